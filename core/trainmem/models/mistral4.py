"""Mistral 4 (``mistral4``: mistralai/Mistral-Small-4-119B-2603; transformers/models/mistral4, 5.24).

Mistral Small 4 is DeepSeek-V3's layout with Mistral's router and Ministral 3's query temperature, as
``modeling_mistral4.py`` builds it:

* **attention**: ``Mistral4Attention`` is ``DeepseekV3Attention`` (multi-head latent attention, models/deepseek.py:
  ``q_lora_rank`` low-rank queries, the ``kv_lora_rank`` latent and one shared RoPE key, ``qk_nope_head_dim`` +
  ``qk_rope_head_dim`` per query/key head, ``v_head_dim`` per value head; interleaved RoPE unless
  ``rope_interleave`` is false), and after ``torch.cat((q_pass, q_rot))`` the query is multiplied by
  ``get_llama_4_attn_scale(...)`` (models/ministral3.py) — no GQA: ``num_key_value_heads`` is read by nothing;
* **router**: ``Mistral4TopkRouter`` holds an ``nn.Parameter`` ``weight`` (E, h) in the model's dtype (no
  ``_keep_in_fp32_modules``), runs ``F.linear(hidden, weight)`` (no ``.float()``, unlike DeepSeek's), a softmax
  over the experts, a group-limited choice (``n_group`` groups scored by their top-2 scores, ``topk_group`` kept),
  gathers the chosen scores, renormalises them in place when ``norm_topk_prob`` and scales them by
  ``routed_scaling_factor``; there is no ``e_score_correction_bias``;
* **MoE**: ``Mistral4MoE`` is ``DeepseekV3MoE`` (fused 3-D experts of ``moe_intermediate_size`` and one
  ``mlp.shared_experts`` MLP of ``n_shared_experts × moe_intermediate_size``); the first ``first_k_dense_replace``
  layers (default 0) hold a dense MLP of ``intermediate_size``.

The class's defaults are Mistral Small 4's (36 layers, hidden 4096, 128 experts of 2048, top 4, one shared expert,
``kv_lora_rank`` 256, ``q_lora_rank`` 1024). The released checkpoint is a ``mistral3`` wrapper whose
``text_config`` is ``mistral4`` (read through it). transformers has no v4→v5 conversion pattern for mistral4
(conversion_mapping.py), so PEFT converts no MoE target names; PEFT 0.21 has no default LoRA targets for it.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..tape import Sym
from .deepseek import DeepseekV3, MlaProgram, chosen_router_weights
from .fields import ConfigFields
from .ministral3 import check_llama4_scaling, scale_query_by_temperature

MISTRAL4_DEFAULTS = dict(
    vocab_size=131072,
    hidden_size=4096,
    intermediate_size=12288,
    moe_intermediate_size=2048,
    num_hidden_layers=36,
    num_attention_heads=32,
    n_shared_experts=1,
    n_routed_experts=128,
    routed_scaling_factor=1.0,
    kv_lora_rank=256,
    q_lora_rank=1024,
    qk_rope_head_dim=64,
    v_head_dim=128,
    qk_nope_head_dim=64,
    n_group=1,
    topk_group=1,
    num_experts_per_tok=4,
    first_k_dense_replace=0,
    norm_topk_prob=True,
    max_position_embeddings=1048576,
    tie_word_embeddings=False,
    rope_interleave=True,
)
"""``Mistral4Config``'s defaults (configuration_mistral4.py; those of Mistral-Small-4-119B-2603)."""


class Mistral4Program(MlaProgram):
    """``Mistral4Attention`` (MLA, then the query temperature) and ``Mistral4TopkRouter`` on the tape."""

    def _scale_query(self, query: Sym) -> Sym:
        return scale_query_by_temperature(self, query)

    def _route(self, x: Sym) -> Sym:
        """``Mistral4TopkRouter.forward``: ``F.linear`` in the stream's dtype (autocast: 16 bits), the softmax saved
        for its gradient, the chosen scores gathered (int64 indices saved), renormalised (``/=``: the weights and
        their sum saved), times ``routed_scaling_factor``. The group scores, masks and ``scores_for_choice`` only
        pick the indices: they are transient, as in DeepSeek's router."""
        arch, shape, tape, names = self.arch, self.shape, self.tape, self.names
        rows = shape.stream_tokens * shape.experts_per_token
        router = self.expert_parameter(names.router, arch.num_experts * shape.hidden, self.trainability.trains(names.router))
        logits = tape.linear(x, router, arch.num_experts)
        scores = tape.unary_saving_result("softmax", logits)
        tape.release(logits)
        choice = tape.scale(scores)  # scores.masked_fill(~score_mask, 0.0)
        tape.release(choice)
        return chosen_router_weights(arch, shape, tape, scores, rows)


class Mistral4(DeepseekV3):
    model_type = "mistral4"
    defaults = MISTRAL4_DEFAULTS
    router_scoring = "softmax"
    has_mtp_field = False
    has_mlp_bias_field = False
    moe_lora_conversion = {}
    """transformers 5.24 has no conversion pattern for mistral4 (conversion_mapping.py), so PEFT converts no v4 MoE
    target names: ``all-linear`` adapts the ``nn.Linear`` modules only (not the router or the fused experts)."""

    def read_config(self, fields: ConfigFields) -> Architecture:
        check_llama4_scaling(fields)
        arch = super().read_config(fields)
        groups = fields.optional_integer("n_group") or MISTRAL4_DEFAULTS["n_group"]
        if arch.num_experts and arch.num_experts // groups < 2:
            raise fields.fail("n_group", f"leaves fewer than 2 experts per group (the router takes each group's top 2), got {groups}")
        return arch

    def program(self) -> type[MlaProgram]:
        return Mistral4Program
