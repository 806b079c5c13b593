"""Qwen3-Next: a hybrid of Gated DeltaNet (linear attention) and gated full attention, with MoE
(transformers/models/qwen3_next/modeling_qwen3_next.py, transformers 5.24).

Layers follow ``layer_types`` (default: three ``linear_attention`` layers, then one
``full_attention``, ``full_attention_interval`` 4). Every layer has Qwen3-Next's RMSNorm
(``(normalized * (1 + weight.float())).type_as(x)``, as Gemma) before each sub-block and an MLP
that is a MoE (router, fused experts, a shared expert behind a sigmoid gate, as Qwen2-MoE) or,
for ``mlp_only_layers`` / ``decoder_sparse_step``, a dense SwiGLU.

* **Gated attention** (``Qwen3NextAttention``): ``q_proj`` yields the queries and a gate of the
  same width (``chunk(2)`` of a (b, s, a, 2d) view; the gate is copied by ``reshape``); per-head
  ``q_norm``/``k_norm``; partial RoPE (``partial_rotary_factor`` 0.25, ending with a ``torch.cat``);
  attention; then ``out * sigmoid(gate)`` before ``o_proj``.
* **Gated DeltaNet** (``Qwen3NextGatedDeltaNet``): ``in_proj_qkvz`` and ``in_proj_ba``; q, k, v are
  concatenated for a depthwise causal ``conv1d`` (kernel ``linear_conv_kernel_dim``, padded by
  kernel − 1 on both sides then sliced) and SiLU; ``beta = sigmoid(b)``,
  ``g = −exp(A_log) · softplus(a + dt_bias)``; then the gated delta rule, and a gated RMSNorm
  (``Qwen3NextRMSNormGated``: ``weight · norm(x) · silu(z)``) before ``out_proj``.
* **What the CPU path saves.** Without flash-linear-attention and causal-conv1d (not installable
  on CPU), transformers runs ``torch_chunk_gated_delta_rule`` and ``causal_conv1d_fn``, which this
  module replays op by op: fp32 copies of q, k, v, beta and g laid out heads-first, their L2 norms,
  the padded sequence (to a multiple of the chunk size, 64), the intra-chunk (C × C) decay,
  UT-transform and attention matrices per chunk, two triangular solves, and, in the scan over
  chunks, each chunk's recurrent state (b · Hv · dk · dv fp32), its corrected values and the
  chunk slices the matmuls copy. On CUDA the fused kernels (``fla.ops.gated_delta_rule.
  chunk_gated_delta_rule``, ``causal_conv1d_fn`` of causal-conv1d) recompute these in backward and
  save far less; trainmem does not model them (it refuses none, the CPU figures stand as an upper
  bound, stated in the report).
* PEFT has no default targets for qwen3_next; transformers maps its v4 MoE names as Qwen2-MoE's
  (``conversion_mapping._MODEL_TO_CONVERSION_PATTERN``), so ``all-linear`` adapts the router and
  the fused experts too. A 4-bit load quantises the ``nn.Linear`` modules (in_proj_qkvz,
  in_proj_ba, out_proj, q/k/v/o, the shared expert); ``conv1d``, ``A_log``, ``dt_bias``, the
  norms, the router and the fused experts keep the load dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..architecture import Architecture
from ..errors import FieldError
from ..layers import LayerProgram
from ..tape import Sym
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import QWEN2_MOE_STYLE_TARGETS, DecoderFamily, checked_layer_types, common_decoder_fields
from .fields import ConfigFields
from .gemma import GemmaProgram
from .qwen2 import sparse_step_dense_layers

QWEN3_NEXT_DEFAULTS = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=48,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)
"""``Qwen3NextConfig``'s defaults."""

CHUNK_SIZE = 64
"""``torch_chunk_gated_delta_rule``'s default ``chunk_size`` (the model does not pass one)."""

CPU_KERNEL_NOTE = (
    "Gated DeltaNet layers: on CPU as transformers' torch fallback runs them (measured); on CUDA what the "
    "flash-linear-attention and causal-conv1d kernels save, read from their source (an assumption, not measured)"
)


@dataclass(frozen=True)
class GatedDeltaNetNames(ModuleNames):
    """The Qwen2-MoE names plus the Gated DeltaNet's that Qwen3-Next and Qwen3.5 share; their input
    projections differ (:meth:`input_projections`, listed first)."""

    conv1d: str = "linear_attn.conv1d"
    a_log: str = "linear_attn.A_log"
    dt_bias: str = "linear_attn.dt_bias"
    gated_norm: str = "linear_attn.norm"
    out_proj: str = "linear_attn.out_proj"

    def input_projections(self) -> tuple[str, ...]:
        return ()

    def module_paths(self) -> tuple[str, ...]:
        return super().module_paths() + self.input_projections() + (
            self.conv1d, self.a_log, self.dt_bias, self.gated_norm, self.out_proj,
        )


@dataclass(frozen=True)
class LinearAttentionNames(GatedDeltaNetNames):
    """Qwen3-Next's module paths: the Gated DeltaNet's fused ``in_proj_qkvz`` and ``in_proj_ba``."""

    in_proj_qkvz: str = "linear_attn.in_proj_qkvz"
    in_proj_ba: str = "linear_attn.in_proj_ba"

    def input_projections(self) -> tuple[str, ...]:
        return (self.in_proj_qkvz, self.in_proj_ba)


QWEN3_NEXT_NAMES = LinearAttentionNames()

LAYER_TYPES = ("linear_attention", "full_attention")


def read_layer_types(fields: ConfigFields, layers: int) -> list[str]:
    """``layer_types``, or ``Qwen3NextConfig.__post_init__``'s default: every
    ``full_attention_interval``-th layer (4) is full attention, the others linear."""
    layer_types = checked_layer_types(fields, layers, LAYER_TYPES)
    if not layer_types:
        interval = fields.integer("full_attention_interval", 4)
        return ["linear_attention" if (i + 1) % interval else "full_attention" for i in range(layers)]
    return layer_types


def partial_rotary_factor(fields: ConfigFields, default: float) -> float:
    rope = fields.rope_parameters()
    factor = rope.get("partial_rotary_factor", fields.config.get("partial_rotary_factor"))
    if factor is None:
        return default
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor <= 1:
        raise fields.fail("rope_parameters.partial_rotary_factor", f"expected a number in (0, 1], got {factor!r}")
    return float(factor)


def linear_attention_fields(fields: ConfigFields) -> dict[str, object]:
    """The Gated DeltaNet's sizes; value heads must be a multiple of key heads (``repeat_interleave``)."""
    key_heads = fields.integer("linear_num_key_heads", 16)
    value_heads = fields.integer("linear_num_value_heads", 32)
    if value_heads % key_heads:
        raise fields.fail(
            "linear_num_value_heads",
            f"must be a multiple of linear_num_key_heads ({key_heads}), got {value_heads}",
        )
    return dict(
        linear_num_key_heads=key_heads,
        linear_num_value_heads=value_heads,
        linear_key_head_dim=fields.integer("linear_key_head_dim", 128),
        linear_value_head_dim=fields.integer("linear_value_head_dim", 128),
        linear_conv_kernel_dim=fields.integer("linear_conv_kernel_dim", 4),
    )


def hybrid_attention_fields(fields: ConfigFields, layer_types: list[str], bias: bool) -> dict[str, object]:
    """What Qwen3-Next and Qwen3.5 read alike: the Gated DeltaNet's sizes (:func:`linear_attention_fields`),
    gated full attention with per-head q/k norms and partial RoPE (default factor 0.25), ``bias`` on the
    q/k/v/o projections (``attention_bias``), which layers are linear, and the CPU kernel note when any is."""
    return dict(
        **linear_attention_fields(fields),
        qk_norm=True,
        attention_qkv_bias=bias,
        attention_output_bias=bias,
        attention_output_gate=True,
        partial_rotary_factor=partial_rotary_factor(fields, 0.25),
        linear_attention_layers=tuple(i for i, kind in enumerate(layer_types) if kind == "linear_attention"),
        not_counted=(CPU_KERNEL_NOTE,) if "linear_attention" in layer_types else (),
    )


class Qwen3Next(DecoderFamily):
    model_type = "qwen3_next"
    names = QWEN3_NEXT_NAMES
    lora_default_targets = None
    moe_lora_conversion = QWEN2_MOE_STYLE_TARGETS
    rope_concatenates = True
    not_counted = ()

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, QWEN3_NEXT_DEFAULTS)
        layers = common["num_hidden_layers"]
        layer_types = read_layer_types(fields, layers)
        bias = fields.boolean("attention_bias", False)
        experts = fields.integer("num_experts", 512, minimum=0)
        dense_width = common["intermediate_size"]
        if experts:
            dense = sparse_step_dense_layers(fields, layers)
            common["intermediate_size"] = fields.integer("moe_intermediate_size", 512)
            moe = dict(
                num_experts=experts,
                num_experts_per_tok=fields.integer("num_experts_per_tok", 10),
                shared_expert_intermediate_size=fields.integer("shared_expert_intermediate_size", 512),
                shared_expert_gate=True,
                dense_layers=dense if len(dense) < layers else (),
                dense_intermediate_size=dense_width,
            )
            if len(dense) == layers:  # every layer dense: a dense model
                moe = {}
                common["intermediate_size"] = dense_width
        else:
            moe = {}
        return Architecture(**common, **moe, **hybrid_attention_fields(fields, layer_types, bias))

    # ------------------------------------------------------------------ inventory
    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        return hybrid_layer_tensors(arch, self.names, linear_attention_tensors)

    def program(self) -> type[LayerProgram]:
        return Qwen3NextProgram


def hybrid_layer_tensors(
    arch: Architecture, names: ModuleNames, linear_tensors: Callable[[Architecture, Any], list[ParameterTensor]]
) -> list[ParameterTensor]:
    """One hybrid layer's parameters in module order: the mixer (``linear_tensors`` on a linear-attention
    layer, :func:`gated_attention_tensors` otherwise), the MLP (MoE or dense), the two norms."""
    mixer = linear_tensors(arch, names) if arch.layer_linear_attention else gated_attention_tensors(arch, names)
    if arch.is_moe:
        mlp = blocks.moe_mlp(arch, names)
    else:
        mlp = blocks.dense_mlp(arch, names, names.mlp, arch.intermediate_size)
    return mixer + mlp + blocks.layer_norms(arch, names)


def gated_attention_tensors(arch: Architecture, names: ModuleNames) -> list[ParameterTensor]:
    """``Qwen3NextAttention``: q_proj of 2·a·d (queries and gate), k, v, o, per-head q/k norms."""
    h, q, kv, bias = arch.hidden_size, arch.query_width, arch.key_value_width, arch.attention_qkv_bias
    return (
        blocks.linear(names.q_proj, "attention", h, 2 * q, bias)
        + blocks.linear(names.k_proj, "attention", h, kv, bias)
        + blocks.linear(names.v_proj, "attention", h, kv, bias)
        + blocks.linear(names.o_proj, "attention", q, h, bias)
        + [ParameterTensor(f"{names.q_norm}.weight", "norms", (arch.resolved_head_dim,))]
        + [ParameterTensor(f"{names.k_norm}.weight", "norms", (arch.resolved_head_dim,))]
    )


def linear_dims(arch: Architecture) -> tuple[int, int, int, int, int]:
    """(key heads, value heads, key head dim, value head dim, conv kernel) of a Gated DeltaNet."""
    return (
        arch.linear_num_key_heads or 16,
        arch.linear_num_value_heads or 32,
        arch.linear_key_head_dim or 128,
        arch.linear_value_head_dim or 128,
        arch.linear_conv_kernel_dim or 4,
    )


def linear_attention_tensors(arch: Architecture, names: LinearAttentionNames) -> list[ParameterTensor]:
    """``Qwen3NextGatedDeltaNet.__init__``, in its parameter order."""
    hk, hv, dk, dv, kernel = linear_dims(arch)
    h, key_dim, value_dim = arch.hidden_size, hk * dk, hv * dv
    conv_dim = 2 * key_dim + value_dim
    return (
        [
            ParameterTensor(f"{names.dt_bias}", "attention", (hv,)),
            ParameterTensor(f"{names.a_log}", "attention", (hv,)),
            ParameterTensor(f"{names.conv1d}.weight", "attention", (conv_dim, 1, kernel)),
        ]
        + blocks.linear(names.in_proj_qkvz, "attention", h, 2 * key_dim + 2 * value_dim, False)
        + blocks.linear(names.in_proj_ba, "attention", h, 2 * hv, False)
        + [ParameterTensor(f"{names.gated_norm}.weight", "norms", (dv,))]
        + blocks.linear(names.out_proj, "attention", value_dim, h, False)
    )


class Qwen3NextProgram(GemmaProgram):
    """Qwen3-Next's layer on the tape: Gemma's (1 + weight) RMSNorm, gated attention or Gated DeltaNet."""

    def attention(self, x: Sym) -> Sym:
        if self.arch.layer_linear_attention:
            return self.linear_attention(x)
        return self.gated_attention(x)

    # ------------------------------------------------------------------ gated full attention
    def gated_attention(self, x: Sym) -> Sym:
        """``Qwen3NextAttention.forward``."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        if shape.stream_tokens != shape.tokens:
            raise FieldError("parallelism.sequence_parallel", "is not modelled for qwen3_next yet")
        tokens, d = shape.tokens, shape.head_dim
        q_width, kv_width = shape.heads * d, shape.kv_heads * d
        bias = arch.attention_qkv_bias
        query_and_gate = self.linear(names.q_proj, x, shape.hidden, 2 * q_width, bias)
        q, gate = tape.split(query_and_gate, [tokens * q_width, tokens * q_width])
        gate = tape.copy(gate)  # gate.reshape(*input_shape, -1) of a strided chunk: a copy
        k = self.linear(names.k_proj, x, shape.hidden, kv_width, bias)
        v = self.linear(names.v_proj, x, shape.hidden, kv_width, bias)
        q, k, heads_first = self._position_and_norm(q, k, [q, k])
        tape.release(query_and_gate)
        out = self._attention_core(q, k, v)
        if heads_first and self.kernels.attention == "fused":
            merged = tape.copy(out)  # attn_output.transpose(1, 2).contiguous()
            tape.release(out)
            out = merged
        tape.release(q, k, v)
        sigmoid = tape.unary_saving_result("sigmoid", gate)
        tape.release(gate)
        gated = tape.mul(out, sigmoid)
        tape.release(out, sigmoid)
        projected = self.linear(names.o_proj, gated, q_width, shape.hidden, bias)
        tape.release(gated)
        return projected

    # ------------------------------------------------------------------ Gated DeltaNet
    linear_attention_family = "qwen3_next"
    """The model type that errors about the Gated DeltaNet layers name."""

    def linear_attention(self, x: Sym) -> Sym:
        """``Qwen3NextGatedDeltaNet.forward`` without a cache (training)."""
        shape, tape, names = self.shape, self.tape, self.names
        self._refuse_split_linear_attention()
        hk, hv, dk, dv, kernel = linear_dims(self.arch)
        b, s, h, tokens = shape.batch, shape.seq, shape.hidden, shape.tokens
        key_dim, value_dim = hk * dk, hv * dv
        conv_dim = 2 * key_dim + value_dim
        qkvz = self.linear(names.in_proj_qkvz, x, h, 2 * key_dim + 2 * value_dim, False)
        ba = self.linear(names.in_proj_ba, x, h, 2 * hv, False)
        q, k, v, z = tape.split(qkvz, [tokens * key_dim, tokens * key_dim, tokens * value_dim, tokens * value_dim])
        beta_in, a = tape.split(ba, [tokens * hv, tokens * hv])
        if hk > 1:  # reshape(b, s, -1) of per-key-head slices: copies (one head group: views)
            q, k, v = (tape.copy(t) for t in (q, k, v))
            beta_in, a = tape.copy(beta_in), tape.copy(a)
            tape.release(ba)
        mixed = tape.new(tokens * conv_dim, q.dtype, q.requires_grad)
        tape.record("cat", [], [q, k, v], [mixed])  # torch.cat((query, key, value), dim=-1)
        if hk > 1:
            tape.release(q, k, v)
        core = self._conv_and_delta_rule(mixed, beta_in, a)
        if hk > 1:
            z_rows = tape.copy(z)  # z.reshape(-1, head_v_dim) of a strided slice: a copy
        else:
            z_rows = z
        normed = self._gated_norm(core, z_rows, tokens * hv, dv)
        tape.release(core, z_rows, qkvz)
        out = self.linear(names.out_proj, normed, value_dim, h, False)
        tape.release(normed)
        return out

    def _refuse_split_linear_attention(self) -> None:
        """Sequence and tensor parallelism of the Gated DeltaNet layers are not modelled: one FieldError."""
        shape, family = self.shape, self.linear_attention_family
        if shape.stream_tokens != shape.tokens:
            raise FieldError("parallelism.sequence_parallel", f"is not modelled for {family} yet")
        if shape.heads != self.arch.num_attention_heads:
            raise FieldError(
                "parallelism.tensor_parallel_size",
                f"tensor parallelism of {family}'s Gated DeltaNet layers is not modelled yet; use 1",
            )

    def _conv_and_delta_rule(self, mixed: Sym, beta_in: Sym, a: Sym) -> Sym:
        """From the concatenated q, k, v (``mixed``, freed) and the b, a projections (freed) to the gated
        delta rule's output: the causal conv1d and SiLU, ``beta = sigmoid(b)``, the decay ``g``, the chunked
        rule (the fused kernels on CUDA). Shared by ``Qwen3NextGatedDeltaNet`` and ``Qwen3_5GatedDeltaNet``."""
        tape, tokens = self.tape, self.shape.tokens
        hk, hv, dk, dv, kernel = linear_dims(self.arch)
        key_dim, value_dim = hk * dk, hv * dv
        conv_dim = 2 * key_dim + value_dim
        fused = self.kernels.device == "cuda"
        activated = (self._fused_causal_conv1d if fused else self._causal_conv1d)(mixed, conv_dim, kernel)
        tape.release(mixed)
        q, k, v = tape.split(activated, [tokens * key_dim, tokens * key_dim, tokens * value_dim])
        beta = tape.unary_saving_result("sigmoid", beta_in)
        tape.release(beta_in)
        decay = self._decay(a, hv)
        tape.release(a)
        core = (self._fused_chunk_gated_delta_rule if fused else self._chunk_gated_delta_rule)(q, k, v, decay, beta)
        tape.release(activated, decay, beta)
        return core

    def _causal_conv1d(self, mixed: Sym, conv_dim: int, kernel: int) -> Sym:
        """``causal_conv1d_fn``: ``F.conv1d(x.to(weight.dtype), padding=kernel − 1, groups=conv_dim)[..., :s]``,
        SiLU, ``.to(x.dtype)``. The conv saves its input; SiLU saves the sliced output (a view that keeps
        all s + kernel − 1 positions alive)."""
        tape, shape = self.tape, self.shape
        weight = self.parameter(self.names.conv1d, conv_dim * kernel)
        conv_in = tape.to(mixed, weight.dtype)
        x_in, w_in = conv_in, weight
        if tape.autocast:  # conv1d is on autocast's lower-precision lists (CUDA and CPU)
            x_in = tape.to(conv_in, tape.autocast)
            w_in = tape.to(weight, tape.autocast, cache=weight.requires_grad)
        padded = tape.new(shape.batch * conv_dim * (shape.seq + kernel - 1), x_in.dtype, True)
        # ConvolutionBackward0 saves input and weight whenever anything needs a gradient (derivatives.yaml: one
        # convolution_backward formula): a frozen conv1d (LoRA) keeps its input too (measured on LFM2's conv).
        tape.record("conv1d", [x_in, w_in], [x_in, w_in], [padded])
        if x_in is not conv_in:
            tape.release(x_in)
        if conv_in is not mixed:
            tape.release(conv_in)
        sliced = self._slice(padded, shape.tokens * conv_dim)
        activated = tape.unary_saving_input("silu", sliced)
        tape.release(padded)
        out = tape.to(activated, mixed.dtype)
        if out is not activated:
            tape.release(activated)
        return out

    # ------------------------------------------------------------------ CUDA kernels (assumed, not measured)
    def _fused_causal_conv1d(self, mixed: Sym, conv_dim: int, kernel: int) -> Sym:
        """causal-conv1d's ``causal_conv1d_fn`` (``CausalConv1dFn``): saves the input and the weight, the
        SiLU is fused (its output is not saved). From the causal-conv1d 1.x source, not measured here."""
        tape = self.tape
        weight = self.parameter(self.names.conv1d, conv_dim * kernel)
        out = tape.new(mixed.numel, mixed.dtype, True)
        tape.record("causal_conv1d", [mixed, weight if mixed.requires_grad else None], [mixed, weight], [out])
        return out

    def _fused_chunk_gated_delta_rule(self, q: Sym, k: Sym, v: Sym, decay: Sym, beta: Sym) -> Sym:
        """flash-linear-attention's ``chunk_gated_delta_rule`` (fla-core 0.6.0,
        ``fla/ops/gated_delta_rule/chunk.py`` ``ChunkGatedDeltaRuleFunction.forward``): ``input_guard``
        makes q, k, v contiguous; it saves the L2-normed q and k with their fp32 rstd, v, the chunk-local
        cumulative gate (fp32), beta and ``A`` (b, s, Hv, 64) in k's dtype, and recomputes the chunk
        states in backward. Grouped value heads are native (no repeat). Assumed from the source, not
        measured (no CUDA here)."""
        shape, tape = self.shape, self.tape
        hk, hv, dk, dv, _ = linear_dims(self.arch)
        tokens = shape.tokens
        contiguous = [tape.copy(t) for t in (q, k, v)]
        q_c, k_c, v_c = contiguous
        q_n, k_n = tape.new(q.numel, q.dtype, True), tape.new(k.numel, k.dtype, True)
        q_rstd, k_rstd = Sym(tokens * hk, "fp32", False), Sym(tokens * hk, "fp32", False)
        g_cum = Sym(tokens * hv, "fp32", False)
        a_matrix = Sym(tokens * hv * CHUNK_SIZE, k.dtype, False)
        out = tape.new(tokens * hv * dv, q.dtype, True)
        tape.record(
            "chunk_gated_delta_rule",
            [q_n, q_rstd, k_n, k_rstd, v_c, g_cum, beta, a_matrix],
            [q_c, k_c, v_c, decay, beta],
            [out],
        )
        tape.release(q_c, k_c, q_n, k_n, v_c)
        return out

    def _decay(self, a: Sym, hv: int) -> Sym:
        """``g = -A_log.float().exp() * softplus(a.float() + dt_bias)`` (fp32)."""
        tape = self.tape
        a_log = tape.to(self.parameter(self.names.a_log, hv), "fp32")
        rate = tape.unary_saving_result("exp", a_log)
        negated = tape.scale(rate)
        a32 = tape.to(a, "fp32")
        shifted = tape.add(a32, self.parameter(self.names.dt_bias, hv))
        if a32 is not a:
            tape.release(a32)
        softplus = tape.unary_saving_input("softplus", shifted)
        tape.release(shifted)
        decay = tape.mul(negated, softplus)
        tape.release(rate, negated, softplus)
        return decay

    def _slice(self, x: Sym, numel: int) -> Sym:
        """``x[:, :, i]`` (or any slice): a view; its backward makes a zero tensor of x's size."""
        part = x.view(numel)
        self.tape.record("slice", [], [x], [part])
        return part

    def _bmm_operand(self, x: Sym) -> Sym:
        """A chunked operand of a batched matmul: matmul's reshape of a strided (b, Hv, chunks, C, d)
        tensor copies it (measured); a contiguous one is a view, and under autocast its cast is the copy."""
        return self.tape.copy(x) if self._strided else x

    def _chunk_gated_delta_rule(self, q: Sym, k: Sym, v: Sym, decay: Sym, beta: Sym) -> Sym:
        """``torch_chunk_gated_delta_rule`` with ``use_qk_l2norm_in_kernel=True`` and no initial state."""
        shape, tape = self.shape, self.tape
        hk, hv, dk, dv, _ = linear_dims(self.arch)
        b, s = shape.batch, shape.seq
        chunk = CHUNK_SIZE
        padded_seq = -(-s // chunk) * chunk
        chunks = padded_seq // chunk
        input_dtype = q.dtype
        if hv != hk:  # repeat_interleave over the head dimension: new tensors, nothing saved
            q, k = tape.copy(q, b * s * hv * dk), tape.copy(k, b * s * hv * dk)
        # x.transpose(1, 2).to(float32, memory_format=contiguous_format): a 16-bit input is copied to a
        # contiguous fp32 tensor; an fp32 one comes back as the transposed view itself (measured, torch
        # 2.13), so the element-wise results after it keep the (b, s, heads, d) layout, and so does F.pad
        # when it pads nothing (a sequence that is a multiple of the chunk): the batched matmuls below
        # then copy their strided operands. A real pad writes a new contiguous tensor.
        self._strided = input_dtype == "fp32" and not tape.autocast and padded_seq == s
        heads_first = []
        for t in (q, k, v, beta, decay):
            if self._strided:
                heads_first.append(self._slice(t, t.numel))
                continue
            copy = tape.new(t.numel, "fp32", t.requires_grad)
            tape.record("to_copy", [], [t], [copy])
            heads_first.append(copy)
        if hv != hk and not self._strided:
            tape.release(q, k)
        q32, k32, v32, beta32, decay32 = heads_first
        q_normed, k_normed = self._l2norm(q32, b * hv * s), self._l2norm(k32, b * hv * s)
        if not self._strided:
            tape.release(q32, k32)
        elif hv != hk:
            tape.release(q, k)
        q_scaled = tape.scale(q_normed)
        tape.release(q_normed)
        q_pad, k_pad, v_pad = (tape.copy(t, b * hv * padded_seq * width) for t, width in ((q_scaled, dk), (k_normed, dk), (v32, dv)))
        beta_pad, decay_pad = (tape.copy(t, b * hv * padded_seq) for t in (beta32, decay32))
        tape.release(q_scaled, k_normed)
        if not self._strided:
            tape.release(v32, beta32, decay32)
        v_beta = tape.mul(v_pad, beta_pad)
        k_beta = tape.mul(k_pad, beta_pad)
        tape.release(v_pad, beta_pad)
        mask = tape.new(chunk * chunk, "bool", False)
        cum = tape.copy(decay_pad)  # cumsum over the chunk: backward needs no saved tensor
        tape.release(decay_pad)
        pairs = b * hv * chunks * chunk * chunk
        pairwise = tape.new(pairs, "fp32", cum.requires_grad)
        tape.record("sub", [], [cum], [pairwise])  # cum.unsqueeze(4) - cum.unsqueeze(3)
        masked = tape.new(pairs, "fp32", cum.requires_grad)
        tape.record("masked_fill", [mask], [pairwise], [masked])
        tape.release(pairwise, mask)
        pair_decay = tape.unary_saving_result("exp", masked)
        tape.release(masked)
        ut_system = self._decayed_product(k_beta, k_pad, pair_decay, pairs)
        intra = self._decayed_product(q_pad, k_pad, pair_decay, pairs)
        tape.release(pair_decay)
        cum_exp = tape.unary_saving_result("exp", cum)
        decayed_k_beta = tape.mul(k_beta, cum_exp)
        tape.release(cum_exp, k_beta)
        new_values = self._solve_triangular(ut_system, v_beta)
        k_cumdecay = self._solve_triangular(ut_system, decayed_k_beta)
        tape.release(ut_system, v_beta, decayed_k_beta)
        state_numel = b * hv * dk * dv
        state = tape.new(state_numel, "fp32", False)  # torch.zeros(recurrent_state_shape)
        out_all = tape.new(b * hv * padded_seq * dv, "fp32", False)  # torch.zeros_like(new_values)
        q_exp = tape.unary_saving_result("exp", cum)
        q_decayed = tape.mul(q_pad, q_exp)
        tape.release(q_exp, q_pad)
        to_end = tape.copy(cum)  # cum[..., -1:] - cum
        k_exp = tape.unary_saving_result("exp", to_end)
        tape.release(to_end)
        k_decayed = tape.mul(k_pad, k_exp)
        tape.release(k_exp, k_pad)
        last = tape.new(b * hv * chunks, "fp32", cum.requires_grad)
        tape.record("select", [], [cum], [last])
        chunk_decay = tape.unary_saving_result("exp", last)
        tape.release(last, cum)
        rows_k, rows_v = b * hv * chunk * dk, b * hv * chunk * dv
        outputs = []
        for index in range(chunks):
            k_cumdecay_i = self._slice(k_cumdecay, rows_k)
            read = tape.matmul(k_cumdecay_i, state, rows_v)
            v_new = tape.new(rows_v, "fp32", True)
            tape.record("sub", [], [new_values, read], [v_new])
            tape.release(read)
            q_i = self._slice(q_decayed, rows_k)
            if state.requires_grad and self._strided:
                q_i = tape.copy(q_i)  # matmul's reshape of the strided chunk slice (measured)
            inter = tape.matmul(q_i, state, rows_v)
            if q_i.storage != q_decayed.storage:
                tape.release(q_i)
            intra_out = tape.matmul(self._slice(intra, b * hv * chunk * chunk), v_new, rows_v)
            chunk_out = tape.add(inter, intra_out)
            tape.release(inter, intra_out)
            outputs.append(chunk_out)
            if index == chunks - 1:
                # The last update makes the final state, which training discards (output_final_state is
                # False): its graph is freed at once, and with it what its mul and matmul saved.
                tape.release(v_new)
                break
            carried = tape.mul(state, self._slice(chunk_decay, b * hv))
            k_t = self._bmm_operand(self._slice(k_decayed, rows_k))  # key[:, :, i].transpose(-1, -2)
            update = tape.matmul(k_t, v_new, state_numel)
            if k_t.storage != k_decayed.storage:
                tape.release(k_t)
            tape.release(v_new)
            new_state = tape.add(carried, update)
            tape.release(carried, update, state)
            state = new_state
        tape.release(state)
        written = tape.new(out_all.numel, "fp32", True)  # core_attn_out[:, :, i] = ... (CopySlices)
        tape.record("copy_slices", [], outputs, [written])
        tape.release(*outputs, out_all)
        tape.release(new_values, k_cumdecay, q_decayed, k_decayed, intra, chunk_decay)
        out = tape.new(b * s * hv * dv, input_dtype, True)  # [:, :, :s].transpose(1, 2).to(dtype, contiguous)
        tape.record("to_copy", [], [written], [out])
        tape.release(written)
        return out

    def _l2norm(self, x: Sym, rows: int) -> Sym:
        """``l2norm``: ``x * rsqrt((x * x).sum(-1, keepdim=True) + eps)``."""
        tape = self.tape
        squared = tape.mul(x, x)
        summed = tape.reduce(squared, rows)
        tape.release(squared)
        shifted = tape.scale(summed)
        tape.release(summed)
        inverse = tape.unary_saving_result("rsqrt", shifted)
        tape.release(shifted)
        out = tape.mul(x, inverse)
        tape.release(inverse)
        return out

    def _decayed_product(self, a: Sym, key: Sym, pair_decay: Sym, pairs: int) -> Sym:
        """``(a @ key.transpose(-1, -2)) * pair_decay`` over (b, Hv, chunks) batches of C × C."""
        tape = self.tape
        a_in, k_in = self._bmm_operand(a), self._bmm_operand(key)
        product = tape.matmul(a_in, k_in, pairs)
        if a_in is not a:
            tape.release(a_in)
        if k_in is not key:
            tape.release(k_in)
        out = tape.mul(product, pair_decay)
        tape.release(product)
        return out

    def _solve_triangular(self, system: Sym, rhs: Sym) -> Sym:
        """``torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)``: saves the
        system and the result."""
        tape = self.tape
        out = tape.new(rhs.numel, tape.promote(system.dtype, rhs.dtype), True)
        tape.record("solve_triangular", [system, out], [system, rhs], [out])
        return out

    def _gated_norm(self, x: Sym, gate: Sym, rows: int, width: int) -> Sym:
        """``Qwen3NextRMSNormGated``: ``(weight * norm(x).to(dtype) * silu(gate.float())).to(dtype)``."""
        tape = self.tape
        normalized = self._normalize_in_fp32(x, rows)
        cast = tape.to(normalized, x.dtype)
        if cast is not normalized:
            tape.release(normalized)
        weighted = tape.mul(self.parameter(self.names.gated_norm, width), cast)
        tape.release(cast)
        gate32 = tape.to(gate, "fp32")
        activated = self._gate_activation(gate32)
        if gate32 is not gate:
            tape.release(gate32)
        product = tape.mul(weighted, activated)
        tape.release(weighted, activated)
        out = tape.to(product, x.dtype)
        if out is not product:
            tape.release(product)
        return out

    def _gate_activation(self, gate32: Sym) -> Sym:
        """The gated norm's activation of the fp32 gate: SiLU, which saves its input."""
        return self.tape.unary_saving_input("silu", gate32)
