"""The MoE families of 2026 (minimax_m2, glm4_moe_lite, hunyuan_v1_moe and hunyuan_v1_dense): what their readers
take from a config.json, and the published configs copied into tests/data/hf_configs_moe_2026.

Counts against transformers and PEFT are in tests/test_families.py (small configs) and tests/test_presets.py
(the published checkpoints); measured steps in the corpus (scripts/corpus_cases.py: minimaxm2-*, glm4moelite-*,
hunyuanmoe-*, hunyuandense-*, ernie45moe-*).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmem.catalogs import presets
from trainmem.errors import FieldError
from trainmem.inputs.hub import preset_for_hub_id
from trainmem.inventory import build_inventory
from trainmem.lora_targets import resolve_lora_targets
from trainmem.models import architecture_from_hf_config, family_for
from trainmem.setup import LoRAConfig, Setup

from config_refusals import refused

CONFIGS = Path(__file__).parent / "data" / "hf_configs_moe_2026"
SMALL = dict(vocab_size=512, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=32, head_dim=16)




@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda path: path.stem)
def test_published_config_is_the_preset_and_names_its_source(path):
    config = json.loads(path.read_text())
    assert config.pop("_source")
    assert presets()[path.stem].config == config
    assert preset_for_hub_id(presets()[path.stem].hf_id) == path.stem


# ---------------------------------------------------------------------------- MiniMax-M2


def test_minimax_m2_reads_rotary_dim_whole_projection_norms_and_states_mtp():
    arch = architecture_from_hf_config(presets()["minimax-m2"].config)
    assert arch.rotary_dim == 64 and arch.qk_norm and arch.qk_norm_over == "projection"
    assert arch.num_experts == 256 and arch.num_experts_per_tok == 8 and arch.shared_expert_intermediate_size == 0
    assert arch.router_scoring == "sigmoid" and arch.dense_layers == ()
    assert "3 multi-token-prediction module(s)" in arch.not_counted[0]


def test_minimax_m2_partial_rotary_factor_wins_over_rotary_dim_and_defaults_to_the_whole_head():
    assert architecture_from_hf_config({"model_type": "minimax_m2", **SMALL, "rotary_dim": 8}).rotary_dim == 8
    explicit = {"model_type": "minimax_m2", **SMALL, "rotary_dim": 8, "rope_parameters": {"partial_rotary_factor": 0.25}}
    assert architecture_from_hf_config(explicit).rotary_dim == 4
    assert architecture_from_hf_config({"model_type": "minimax_m2", **SMALL}).rotary_dim == 16


def test_minimax_m2_bad_fields_are_named():
    refused({"model_type": "minimax_m2", **SMALL, "rotary_dim": 7}, "rotary_dim", "must be even")
    refused({"model_type": "minimax_m2", **SMALL, "num_local_experts": 2, "num_experts_per_tok": 4},
            "num_experts_per_tok", "cannot exceed")
    refused({"model_type": "minimax_m2", **SMALL, "router_jitter_noise": "0.1"}, "router_jitter_noise", "expected a number")


def test_minimax_m2_router_is_a_parameter_so_all_linear_adapts_it_through_the_mixtral_conversion():
    arch = architecture_from_hf_config({"model_type": "minimax_m2", **SMALL, "num_local_experts": 4, "num_experts_per_tok": 2})
    inventory = build_inventory(arch)
    router = next(t for g in inventory.layer_groups for t in g.tensors if t.name == "mlp.gate.weight")
    assert router.linear_features is None  # nn.Parameter: no bitsandbytes, no module LoRA
    targets = resolve_lora_targets(LoRAConfig(r=8, target_modules="all-linear"), family_for(arch), inventory)
    assert targets.experts.router and targets.experts.gate_up_proj == 2 and targets.experts.down_proj == 1
    with pytest.raises(ValueError, match="target_modules"):
        Setup.model_validate({"model": {"hf_config": {"model_type": "minimax_m2", **SMALL}}, "finetuning": {"method": "lora"}})


# ---------------------------------------------------------------------------- GLM-4.7-Flash


def test_glm4_moe_lite_is_latent_attention_with_dense_layers_from_mlp_layer_types():
    arch = architecture_from_hf_config(presets()["glm-4.7-flash"].config)
    assert arch.kv_lora_rank == 512 and arch.q_lora_rank == 768 and arch.v_head_dim == 256
    assert arch.dense_layers == (0,)  # mlp_layer_types' default; first_k_dense_replace is not read
    assert arch.num_experts == 64 and arch.shared_expert_intermediate_size == 1536
    assert "1 multi-token-prediction layer" in arch.not_counted[0]
    lite = {"model_type": "glm4_moe_lite", **SMALL, "num_key_value_heads": 4, "moe_intermediate_size": 16,
            "n_routed_experts": 4, "num_experts_per_tok": 2, "kv_lora_rank": 16, "qk_rope_head_dim": 8}
    assert architecture_from_hf_config({**lite, "mlp_layer_types": ["sparse", "dense", "dense"]}).dense_layers == (1, 2)
    assert architecture_from_hf_config({**lite, "first_k_dense_replace": 3}).dense_layers == (0,)
    assert architecture_from_hf_config(lite).not_counted == ()
    refused({**lite, "mlp_layer_types": ["dense", "sparse"]}, "mlp_layer_types", "has 2 entries for 3 layers")
    refused({**lite, "mlp_layer_types": ["dense", "moe", "sparse"]}, "mlp_layer_types", "unknown MLP type 'moe'")
    refused({**lite, "mlp_layer_types": ["dense"] * 3}, "mlp_layer_types", "every layer dense")


# ---------------------------------------------------------------------------- Hunyuan


def test_hunyuan_moe_has_a_shared_mlp_of_intermediate_size_and_an_nn_linear_router():
    arch = architecture_from_hf_config(presets()["hunyuan-a13b"].config)
    assert arch.num_experts == 64 and arch.num_experts_per_tok == 8 and arch.shared_expert_intermediate_size == 3072
    assert arch.qk_norm and arch.qk_norm_over == "head" and arch.tie_word_embeddings
    inventory = build_inventory(arch)
    names = {t.name: t for g in inventory.layer_groups for t in g.tensors}
    assert names["mlp.gate.wg.weight"].linear_features == (4096, 64)
    assert "self_attn.query_layernorm.weight" in names and "mlp.shared_mlp.gate_proj.weight" in names
    assert family_for(arch).quantized_by_bitsandbytes(names["mlp.gate.wg.weight"])


def test_hunyuan_moe_lora_adapts_wg_as_a_module_and_refuses_the_v4_gate_name():
    arch = architecture_from_hf_config({"model_type": "hunyuan_v1_moe", **SMALL, "num_experts": 4, "moe_topk": 2})
    inventory = build_inventory(arch)
    targets = resolve_lora_targets(LoRAConfig(r=8, target_modules="all-linear"), family_for(arch), inventory)
    assert "mlp.gate.wg" in targets.modules and not targets.experts.router
    assert not any(module.startswith("mlp.shared_mlp") for module in targets.modules)
    with pytest.raises(FieldError, match="match no linear module"):
        resolve_lora_targets(LoRAConfig(r=8, target_modules=["gate"]), family_for(arch), inventory)


def test_hunyuan_moe_topk_list_must_be_uniform_and_cover_every_layer():
    base = {"model_type": "hunyuan_v1_moe", **SMALL, "num_experts": 4}
    assert architecture_from_hf_config({**base, "moe_topk": [2, 2, 2]}).num_experts_per_tok == 2
    refused({**base, "moe_topk": [2, 2]}, "moe_topk", "has 2 entries for 3 layers")
    refused({**base, "moe_topk": [2, 1, 2]}, "moe_topk", "not modelled yet")
    refused({**base, "moe_topk": 8}, "moe_topk", "cannot exceed num_experts")
    refused({**base, "num_experts": [4, 4, 4]}, "num_experts", "give an integer")


def test_hunyuan_dense_is_llama_with_per_head_norms_after_rope():
    arch = architecture_from_hf_config(presets()["hunyuan-7b"].config)
    assert not arch.is_moe and arch.qk_norm and arch.resolved_head_dim == 128 and arch.tie_word_embeddings


# ---------------------------------------------------------------------------- every new family estimates


NEW_FAMILY_CONFIGS = {
    "minimax_m2": {"model_type": "minimax_m2", **SMALL, "num_local_experts": 4, "num_experts_per_tok": 2, "rotary_dim": 8},
    "glm4_moe_lite": {"model_type": "glm4_moe_lite", **SMALL, "num_key_value_heads": 4, "moe_intermediate_size": 16,
                      "n_routed_experts": 4, "num_experts_per_tok": 2, "kv_lora_rank": 16, "qk_rope_head_dim": 8},
    "hunyuan_v1_moe": {"model_type": "hunyuan_v1_moe", **SMALL, "num_experts": 4, "moe_topk": 2},
    "hunyuan_v1_dense": {"model_type": "hunyuan_v1_dense", **SMALL},
}


@pytest.mark.parametrize("name", sorted(NEW_FAMILY_CONFIGS))
@pytest.mark.parametrize("method", ["full", "qlora"])
def test_new_family_estimates_full_training_and_qlora(name, method):
    from trainmem import estimate

    finetuning = {"method": method}
    if method != "full":
        finetuning["lora"] = {"r": 8, "target_modules": "all-linear"}
    setup = Setup.model_validate({
        "model": {"hf_config": NEW_FAMILY_CONFIGS[name]}, "micro_batch_size": 1, "sequence_length": 64,
        "precision": "bf16-pure" if method == "full" else "fp32", "finetuning": finetuning,
    })
    report = estimate(setup)
    assert report.peak_allocated_bytes > 0
