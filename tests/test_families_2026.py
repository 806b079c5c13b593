"""The 2026 families (glm4_moe, smollm3, olmo3, seed_oss, exaone4, ernie4_5, ernie4_5_moe): what their readers
take from a config.json, and the published configs copied into tests/data/hf_configs_2026.

Counts against transformers and PEFT are in tests/test_families.py (small configs) and tests/test_presets.py
(the published checkpoints); measured steps in the corpus (scripts/corpus_cases.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmem import estimate
from trainmem.catalogs import presets
from trainmem.inventory import build_inventory
from trainmem.models import architecture_from_hf_config
from trainmem.plan import Plan
from trainmem.setup import Setup

from config_refusals import refused



CONFIGS = Path(__file__).parent / "data" / "hf_configs_2026"
SMALL = dict(vocab_size=512, hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda path: path.stem)
def test_published_config_is_the_preset_and_names_its_source(path):
    config = json.loads(path.read_text())
    assert config.pop("_source")
    assert presets()[path.stem].config == config


def test_smollm3_every_fourth_layer_is_nope_and_the_window_follows_them():
    arch = architecture_from_hf_config({"model_type": "smollm3", **SMALL, "num_hidden_layers": 8})
    assert arch.nope_layers == (3, 7) and arch.sliding_window is None
    windowed = architecture_from_hf_config(
        {"model_type": "smollm3", **SMALL, "use_sliding_window": True, "sliding_window": 64, "no_rope_layers": [1, 0, 1, 1]}
    )
    assert windowed.nope_layers == (1,) and windowed.window_layers() == (1,)
    assert [kind.architecture.layer_rope for kind in windowed.layer_kinds()] == [True, False]


def test_smollm3_no_rope_layers_must_cover_every_layer():
    refused({"model_type": "smollm3", **SMALL, "no_rope_layers": [1, 0]}, "no_rope_layers", "needs an entry")


def test_exaone4_global_layers_are_nope_only_with_a_window():
    arch = architecture_from_hf_config({"model_type": "exaone4", **SMALL, "sliding_window": 16})
    assert arch.window_layers() == (0, 1, 2) and arch.nope_layers == (3,)
    pattern = architecture_from_hf_config({"model_type": "exaone4", **SMALL, "sliding_window": 16, "sliding_window_pattern": "LG"})
    assert pattern.window_layers() == (0, 2) and pattern.nope_layers == (1, 3)
    plain = architecture_from_hf_config({"model_type": "exaone4", **SMALL, "sliding_window": None})
    assert plain.window_layers() == () and plain.nope_layers == ()
    refused({"model_type": "exaone4", **SMALL, "sliding_window_pattern": "LLX"}, "sliding_window_pattern", "a string of L and G")


def test_olmo3_has_one_rotary_table_per_layer_type():
    arch = architecture_from_hf_config({"model_type": "olmo3", **SMALL})
    assert arch.window_layers() == (0, 1, 2) and arch.rope_sets == 2 and arch.sliding_window == 4096
    full = architecture_from_hf_config({"model_type": "olmo3", **SMALL, "layer_types": ["full_attention"] * 4})
    assert full.window_layers() == () and full.rope_sets == 1
    refused({"model_type": "olmo3", **SMALL, "layer_types": ["linear_attention"] * 4}, "layer_types", "unknown layer type")


def test_glm4_moe_reads_deepseek_style_moe_and_partial_rotary():
    arch = architecture_from_hf_config(presets()["glm-4.6"].config)
    assert arch.dense_layers == (0, 1, 2) and arch.router_scoring == "sigmoid" and arch.qk_norm
    assert arch.rotary_dim == 64 and arch.shared_expert_intermediate_size == 1536
    assert "multi-token-prediction" in arch.not_counted[0]
    refused({"model_type": "glm4_moe", **SMALL, "n_routed_experts": 6, "num_experts_per_tok": 2, "n_group": 4}, "n_group",
            "must divide n_routed_experts")


def test_ernie4_5_moe_correction_bias_is_a_parameter_that_never_trains():
    config = {"model_type": "ernie4_5_moe", **SMALL, "moe_intermediate_size": 32, "moe_num_experts": 4, "moe_k": 2}
    arch = architecture_from_hf_config(config)
    assert arch.dense_layers == (0,)  # moe_layer_start_index 1
    plan = Plan(Setup(model={"hf_config": config}))
    assert plan.num_parameters - plan.num_trainable_parameters == 3 * 4  # (1, E) per MoE layer
    assert build_inventory(arch).num_parameters == plan.num_parameters


@pytest.mark.parametrize("model_type", ["glm4_moe", "smollm3", "olmo3", "seed_oss", "exaone4", "ernie4_5", "ernie4_5_moe"])
def test_a_small_step_of_each_family_is_simulated(model_type):
    config = {"model_type": model_type, **SMALL, "head_dim": 16, "moe_intermediate_size": 32, "n_routed_experts": 4,
              "num_experts_per_tok": 2, "moe_num_experts": 4, "moe_k": 2, "sliding_window": 32}
    for precision in ("amp-bf16", "bf16-pure"):
        report = estimate({"model": {"hf_config": config}, "micro_batch_size": 1, "sequence_length": 64,
                           "precision": precision, "runtime": {"device": "cpu"}})
        assert report.peak_allocated_bytes > 0
