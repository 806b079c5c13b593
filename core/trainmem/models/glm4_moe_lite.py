"""GLM-4.7-Flash (``glm4_moe_lite``, zai-org/GLM-4.7-Flash; transformers/models/glm4_moe_lite, transformers 5.24).

GLM's MoE with DeepSeek-V3's **multi-head latent attention**: ``Glm4MoeLiteAttention`` is ``DeepseekV3Attention``
unchanged (low-rank queries through ``q_lora_rank``, the compressed ``kv_lora_rank`` latent and one shared RoPE key,
``qk_nope_head_dim`` + ``qk_rope_head_dim`` per query/key head, ``v_head_dim`` per value head, interleaved RoPE by
``rope_interleave``), and the MoE is GLM-4.5's (``Glm4MoeLiteMoE`` = ``Glm4MoeMoE``): a ``Glm4MoeTopkRouter`` over an
fp32 ``nn.Parameter`` (sigmoid scores, the ``e_score_correction_bias`` buffer and the ``n_group`` / ``topk_group``
choice, ``norm_topk_prob``, ``routed_scaling_factor``), fused 3-D experts of ``moe_intermediate_size`` and one
``mlp.shared_experts`` MLP of ``n_shared_experts × moe_intermediate_size``. Both run as ``models/deepseek.py``'s
``MlaProgram``, the same code in transformers, so the family is DeepSeek-V3's with the class's defaults and one
difference: which layers are dense comes from ``mlp_layer_types`` (``"dense"`` / ``"sparse"`` per layer; default:
the first layer dense, ``Glm4MoeLiteConfig.__post_init__``), not ``first_k_dense_replace`` (which the class ignores).

The checkpoint's multi-token-prediction layer (``num_nextn_predict_layers``: 1, ``model.layers.47.*``) is not built
(``Glm4MoeLitePreTrainedModel._keys_to_ignore_on_load_unexpected``): not counted, stated. PEFT 0.21 has no default
LoRA targets for glm4_moe_lite and converts its v4 MoE names as Qwen2-MoE's (transformers/conversion_mapping.py:
glm4_moe_lite -> qwen2_moe).
"""

from __future__ import annotations

from ..architecture import Architecture
from .deepseek import DeepseekV3
from .fields import ConfigFields
from .glm4_moe import mtp_not_counted

GLM4_MOE_LITE_DEFAULTS = dict(
    vocab_size=154880,
    hidden_size=2048,
    intermediate_size=10240,
    moe_intermediate_size=1536,
    num_hidden_layers=47,
    num_attention_heads=20,
    n_shared_experts=1,
    n_routed_experts=64,
    routed_scaling_factor=1.8,
    kv_lora_rank=512,
    q_lora_rank=768,
    qk_rope_head_dim=64,
    v_head_dim=256,
    qk_nope_head_dim=192,
    n_group=1,
    topk_group=1,
    num_experts_per_tok=4,
    first_k_dense_replace=0,  # unused: mlp_layer_types decides
    norm_topk_prob=True,
    max_position_embeddings=202752,
    tie_word_embeddings=False,
    rope_interleave=True,
)
"""``Glm4MoeLiteConfig``'s defaults (transformers 5.24 configuration_glm4_moe_lite.py; those of GLM-4.7-Flash)."""

MLP_LAYER_TYPES = ("dense", "sparse")


def dense_layers_from_mlp_layer_types(fields: ConfigFields, layers: int) -> tuple[int, ...]:
    """The layers ``mlp_layer_types`` marks ``dense`` (default: layer 0 only), checked one entry per layer."""
    types = fields.string_list("mlp_layer_types")
    if not types:
        return (0,)
    if len(types) != layers:
        raise fields.fail("mlp_layer_types", f"has {len(types)} entries for {layers} layers")
    unknown = sorted(set(types) - set(MLP_LAYER_TYPES))
    if unknown:
        raise fields.fail("mlp_layer_types", f"unknown MLP type {unknown[0]!r}; allowed: {', '.join(MLP_LAYER_TYPES)}")
    return tuple(i for i, kind in enumerate(types) if kind == "dense")


class Glm4MoeLite(DeepseekV3):
    model_type = "glm4_moe_lite"
    defaults = GLM4_MOE_LITE_DEFAULTS
    has_mtp_field = False
    """``Glm4MoeLiteConfig`` has no ``num_nextn_predict_layers``; the checkpoint's field is read below (default 0)."""

    def read_config(self, fields: ConfigFields) -> Architecture:
        arch = super().read_config(fields)
        update: dict[str, object] = {"not_counted": mtp_not_counted(fields, 0)}
        if arch.num_experts:
            dense = dense_layers_from_mlp_layer_types(fields, arch.num_hidden_layers)
            if len(dense) == arch.num_hidden_layers:
                raise fields.fail("mlp_layer_types", "marks every layer dense; give n_routed_experts: 0 for a dense model")
            update["dense_layers"] = dense
        return Architecture(**{**arch.model_dump(), **update})
