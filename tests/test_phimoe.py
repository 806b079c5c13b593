"""PhiMoE (Phi-3.5-MoE): its reader, PEFT's and bitsandbytes' rules for it, and its step.

Counts against transformers 5.24 and PEFT 0.21 for small configs are in tests/test_families.py
(``phimoe``, ``phimoe-biases``) and for the preset in tests/test_presets.py; the measured steps are the
``phimoe-small-*`` corpus cases (tests/test_validation.py).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import trainmem
from trainmem.catalogs import presets
from trainmem.errors import FieldError, format_validation_error
from trainmem.inventory import build_inventory
from trainmem.models import FAMILIES, architecture_from_hf_config, family_for
from trainmem.setup import Setup

SMALL = {
    "model_type": "phimoe", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
    "attention_bias": True, "lm_head_bias": True, "input_jitter_noise": 0.01,
}
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]


def _longrope(head_dim: int) -> dict:
    """A ``longrope`` rope_scaling of Phi-3.5-MoE's form (one factor per rotary frequency). The factor values
    here are placeholders: the published lists hold 64 numbers each, which change no shape."""
    return {
        "type": "longrope", "long_factor": [1.0] * (head_dim // 2), "short_factor": [1.0] * (head_dim // 2),
        "long_mscale": 1.243163121016122, "short_mscale": 1.243163121016122, "original_max_position_embeddings": 4096,
    }


def test_phi_3_5_moe_preset_reads_layernorm_biases_sparsemixer_and_jitter():
    arch = architecture_from_hf_config(presets()["phi-3.5-moe"].config)
    assert (arch.model_type, arch.norm, arch.num_experts, arch.num_experts_per_tok) == ("phimoe", "layernorm", 16, 2)
    assert arch.attention_qkv_bias and arch.attention_output_bias and arch.lm_head_bias
    assert arch.input_jitter_noise == 0.01
    assert arch.sliding_window == 131072  # the instruct config's window: longer than any trained sequence
    inventory = build_inventory(arch)
    assert inventory.num_parameters == 41_873_153_344  # transformers on the meta device; the card says 41.9B
    names = {tensor.name for group in inventory.layer_groups for tensor in group.tensors}
    assert {"mlp.router.weight", "mlp.experts.gate_up_proj", "mlp.experts.down_proj", "self_attn.o_proj.bias",
            "input_layernorm.bias"} <= names
    assert "lm_head.bias" in {tensor.name for tensor in inventory.head}


def test_longrope_rope_scaling_is_read():
    arch = architecture_from_hf_config({**SMALL, "rope_scaling": _longrope(16)})
    assert arch.num_experts == 4


@pytest.mark.parametrize(
    "change, field, words",
    [
        ({"num_experts_per_tok": 1}, "num_experts_per_tok", "always picks 2 experts"),
        ({"num_experts_per_tok": 4}, "num_experts_per_tok", "always picks 2 experts"),
        ({"num_local_experts": 1}, "num_local_experts", "at least 2"),
        ({"input_jitter_noise": 1.5}, "input_jitter_noise", "between"),
        ({"lm_head_bias": "true"}, "lm_head_bias", "expected true or false"),
        ({"rope_scaling": "longrope"}, "rope_scaling", "expected an object"),
    ],
)
def test_impossible_phimoe_values_name_their_field(change, field, words):
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({**SMALL, **change}, "model.hf_config")
    assert error.value.field == f"model.hf_config.{field}"
    assert words in str(error.value)


def test_lora_on_the_router_is_refused_in_one_line():
    """PEFT wraps the nn.Linear router and the step then fails (peft 0.21): all-linear, or a target naming it."""
    for targets in ("all-linear", ["router"], ["q_proj", "mlp.router"]):
        with pytest.raises(ValidationError) as error:
            Setup.model_validate({"model": {"hf_config": SMALL}, "finetuning": {"method": "lora", "lora": {"target_modules": targets}}})
        problems = dict(format_validation_error(error.value))
        assert problems["finetuning.lora.target_modules"].startswith("PEFT wraps phimoe's router")
        assert "\n" not in problems["finetuning.lora.target_modules"]


def test_phimoe_has_no_peft_default_targets():
    with pytest.raises(ValidationError, match="no default target_modules"):
        Setup.model_validate({"model": {"hf_config": SMALL}, "finetuning": {"method": "lora"}})


def test_qlora_quantises_attention_only():
    """bitsandbytes converts ``type(module) is nn.Linear``: q/k/v/o; the router subclass, the fused experts,
    the norms and the head stay in the load dtype."""
    arch = architecture_from_hf_config(presets()["phi-3.5-moe"].config)
    family = family_for(arch)
    quantized = {t.name for group in build_inventory(arch).layer_groups for t in group.tensors if family.quantized_by_bitsandbytes(t)}
    assert quantized == {f"self_attn.{p}.weight" for p in ATTENTION}


def test_qlora_step_keeps_the_experts_in_bf16():
    setup = {"model": "phi-3.5-moe", "finetuning": {"method": "qlora", "lora": {"r": 16, "target_modules": ATTENTION}},
             "precision": "bf16-pure", "micro_batch_size": 1, "sequence_length": 1024}
    report = trainmem.estimate(setup, suggestions=False)
    parameters = sum(part.bytes for part in report.parts if part.category == "parameters" and part.allocated)
    arch = architecture_from_hf_config(presets()["phi-3.5-moe"].config)
    inventory = build_inventory(arch)
    experts = sum(t.numel * group.count for group in inventory.layer_groups for t in group.tensors if t.group == "experts")
    assert experts == 40_265_318_400  # 32 layers x 16 experts x 3 x 4096 x 6400
    assert 2 * experts <= parameters < 2 * inventory.num_parameters  # experts at 2 bytes each; attention in 4 bits


@pytest.mark.parametrize("precision, attention", [("fp32", "sdpa"), ("amp-bf16", "eager"), ("bf16-pure", "sdpa")])
def test_estimates_run(precision, attention):
    report = trainmem.estimate(
        {"model": {"hf_config": SMALL}, "precision": precision, "attention": attention, "micro_batch_size": 2,
         "sequence_length": 128, "runtime": {"device": "cpu"}},
        suggestions=False,
    )
    assert report.peak_allocated_bytes > 0


def test_input_jitter_saves_two_noise_tensors_per_layer():
    """Each in-place jitter product saves its noise: 2 x tokens x hidden per layer (fp32 here)."""
    def activations(jitter: float) -> int:
        report = trainmem.estimate(
            {"model": {"hf_config": {**SMALL, "input_jitter_noise": jitter}}, "micro_batch_size": 2,
             "sequence_length": 128, "runtime": {"device": "cpu"}},
            suggestions=False,
        )
        return report.peak_allocated_bytes

    assert activations(0.01) - activations(0.0) >= 2 * SMALL["num_hidden_layers"] * 2 * 128 * SMALL["hidden_size"] * 4


# ---------------------------------------------------------------------------- against transformers and bitsandbytes


@pytest.mark.torch
def test_quantised_modules_follow_replace_with_bnb_linear():
    """transformers/integrations/bitsandbytes.py converts modules whose ``type(module) is nn.Linear`` (not the
    output embedding): the same parameters as trainmem's rule, on the meta device."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = dict(SMALL)
    config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    expected = sum(
        module.weight.numel()
        for name, module in model.named_modules()
        if type(module) is torch.nn.Linear and name != "lm_head"
    )
    arch = architecture_from_hf_config(SMALL)
    family = FAMILIES["phimoe"]
    ours = sum(
        t.numel * group.count for group in build_inventory(arch).layer_groups for t in group.tensors if family.quantized_by_bitsandbytes(t)
    )
    assert ours == expected
