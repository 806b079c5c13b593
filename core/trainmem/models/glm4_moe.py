"""GLM-4.5 / 4.6 / 4.7 (``glm4_moe``, transformers/models/glm4_moe, transformers 5.24).

Grouped-query attention with a bias on q, k and v (``attention_bias``; never on ``o_proj``), an optional
RMSNorm over each query and key head (``use_qk_norm``, ``Glm4MoeAttention``), and **partial rotary**:
``partial_rotary_factor`` (0.5 unless the file says otherwise: ``Glm4MoeConfig.__post_init__``) of each
head's dims are rotated and ``apply_rotary_pos_emb`` ends with ``torch.cat([q_embed, q_pass], dim=-1)``, a
new tensor laid out heads-first (as Phi-3's; ``DecoderFamily.rope_concatenates``). ``head_dim`` is not a
field of ``Glm4MoeConfig``: the attention reads ``getattr(config, "head_dim", hidden_size //
num_attention_heads)``, so a file's ``head_dim`` (GLM-4.5: 128 with 96 heads of a 5120-wide stream) wins.

The MoE is DeepSeek-V3's: the first ``first_k_dense_replace`` layers have a dense SwiGLU MLP of
``intermediate_size``; the others a ``Glm4MoeTopkRouter`` (an fp32 ``weight`` parameter, not an
``nn.Linear``; sigmoid scores, the ``e_score_correction_bias`` buffer and the ``n_group`` / ``topk_group``
choice, ``norm_topk_prob``, ``routed_scaling_factor``), ``n_routed_experts`` fused 3-D experts of
``moe_intermediate_size`` and one always-on ``mlp.shared_experts`` MLP of ``n_shared_experts ×
moe_intermediate_size``, added to the routed output (``Glm4MoeMoE.forward``). The router runs as
``models/deepseek.py``'s ``MlaProgram._route`` (the same code in transformers).

The multi-token-prediction layer of the checkpoints (``num_nextn_predict_layers``; ``model.layers.92.*``
of GLM-4.5) is not built by ``Glm4MoeForCausalLM`` (``_keys_to_ignore_on_load_unexpected``): not counted,
stated. PEFT 0.21 has no default LoRA targets for glm4_moe and converts its v4 MoE names as Qwen2-MoE's
(transformers/conversion_mapping.py ``_MODEL_TO_CONVERSION_PATTERN``: glm4_moe -> qwen2_moe).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..layers import LayerProgram
from .blocks import ModuleNames
from .deepseek import MlaProgram
from .family import QWEN2_MOE_STYLE_TARGETS, DecoderFamily, common_decoder_fields
from .fields import ConfigFields
from .qwen3_next import partial_rotary_factor

GLM4_MOE_DEFAULTS = dict(
    vocab_size=151552,
    hidden_size=4096,
    intermediate_size=10944,
    num_hidden_layers=46,
    num_attention_heads=96,
    num_key_value_heads=8,
    max_position_embeddings=131072,
    tie_word_embeddings=False,
)
"""``Glm4MoeConfig``'s defaults (transformers 5.24 configuration_glm4_moe.py)."""


@dataclass(frozen=True)
class Glm4MoeNames(ModuleNames):
    """``mlp.shared_experts`` (plural, as DeepSeek's)."""

    shared_expert: str = "mlp.shared_experts"


class Glm4MoeProgram(LayerProgram):
    """Llama's attention (with the partial-rotary concatenation) and DeepSeek-V3's router."""

    _route = MlaProgram._route


def deepseek_style_moe_fields(fields: ConfigFields, layers: int, dense_width: int, defaults: dict) -> dict[str, object]:
    """The MoE fields of a DeepSeek-V3-style config (``n_routed_experts``, ``n_shared_experts``,
    ``first_k_dense_replace``, sigmoid router with the correction bias), with the class's ``defaults``."""
    experts = fields.integer("n_routed_experts", defaults["n_routed_experts"], aliases=("num_local_experts",))
    if not experts:
        return {}
    per_token = fields.integer("num_experts_per_tok", defaults["num_experts_per_tok"])
    if per_token > experts:
        raise fields.fail("num_experts_per_tok", f"cannot exceed n_routed_experts ({experts}), got {per_token}")
    groups = fields.integer("n_group", defaults.get("n_group", 1))
    if experts % groups:
        raise fields.fail("n_group", f"must divide n_routed_experts ({experts}), got {groups}")
    topk_group = fields.integer("topk_group", defaults.get("topk_group", 1))
    if topk_group > groups:
        raise fields.fail("topk_group", f"cannot exceed n_group ({groups}), got {topk_group}")
    width = fields.integer("moe_intermediate_size", defaults["moe_intermediate_size"])
    first_dense = fields.integer("first_k_dense_replace", defaults["first_k_dense_replace"], minimum=0)
    return dict(
        intermediate_size=width,
        num_experts=experts,
        num_experts_per_tok=per_token,
        shared_expert_intermediate_size=width * fields.integer("n_shared_experts", defaults["n_shared_experts"], minimum=0),
        dense_layers=tuple(range(min(first_dense, layers))),
        dense_intermediate_size=dense_width,
        router_scoring="sigmoid",
        router_score_correction_bias=True,
        norm_topk_prob=fields.boolean("norm_topk_prob", defaults.get("norm_topk_prob", True)),
    )


def mtp_not_counted(fields: ConfigFields, default: int) -> tuple[str, ...]:
    """``num_nextn_predict_layers`` (alias ``num_mtp_layers``): stated, not counted."""
    mtp = fields.integer("num_nextn_predict_layers", default, minimum=0, aliases=("num_mtp_layers",))
    if not mtp:
        return ()
    return (f"{mtp} multi-token-prediction layer(s) of the checkpoint (transformers does not build them for training)",)


class Glm4Moe(DecoderFamily):
    model_type = "glm4_moe"
    names = Glm4MoeNames()
    lora_default_targets = None
    moe_lora_conversion = QWEN2_MOE_STYLE_TARGETS
    rope_concatenates = True
    moe_defaults = dict(
        n_routed_experts=128, num_experts_per_tok=8, n_group=1, topk_group=1, moe_intermediate_size=1408,
        first_k_dense_replace=1, n_shared_experts=1, norm_topk_prob=True,
    )

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, GLM4_MOE_DEFAULTS)
        if common["head_dim"] is None:  # getattr(config, "head_dim", hidden_size // num_attention_heads)
            common["head_dim"] = common["hidden_size"] // common["num_attention_heads"]
        moe = deepseek_style_moe_fields(fields, common["num_hidden_layers"], common["intermediate_size"], self.moe_defaults)
        return Architecture(
            **{**common, **moe},
            attention_qkv_bias=fields.boolean("attention_bias", False),
            qk_norm=fields.boolean("use_qk_norm", False),
            partial_rotary_factor=partial_rotary_factor(fields, 0.5),
            not_counted=mtp_not_counted(fields, 1),
        )

    def program(self) -> type[LayerProgram]:
        return Glm4MoeProgram
