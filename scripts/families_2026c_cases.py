"""Corpus cases of Ministral 3, Mistral 4 and DeepSeek-V3.2 (scaled down; tests/test_families_2026c.py).

Each family gets fp32 AdamW, AMP bf16 with full checkpointing, pure bf16 LoRA on every linear layer, and pure bf16
on fake tensors, at micro-batch 2. The shapes are small enough to run for real on the CPU in seconds.
"""

from __future__ import annotations

from typing import Any, Callable

FAMILY_COMMON = {"vocab_size": 32000, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 3,
                 "num_attention_heads": 8, "num_key_value_heads": 4, "max_position_embeddings": 4096}
IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}

# Ministral 3 scaled down: Mistral's layer, head_dim 32, the query scaled by Llama 4's temperature after RoPE (the
# class's default YaRN rope_parameters, llama_4_scaling_beta 0.1; original_max_position_embeddings 128 so that the
# scale is not 1 over the sequence).
MINISTRAL3_SMALL = {"model_type": "ministral3", **FAMILY_COMMON, **IDS, "head_dim": 32,
                    "rope_parameters": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 16.0,
                                        "original_max_position_embeddings": 128, "beta_fast": 32.0, "beta_slow": 1.0,
                                        "mscale_all_dim": 1.0, "mscale": 1.0, "llama_4_scaling_beta": 0.1}}


def families_2026c_cases(case: Callable[..., dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        # ------------------------------------------------------------ Ministral 3 (ministral3)
        case("ministral3-small-fp32-adamw-b2-s256", MINISTRAL3_SMALL, batch=2, seq=256,
             description="Ministral 3: Mistral's layer with the query times Llama 4's per-position temperature."),
        case("ministral3-small-ampbf16-adamw-ckpt-b2-s256", MINISTRAL3_SMALL, batch=2, seq=256, precision="amp-bf16",
             checkpointing="full"),
        case("ministral3-small-ampbf16-adamw-eager-b2-s256", MINISTRAL3_SMALL, batch=2, seq=256, precision="amp-bf16",
             attention="eager"),
        case("ministral3-small-bf16-lora-all-b2-s256", MINISTRAL3_SMALL, batch=2, seq=256, precision="bf16-pure",
             lora={"r": 8, "target_modules": "all-linear"}),
        case("ministral3-small-bf16-adamw-b2-s256-fake", MINISTRAL3_SMALL, batch=2, seq=256, precision="bf16-pure",
             fake=True),
    ]
