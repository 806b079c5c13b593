"""Ministral 3, Mistral 4 and DeepSeek-V3.2: what their readers take from a config.json, the configs copied into
tests/data/hf_configs_2026c (each names its source in ``_source``), and what each layer program replays that the
shared blocks do not.

Counts against transformers and PEFT are in tests/test_families.py (small configs) and tests/test_presets.py
(the published checkpoints); measured steps in the corpus (scripts/families_2026c_cases.py: ministral3-*,
mistral4-*, deepseekv32-*).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmem import estimate
from trainmem.catalogs import presets
from trainmem.errors import FieldError
from trainmem.models import architecture_from_hf_config, family_for
from trainmem.setup import Setup

CONFIGS = Path(__file__).parent / "data" / "hf_configs_2026c"
SMALL = dict(vocab_size=512, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96)
MINISTRAL3 = {"model_type": "ministral3", **SMALL, "head_dim": 32}


def refused(config: dict, field: str, message: str) -> None:
    """The reader refuses ``config`` in one FieldError naming ``field``."""
    with pytest.raises(FieldError, match=message) as error:
        architecture_from_hf_config(config)
    assert error.value.field == field


def peak_bytes(config: dict, **setup) -> int:
    return estimate(Setup.model_validate({"model": {"hf_config": config}, "micro_batch_size": 2,
                                          "sequence_length": 128, **setup})).peak_allocated_bytes


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda path: path.stem)
def test_published_config_is_the_preset_and_names_its_source(path):
    config = json.loads(path.read_text())
    assert config.pop("_source")
    assert presets()[path.stem].config == config


# ---------------------------------------------------------------------- Ministral 3
def test_ministral3_has_mistral_parameters():
    ministral = architecture_from_hf_config(MINISTRAL3)
    mistral = architecture_from_hf_config({**MINISTRAL3, "model_type": "mistral"})
    names = lambda arch: [(t.name, t.shape) for t in family_for(arch).layer(arch)]  # noqa: E731
    assert names(ministral) == names(mistral)


def test_ministral3_query_temperature_costs_one_query_product_per_layer():
    """The product is a new query-sized tensor whose input dies; what stays saved is the small scale tensor, so the
    step's peak moves by less than one query per layer above Mistral's (measured: ministral3-* corpus cases)."""
    ministral = peak_bytes(MINISTRAL3, precision="fp32")
    mistral = peak_bytes({**MINISTRAL3, "model_type": "mistral"}, precision="fp32")
    query_bytes = 2 * 128 * 4 * 32 * 4
    assert 0 < ministral - mistral < query_bytes * SMALL["num_hidden_layers"]


def test_ministral3_rope_parameters_need_the_llama4_scaling_entries():
    refused({**MINISTRAL3, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}},
            "rope_parameters.llama_4_scaling_beta", "Llama 4's temperature")
    refused({**MINISTRAL3, "rope_parameters": {"rope_type": "default", "llama_4_scaling_beta": 0.1}},
            "rope_parameters.original_max_position_embeddings", "expected a number")


def test_ministral3_text_config_of_a_mistral3_wrapper():
    text = {k: v for k, v in MINISTRAL3.items()}
    arch = architecture_from_hf_config({"model_type": "mistral3", "text_config": text,
                                        "vision_config": {"model_type": "pixtral"}})
    assert arch.model_type == "ministral3"


def test_ministral3_lora_needs_target_modules_as_peft_does():
    with pytest.raises(ValueError, match="target_modules"):
        Setup.model_validate({"model": {"hf_config": MINISTRAL3}, "finetuning": {"method": "lora"}})


# ---------------------------------------------------------------------- Mistral 4
MISTRAL4 = {"model_type": "mistral4", **SMALL, "moe_intermediate_size": 32, "n_routed_experts": 4,
            "num_experts_per_tok": 2, "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
            "qk_rope_head_dim": 8, "v_head_dim": 16}


def test_mistral4_is_latent_attention_with_a_softmax_router_and_no_correction_bias():
    arch = architecture_from_hf_config(MISTRAL4)
    assert arch.kv_lora_rank == 32 and arch.num_key_value_heads == arch.num_attention_heads  # GQA heads unread
    assert arch.router_scoring == "softmax" and not arch.router_score_correction_bias
    assert arch.rope_layout == "interleaved" and arch.dense_layers == ()
    half = architecture_from_hf_config({**MISTRAL4, "rope_interleave": False, "first_k_dense_replace": 1})
    assert half.rope_layout == "half" and half.dense_layers == (0,)


def test_mistral4_query_temperature_and_router_differ_from_deepseek_v3():
    v3 = {**MISTRAL4, "model_type": "deepseek_v3", "n_group": 1, "topk_group": 1, "first_k_dense_replace": 0}
    assert peak_bytes(MISTRAL4, precision="fp32") != peak_bytes(v3, precision="fp32")


def test_mistral4_bad_groups_name_their_field():
    refused({**MISTRAL4, "n_group": 3}, "n_group", "must divide n_routed_experts")
    refused({**MISTRAL4, "n_group": 4}, "n_group", "fewer than 2 experts per group")
    refused({**MISTRAL4, "rope_parameters": {"rope_type": "default"}}, "rope_parameters.llama_4_scaling_beta",
            "expected a number")


def test_mistral4_lora_all_linear_leaves_router_and_experts_alone():
    """No v4→v5 MoE conversion for mistral4 (transformers' conversion_mapping.py): only nn.Linear modules adapt."""
    from trainmem.plan import Plan

    setup = {"model": {"hf_config": MISTRAL4}, "finetuning": {"method": "lora", "lora": {"target_modules": "all-linear"}}}
    plan = Plan(Setup.model_validate(setup))
    v3 = {**MISTRAL4, "model_type": "deepseek_v3", "n_group": 1, "topk_group": 1, "first_k_dense_replace": 0}
    converted = Plan(Setup.model_validate({**setup, "model": {"hf_config": v3}}))
    assert plan.num_trainable_parameters < converted.num_trainable_parameters


# ---------------------------------------------------------------------- DeepSeek-V3.2
DEEPSEEK_V32 = {"model_type": "deepseek_v32", **SMALL, "moe_intermediate_size": 32, "n_routed_experts": 4,
                "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "q_lora_rank": 48, "kv_lora_rank": 32,
                "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "index_n_heads": 4,
                "index_head_dim": 16, "index_topk": 8, "first_k_dense_replace": 1}


def test_deepseek_v32_reads_the_indexer_and_the_dense_layers():
    arch = architecture_from_hf_config(DEEPSEEK_V32)
    assert (arch.indexer_heads, arch.indexer_head_dim, arch.indexer_topk) == (4, 16, 8)
    assert arch.dense_layers == (0,)
    default = {k: v for k, v in DEEPSEEK_V32.items() if k != "first_k_dense_replace"}
    assert architecture_from_hf_config({**default, "num_hidden_layers": 5}).dense_layers == (0, 1, 2)  # the class's 3
    typed = architecture_from_hf_config({**DEEPSEEK_V32, "mlp_layer_types": ["sparse", "dense", "sparse"]})
    assert typed.dense_layers == (1,)
    assert architecture_from_hf_config({**DEEPSEEK_V32, "rope_interleave": False}).rope_layout == "interleaved"
    mtp = architecture_from_hf_config({**DEEPSEEK_V32, "num_nextn_predict_layers": 1})
    assert any("multi-token" in note for note in mtp.not_counted)


def test_deepseek_v32_indexer_parameters_get_no_gradient_and_weights_proj_stays_unquantised():
    from trainmem.inventory import build_inventory

    arch = architecture_from_hf_config(DEEPSEEK_V32)
    family = family_for(arch)
    indexer = [t for t in family.layer(arch) if ".indexer." in t.name]
    assert {t.name for t in indexer} == {
        "self_attn.indexer.wq_b.weight", "self_attn.indexer.wk.weight", "self_attn.indexer.k_norm.weight",
        "self_attn.indexer.k_norm.bias", "self_attn.indexer.weights_proj.weight"}
    assert {t.group for t in indexer} == {"no_gradient"}
    quantised = {t.name for t in indexer if family.quantized_by_bitsandbytes(t)}
    assert quantised == {"self_attn.indexer.wq_b.weight", "self_attn.indexer.wk.weight"}
    assert build_inventory(arch).num_parameters > build_inventory(
        architecture_from_hf_config({**DEEPSEEK_V32, "model_type": "deepseek_v3", "first_k_dense_replace": 3})
    ).num_parameters


def test_deepseek_v32_bad_fields_name_themselves():
    refused({**DEEPSEEK_V32, "q_lora_rank": None}, "q_lora_rank", "always has the query LoRA")
    refused({**DEEPSEEK_V32, "index_head_dim": 4}, "index_head_dim", "at least qk_rope_head_dim")
    refused({**DEEPSEEK_V32, "index_n_heads": "8"}, "index_n_heads", "integer")


def test_deepseek_v32_indexer_scores_grow_with_its_heads_at_long_sequences():
    """The (b, s, H, s) scores are transient but set the peak when they outweigh the saved activations (measured:
    deepseekv32-indexer-peak-* in the corpus)."""
    setup = dict(precision="fp32", activation_checkpointing="full")
    few = estimate(Setup.model_validate({"model": {"hf_config": DEEPSEEK_V32}, "micro_batch_size": 1,
                                         "sequence_length": 1024, **setup})).peak_allocated_bytes
    many = estimate(Setup.model_validate({"model": {"hf_config": {**DEEPSEEK_V32, "index_n_heads": 32}},
                                          "micro_batch_size": 1, "sequence_length": 1024, **setup})).peak_allocated_bytes
    scores_bytes = 1024 * 1024 * 28 * 4  # 28 more heads of fp32 scores
    assert many - few >= scores_bytes
