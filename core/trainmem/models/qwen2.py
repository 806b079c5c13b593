"""Qwen2 and Qwen2-MoE (transformers/models/qwen2, models/qwen2_moe).

Qwen2 is Llama with a bias on q, k and v (not o). Qwen2-MoE routes each token to
``num_experts_per_tok`` of ``num_experts`` experts of width ``moe_intermediate_size`` and adds an
always-on shared expert of width ``shared_expert_intermediate_size`` behind a sigmoid gate
(``shared_expert_gate``, an ``nn.Linear(h, 1)``). Layers listed in ``mlp_only_layers`` and, with
``decoder_sparse_step`` > 1, layers whose ``(index + 1) % decoder_sparse_step != 0`` get a dense MLP of
``intermediate_size`` instead (``Qwen2MoeDecoderLayer.__init__``). PEFT has no default LoRA targets for
qwen2_moe.
"""

from __future__ import annotations

from ..architecture import Architecture
from .family import DecoderFamily, common_decoder_fields, sliding_window_fields
from .fields import ConfigFields

#: Qwen2Config's own defaults.
QWEN2_DEFAULTS = dict(
    vocab_size=151936,
    hidden_size=4096,
    intermediate_size=22016,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)

QWEN2_MOE_DEFAULTS = dict(
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=5632,
    num_hidden_layers=24,
    num_attention_heads=16,
    num_key_value_heads=16,
    max_position_embeddings=32768,
    tie_word_embeddings=False,
)


def sparse_step_dense_layers(fields: ConfigFields, layers: int) -> tuple[int, ...]:
    """Layers with a dense MLP under Qwen-MoE's rule: listed in ``mlp_only_layers``, or not on the
    ``decoder_sparse_step`` grid (``(i + 1) % step != 0``)."""
    step = fields.integer("decoder_sparse_step", 1, minimum=1)
    listed = fields.integer_list("mlp_only_layers", maximum=layers - 1)
    return tuple(i for i in range(layers) if i in listed or (i + 1) % step != 0)


def qwen_sliding_window(fields: ConfigFields, layers: int) -> dict[str, object]:
    """Qwen's window applies only with ``use_sliding_window``, to layers from ``max_window_layers`` on
    (Qwen2Config.__post_init__), unless ``layer_types`` says otherwise."""
    if not fields.boolean("use_sliding_window", False):
        return {}
    first = fields.integer("max_window_layers", 28, minimum=0)
    return sliding_window_fields(fields, layers, 4096, tuple(range(min(first, layers), layers)))


class Qwen2(DecoderFamily):
    model_type = "qwen2"

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, QWEN2_DEFAULTS)
        return Architecture(
            **common, **qwen_sliding_window(fields, common["num_hidden_layers"]), attention_qkv_bias=True
        )


class Qwen2Moe(DecoderFamily):
    model_type = "qwen2_moe"
    lora_default_targets = None

    def read_config(self, fields: ConfigFields) -> Architecture:
        common = common_decoder_fields(fields, QWEN2_MOE_DEFAULTS)
        experts = fields.integer("num_experts", 60)
        dense = sparse_step_dense_layers(fields, common["num_hidden_layers"])
        dense_width = common["intermediate_size"]
        common["intermediate_size"] = fields.integer("moe_intermediate_size", 1408)
        return Architecture(
            **common,
            **qwen_sliding_window(fields, common["num_hidden_layers"]),
            attention_qkv_bias=fields.boolean("qkv_bias", True),
            num_experts=experts,
            num_experts_per_tok=fields.integer("num_experts_per_tok", 4),
            shared_expert_intermediate_size=fields.integer("shared_expert_intermediate_size", 5632),
            shared_expert_gate=True,
            dense_layers=dense,
            dense_intermediate_size=dense_width,
        )
