"""Falcon-H1, Apertus and GLM-4 (0414): what their readers take from a config.json, the published configs copied
into tests/data/hf_configs_2026b, and what each layer program replays that the shared blocks do not.

Counts against transformers and PEFT are in tests/test_families.py (small configs) and tests/test_presets.py
(the published checkpoints); measured steps in the corpus (scripts/corpus_cases.py: falconh1-*, apertus-*, glm4-*).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmem import estimate
from trainmem.catalogs import presets
from trainmem.inventory import build_inventory
from trainmem.models import architecture_from_hf_config
from trainmem.setup import Setup

from config_refusals import refused

CONFIGS = Path(__file__).parent / "data" / "hf_configs_2026b"
SMALL = dict(vocab_size=512, hidden_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=96)
FALCON_H1 = {"model_type": "falcon_h1", **SMALL, "mamba_d_ssm": 128, "mamba_n_heads": 8, "mamba_d_state": 16,
             "mamba_chunk_size": 32}




@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda path: path.stem)
def test_published_config_is_the_preset_and_names_its_source(path):
    config = json.loads(path.read_text())
    assert config.pop("_source")
    assert presets()[path.stem].config == config


# ---------------------------------------------------------------------- Falcon-H1
def test_falcon_h1_every_layer_holds_attention_and_a_mixer():
    arch = architecture_from_hf_config(FALCON_H1)
    assert arch.linear_attention_layers == (0, 1, 2) and len(arch.layer_kinds()) == 1
    assert arch.mamba.inner_width == 128 and arch.mamba.head_dim == 16 and arch.mamba.gated_norm == "gate_only"
    from trainmem.models import family_for

    layer = {t.name for t in family_for(arch).layer(arch)}
    assert {"mamba.in_proj.weight", "mamba.out_proj.weight", "self_attn.q_proj.weight", "feed_forward.gate_proj.weight",
            "pre_ff_layernorm.weight"} <= layer
    assert "mamba.norm.weight" not in layer  # no gated norm without mamba_rms_norm


def test_falcon_h1_mixer_norm_order_and_inner_width_from_expand():
    normed = architecture_from_hf_config({**FALCON_H1, "mamba_rms_norm": True})
    assert normed.mamba.gated_norm == "norm_then_gate"
    after = architecture_from_hf_config({**FALCON_H1, "mamba_rms_norm": True, "mamba_norm_before_gate": False})
    assert after.mamba.gated_norm == "gate_then_norm"
    expanded = architecture_from_hf_config({**FALCON_H1, "mamba_d_ssm": None, "mamba_n_heads": 4})
    assert expanded.mamba.inner_width == 128 and expanded.mamba.head_dim == 32


def test_falcon_h1_bad_mixer_sizes_and_multipliers_name_their_field():
    refused({**FALCON_H1, "mamba_n_heads": 6}, "mamba_n_heads", "must divide the Mamba inner width")
    refused({**FALCON_H1, "mamba_d_head": 8}, "mamba_d_head", "must equal the Mamba inner width")
    refused({**FALCON_H1, "mlp_multipliers": [1.0]}, "mlp_multipliers", "a list of 2 numbers")
    refused({**FALCON_H1, "ssm_multipliers": "1"}, "ssm_multipliers", "a list of 5 numbers")
    refused({**FALCON_H1, "key_multiplier": "0.4"}, "key_multiplier", "number")
    refused({**FALCON_H1, "hidden_act": "gelu"}, "hidden_act", "only silu")


def test_falcon_h1_lora_on_out_proj_is_refused_as_peft_does():
    setup = {"model": {"hf_config": FALCON_H1}, "finetuning": {"method": "lora", "lora": {"target_modules": "all-linear"}}}
    with pytest.raises(ValueError, match="PEFT refuses LoRA on out_proj of falcon_h1"):
        Setup.model_validate(setup)
    setup["finetuning"]["lora"]["target_modules"] = ["in_proj", "q_proj", "v_proj"]
    Setup.model_validate(setup)


def test_falcon_h1_counts_one_mup_vector_per_layer_among_the_buffers():
    from trainmem.models import family_for

    arch = architecture_from_hf_config(FALCON_H1)
    assert family_for(arch).layer_buffer_numels(arch) == [arch.mamba.projection_width] * 3
    setup = {"model": {"hf_config": FALCON_H1}, "micro_batch_size": 1, "sequence_length": 64, "precision": "fp32",
             "runtime": {"device": "cpu"}}
    buffers = [part for part in estimate(setup).parts if part.name == "buffers"]
    rope = 2 * (16 // 2) * 4  # inv_freq and original_inv_freq, head_dim 16, fp32
    assert buffers and buffers[0].bytes == rope + 3 * arch.mamba.projection_width * 4


# ---------------------------------------------------------------------- Apertus
def test_apertus_reads_xielu_qk_norm_and_an_ungated_mlp():
    arch = architecture_from_hf_config({"model_type": "apertus", **SMALL})
    assert arch.hidden_act == "xielu" and arch.qk_norm and arch.mlp == "plain" and not arch.mlp_bias
    from trainmem.models import family_for

    layer = {t.name: t.shape for t in family_for(arch).layer(arch)}
    assert layer["mlp.act_fn.alpha_p"] == (1,) and layer["mlp.act_fn.alpha_n"] == (1,)
    assert "mlp.up_proj.weight" in layer and "mlp.gate_proj.weight" not in layer
    assert "attention_layernorm.weight" in layer and "feedforward_layernorm.weight" in layer
    assert family_for(arch).layer_buffer_numels(arch) == [1, 1] * 3  # beta and eps


def test_apertus_xielu_saves_more_than_silu():
    """xIELU's Python path keeps the bool mask, alpha_p * x, expm1's result and expm1 - x besides x."""
    from trainmem.layers import LayerKernels, LayerShape, Trainability, trace_layer

    def saved(act):
        arch = architecture_from_hf_config({"model_type": "apertus", **SMALL, "hidden_act": act})
        shape = LayerShape(batch=1, seq=16, kv_seq=16, heads=4, kv_heads=2, head_dim=16, hidden=64, intermediate=96,
                           stream_tokens=16)
        kernels = LayerKernels(device="cuda", autocast=None, weight_dtype="fp32", stream_dtype="fp32", attention="fused")
        return trace_layer(arch, shape, kernels, Trainability(lambda _m: True, lambda _m: False), True).saved_activation_bytes

    tokens_by_width = 16 * 96
    # three fp32 tensors and a bool one of x's size, and the two one-element scalars softplus makes (512 B blocks)
    assert saved("xielu") - saved("silu") == 3 * 4 * tokens_by_width + tokens_by_width + 2 * 512


# ---------------------------------------------------------------------- GLM-4
def test_glm4_reads_sandwich_norms_biases_and_half_rotary():
    arch = architecture_from_hf_config({"model_type": "glm4", **SMALL, "head_dim": 32})
    assert arch.norms_per_layer == 4 and arch.attention_qkv_bias and not arch.attention_output_bias
    assert arch.fused_gate_up and arch.rotary_dim == 16
    from trainmem.models import family_for

    layer = {t.name for t in family_for(arch).layer(arch)}
    assert {"post_self_attn_layernorm.weight", "post_attention_layernorm.weight", "post_mlp_layernorm.weight",
            "input_layernorm.weight", "mlp.gate_up_proj.weight"} <= layer
    full = architecture_from_hf_config({"model_type": "glm4", **SMALL, "head_dim": 32, "partial_rotary_factor": 1.0})
    assert full.rotary_dim == 32 and architecture_from_hf_config({"model_type": "glm4", **SMALL}).head_dim == 128
