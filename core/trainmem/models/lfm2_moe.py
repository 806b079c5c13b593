"""LFM2-MoE (Liquid AI's LFM2-8B-A1B): LFM2's gated short convolutions and GQA attention with MoE layers after
the first ``num_dense_layers`` dense ones (transformers/models/lfm2_moe/modeling_lfm2_moe.py, transformers 5.24).

What differs from LFM2 (:mod:`trainmem.models.lfm2`, whose mixers, names and layer program it reuses):

* ``Lfm2MoeMLP`` takes ``intermediate_size`` as it is (no ``block_auto_adjust_ff_dim``) in the first
  ``num_dense_layers`` (2) layers; the others are ``Lfm2MoeSparseMoeBlock``: ``num_experts`` (32) fused 3-D experts
  of ``moe_intermediate_size`` (``Qwen2MoeExperts``: ``gate_up_proj`` (E, 2i, h), ``down_proj`` (E, h, i)), no
  shared expert, behind ``Lfm2MoeTopKRouter``, an ``nn.Parameter`` ``feed_forward.gate.weight`` (E, h).
* The router (``Lfm2MoeTopKRouter.forward``): ``F.linear(x, weight)`` (16-bit under autocast), ``sigmoid`` in the
  logits' dtype (saves its result), plus the fp32 ``expert_bias`` buffer (``use_expert_bias``; E values per MoE
  layer, cast with the model) for ``topk``'s choice only, the sigmoid scores gathered at the chosen experts
  (saves the index), divided by their sum + 1e-6 when ``norm_topk_prob`` (saves both operands), times
  ``routed_scaling_factor`` (a new tensor, nothing saved).
* PEFT 0.21 has no default targets and no v4→v5 MoE conversion for ``lfm2_moe`` (it is not in transformers'
  ``_MODEL_TO_CONVERSION_PATTERN``): ``all-linear`` adapts the ``nn.Linear`` modules only (conv and attention
  projections, the dense layers' ``w1``/``w3``/``w2``), not the router or the fused experts, which a 4-bit load
  keeps in the load dtype too.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .family import common_decoder_fields
from .fields import ConfigFields
from .lfm2 import Lfm2, Lfm2Program, read_lfm2_layer_types, short_conv_fields, tied_embeddings

LFM2_MOE_DEFAULTS = dict(
    vocab_size=65536,
    hidden_size=2048,
    intermediate_size=7168,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    max_position_embeddings=128_000,
    tie_word_embeddings=True,
)
"""``Lfm2MoeConfig``'s defaults (transformers 5.24)."""


class Lfm2Moe(Lfm2):
    model_type = "lfm2_moe"

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, LFM2_MOE_DEFAULTS)
        layers = common["num_hidden_layers"]
        common["tie_word_embeddings"] = tied_embeddings(fields, True)
        common["hidden_act"] = "silu"  # Lfm2MoeMLP and Lfm2MoeExperts call F.silu
        dense_width = common["intermediate_size"]
        dense = tuple(range(min(fields.integer("num_dense_layers", 2, minimum=0), layers)))
        experts = fields.integer("num_experts", 32)
        per_token = fields.integer("num_experts_per_tok", 4)
        if per_token > experts:
            raise fields.fail("num_experts_per_tok", f"cannot exceed num_experts ({experts}), got {per_token}")
        moe: dict[str, object] = dict(
            intermediate_size=fields.integer("moe_intermediate_size", 1792),
            num_experts=experts,
            num_experts_per_tok=per_token,
            dense_layers=dense,
            dense_intermediate_size=dense_width,
            router_scoring="sigmoid",
            router_score_correction_bias=fields.boolean("use_expert_bias", True),
            norm_topk_prob=fields.boolean("norm_topk_prob", True),
        )
        fields.number("routed_scaling_factor", 1.0)  # checked: a number (a scalar product, nothing saved)
        if len(dense) == layers:  # every layer dense: no sparse block is built
            moe = {}
            common["intermediate_size"] = dense_width
        common.update(moe)
        return Architecture(**common, qk_norm=True, **short_conv_fields(fields, read_lfm2_layer_types(fields, layers)))

    def layer_buffer_numels(self, arch: Architecture) -> list[int]:
        """``Lfm2MoeSparseMoeBlock.expert_bias``: one (E,) buffer per MoE layer under ``use_expert_bias``."""
        if not (arch.is_moe and arch.router_score_correction_bias):
            return []
        return [arch.num_experts] * (arch.num_hidden_layers - len(arch.dense_layers))

    def program(self) -> type[LayerProgram]:
        return Lfm2MoeProgram


class Lfm2MoeProgram(Lfm2Program):
    """LFM2's layer with ``Lfm2MoeSparseMoeBlock`` (the shared expert machinery of ``LayerProgram._moe``)."""

    def _route(self, x: Sym) -> Sym:
        """``Lfm2MoeTopKRouter.forward``: the top-k routing weights (one per token and chosen expert)."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        rows = shape.stream_tokens * shape.experts_per_token
        router = self.expert_parameter(names.router, arch.num_experts * shape.hidden, self.trainability.trains(names.router))
        logits = tape.linear(x, router, arch.num_experts)
        scores = tape.unary_saving_result("sigmoid", logits)  # in the logits' dtype (no .float())
        tape.release(logits)
        if arch.router_score_correction_bias:
            choice = tape.new(scores.numel, "fp32", scores.requires_grad)  # scores + expert_bias: topk's indices only
            tape.record("add", [], [scores], [choice], grad_passes_through=True)
            tape.release(choice)
        top = tape.gather(scores, rows, rows)  # gather(routing_weights, 1, selected_experts) (or topk's values)
        tape.release(scores)
        if arch.norm_topk_prob:
            total = tape.reduce(top, shape.stream_tokens)  # routing_weights.sum(dim=-1, keepdim=True)
            shifted = tape.scale(total)  # + 1e-6
            tape.release(total)
            normalized = tape.mul(top, shifted)  # routing_weights / (...): saves both operands
            tape.release(top, shifted)
            top = normalized
        scaled = tape.scale(top)  # * routed_scaling_factor
        tape.release(top)
        return scaled
