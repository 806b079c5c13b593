"""The command line: the README's example, JSON output, catalogs, and one-line errors with exit status 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import trainmem
from trainmem.cli import main

HEADLINE = [
    "estimate",
    "--preset",
    "llama-2-13b",
    "--gpus",
    "8",
    "--zero",
    "3",
    "--precision",
    "bf16-mixed",
    "--micro-batch-size",
    "4",
    "--seq-len",
    "4096",
    "--checkpointing",
    "full",
    "--gpu",
    "a100-80gb",
]


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_headline_example_prints_the_breakdown(capsys):
    code, out, err = run(HEADLINE, capsys)
    assert code == 0 and not err
    for word in ("parameters", "gradients", "optimizer states", "activations", "overhead", "peak at", "Fits"):
        assert word in out


def test_json_report_has_the_contract_keys(capsys):
    code, out, _ = run(HEADLINE + ["--json"], capsys)
    report = json.loads(out)
    assert code == 0
    for key in ("num_parameters", "num_trainable_parameters", "peak_allocated_bytes", "peak_total_bytes"):
        assert isinstance(report[key], int)
    assert set(report["breakdown"]) == {"parameters", "gradients", "optimizer_states", "activations", "overhead"}
    assert sum(report["breakdown"].values()) == report["peak_total_bytes"]
    assert report["num_parameters"] == 13_015_864_320


def test_flags_equal_the_python_api(capsys):
    _, out, _ = run(HEADLINE + ["--json"], capsys)
    python = trainmem.estimate(
        {
            "model": {"preset": "llama-2-13b"},
            "parallelism": {"num_gpus": 8, "strategy": "zero", "zero_stage": 3},
            "precision": "bf16-mixed",
            "micro_batch_size": 4,
            "sequence_length": 4096,
            "activation_checkpointing": "full",
            "gpu": "a100-80gb",
        }
    )
    assert json.loads(out)["peak_total_bytes"] == python.peak_total_bytes


def test_setup_file_with_flags_overriding(tmp_path, capsys):
    setup = tmp_path / "setup.json"
    setup.write_text(json.dumps({"model": {"preset": "gpt2"}, "micro_batch_size": 2, "sequence_length": 512}))
    _, out, _ = run(["estimate", str(setup), "--json", "--micro-batch-size", "8"], capsys)
    report = json.loads(out)
    assert report["setup"]["micro_batch_size"] == 8 and report["setup"]["sequence_length"] == 512


def test_hf_config_file(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "vocab_size": 32000,
                "hidden_size": 2048,
                "intermediate_size": 5632,
                "num_hidden_layers": 22,
                "num_attention_heads": 32,
                "num_key_value_heads": 4,
            }
        )
    )
    _, out, _ = run(["estimate", "--hf-config", str(config), "--json"], capsys)
    assert json.loads(out)["num_parameters"] == 1_100_048_384  # TinyLlama-1.1B (tests/test_presets.py)


@pytest.mark.parametrize("kind", ["presets", "gpus", "optimizers"])
def test_catalogs(kind, capsys):
    code, out, _ = run([kind, "--json"], capsys)
    rows = json.loads(out)
    assert code == 0 and len(rows) >= 10 and all("name" in row for row in rows)
    if kind == "presets":
        assert all(row["num_parameters"] > 0 for row in rows)
    if kind == "gpus":
        assert len(rows) >= 15


def test_schema_is_the_setup_json_schema(capsys):
    code, out, _ = run(["schema"], capsys)
    schema = json.loads(out)
    assert code == 0 and "model" in schema["properties"] and schema["required"] == ["model"]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["estimate", "--preset", "llama-9"], "model.preset"),
        (["estimate", "--preset", "gpt2", "--micro-batch-size", "-1"], "micro_batch_size"),
        (["estimate", "--preset", "gpt2", "--gpu", "a200"], "gpu"),
        (["estimate", "--preset", "gpt2", "--precision", "fp64"], "precision"),
        (["estimate", "--preset", "gpt2", "--gpus", "6", "--tp", "4"], "parallelism"),
        (["estimate"], "model"),
        (["estimate", "/nonexistent/setup.json"], "setup"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_field(argv, field, capsys):
    code, _, err = run(argv, capsys)
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and field in err and "Traceback" not in err


def test_argparse_errors_are_one_line_too(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", "--zero", "5"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert len(err.strip().splitlines()) == 1 and "--zero" in err


def test_malformed_json_and_unsupported_config(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = run(["estimate", str(bad)], capsys)
    assert code == 2 and "not valid JSON" in err
    bert = tmp_path / "mamba.json"
    bert.write_text(json.dumps({"model_type": "mamba", "hidden_size": 768}))
    code, _, err = run(["estimate", "--hf-config", str(bert)], capsys)
    assert code == 2 and "model.hf_config" in err and "llama" in err


def test_heads_not_divisible_by_kv_heads(tmp_path, capsys):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama", "num_attention_heads": 32, "num_key_value_heads": 5}))
    code, _, err = run(["estimate", "--hf-config", str(config)], capsys)
    assert code == 2 and "num_key_value_heads" in err


def test_fail_if_not_fit(capsys):
    code, _, _ = run(["estimate", "--preset", "llama-2-70b", "--gpu", "rtx-4090", "--fail-if-not-fit"], capsys)
    assert code == 1


def test_console_script_runs_as_module():
    completed = subprocess.run(
        [sys.executable, "-m", "trainmem", "estimate", "--preset", "gpt2", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(completed.stdout)["num_parameters"] == 124_439_808
