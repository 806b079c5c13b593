"""OLMo Hybrid (``olmo_hybrid``, allenai/Olmo-Hybrid-7B; transformers/models/olmo_hybrid, transformers 5.24).

Layers follow ``layer_types`` (default: three ``linear_attention`` layers, then one ``full_attention``; the last
layer is attention if none is). The two kinds differ in more than their mixer:

* **Attention layers** (``OlmoHybridAttentionDecoderLayer``) are OLMo 3's **post-norm** layers: q and k RMS-normed
  over the whole projections, ``o_proj``, ``post_attention_layernorm`` and ``post_feedforward_layernorm`` after the
  sub-blocks, ``Olmo2RMSNorm`` (the weight times the fp32 normalized tensor, then the cast), no sliding window.
  ``OlmoHybridRotaryEmbedding`` returns **fp32** cos/sin whatever the model's dtype, so the rotated q and k are
  fp32 products cast back to q's dtype (``apply_rotary_pos_emb`` of OLMo).
* **Gated DeltaNet layers** (``OlmoHybridLinearAttentionDecoderLayer``) are **pre-norm** (Llama's layout,
  ``input_layernorm`` and ``post_attention_layernorm``, OLMo's RMSNorm). ``OlmoHybridGatedDeltaNet`` differs from
  Qwen3.5's (whose conv and chunked rule trainmem replays, :mod:`trainmem.models.qwen3_next`): separate ``q_proj``,
  ``k_proj``, ``v_proj`` joined by ``torch.cat`` (a new tensor) before the depthwise causal ``conv1d`` (SiLU),
  ``beta = sigmoid(b_proj(x))`` times 2 when ``linear_allow_neg_eigval`` (a new tensor, nothing saved), the gated
  RMSNorm's gate from its own ``g_proj``, and ``o_proj``. The rest — the conv's torch fallback, the decay
  ``g``, ``torch_chunk_gated_delta_rule`` with q/k L2 norms — is the same code as Qwen3-Next's (the same CPU-path
  measurement and CUDA-kernel assumption apply).
* Defaults (``OlmoHybridConfig.__post_init__``): linear key and value heads = ``num_attention_heads``, key head
  dim ``int(0.75 · hidden_size / key heads)``, value head dim twice that, ``num_key_value_heads`` = heads.
* PEFT 0.21 has no default LoRA targets for olmo_hybrid; a 4-bit load quantises the ``nn.Linear`` modules (not the
  conv, ``A_log``, ``dt_bias`` or the norms).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from . import blocks
from .blocks import ParameterTensor
from .family import DecoderFamily, checked_layer_types, common_decoder_fields
from .fields import ConfigFields
from .olmo2 import Olmo2Program
from .qwen3_next import CPU_KERNEL_NOTE, GatedDeltaNetNames, Qwen3NextProgram, linear_dims

OLMO_HYBRID_DEFAULTS = dict(
    vocab_size=100352,
    hidden_size=3840,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=30,
    max_position_embeddings=65536,
    tie_word_embeddings=False,
)
"""``OlmoHybridConfig``'s defaults (a LlamaConfig subclass: untied embeddings, SiLU)."""

LAYER_TYPES = ("linear_attention", "full_attention")


@dataclass(frozen=True)
class OlmoHybridNames(GatedDeltaNetNames):
    """OLMo Hybrid's module paths: OLMo 3's attention and norms, the Gated DeltaNet's own projections."""

    post_feedforward_norm: str = "post_feedforward_layernorm"
    gated_norm: str = "linear_attn.o_norm"
    out_proj: str = "linear_attn.o_proj"
    linear_q_proj: str = "linear_attn.q_proj"
    linear_k_proj: str = "linear_attn.k_proj"
    linear_v_proj: str = "linear_attn.v_proj"
    linear_a_proj: str = "linear_attn.a_proj"
    linear_b_proj: str = "linear_attn.b_proj"
    linear_g_proj: str = "linear_attn.g_proj"

    def input_projections(self) -> tuple[str, ...]:
        return (
            self.linear_q_proj, self.linear_k_proj, self.linear_v_proj,
            self.linear_a_proj, self.linear_b_proj, self.linear_g_proj,
        )


OLMO_HYBRID_NAMES = OlmoHybridNames()


def olmo_hybrid_layer_types(fields: ConfigFields, layers: int) -> list[str]:
    """``layer_types``, else every 4th layer attention (the last one if none is); at least one of each kind
    (``OlmoHybridConfig.validate_architecture``)."""
    layer_types = checked_layer_types(fields, layers, LAYER_TYPES)
    if not layer_types:
        layer_types = ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)]
        if "full_attention" not in layer_types:
            layer_types[-1] = "full_attention"
    if "linear_attention" not in layer_types:
        raise fields.fail("layer_types", "OLMo Hybrid needs at least one 'linear_attention' layer")
    if "full_attention" not in layer_types:
        raise fields.fail("layer_types", "OLMo Hybrid needs at least one 'full_attention' layer")
    return layer_types


def without_rope(fields: ConfigFields) -> bool:
    """``OlmoHybridModel`` builds no rotary embedding when ``rope_parameters`` names a null ``rope_theta`` (the
    released Olmo-Hybrid-7B: ``{"rope_theta": null}``); its attention layers then skip RoPE (NoPE)."""
    rope = fields.mapping("rope_parameters")
    return rope is not None and "rope_theta" in rope and rope["rope_theta"] is None


class OlmoHybrid(DecoderFamily):
    model_type = "olmo_hybrid"
    names = OLMO_HYBRID_NAMES
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, OLMO_HYBRID_DEFAULTS)
        heads, hidden = common["num_attention_heads"], common["hidden_size"]
        layer_types = olmo_hybrid_layer_types(fields, common["num_hidden_layers"])
        key_heads = fields.integer("linear_num_key_heads", heads)
        value_heads = fields.integer("linear_num_value_heads", heads)
        if value_heads % key_heads:
            raise fields.fail(
                "linear_num_value_heads", f"must be a multiple of linear_num_key_heads ({key_heads}), got {value_heads}"
            )
        key_dim = fields.integer("linear_key_head_dim", max(int(0.75 * hidden / key_heads), 1))
        bias = fields.boolean("attention_bias", False)
        return Architecture(
            **common,
            nope_layers=tuple(range(common["num_hidden_layers"])) if without_rope(fields) else (),
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            qk_norm=True,
            qk_norm_over="projection",
            norm_position="post",
            linear_num_key_heads=key_heads,
            linear_num_value_heads=value_heads,
            linear_key_head_dim=key_dim,
            linear_value_head_dim=fields.integer("linear_value_head_dim", 2 * key_dim),
            linear_conv_kernel_dim=fields.integer("linear_conv_kernel_dim", 4),
            linear_allow_neg_eigval=fields.boolean("linear_allow_neg_eigval", True),
            linear_attention_layers=tuple(i for i, kind in enumerate(layer_types) if kind == "linear_attention"),
            not_counted=(CPU_KERNEL_NOTE,),
        )

    # ------------------------------------------------------------------ inventory
    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        mlp = blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
        if not arch.layer_linear_attention:
            return blocks.attention(arch, names) + mlp + blocks.layer_norms(arch, names)
        norms = blocks.norm(names.input_norm, arch, arch.hidden_size) + blocks.norm(
            names.post_attention_norm, arch, arch.hidden_size
        )
        return gated_deltanet_tensors(arch, names) + mlp + norms

    def has_rotary_embedding(self, arch: Architecture) -> bool:
        """No ``rotary_emb`` (nor its inv_freq buffers) under NoPE (:func:`without_rope`)."""
        return len(arch.nope_layers) != arch.num_hidden_layers

    def rotary_tables_bytes(self, arch: Architecture, seq: int, stream_bytes: int) -> list[int]:
        """``OlmoHybridRotaryEmbedding.forward`` returns fp32 cos and sin (no cast to the input's dtype)."""
        if not self.has_rotary_embedding(arch):
            return []
        return [seq * arch.rotary_dim * 4] * 2

    def program(self) -> type[LayerProgram]:
        return OlmoHybridProgram


def gated_deltanet_tensors(arch: Architecture, names: OlmoHybridNames) -> list[ParameterTensor]:
    """``OlmoHybridGatedDeltaNet.__init__`` in its order: q, k, v, a, b, g, o projections, conv1d, A_log,
    dt_bias, the gated norm (one weight of the value head dim)."""
    hk, hv, dk, dv, kernel = linear_dims(arch)
    h, key_dim, value_dim = arch.hidden_size, hk * dk, hv * dv
    return (
        blocks.linear(names.linear_q_proj, "attention", h, key_dim, False)
        + blocks.linear(names.linear_k_proj, "attention", h, key_dim, False)
        + blocks.linear(names.linear_v_proj, "attention", h, value_dim, False)
        + blocks.linear(names.linear_a_proj, "attention", h, hv, False)
        + blocks.linear(names.linear_b_proj, "attention", h, hv, False)
        + blocks.linear(names.linear_g_proj, "attention", h, value_dim, False)
        + blocks.linear(names.out_proj, "attention", value_dim, h, False)
        + [
            ParameterTensor(f"{names.conv1d}.weight", "attention", (2 * key_dim + value_dim, 1, kernel)),
            ParameterTensor(f"{names.a_log}", "attention", (hv,)),
            ParameterTensor(f"{names.dt_bias}", "attention", (hv,)),
            ParameterTensor(f"{names.gated_norm}.weight", "norms", (dv,)),
        ]
    )


class OlmoHybridProgram(Olmo2Program, Qwen3NextProgram):
    """OLMo 3's post-norm attention layer (Olmo2Program's norm and RoPE cast) or a pre-norm Gated DeltaNet layer
    (Qwen3-Next's conv, decay, chunked rule and gated norm)."""

    linear_attention_family = "olmo_hybrid"

    def layer(self, x: Sym) -> Sym:
        if not self.arch.layer_linear_attention:
            return LayerProgram.layer(self, x)  # post-norm (arch.norm_position)
        shape, tape, names = self.shape, self.tape, self.names
        rows, h = shape.stream_tokens, shape.hidden
        normed = self.norm(names.input_norm, x, rows, h)
        attended = self.linear_attention(normed)
        tape.release(normed)
        hidden = tape.add(x, attended)
        tape.release(attended)
        normed = self.norm(names.post_attention_norm, hidden, rows, h)
        mixed = self.mlp(normed)
        tape.release(normed)
        out = tape.add(hidden, mixed)
        tape.release(hidden, mixed)
        return out

    def attention(self, x: Sym) -> Sym:
        return LayerProgram.attention(self, x)

    def _position_and_norm(self, q: Sym, k: Sym, produced: list[Sym]) -> tuple[Sym, Sym, bool]:
        """Under NoPE (``position_embeddings`` is None) the attention norms q and k over the projections and
        skips ``apply_rotary_pos_emb``."""
        if self.arch.layer_rope:
            return super()._position_and_norm(q, k, produced)
        shape, tape, names = self.shape, self.tape, self.names
        q_normed = self.norm(names.q_norm, q, shape.tokens, shape.heads * shape.head_dim)
        k_normed = self.norm(names.k_norm, k, shape.tokens, shape.kv_heads * shape.head_dim)
        tape.release(q, k)
        return q_normed, k_normed, False

    def _rope(self, q: Sym) -> Sym:
        """OLMo's ``apply_rotary_pos_emb`` with fp32 cos/sin: ``(q * cos) + (rotate_half(q) * sin)`` in fp32 (the
        tables promote 16-bit q), then ``.to(q_type)``."""
        tape = self.tape
        cos = Sym(self.shape.seq * self.arch.rotary_dim, "fp32", False, "external")
        sin = Sym(self.shape.seq * self.arch.rotary_dim, "fp32", False, "external")
        with_cos = tape.mul(q, cos)
        rotated = tape.copy(q, backward_scratch_bytes=q.nbytes)
        with_sin = tape.mul(rotated, sin)
        tape.release(rotated)
        summed = tape.add(with_cos, with_sin)
        tape.release(with_cos, with_sin)
        out = tape.to(summed, q.dtype)
        if out is not summed:
            tape.release(summed)
        return out

    def linear_attention(self, x: Sym) -> Sym:
        """``OlmoHybridGatedDeltaNet.forward`` without a cache (training), in its order."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        self._refuse_split_linear_attention()
        hk, hv, dk, dv, kernel = linear_dims(arch)
        h, tokens = shape.hidden, shape.tokens
        key_dim, value_dim = hk * dk, hv * dv
        conv_dim = 2 * key_dim + value_dim
        q = self.linear(names.linear_q_proj, x, h, key_dim, False)
        k = self.linear(names.linear_k_proj, x, h, key_dim, False)
        v = self.linear(names.linear_v_proj, x, h, value_dim, False)
        mixed = tape.new(tokens * conv_dim, q.dtype, True)  # torch.cat([q, k, v], dim=-1): nothing saved
        tape.record("cat", [], [q, k, v], [mixed])
        tape.release(q, k, v)
        fused = self.kernels.device == "cuda"
        activated = (self._fused_causal_conv1d if fused else self._causal_conv1d)(mixed, conv_dim, kernel)
        tape.release(mixed)
        q_c, k_c, v_c = tape.split(activated, [tokens * key_dim, tokens * key_dim, tokens * value_dim])
        beta_in = self.linear(names.linear_b_proj, x, h, hv, False)
        beta = tape.unary_saving_result("sigmoid", beta_in)
        tape.release(beta_in)
        if arch.linear_allow_neg_eigval:  # beta * 2.0: a new tensor
            doubled = tape.scale(beta)
            tape.release(beta)
            beta = doubled
        a = self.linear(names.linear_a_proj, x, h, hv, False)
        decay = self._decay(a, hv)
        tape.release(a)
        core = (self._fused_chunk_gated_delta_rule if fused else self._chunk_gated_delta_rule)(q_c, k_c, v_c, decay, beta)
        tape.release(activated, decay, beta)
        gate = self.linear(names.linear_g_proj, x, h, value_dim, False)
        normed = self._gated_norm(core, gate, tokens * hv, dv)
        tape.release(core, gate)
        out = self.linear(names.out_proj, normed, value_dim, h, False)
        tape.release(normed)
        return out
