"""The hybrid families of 2026: LFM2 (gated short convolutions + GQA attention). What their readers take from a
config.json, the published configs copied into tests/data/hf_configs_hybrid_2026 (each names its source in
``_source``), and the refusals.

Counts against transformers and PEFT on small configs are in tests/test_families.py (``lfm2*``), the presets'
in tests/test_presets.py; measured steps in the corpus (scripts/corpus_cases.py: ``lfm2-*``).
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

CONFIGS = Path(__file__).parent / "data" / "hf_configs_hybrid_2026"
SMALL = dict(vocab_size=512, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2)
PUBLISHED_PRESET = {"lfm2-1.2b": "lfm2-1.2b", "lfm2.5-1.2b-thinking": "lfm2-1.2b"}
"""Published config -> the preset with its shapes."""


def published(stem: str) -> dict:
    config = json.loads((CONFIGS / f"{stem}.json").read_text())
    assert config.pop("_source")
    return config


def refused(config: dict, field: str, message: str) -> None:
    with pytest.raises(FieldError, match=message) as error:
        architecture_from_hf_config(config)
    assert error.value.field == field


# ---------------------------------------------------------------------------- LFM2


@pytest.mark.parametrize("stem", sorted(PUBLISHED_PRESET))
def test_published_lfm2_configs_read_as_their_preset(stem):
    """The old schema (block_ff_dim 12288 beside intermediate_size 8192, full_attn_idxs) and the transformers 5
    re-save (intermediate_size 12288, layer_types) both give the preset's architecture: MLP 8192, six attention
    layers at 2, 5, 8, 10, 12, 14, tied embeddings, 1,170,340,608 parameters."""
    arch = architecture_from_hf_config(published(stem))
    preset = architecture_from_hf_config(presets()[PUBLISHED_PRESET[stem]].config)
    assert arch.model_copy(update={"head_dim": None}) == preset.model_copy(update={"head_dim": None})
    assert arch.intermediate_size == 8192 and arch.resolved_head_dim == 64 and arch.tie_word_embeddings
    assert sorted(set(range(16)) - set(arch.linear_attention_layers)) == [2, 5, 8, 10, 12, 14]
    assert build_inventory(arch).num_parameters == 1_170_340_608


@pytest.mark.torch
@pytest.mark.parametrize("stem", sorted(PUBLISHED_PRESET))
def test_published_lfm2_config_count_matches_transformers_on_meta_device(stem):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = published(stem)
    hf_config = transformers.AutoConfig.for_model(config.pop("model_type"), **config)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config)
    expected = sum(p.numel() for p in model.parameters())
    assert build_inventory(architecture_from_hf_config(published(stem))).num_parameters == expected


def test_lfm2_hub_ids_resolve_to_presets():
    for name in ("lfm2-350m", "lfm2-700m", "lfm2-1.2b", "lfm2-2.6b"):
        assert preset_for_hub_id(presets()[name].hf_id) == name
    assert preset_for_hub_id("LiquidAI/LFM2.5-1.2B-Instruct") == "lfm2-1.2b"


def test_lfm2_mlp_width_follows_lfm2mlp():
    """int(2·i/3), times the multiplier, rounded up to block_multiple_of; unchanged without auto-adjust."""
    base = {"model_type": "lfm2", **SMALL}
    assert architecture_from_hf_config({**base, "intermediate_size": 144, "block_multiple_of": 16}).intermediate_size == 96
    assert architecture_from_hf_config({**base, "block_ff_dim": 100, "block_ffn_dim_multiplier": 1.5,
                                        "block_multiple_of": 8}).intermediate_size == 104
    assert architecture_from_hf_config({**base, "intermediate_size": 80,
                                        "block_auto_adjust_ff_dim": False}).intermediate_size == 80
    assert architecture_from_hf_config(presets()["lfm2-2.6b"].config).intermediate_size == 10752


def test_lfm2_layer_types_and_full_attn_idxs():
    base = {"model_type": "lfm2", **SMALL}
    assert architecture_from_hf_config(base).linear_attention_layers == ()  # default: every layer attention
    assert architecture_from_hf_config({**base, "full_attn_idxs": [1]}).linear_attention_layers == (0, 2)
    typed = {**base, "layer_types": ["conv", "full_attention", "conv"], "full_attn_idxs": [0, 1, 2]}
    assert architecture_from_hf_config(typed).linear_attention_layers == (0, 2)  # layer_types wins
    refused({**base, "layer_types": ["conv", "attention", "conv"]}, "layer_types", "unknown layer type 'attention'")
    refused({**base, "layer_types": ["conv"]}, "layer_types", "has 1 entries for 3 layers")
    refused({**base, "full_attn_idxs": [3]}, "full_attn_idxs[0]", "must be at most 2")
    refused({**base, "conv_L_cache": "3"}, "conv_L_cache", "expected an integer")


def test_lfm2_tie_embedding_alias_and_conv_bias_tensors():
    base = {"model_type": "lfm2", **SMALL, "layer_types": ["conv", "full_attention", "conv"]}
    assert not architecture_from_hf_config({**base, "tie_embedding": False}).tie_word_embeddings
    arch = architecture_from_hf_config({**base, "conv_bias": True, "conv_L_cache": 4})
    names = {tensor.name for tensor in family_for(arch).layer(arch.layer_kinds()[0].architecture)}
    assert {"conv.conv.weight", "conv.conv.bias", "conv.in_proj.bias", "conv.out_proj.bias"} <= names


def test_lfm2_lora_needs_targets_and_all_linear_adapts_the_convolution_projections():
    config = {"model_type": "lfm2", **SMALL, "layer_types": ["conv", "full_attention", "conv"]}
    with pytest.raises(ValueError, match="target_modules"):
        Setup.model_validate({"model": {"hf_config": config}, "finetuning": {"method": "lora"}})
    arch = architecture_from_hf_config(config)
    targets = resolve_lora_targets(LoRAConfig(r=8, target_modules="all-linear"), family_for(arch), build_inventory(arch))
    assert {"conv.in_proj", "conv.out_proj", "self_attn.out_proj", "feed_forward.w1"} <= set(targets.modules)
    assert "conv.conv" not in targets.modules  # an nn.Conv1d: not a linear module


def test_lfm2_refuses_tensor_and_sequence_parallel_convolutions():
    """Tensor and sequence parallelism of the short-convolution layers: one line naming the field."""
    from pydantic import ValidationError

    from trainmem.errors import format_validation_error

    config = {"model_type": "lfm2", **SMALL, "layer_types": ["conv", "full_attention", "conv"]}
    base = {"model": {"hf_config": config}, "micro_batch_size": 1, "sequence_length": 64}
    for parallelism, field in (
        ({"num_gpus": 2, "strategy": "fsdp", "tensor_parallel_size": 2}, "parallelism.tensor_parallel_size"),
        ({"num_gpus": 2, "strategy": "fsdp", "tensor_parallel_size": 2, "sequence_parallel": True}, None),
    ):
        with pytest.raises(ValidationError) as error:
            Setup.model_validate({**base, "parallelism": parallelism})
        [(path, message), *_] = format_validation_error(error.value)
        assert path.startswith("parallelism.") and "short-convolution" in message and "\n" not in message
        if field:
            assert path == field


def test_lfm2_states_the_torch_fallback_it_models():
    arch = architecture_from_hf_config(presets()["lfm2-350m"].config)
    assert any("causal_conv1d_fn" in note for note in arch.not_counted)
    attention_only = architecture_from_hf_config({"model_type": "lfm2", **SMALL})
    assert attention_only.not_counted == ()


# ---------------------------------------------------------------------------- OLMo Hybrid


def test_olmo_hybrid_reads_the_class_defaults_of_its_gated_deltanet():
    """key/value heads = attention heads, key head dim int(0.75·h / heads), value head dim twice that."""
    arch = architecture_from_hf_config({"model_type": "olmo_hybrid", **SMALL, "num_hidden_layers": 4})
    assert (arch.linear_num_key_heads, arch.linear_num_value_heads) == (4, 4)
    assert (arch.linear_key_head_dim, arch.linear_value_head_dim) == (12, 24)
    assert arch.linear_attention_layers == (0, 1, 2) and arch.norm_position == "post" and arch.qk_norm_over == "projection"
    assert arch.linear_allow_neg_eigval and arch.nope_layers == ()


def test_olmo_hybrid_needs_both_layer_kinds_and_defaults_the_last_layer_to_attention():
    base = {"model_type": "olmo_hybrid", **SMALL}
    assert architecture_from_hf_config(base).linear_attention_layers == (0, 1)  # no 4th layer: the last is attention
    refused({**base, "layer_types": ["linear_attention"] * 3}, "layer_types", "at least one 'full_attention'")
    refused({**base, "layer_types": ["full_attention"] * 3}, "layer_types", "at least one 'linear_attention'")
    refused({**base, "linear_num_value_heads": 6, "linear_num_key_heads": 4}, "linear_num_value_heads", "multiple")


def test_olmo_hybrid_without_rope_theta_has_no_rotary_embedding():
    """The release's ``rope_parameters: {"rope_theta": null}``: no rotary_emb, no tables, no RoPE on any layer."""
    config = {"model_type": "olmo_hybrid", **SMALL, "rope_parameters": {"rope_theta": None}}
    arch = architecture_from_hf_config(config)
    family = family_for(arch)
    assert arch.nope_layers == (0, 1, 2) and not family.has_rotary_embedding(arch)
    assert family.rotary_tables_bytes(arch, 128, 2) == []
    roped = architecture_from_hf_config({"model_type": "olmo_hybrid", **SMALL})
    assert family.rotary_tables_bytes(roped, 128, 2) == [128 * 16 * 4] * 2  # fp32 whatever the model's dtype


def test_olmo_hybrid_lora_all_linear_adapts_every_projection_but_not_the_conv():
    arch = architecture_from_hf_config({"model_type": "olmo_hybrid", **SMALL})
    targets = resolve_lora_targets(LoRAConfig(r=8, target_modules="all-linear"), family_for(arch), build_inventory(arch))
    expected = {f"linear_attn.{name}" for name in ("q_proj", "k_proj", "v_proj", "a_proj", "b_proj", "g_proj", "o_proj")}
    assert expected | {"self_attn.q_proj", "self_attn.o_proj", "mlp.down_proj"} <= set(targets.modules)
    assert "linear_attn.conv1d" not in targets.modules


@pytest.mark.parametrize("model_type", ["lfm2", "lfm2_moe", "olmo_hybrid"])
def test_bitsandbytes_quantizes_the_linear_modules_only(model_type):
    """``replace_with_bnb_linear`` swaps ``nn.Linear`` modules: not the depthwise conv, the router parameter, the
    fused experts, A_log/dt_bias or the norms."""
    config = {"model_type": model_type, **SMALL, "num_hidden_layers": 4, "num_experts": 4, "num_experts_per_tok": 2,
              "num_dense_layers": 1, "layer_types": ["conv", "full_attention", "conv", "conv"]}
    if model_type == "olmo_hybrid":
        config = {"model_type": model_type, **SMALL, "num_hidden_layers": 4}
    arch = architecture_from_hf_config(config)
    family = family_for(arch)
    quantized, kept = set(), set()
    for kind in arch.layer_kinds():
        for tensor in family.layer(kind.architecture):
            (quantized if family.quantized_by_bitsandbytes(tensor) else kept).add(tensor.module)
    assert not {"conv.conv", "linear_attn.conv1d", "feed_forward.gate", "feed_forward.experts"} & quantized
    assert {"self_attn.q_proj"} <= quantized
    assert ({"conv.in_proj", "conv.out_proj"} if model_type != "olmo_hybrid" else {"linear_attn.g_proj"}) <= quantized
