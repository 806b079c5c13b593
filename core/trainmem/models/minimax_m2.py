"""MiniMax-M2 / M2.1 (``minimax_m2``, MiniMaxAI/MiniMax-M2; transformers/models/minimax_m2, transformers 5.24).

Grouped-query attention without biases whose q and k are RMS-normed over the **whole projection** before the
split into heads (``MiniMaxM2Attention``: ``q_norm`` of ``num_attention_heads × head_dim`` features, ``k_norm`` of
``num_key_value_heads × head_dim``; the released config's ``qk_norm_type: per_layer``), as OLMo 2's, with Llama's
RMSNorm (cast, then the weight). **Partial rotary**: ``rotary_dim`` (64 of ``head_dim`` 128 in the released
checkpoints) becomes ``rope_parameters.partial_rotary_factor`` (``MiniMaxM2Config.convert_rope_params_to_dict``;
an explicit factor wins; neither: the whole head), and ``apply_rotary_pos_emb`` ends with ``torch.cat([q_embed,
q_pass], dim=-1)``, a new heads-first tensor (``DecoderFamily.rope_concatenates``), also when the whole head rotates.

Every layer is a MoE layer (``MiniMaxM2SparseMoeBlock``): ``num_local_experts`` fused 3-D experts of
``intermediate_size`` (Mixtral's layout), no shared expert, and ``MiniMaxM2TopKRouter`` over an
``nn.Parameter`` ``mlp.gate.weight`` (not an ``nn.Linear``: bitsandbytes and ``all-linear`` leave it alone):
``F.linear(x.to(weight.dtype), weight)`` (under autocast in 16 bits), ``sigmoid(logits.float())`` (saves its fp32
result), plus the ``e_score_correction_bias`` *buffer* (``mlp.e_score_correction_bias``: not a parameter, not
counted) for ``topk``'s choice only, the unbiased scores gathered and divided in place by their sum (saves the
quotient and the sum). With ``router_jitter_noise`` > 0 the block first multiplies its input in place by
U(1 - eps, 1 + eps) noise (saved by the product; PhiMoE's ``_jitter``). PEFT 0.21 has no default LoRA targets
for minimax_m2 and converts its v4 MoE names as Mixtral's (transformers/conversion_mapping.py
``_MODEL_TO_CONVERSION_PATTERN``: minimax_m2 -> mixtral: ``gate``, ``w1``/``w3`` -> ``gate_up_proj``, ``w2``).

The checkpoints' multi-token-prediction modules (``use_mtp``, ``num_mtp_modules``: 3) are not built by
``MiniMaxM2ForCausalLM``: not counted, stated.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerProgram
from ..tape import Sym
from .family import MIXTRAL_STYLE_MOE_TARGETS, DecoderFamily, common_decoder_fields
from .fields import ConfigFields
from .phimoe import PhimoeProgram
from .qwen3_next import partial_rotary_factor

MINIMAX_M2_DEFAULTS = dict(
    vocab_size=200064,
    hidden_size=3072,
    intermediate_size=1536,
    num_hidden_layers=62,
    num_attention_heads=48,
    num_key_value_heads=8,
    head_dim=128,
    max_position_embeddings=196608,
    tie_word_embeddings=False,
)
"""``MiniMaxM2Config``'s defaults (transformers 5.24 configuration_minimax_m2.py; those of MiniMax-M2)."""


class MiniMaxM2Program(LayerProgram):
    """Llama's layer with whole-projection q/k norms, the partial-rotary concatenation and the sigmoid router."""

    _jitter = PhimoeProgram._jitter

    def _moe(self, x: Sym) -> Sym:
        """``MiniMaxM2SparseMoeBlock.forward``: the optional in-place input jitter, then router and experts."""
        if self.arch.input_jitter_noise > 0:
            x = self._jitter(x)
        return super()._moe(x)

    def _route(self, x: Sym) -> Sym:
        """``MiniMaxM2TopKRouter.forward``: the top-k routing weights (fp32, one per token and chosen expert)."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        rows = shape.stream_tokens * shape.experts_per_token
        router = self.expert_parameter(names.router, arch.num_experts * shape.hidden, self.trainability.trains(names.router))
        x_in = tape.to(x, router.dtype)  # hidden_states.to(self.weight.dtype)
        logits = tape.linear(x_in, router, arch.num_experts)
        if x_in is not x:
            tape.release(x_in)
        logits32 = tape.to(logits, "fp32")  # router_logits.float()
        scores = tape.unary_saving_result("sigmoid", logits32)
        tape.release(logits, logits32)
        choice = tape.scale(scores)  # routing_weights + e_score_correction_bias: topk's indices only
        tape.release(choice)
        top = tape.gather(scores, rows, rows)  # routing_weights.gather(1, top_k_index)
        tape.release(scores)
        total = tape.reduce(top, shape.stream_tokens)  # top_k_weights.sum(dim=-1, keepdim=True)
        normalized = tape.mul(top, total)  # top_k_weights /= total: saves the quotient and the sum
        tape.release(top, total)
        return normalized


def mtp_modules_not_counted(fields: ConfigFields) -> tuple[str, ...]:
    """``use_mtp`` / ``num_mtp_modules`` of the released configs (remote-code fields transformers ignores)."""
    modules = fields.integer("num_mtp_modules", 0, minimum=0)
    if not (modules and fields.boolean("use_mtp", False)):
        return ()
    return (f"{modules} multi-token-prediction module(s) of the checkpoint (transformers does not build them)",)


class MiniMaxM2(DecoderFamily):
    model_type = "minimax_m2"
    lora_default_targets = None
    moe_lora_conversion = MIXTRAL_STYLE_MOE_TARGETS
    rope_concatenates = True

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, MINIMAX_M2_DEFAULTS)
        experts = fields.integer("num_local_experts", 256, aliases=("num_experts",))
        per_token = fields.integer("num_experts_per_tok", 8)
        if per_token > experts:
            raise fields.fail("num_experts_per_tok", f"cannot exceed num_local_experts ({experts}), got {per_token}")
        factor = partial_rotary_factor(fields, 1.0)
        rotary_dim = fields.optional_integer("rotary_dim")
        rope = fields.mapping("rope_parameters") or {}
        if rotary_dim is not None and "partial_rotary_factor" not in rope and "partial_rotary_factor" not in fields.config:
            if rotary_dim > common["head_dim"] or rotary_dim % 2:
                raise fields.fail("rotary_dim", f"must be even and at most head_dim ({common['head_dim']}), got {rotary_dim}")
            factor = rotary_dim / common["head_dim"]
        return Architecture(
            **common,
            qk_norm=True,
            qk_norm_over="projection",
            partial_rotary_factor=factor,
            num_experts=experts,
            num_experts_per_tok=per_token,
            router_scoring="sigmoid",
            router_score_correction_bias=True,
            input_jitter_noise=fields.number("router_jitter_noise", 0.0, minimum=0.0, maximum=0.99),
            not_counted=mtp_modules_not_counted(fields),
        )

    def program(self) -> type[LayerProgram]:
        return MiniMaxM2Program
