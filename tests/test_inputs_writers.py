"""Writers: each written file, read back by its reader, gives the same setup (the fields the format carries come
from the file; the rest, which the format cannot hold, from the command line's overrides)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainmem import inputs
from trainmem.cli import main
from trainmem.inputs.writers import FILENAMES, carries, write
from trainmem.setup import Setup

yaml = pytest.importorskip("yaml")  # trainer files are YAML; PyYAML is a runtime dependency

SETUPS = {
    "lora-dora-packed": {
        "model": "llama-3-8b",
        "micro_batch_size": 2,
        "sequence_length": 2048,
        "precision": "bf16-pure",
        "attention": "flash_attention_2",
        "batch": "packed",
        "loss": "liger",
        "activation_checkpointing": "full",
        "finetuning": {
            "method": "lora",
            "lora": {"r": 16, "target_modules": ["q_proj", "v_proj"], "modules_to_save": ["lm_head"], "use_dora": True},
        },
    },
    "zero3-offload": {
        "model": "llama-3-8b",
        "micro_batch_size": 2,
        "gradient_accumulation_steps": 4,
        "sequence_length": 4096,
        "precision": "bf16-mixed",
        "activation_checkpointing": "full",
        "optimizer": {"name": "adamw", "implementation": "fused"},
        "parallelism": {"num_gpus": 8, "strategy": "zero", "zero_stage": 3, "offload_optimizer": True},
    },
    "qlora-liger": {
        "model": "llama-3.2-1b",
        "micro_batch_size": 4,
        "sequence_length": 2048,
        "precision": "bf16-pure",
        "attention": "flash_attention_2",
        "optimizer": "paged-adamw-8bit",
        "activation_checkpointing": "full",
        "loss": "liger",
        "finetuning": {"method": "qlora", "lora": {"r": 32, "target_modules": "all-linear", "lora_dropout": 0.05}},
    },
    "fsdp-amsgrad": {
        "model": "qwen2.5-7b",
        "micro_batch_size": 1,
        "gradient_accumulation_steps": 8,
        "sequence_length": 8192,
        "precision": "fp16-mixed",
        "optimizer": "adamw-amsgrad",
        "activation_checkpointing": "full",
        "parallelism": {
            "num_gpus": 4,
            "strategy": "fsdp",
            "fsdp_sharding_strategy": "SHARD_GRAD_OP",
            "offload_optimizer": True,
            "offload_parameters": True,
        },
    },
    "ddp-lora-fp32": {
        "model": "gpt2",
        "micro_batch_size": 3,
        "gradient_accumulation_steps": 2,
        "sequence_length": 512,
        "precision": "fp32",
        "optimizer": "sgd",
        "attention": "eager",
        "finetuning": {"method": "lora", "lora": {"r": 8, "target_modules": ["c_attn"]}},
        "parallelism": {"num_gpus": 2},
    },
}
CASES = [(fmt, name) for fmt in ("trl", "axolotl", "accelerate") for name in SETUPS] + [("deepspeed", "zero3-offload")]


def leaves(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out.update(leaves(value, path))
        else:
            out[path] = value
    return out


def nest(flat: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in flat.items():
        node = out
        *parents, last = path.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def carried(path: str, fields: list[str]) -> bool:
    return any(path == f or path.startswith(f + ".") for f in fields)


@pytest.mark.parametrize("file_format, name", CASES)
def test_round_trip(file_format, name):
    original = Setup.model_validate(SETUPS[name])
    text, notes = write(original, file_format)
    assert isinstance(notes, list)
    flat = leaves(original.model_dump(mode="json"))
    rest = nest({k: v for k, v in flat.items() if not carried(k, carries(original, file_format))})
    back, keys = inputs.read_texts({FILENAMES[file_format]: text}, overrides=rest)
    assert back.model_dump(mode="json") == original.model_dump(mode="json")
    assert keys.files[0].kind == file_format
    assert not [e.key for e in keys.entries if "unknown to trainmem" in e.detail]


@pytest.mark.parametrize("file_format", ["trl", "axolotl"])
def test_trainer_files_are_complete_on_their_own(file_format):
    """A trainer file carries the model and the batch: read alone it needs no overrides but the GPU count."""
    original = Setup.model_validate(SETUPS["qlora-liger"])
    text, _ = write(original, file_format)
    back, _ = inputs.read_texts({FILENAMES[file_format]: text})
    assert back.model_dump(mode="json") == original.model_dump(mode="json")


def test_written_files_parse_as_their_format():
    setup = Setup.model_validate(SETUPS["zero3-offload"])
    ds, _ = write(setup, "deepspeed")
    assert json.loads(ds)["zero_optimization"] == {
        "stage": 3,
        "offload_optimizer": {"device": "cpu", "pin_memory": True},
        "contiguous_gradients": True,
    }
    trl = yaml.safe_load(write(setup, "trl")[0])
    assert trl["deepspeed"]["train_micro_batch_size_per_gpu"] == 2 and trl["optim"] == "adamw_torch_fused"
    accelerate = yaml.safe_load(write(setup, "accelerate")[0])
    assert accelerate["distributed_type"] == "DEEPSPEED" and accelerate["num_processes"] == 8


def test_emit_to_stdout_and_to_a_file(tmp_path, capsys):
    assert main(["estimate", "--preset", "llama-3.2-1b", "--mbs", "2", "--emit", "trl"]) == 0
    captured = capsys.readouterr()
    assert yaml.safe_load(captured.out)["per_device_train_batch_size"] == 2
    assert "trainmem: note:" in captured.err
    target = tmp_path / "ds.json"
    assert (
        main(
            [
                "estimate",
                "--preset",
                "llama-3-8b",
                "--gpus",
                "8",
                "--zero",
                "2",
                "--emit",
                "deepspeed",
                "--emit-to",
                str(target),
            ]
        )
        == 0
    )
    captured = capsys.readouterr()
    assert "Per GPU" in captured.out and f"wrote {target}" in captured.err
    assert json.loads(target.read_text())["zero_optimization"]["stage"] == 2


def test_apply_a_suggestion_before_emitting(capsys):
    argv = [
        "estimate",
        "--preset",
        "llama-3-8b",
        "--gpus",
        "8",
        "--zero",
        "1",
        "--mbs",
        "4",
        "--seq-len",
        "4096",
        "--json",
    ]
    assert main(argv) == 0
    suggestions = json.loads(capsys.readouterr().out)["suggestions"]
    assert suggestions
    patch = suggestions[0]["setup_patch"]
    assert main(argv[:-1] + ["--apply", "1", "--emit", "accelerate"]) == 0
    emitted = yaml.safe_load(capsys.readouterr().out)
    if "parallelism" in patch and "zero_stage" in patch["parallelism"]:
        assert emitted["deepspeed_config"]["zero_stage"] == patch["parallelism"]["zero_stage"]
    assert emitted["num_processes"] == patch.get("parallelism", {}).get("num_gpus", 8)
