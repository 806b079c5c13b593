"""Setup validation: every bad input becomes a message that names the field and what is allowed."""

import pytest
from pydantic import ValidationError

import trainmem
from trainmem.errors import format_validation_error, one_line
from trainmem.setup import Setup


def error_for(data: dict) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as info:
        Setup.model_validate(data)
    return format_validation_error(info.value)


@pytest.mark.parametrize(
    ("data", "field", "mentions"),
    [
        ({"model": "llama-9"}, "model.preset", "llama-2-7b"),
        ({"model": "gpt2", "micro_batch_size": 0}, "micro_batch_size", "greater than 0"),
        ({"model": "gpt2", "precision": "fp64"}, "precision", "bf16-mixed"),
        ({"model": "gpt2", "optimizer": "adamax"}, "optimizer.name", "adamw"),
        ({"model": "gpt2", "gpu": "a200"}, "gpu", "h100-sxm-80gb"),
        ({"model": "gpt2", "attention": "flash3"}, "attention", "sdpa"),
        ({"model": "gpt2", "micro_bacth_size": 2}, "micro_bacth_size", "unknown field"),
        ({"model": {"hf_config": {"model_type": "mamba"}}}, "model.hf_config.model_type", "llama"),
        ({"model": {}}, "model", "preset, hf_config"),
        ({"model": "gpt2", "parallelism": {"num_gpus": 8, "zero_stage": 4}}, "parallelism.zero_stage", "3"),
        (
            {"model": "gpt2", "parallelism": {"num_gpus": 6, "tensor_parallel_size": 4}},
            "parallelism.num_gpus",
            "multiple",
        ),
        (
            {"model": "gpt2", "parallelism": {"offload_parameters": True, "num_gpus": 2}},
            "parallelism.offload_parameters",
            "zero_stage 3",
        ),
        (
            {"model": "gpt2", "parallelism": {"num_gpus": 8, "tensor_parallel_size": 8}},
            "parallelism.tensor_parallel_size",
            "12",
        ),
        (
            {"model": "gpt2", "finetuning": {"method": "lora", "lora": {"target_modules": []}}},
            "finetuning.lora.target_modules",
            "all-linear",
        ),
        ({"model": "gpt2", "finetuning": {"frozen": ["everything"]}}, "finetuning.frozen", "embeddings"),
        ({"model": {"num_parameters": 10**9}, "finetuning": {"method": "lora"}}, "finetuning", "architecture"),
        (
            {
                "model": {
                    "architecture": {
                        "vocab_size": 10,
                        "hidden_size": 64,
                        "num_hidden_layers": 2,
                        "num_attention_heads": 8,
                        "num_key_value_heads": 3,
                        "intermediate_size": 128,
                    }
                }
            },
            "model.architecture.num_key_value_heads",
            "num_key_value_heads",
        ),
        ({"model": "gpt2", "headroom_fraction": 0.9}, "headroom_fraction", "0.5"),
    ],
)
def test_bad_setup_names_field_and_allowed_values(data, field, mentions):
    errors = dict(error_for(data))
    assert field in errors, errors
    assert mentions in errors[field]


def test_shorthands():
    setup = Setup.model_validate({"model": "Llama-2-7B", "optimizer": "adamw_8bit", "gpu": "H100-SXM-80GB"})
    assert setup.model.preset == "llama-2-7b"
    assert setup.optimizer.name == "adamw-8bit"
    assert setup.gpu == "h100-sxm-80gb"


def test_zero_stage_implies_the_zero_strategy():
    assert (
        Setup.model_validate({"model": "gpt2", "parallelism": {"num_gpus": 4, "zero_stage": 2}}).parallelism.strategy
        == "zero"
    )


def test_setup_json_round_trip():
    setup = Setup.model_validate(
        {
            "model": {
                "hf_config": {
                    "model_type": "llama",
                    "hidden_size": 512,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 8,
                    "intermediate_size": 1024,
                }
            },
            "finetuning": {"method": "qlora"},
            "gpu": {"memory_gib": 20},
        }
    )
    assert Setup.model_validate_json(setup.model_dump_json()) == setup


def test_a_missing_lora_target_is_reported():
    with pytest.raises(ValidationError) as info:
        trainmem.estimate({"model": "gpt2", "finetuning": {"method": "lora", "lora": {"target_modules": ["q_proj"]}}})
    assert "finetuning.lora.target_modules" in one_line(info.value)
    assert "c_attn" in one_line(info.value)
