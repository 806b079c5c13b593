"""Qwen3.5 (``qwen3_5_text`` dense, ``qwen3_5_moe_text`` MoE, and their multimodal wrappers ``qwen3_5`` /
``qwen3_5_moe``): config reading, layer kinds, PEFT and bitsandbytes rules, and the split Gated DeltaNet's saved
tensors against a real forward (torch-marked). Parameter counts and LoRA counts against transformers and PEFT
on the meta device are in tests/test_families.py (``FAMILY_CONFIGS``)."""

from __future__ import annotations

import pytest

from trainmem import estimate
from trainmem.errors import FieldError
from trainmem.inventory import build_inventory
from trainmem.lora_targets import resolve_lora_targets
from trainmem.models import architecture_from_hf_config, family_for
from trainmem.setup import LoRAConfig

TEXT = {
    "vocab_size": 512, "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 16, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 8, "pad_token_id": 0,
}
DENSE = {"model_type": "qwen3_5_text", **TEXT, "intermediate_size": 96}
MOE = {"model_type": "qwen3_5_moe_text", **TEXT, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48,
       "num_experts": 4, "num_experts_per_tok": 2}


@pytest.mark.parametrize(("wrapper", "text"), [("qwen3_5", DENSE), ("qwen3_5_moe", MOE)])
def test_multimodal_wrapper_reads_its_text_config_and_says_the_vision_tower_is_not_counted(wrapper, text):
    config = {"model_type": wrapper, "text_config": text, "vision_config": {"depth": 2, "hidden_size": 64}}
    arch = architecture_from_hf_config(config)
    assert arch.model_type == text["model_type"]
    assert any("vision tower" in note and wrapper in note for note in arch.not_counted)
    assert arch == architecture_from_hf_config(text).model_copy(update={"not_counted": arch.not_counted})


def test_default_layer_types_put_full_attention_on_every_fourth_layer():
    arch = architecture_from_hf_config({**DENSE, "num_hidden_layers": 8})
    kinds = arch.layer_kinds()
    assert [kind.indices for kind in kinds] == [(0, 1, 2, 4, 5, 6), (3, 7)]
    assert kinds[0].architecture.layer_linear_attention and not kinds[1].architecture.layer_linear_attention
    assert any("Gated DeltaNet" in note for note in arch.not_counted)
    assert architecture_from_hf_config({**DENSE, "full_attention_interval": 2}).layer_kinds()[1].indices == (1, 3)


def test_moe_has_experts_in_every_layer_and_ignores_a_stray_intermediate_size():
    arch = architecture_from_hf_config({**MOE, "intermediate_size": 12345, "mlp_only_layers": [0]})
    assert arch.is_moe and arch.intermediate_size == 32 and arch.dense_layers == ()
    assert all(kind.architecture.is_moe for kind in arch.layer_kinds())


@pytest.mark.parametrize(
    ("update", "field"),
    [
        ({"layer_types": ["linear_attention"]}, "layer_types"),
        ({"layer_types": ["linear_attention", "mamba", "full_attention", "full_attention"]}, "layer_types"),
        ({"linear_num_value_heads": 3}, "linear_num_value_heads"),
        ({"linear_key_head_dim": "128"}, "linear_key_head_dim"),
    ],
)
def test_bad_fields_are_named(update, field):
    for config in (DENSE, MOE):
        with pytest.raises(FieldError) as error:
            architecture_from_hf_config({**config, **update})
        assert error.value.field == field
    with pytest.raises(FieldError) as error:
        architecture_from_hf_config({"model_type": "qwen3_5", "text_config": {**DENSE, **update}})
    assert error.value.field == f"text_config.{field}"


def _adapted(config: dict) -> set[str]:
    arch = architecture_from_hf_config(config)
    inventory = build_inventory(arch)
    targets = resolve_lora_targets(LoRAConfig(r=8, target_modules="all-linear"), family_for(arch), inventory)
    return {adapter.module for group in inventory.layer_groups for adapter in targets.adapters_of(group)}


def test_lora_all_linear_adapts_the_split_projections_and_not_the_router_or_experts():
    projections = {f"linear_attn.{name}" for name in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj")}
    dense = _adapted(DENSE)
    assert projections | {"self_attn.q_proj", "mlp.gate_proj"} <= dense and "linear_attn.conv1d" not in dense
    moe = _adapted(MOE)
    assert projections | {"mlp.shared_expert.gate_proj", "mlp.shared_expert_gate"} <= moe
    assert "mlp.gate" not in moe and not any(module.startswith("mlp.experts") for module in moe)


def test_lora_without_target_modules_asks_for_them():
    setup = {"model": {"hf_config": DENSE}, "finetuning": {"method": "lora"}}
    with pytest.raises(ValueError, match="target_modules"):
        estimate(setup)


def test_bitsandbytes_quantises_linear_layers_not_the_conv_or_the_experts():
    arch = architecture_from_hf_config(MOE)
    family = family_for(arch)
    linear_group = build_inventory(arch).layer_groups[0]
    quantized = {t.name for t in linear_group.tensors if family.quantized_by_bitsandbytes(t)}
    assert {"linear_attn.in_proj_qkv.weight", "linear_attn.in_proj_a.weight", "linear_attn.out_proj.weight"} <= quantized
    assert not quantized & {"linear_attn.conv1d.weight", "linear_attn.A_log", "mlp.experts.gate_up_proj", "mlp.gate.weight"}


def test_wrapper_estimates_and_states_what_is_not_counted():
    report = estimate({"model": {"hf_config": {"model_type": "qwen3_5_moe", "text_config": MOE}}, "micro_batch_size": 1,
                       "sequence_length": 128, "precision": "bf16-pure",
                       "finetuning": {"method": "lora", "lora": {"target_modules": "all-linear"}}})
    assert report.peak_allocated_bytes > 0
    text = report.model_dump_json()
    assert "Gated DeltaNet" in text and "vision tower" in text


def test_tensor_parallel_delta_net_is_refused_in_one_line():
    """Refused when the setup is read (trainmem.setup check_divisibility), before any trace runs."""
    from pydantic import ValidationError

    from trainmem.errors import format_validation_error
    from trainmem.setup import Setup

    setup = {"model": {"hf_config": DENSE}, "micro_batch_size": 1, "sequence_length": 64,
             "parallelism": {"num_gpus": 2, "tensor_parallel_size": 2}}
    with pytest.raises(ValidationError) as error:
        Setup.model_validate(setup)
    [(path, message)] = format_validation_error(error.value)
    assert path == "parallelism.tensor_parallel_size" and "Gated DeltaNet" in message


# ---------------------------------------------------------------------------- against a real forward


@pytest.mark.torch
@pytest.mark.parametrize(("config", "precision", "dtype_name", "seq"),
                         [(DENSE, "fp32", "fp32", 160), (MOE, "bf16-pure", "bf16", 128)])
def test_split_delta_net_layer_saves_what_torch_saves(config, precision, dtype_name, seq):
    """The Gated DeltaNet layer (norm, mixer, MLP or MoE) on the tape against autograd's saved tensors: equal but
    for the 16-byte int32 offsets of ``_grouped_mm`` (MoE)."""
    from test_qwen3_next_cohere_falcon import _saved_bytes_of_layer, _traced_saved_bytes

    measured = _saved_bytes_of_layer(config, 0, 2, seq, dtype_name)
    traced = _traced_saved_bytes(config, 0, 2, seq, precision)
    assert abs(traced - measured) <= 64 + 0.002 * measured
