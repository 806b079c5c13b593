"""LFM2 (Liquid AI's LFM2-350M/700M/1.2B/2.6B and LFM2.5): gated short convolutions and GQA attention
(transformers/models/lfm2/modeling_lfm2.py, transformers 5.24).

Layers follow ``layer_types`` (``conv`` or ``full_attention``; without it ``full_attn_idxs``, whose
default is every layer attention: ``Lfm2Config.__post_init__``). Every layer is
``x + mixer(operator_norm(x))`` then ``+ feed_forward(ffn_norm(·))`` with Llama's RMSNorm, a SwiGLU
MLP named ``w1``/``w3``/``w2`` whose width ``Lfm2MLP.__init__`` derives from ``intermediate_size``
(``block_ff_dim`` in older files) when ``block_auto_adjust_ff_dim``: ``int(2·i/3)``, then, with a
``block_ffn_dim_multiplier``, ``int(m·i)`` rounded up to ``block_multiple_of``. The final norm is
``embedding_norm``; embeddings are tied by default (``tie_embedding`` is an alias).

* **Attention** (``Lfm2Attention``): Qwen3's, per-head ``q_layernorm``/``k_layernorm`` before RoPE,
  no biases, ``out_proj``.
* **Gated short convolution** (``Lfm2ShortConv``): ``BCx = in_proj(x).transpose(-1, -2)`` (h → 3h,
  ``conv_bias``), ``B, C, x = BCx.chunk(3)``, ``Bx = B * x``, a depthwise causal ``conv1d`` of kernel
  ``conv_L_cache`` (3) run by ``causal_conv1d_fn``'s torch fallback — ``F.conv1d(Bx.to(weight.dtype),
  padding=L − 1, groups=h)[..., :s]`` with no activation — then ``y = C * conv_out`` and ``out_proj``
  of ``y.transpose(-1, -2).contiguous()``. What it saves (measured op by op, torch 2.13 CPU): the
  product ``B * x`` keeps both chunks, so the whole ``in_proj`` output (3h per token) lives until
  backward; the conv saves its (cast) input; ``C * conv_out`` keeps the conv's padded output
  (s + L − 1 positions) through the slice view; ``out_proj`` saves its input. transformers would use
  causal-conv1d's CUDA kernel where installed (``use_kernel_func_from_hub_with_fallback``); the torch
  path is what runs without it, and what trainmem models on both devices (stated in the report).
* PEFT 0.21 has no default targets for ``lfm2`` (LiquidAI's fine-tuning examples list ``q_proj``,
  ``k_proj``, ``v_proj``, ``out_proj``, ``in_proj``, ``w1``, ``w2``, ``w3``); ``all-linear`` adapts every
  ``nn.Linear`` but the head. A 4-bit load quantises those linear modules; the depthwise ``conv``
  (an ``nn.Conv1d``) and the norms keep the load dtype.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily, checked_layer_types, common_decoder_fields
from .fields import ConfigFields

LFM2_DEFAULTS = dict(
    vocab_size=65536,
    hidden_size=2560,
    intermediate_size=12288,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=128_000,
    tie_word_embeddings=True,
)
"""``Lfm2Config``'s defaults (transformers 5.24)."""

LAYER_TYPES = ("conv", "full_attention")
"""The layer types ``Lfm2Model.forward`` has a mask for (``causal_mask_mapping``); any other is a KeyError."""

SHORT_CONV_NOTE = (
    "short-convolution layers: as transformers' torch fallback of causal_conv1d_fn runs them (measured on CPU); "
    "with the causal-conv1d CUDA kernel installed they save less (not modelled)"
)


@dataclass(frozen=True)
class Lfm2Names(ModuleNames):
    """LFM2's module paths (``Lfm2DecoderLayer``, ``Lfm2Model``)."""

    final_norm: str = "embedding_norm"
    input_norm: str = "operator_norm"
    post_attention_norm: str = "ffn_norm"
    o_proj: str = "self_attn.out_proj"
    q_norm: str = "self_attn.q_layernorm"
    k_norm: str = "self_attn.k_layernorm"
    mlp: str = "feed_forward"
    gate_proj: str = "w1"
    up_proj: str = "w3"
    down_proj: str = "w2"
    router: str = "feed_forward.gate"
    experts: str = "feed_forward.experts"
    conv_in_proj: str = "conv.in_proj"
    conv_conv: str = "conv.conv"
    conv_out_proj: str = "conv.out_proj"

    def module_paths(self) -> tuple[str, ...]:
        return super().module_paths() + (self.conv_in_proj, self.conv_conv, self.conv_out_proj)


LFM2_NAMES = Lfm2Names()


def read_lfm2_layer_types(fields: ConfigFields, layers: int) -> list[str]:
    """``layer_types``, else ``full_attn_idxs`` (default: every layer attention), as ``Lfm2Config.__post_init__``."""
    layer_types = checked_layer_types(fields, layers, LAYER_TYPES)
    if layer_types:
        return layer_types
    if not fields.has("full_attn_idxs"):
        return ["full_attention"] * layers
    attention = set(fields.integer_list("full_attn_idxs", maximum=layers - 1))
    return ["full_attention" if i in attention else "conv" for i in range(layers)]


def lfm2_mlp_width(fields: ConfigFields, default: int) -> int:
    """``Lfm2MLP.__init__``'s width: ``intermediate_size`` (``block_ff_dim`` wins when present, as
    ``Lfm2Config.__post_init__`` pops it), adjusted when ``block_auto_adjust_ff_dim`` (default true)."""
    width = fields.integer("block_ff_dim", fields.integer("intermediate_size", default))
    if not fields.boolean("block_auto_adjust_ff_dim", True):
        return width
    width = int(2 * width / 3)
    # Lfm2MLP skips the rounding for a None multiplier, but the strict Lfm2Config refuses None (a float or int)
    multiplier = fields.number("block_ffn_dim_multiplier", 1.0, minimum=1e-6)
    multiple = fields.integer("block_multiple_of", 256)
    width = int(multiplier * width)
    width = multiple * ((width + multiple - 1) // multiple)
    if width < 1:
        raise fields.fail("intermediate_size", f"leaves an MLP of width {width} after block_auto_adjust_ff_dim")
    return width


def short_conv_fields(fields: ConfigFields, layer_types: list[str]) -> dict[str, object]:
    """The Architecture fields of LFM2's mixers: which layers are short convolutions, their kernel, the bias."""
    conv_layers = tuple(i for i, kind in enumerate(layer_types) if kind == "conv")
    return dict(
        linear_attention_layers=conv_layers,
        short_conv=True,
        linear_conv_kernel_dim=fields.integer("conv_L_cache", 3),
        short_conv_bias=fields.boolean("conv_bias", False),
        not_counted=(SHORT_CONV_NOTE,) if conv_layers else (),
    )


def tied_embeddings(fields: ConfigFields, default: bool) -> bool:
    """``tie_word_embeddings``, overridden by the older ``tie_embedding`` alias when the file has it."""
    if "tie_embedding" in fields.config:
        return fields.boolean("tie_embedding", default)
    return fields.boolean("tie_word_embeddings", default)


class Lfm2(DecoderFamily):
    model_type = "lfm2"
    names = LFM2_NAMES
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, LFM2_DEFAULTS)
        layers = common["num_hidden_layers"]
        common["intermediate_size"] = lfm2_mlp_width(fields, LFM2_DEFAULTS["intermediate_size"])
        common["tie_word_embeddings"] = tied_embeddings(fields, True)
        common["hidden_act"] = "silu"  # Lfm2MLP calls F.silu; the config has no hidden_act
        return Architecture(**common, qk_norm=True, **short_conv_fields(fields, read_lfm2_layer_types(fields, layers)))

    # ------------------------------------------------------------------ inventory
    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        mixer = short_conv_tensors(arch, names) if arch.layer_linear_attention else blocks.attention(arch, names)
        if arch.is_moe:
            mlp = blocks.moe_mlp(arch, names)
        else:
            mlp = blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
        return mixer + mlp + blocks.layer_norms(arch, names)

    def program(self) -> type[LayerProgram]:
        return Lfm2Program


def short_conv_tensors(arch: Architecture, names: Lfm2Names) -> list[ParameterTensor]:
    """``Lfm2ShortConv.__init__``: the depthwise ``conv`` (h, 1, L), ``in_proj`` h → 3h, ``out_proj`` h → h,
    each with a bias under ``conv_bias``."""
    h, kernel, bias = arch.hidden_size, arch.linear_conv_kernel_dim or 3, arch.short_conv_bias
    conv = [ParameterTensor(f"{names.conv_conv}.weight", "attention", (h, 1, kernel))]
    if bias:
        conv.append(ParameterTensor(f"{names.conv_conv}.bias", "attention", (h,)))
    return (
        conv
        + blocks.linear(names.conv_in_proj, "attention", h, 3 * h, bias)
        + blocks.linear(names.conv_out_proj, "attention", h, h, bias)
    )


class Lfm2Program(LayerProgram):
    """LFM2's layer on the tape: Qwen3-style attention or the gated short convolution, then the MLP."""

    def attention(self, x: Sym) -> Sym:
        if self.arch.layer_linear_attention:
            return self.short_conv(x)
        return super().attention(x)

    def short_conv(self, x: Sym) -> Sym:
        """``Lfm2ShortConv.forward`` without a cache (training), op by op."""
        tape, shape, names = self.tape, self.shape, self.names
        h, tokens = shape.hidden, shape.tokens
        bias = self.arch.short_conv_bias
        bcx = self.linear(names.conv_in_proj, x, h, 3 * h, bias)
        gate_b, gate_c, values = tape.split(bcx, [tokens * h] * 3)  # views of the transposed projection
        tape.release(bcx)
        gated = tape.mul(gate_b, values)  # saves both chunks: the whole in_proj output stays alive
        conv_out = self._causal_conv1d(gated)
        tape.release(gated)
        mixed = tape.mul(gate_c, conv_out)
        tape.release(gate_b, gate_c, values, conv_out)
        projected = self.linear(names.conv_out_proj, mixed, h, h, bias)
        tape.release(mixed)
        return projected

    def _causal_conv1d(self, x: Sym) -> Sym:
        """``causal_conv1d_fn``'s torch path with no activation: ``F.conv1d(x.to(weight.dtype), weight,
        bias, padding=L − 1, groups=h)[..., :s].to(x.dtype)``. Under autocast the fp32 cast is cast back
        to 16 bits for the conv (conv1d is on autocast's lower-precision lists), and the cached 16-bit
        weight is what the conv saves. Returns the slice: a view that keeps all s + L − 1 positions."""
        tape, shape = self.tape, self.shape
        h, kernel = shape.hidden, self.arch.linear_conv_kernel_dim or 3
        weight = self.parameter(self.names.conv_conv, h * kernel)
        bias = self.parameter(self.names.conv_conv, h) if self.arch.short_conv_bias else None
        conv_in = tape.to(x, weight.dtype)
        x_in, w_in = conv_in, weight
        if tape.autocast:
            x_in = tape.to(conv_in, tape.autocast)
            w_in = tape.to(weight, tape.autocast, cache=weight.requires_grad)
            if bias is not None:
                bias = tape.to(bias, tape.autocast, cache=bias.requires_grad)
        padded = tape.new(shape.batch * h * (shape.seq + kernel - 1), x_in.dtype, True)
        # ConvolutionBackward0 saves input and weight whenever anything needs a gradient (one convolution_backward
        # formula for all outputs, derivatives.yaml): a frozen conv (LoRA) still keeps its input (measured).
        tape.record("conv1d", [x_in, w_in], [x_in, w_in] + ([bias] if bias is not None else []), [padded])
        if x_in is not conv_in:
            tape.release(x_in)
        if conv_in is not x:
            tape.release(conv_in)
        sliced = padded.view(shape.tokens * h)
        tape.record("slice", [], [padded], [sliced])
        out = tape.to(sliced, x.dtype)
        if out is not sliced:
            tape.release(padded)
        return out
