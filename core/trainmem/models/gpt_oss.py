"""gpt-oss (transformers/models/gpt_oss, transformers 5.24).

* Attention: q/k/v/o with biases (``attention_bias``, default true), grouped-query heads of
  ``head_dim`` 64, and one learned **sink** logit per head (``self_attn.sinks``). Layers alternate
  sliding-window (``sliding_window``, 128 by default) and full attention (``layer_types``, by default
  sliding on the even layers): the reader keeps the window and its layers (their own layer kind), as
  for Mistral and Gemma; on the eager path the window is a mask
  (``create_sliding_window_causal_mask``) and changes no saved tensor.
  transformers 5.24 has no SDPA path for the sinks (``GptOssPreTrainedModel._supports_sdpa = False``):
  it trains eager, or with a flash-attention kernel that takes ``s_aux`` on CUDA
  (``integrations/flash_attention.py``; flex attention refuses sinks on CPU). The eager path
  (``eager_attention_forward`` in modeling_gpt_oss.py) concatenates the sinks as an extra key
  column, subtracts the row maximum, takes a softmax in the scores' dtype and drops the sink column
  (a view) before the product with v.
* RMSNorm multiplies ``weight * normalized`` in fp32 and casts the product (``GptOssRMSNorm``).
* MoE on every layer: ``mlp.router`` (``GptOssTopKRouter``: a weight *and a bias*, top-k of the
  logits, softmax over the k), ``num_local_experts`` experts with biases, stored transposed
  (``gate_up_proj`` E×h×2i with gate and up interleaved, ``down_proj`` E×i×h) and the clamped SwiGLU
  ``(clamp(up, ±limit) + 1) · g · sigmoid(alpha · g)``, ``g = clamp(gate, max=limit)``
  (``GptOssExperts._apply_gate``), run through transformers' ``grouped_mm`` experts.
* **MXFP4**: the published checkpoints store the expert weights in MXFP4 (4-bit values with one
  8-bit scale per 32, OCP Microscaling spec), but training dequantises them
  (``Mxfp4Config(dequantize=True)``; the MXFP4 Triton kernels are inference-only): trainmem
  models the experts as ordinary (bf16 or fp32) parameters. That is an assumption about how the
  model is trained, stated in the report, not a measurement of the MXFP4 kernels.
* PEFT has no default targets for gpt_oss and no v4→v5 MoE conversion for it: ``all-linear`` adapts
  q/k/v/o only (the router is not an ``nn.Linear``, the experts are 3-D parameters).
"""

from __future__ import annotations

from typing import Optional

from ..architecture import Architecture
from ..errors import FieldError
from ..layers import LayerProgram
from ..tape import Sym
from . import blocks
from .blocks import ModuleNames, ParameterTensor
from .family import DecoderFamily, common_decoder_fields, sliding_window_fields
from .fields import ConfigFields
from .norm_programs import WeightTimesFp32RMSNorm

GPT_OSS_DEFAULTS = dict(
    vocab_size=201088,
    hidden_size=2880,
    intermediate_size=2880,
    num_hidden_layers=36,
    num_attention_heads=64,
    num_key_value_heads=8,
    head_dim=64,
    max_position_embeddings=131072,
    tie_word_embeddings=False,
)
"""``GptOssConfig``'s defaults (those of gpt-oss-20b, except the layer count: 24 there)."""

GPT_OSS_SLIDING_WINDOW = 128
"""``GptOssConfig.sliding_window``'s default."""


def default_sliding_layers(layers: int) -> tuple[int, ...]:
    """``GptOssConfig.__post_init__``'s default ``layer_types``: sliding where ``(i + 1) % 2``, i.e. the even layers."""
    return tuple(i for i in range(layers) if (i + 1) % 2)


CPU_ATTENTION_MESSAGE = (
    "gpt_oss trains with eager attention on CPU: transformers 5.24 has no SDPA path for its attention sinks "
    "(GptOssPreTrainedModel._supports_sdpa is False); use 'eager'"
)

CUDA_FP32_MESSAGE = (
    "gpt_oss's sinks need a flash kernel with s_aux on CUDA, which computes in bf16/fp16 only: with fp32 "
    "compute use 'eager', or a bf16/fp16 precision"
)
CUDA_MATH_MESSAGE = (
    "gpt_oss has no SDPA math path (its sinks need eager or a flash kernel with s_aux); use 'eager' or 'sdpa' "
    "(a fused flash kernel on CUDA)"
)

GPT_OSS_NAMES = ModuleNames(router="mlp.router", experts="mlp.experts")

MXFP4_NOTE = (
    "the MXFP4 format of the published expert weights: trained dequantised to the load dtype "
    "(Mxfp4Config(dequantize=True)), an assumption"
)


class GptOss(DecoderFamily):
    model_type = "gpt_oss"
    names = GPT_OSS_NAMES
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, GPT_OSS_DEFAULTS)
        layers = common["num_hidden_layers"]
        layer_types = fields.string_list("layer_types")
        if layer_types:
            unknown = sorted(set(layer_types) - {"sliding_attention", "full_attention"})
            if unknown:
                raise fields.fail("layer_types", f"unknown layer type {unknown[0]!r}; allowed: sliding_attention, full_attention")
        window = sliding_window_fields(fields, layers, GPT_OSS_SLIDING_WINDOW, default_sliding_layers(layers))
        experts = fields.integer("num_local_experts", 128, aliases=("num_experts",))
        per_token = fields.integer("num_experts_per_tok", 4, aliases=("experts_per_token",))
        if per_token > experts:
            raise fields.fail("num_experts_per_tok", f"cannot exceed num_local_experts ({experts}), got {per_token}")
        bias = fields.boolean("attention_bias", True)
        fields.mapping("quantization_config")  # MXFP4 as published; trained dequantised either way
        return Architecture(
            **common,
            attention_qkv_bias=bias,
            attention_output_bias=bias,
            num_experts=experts,
            num_experts_per_tok=per_token,
            router_scoring="topk_softmax",
            router_bias=True,
            expert_bias=True,
            swiglu_limit=fields.number("swiglu_limit", 7.0, minimum=1e-9),
            attention_sinks=True,
            not_counted=(MXFP4_NOTE,),
            **window,
        )

    def layer(self, arch: Architecture) -> list[ParameterTensor]:
        names = self.names
        h, i, experts = arch.hidden_size, arch.intermediate_size, arch.num_experts
        moe = [
            ParameterTensor(f"{names.router}.weight", "router", (experts, h)),
            ParameterTensor(f"{names.router}.bias", "router", (experts,)),
            ParameterTensor(f"{names.experts}.gate_up_proj", "experts", (experts, h, 2 * i)),
            ParameterTensor(f"{names.experts}.gate_up_proj_bias", "experts", (experts, 2 * i)),
            ParameterTensor(f"{names.experts}.down_proj", "experts", (experts, i, h)),
            ParameterTensor(f"{names.experts}.down_proj_bias", "experts", (experts, h)),
        ]
        sinks = [ParameterTensor("self_attn.sinks", "attention", (arch.num_attention_heads,))]
        return blocks.attention(arch, names) + sinks + moe + blocks.layer_norms(arch, names)

    def unsupported_attention(self, attention: str, device: str, compute_dtype: str = "bf16") -> Optional[str]:
        """No SDPA for the sinks: eager anywhere; on CUDA ``sdpa`` stands for a fused flash kernel that
        takes ``s_aux`` (kernels-community/vllm-flash-attn3), which has no math fallback and, as every
        flash kernel, takes fp16/bf16 only (fp32 compute would send SDPA to math)."""
        if attention == "eager":
            return None
        if device == "cpu":
            return CPU_ATTENTION_MESSAGE
        if attention == "sdpa-math":
            return CUDA_MATH_MESSAGE
        if compute_dtype == "fp32":
            return CUDA_FP32_MESSAGE
        return None

    def program(self) -> type[LayerProgram]:
        return GptOssProgram


class GptOssProgram(WeightTimesFp32RMSNorm):
    """gpt-oss's norm (``GptOssRMSNorm``: the product in fp32, then the cast), attention with sinks, router
    and clamped-SwiGLU experts on the tape."""

    def _rope(self, q: Sym) -> Sym:
        """``_apply_rotary_emb``: halves (views), ``cat((x1·cos − x2·sin, x2·cos + x1·sin))``; cos and sin
        hold head_dim / 2 values per position (no duplication); nothing but cos/sin is saved."""
        tape = self.tape
        half = self.shape.seq * self.shape.head_dim // 2
        cos = Sym(half, self.kernels.stream_dtype, False, "external")
        sin = Sym(half, self.kernels.stream_dtype, False, "external")
        first, second = tape.split(q, [q.numel // 2, q.numel // 2])
        parts = []
        for a, b in ((first, second), (second, first)):
            with_cos = tape.mul(a, cos)
            with_sin = tape.mul(b, sin)
            parts.append(tape.add(with_cos, with_sin))
            tape.release(with_cos, with_sin)
        out = tape.new(q.numel, tape.promote(*(p.dtype for p in parts)), q.requires_grad)
        tape.record("cat", [], parts, [out])
        tape.release(*parts)
        return out

    def _attention_core(self, q: Sym, k: Sym, v: Sym) -> Sym:
        kernel = self.kernels.attention
        if kernel != "eager" and self.kernels.device == "cpu":
            raise FieldError("attention", CPU_ATTENTION_MESSAGE)
        if kernel == "math":
            raise FieldError("attention", CUDA_MATH_MESSAGE)
        if kernel != "eager":
            # flash attention with s_aux (CUDA): saves what a fused kernel saves (assumed, not measured)
            lse = self.shape.batch * self.shape.heads * self.shape.seq
            return self.tape.fused_attention(q, k, v, lse, self.arch.attention_dropout > 0)
        return self._eager_with_sinks(q, k, v)

    def _eager_with_sinks(self, q: Sym, k: Sym, v: Sym) -> Sym:
        """``eager_attention_forward`` of modeling_gpt_oss.py."""
        shape, tape = self.shape, self.tape
        groups = shape.heads // shape.kv_heads
        if groups > 1:  # repeat_kv
            k = tape.copy(k, k.numel * groups)
            v = tape.copy(v, v.numel * groups)
        rows = shape.batch * shape.heads * shape.seq
        scores = tape.matmul(q, k, rows * shape.kv_seq)
        scaled = tape.scale(scores)
        tape.release(scores)
        masked = tape.scale(scaled)  # + attention_mask
        tape.release(scaled)
        sinks = self.parameter("self_attn.sinks", shape.heads)
        combined = tape.new(rows * (shape.kv_seq + 1), masked.dtype, True)
        tape.record("cat", [], [masked, sinks], [combined])  # torch.cat([attn_weights, sinks], dim=-1)
        tape.release(masked)
        maximum = tape.new(rows, combined.dtype, True)  # .max(dim=-1, keepdim=True).values: saves the indices
        tape.record("max", [Sym(rows, "int64", False)], [combined], [maximum], combined.nbytes)
        shifted = tape.add(combined, maximum)
        tape.release(combined, maximum)
        probs = tape.unary_saving_result("softmax", shifted, dtype=shifted.dtype)
        tape.release(shifted)
        without_sink = probs.view(rows * shape.kv_seq)  # probs[..., :-1]
        tape.record("slice", [], [probs], [without_sink], probs.nbytes)
        dropped = tape.dropout(without_sink, self.arch.attention_dropout)
        cast = tape.to(dropped, v.dtype)
        context = tape.matmul(cast, v, q.numel)
        tape.release(probs, dropped, cast)
        if groups > 1:
            tape.release(k, v)
        out = tape.copy(context)  # transpose(1, 2).contiguous()
        tape.release(context)
        return out

    # ------------------------------------------------------------------ MoE
    def _route(self, x: Sym) -> Sym:
        """``GptOssTopKRouter``: ``F.linear(x, weight, bias)``, top-k of the logits (indices saved),
        softmax over the k in the logits' dtype."""
        arch, shape, tape = self.arch, self.shape, self.tape
        rows = shape.stream_tokens * shape.experts_per_token
        weight = self.parameter(self.names.router, arch.num_experts * shape.hidden)
        bias = self.parameter(self.names.router, arch.num_experts)
        logits = tape.linear(x, weight, arch.num_experts, bias)
        top = tape.gather(logits, rows, rows)
        tape.release(logits)
        weights = tape.unary_saving_result("softmax", top, dtype=top.dtype)
        tape.release(top)
        return weights

    def _moe(self, x: Sym) -> Sym:
        """transformers' ``grouped_mm_experts_forward`` with gpt-oss's transposed, biased experts and
        ``_apply_gate``: biases gathered per routed row and added in place, gate and up interleaved
        (strided views of one output), both clamped (clamp saves its input: the whole gate_up output)."""
        arch, shape, tape = self.arch, self.shape, self.tape
        h, i = shape.hidden, shape.intermediate
        experts = shape.local_experts or arch.num_experts
        rows = shape.stream_tokens * shape.experts_per_token
        trains = self.trainability.trains(self.names.experts)
        routing = self._route(x)
        gathered = tape.gather(x, rows * h, rows)  # hidden_states[perm // k]
        weights = tape.gather(routing, rows, rows)  # sample_weights[perm]
        tape.release(routing)
        rank = self.kernels.lora_rank
        gate_up_weight = self.expert_parameter(
            f"{self.names.experts}.gate_up_proj", experts * 2 * i * h, trains, rank * experts * (2 * i + h)
        )
        gate_up = tape.linear(gathered, gate_up_weight, 2 * i, in_features=h, op="grouped_mm")
        tape.release(gathered)
        gate_up = self._add_gathered_bias(gate_up, experts * 2 * i, rows * 2 * i, rows, trains)
        gate, up = tape.split(gate_up, [gate_up.numel // 2, gate_up.numel // 2])  # [..., ::2], [..., 1::2]
        gate_clamped = tape.unary_saving_input("clamp", gate)
        up_clamped = tape.unary_saving_input("clamp", up)
        tape.release(gate_up)
        gate_scaled = tape.scale(gate_clamped)  # gate * alpha
        sigmoid = tape.unary_saving_result("sigmoid", gate_scaled)
        tape.release(gate_scaled)
        glu = tape.mul(gate_clamped, sigmoid)
        tape.release(gate_clamped, sigmoid)
        up_plus_one = tape.scale(up_clamped)
        tape.release(up_clamped)
        gated = tape.mul(up_plus_one, glu)
        tape.release(up_plus_one, glu)
        down_weight = self.expert_parameter(f"{self.names.experts}.down_proj", experts * i * h, trains, rank * experts * (i + h))
        down = tape.linear(gated, down_weight, h, in_features=i, op="grouped_mm")
        tape.release(gated)
        down = self._add_gathered_bias(down, experts * h, rows * h, rows, trains)
        weighted = tape.mul(down, weights)
        tape.release(down, weights)
        reordered = tape.gather(weighted, weighted.numel, rows)  # weighted_out[inv_perm]
        tape.release(weighted)
        out = tape.reduce(reordered, shape.stream_tokens * h)
        tape.release(reordered)
        cast = tape.to(out, x.dtype)
        if cast is not out:
            tape.release(out)
        return cast

    def _add_gathered_bias(self, out: Sym, bias_numel: int, gathered_numel: int, rows: int, trains: bool) -> Sym:
        """``out.add_(bias[expert_ids_g])``: the gathered bias is a transient, the add saves nothing."""
        tape = self.tape
        bias = Sym(bias_numel, self.kernels.weight_dtype, trains, "parameter")
        gathered = tape.gather(bias, gathered_numel, rows)
        summed = out.view()
        tape.record("add_", [], [out, gathered], [summed])
        tape.release(gathered)
        return summed
