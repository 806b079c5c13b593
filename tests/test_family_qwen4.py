"""Qwen4-Exp (``qwen4_exp_text`` and the ``qwen4_exp`` wrapper): config reading, the inventory of the released
config, the hyper-connected residual stream on the tape, and the one-line refusals.

``tests/data/qwen4_exp_config.json`` holds the released checkpoint's shapes: no config.json of ``Qwen/Qwen4-Exp``
is in this environment's search corpus; the values are those third-party Qwen4-Exp ports pin as the shipped
``text_config`` (e.g. a Rust parser's fixture "pinned to the real config.json values" and a Python port's
``_hf_config``, both 48 layers, hidden 2560, 512 experts, ``ple_layer_ids`` [2]); transformers 5.24 builds
176,943,899,520 parameters from it on the meta device (checked by the torch-marked test below).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import trainmem
from trainmem.errors import FieldError
from trainmem.hyper_connections import HyperConnections, _is_prime
from trainmem.inventory import build_inventory
from trainmem.layers import Trainability, trace_layer
from trainmem.models import architecture_from_hf_config
from trainmem.plan import Plan
from trainmem.setup import Setup

RELEASED = json.loads((Path(__file__).parent / "data" / "qwen4_exp_config.json").read_text())
RELEASED_PARAMETERS = 176_943_899_520

TINY = {
    "model_type": "qwen4_exp_text", "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 16, "linear_value_head_dim": 16, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
    "num_experts": 4, "num_experts_per_tok": 2, "hc_count": 4, "hc_lowrank": 16, "ple_layer_ids": [2], "ple_embed_dim": 32,
    "ngram_size": 3, "heads_per_ngram": 2, "ngram_vocab_size_base": 100, "make_ngram_vocab_size_divisible_by": 8,
    "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 16, "indexer_budget": 8, "indexer_compress_ratio": 4,
    "eos_token_id": 1, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
}
TINY_PARAMETERS = 389_864  # transformers 5.24 Qwen4ExpForCausalLM on the meta device


def test_released_config_counts_every_parameter_and_says_the_vision_tower_is_not_counted():
    arch = architecture_from_hf_config(RELEASED)
    assert arch.model_type == "qwen4_exp_text"
    assert build_inventory(arch).num_parameters == RELEASED_PARAMETERS
    assert "the vision tower and projector of qwen4_exp" in arch.not_counted
    assert arch.ple_layers == (1,)
    assert len(arch.linear_attention_layers) == 36


def test_the_ngram_table_has_the_primes_transformers_finds():
    """16 heads: the first 16 primes above 20,000,000 (320,001,446 rows), padded to 128: 320,001,536 rows of 160."""
    hc = architecture_from_hf_config(RELEASED).hyper_connections
    assert hc.ngram_rows(0) == 320_001_536 and hc.ngram_head_dim == 160
    assert all(_is_prime(p) for p in (20_000_003, 20_000_171)) and not _is_prime(20_000_001)
    second = HyperConnections(streams=4, rank=8, ple_embed_dim=32, heads_per_ngram=2, ngram_vocab_size_base=100, ngram_vocab_divisor=8)
    assert second.ngram_rows(0) == 424  # 101 + 103 + 107 + 109 = 420, padded to 8 (the tiny model below)
    assert second.ngram_rows(1) == 512  # the second PLE layer has the next four: 113 + 127 + 131 + 137 = 508


def test_tiny_config_counts_and_layer_kinds():
    arch = architecture_from_hf_config(TINY)
    assert build_inventory(arch).num_parameters == TINY_PARAMETERS
    kinds = {kind.indices: kind.architecture for kind in arch.layer_kinds()}
    assert set(kinds) == {(0, 2), (1,), (3,)}
    assert kinds[(1,)].layer_ple_index == 0 and kinds[(3,)].layer_linear_attention is False


def test_the_indexer_gets_no_gradient_and_no_optimizer_state():
    plan = Plan(Setup.model_validate({"model": {"hf_config": TINY}}))
    indexer = [t for group in plan.inventory.layer_groups for t in group.tensors if ".indexer." in t.name]
    assert {t.group for t in indexer} == {"no_gradient"}
    assert plan.num_trainable_parameters == TINY_PARAMETERS  # requires_grad, as PyTorch counts them
    assert not any(plan.tensor_trains(t) for t in indexer)  # but no gradient, no optimizer state


def test_the_layers_carry_hc_count_streams():
    setup = Setup.model_validate({"model": {"hf_config": TINY}, "micro_batch_size": 1, "sequence_length": 32})
    plan = Plan(setup)
    from trainmem import simulate

    group = plan.inventory.layer_groups[0]
    shape = simulate._shape(plan, group.architecture)
    trace = trace_layer(group.architecture, shape, simulate._kernels(plan, False), Trainability(plan.module_trains, plan.has_adapter), True)
    assert trace.output_bytes == 32 * 4 * 64 * 4  # (tokens, hc · h) fp32
    report = trainmem.estimate(setup)
    assert report.peak_allocated_bytes > 0


def test_preset_and_hub_id():
    report = trainmem.estimate(Setup.model_validate({"model": {"preset": "qwen4-exp"}, "sequence_length": 256}))
    assert report.num_parameters == RELEASED_PARAMETERS
    from trainmem.inputs.hub import preset_for_hub_id

    assert preset_for_hub_id("Qwen/Qwen4-Exp") == "qwen4-exp"


@pytest.mark.parametrize(
    "change, field",
    [
        ({"hc_count": 1}, "hc_count"),
        ({"ple_layer_ids": [4]}, "ple_layer_ids"),  # layer 4 is the attention layer
        ({"ple_layer_ids": [9]}, "ple_layer_ids[0]"),
        ({"eos_token_id": None}, "eos_token_id"),
        ({"ple_embed_dim": 30}, "ple_embed_dim"),
        ({"indexer_head_dim": None}, "indexer_head_dim"),
        ({"indexer_kv_heads": 2}, "indexer_kv_heads"),
        ({"indexer_budget": 10}, "indexer_budget"),
        ({"output_gate_type": "tanh"}, "output_gate_type"),
        ({"layer_types": ["linear_attention"] * 3 + ["sliding_attention"]}, "layer_types"),
        ({"ngram_vocab_size_base": 1 << 50}, "ngram_vocab_size_base"),
        ({k: None for k in ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget",
                            "indexer_compress_ratio")}, "indexer_n_heads"),  # transformers cannot build it either
    ],
)
def test_bad_fields_are_refused_in_one_line_naming_the_field(change, field):
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({**TINY, **change})
    assert error.value.field.endswith(field)


def test_full_attention_in_layer_types_means_indexed_attention():
    a = architecture_from_hf_config({**TINY, "layer_types": ["linear_attention"] * 3 + ["full_attention"]})
    b = architecture_from_hf_config({**TINY, "layer_types": ["linear_attention"] * 3 + ["indexed_attention"]})
    assert a == b


@pytest.mark.torch
def test_released_config_count_matches_transformers_on_the_meta_device():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    text = {k: v for k, v in RELEASED["text_config"].items() if k != "model_type"}
    with torch.device("meta"):
        model = transformers.Qwen4ExpForCausalLM(transformers.Qwen4ExpTextConfig(**text))
    assert sum(p.numel() for p in model.parameters()) == RELEASED_PARAMETERS
