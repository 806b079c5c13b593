"""Hostile numbers on the command line's numeric flags and in the page's share link.

Each value — huge, negative, zero, NaN, ``1e400``, ``0x10``, Unicode digits, ``1_000``, ``4.0``, an empty string — is
either a report or one line that names the flag or the setup field (exit status 2 on the command line; an inline
field error on the page). The CLI runs in-process (``trainmem.cli.main``). The page's reading of a hash is its own
JavaScript (``web/js/setup.js`` decodeHash and main.js's overlay on the core's defaults, run under Node by
``tests/js/hash_setups.mjs``); the setups it builds go through the page's bridge (``web/py/trainmem_web.py``
compute), which must never raise. A seeded sample runs by default; ``-m slow`` runs every combination.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainmem.cli import main

ROOT = Path(__file__).resolve().parents[1]
HASH_SCRIPT = ROOT / "tests" / "js" / "hash_setups.mjs"

BASE = ["estimate", "--preset", "gpt2", "--seq-len", "256"]
INTEGER_FLAGS = {
    "--micro-batch-size": "micro_batch_size",
    "--seq-len": "sequence_length",
    "--grad-accum": "gradient_accumulation_steps",
    "--gpus": "parallelism.num_gpus",
    "--zero": None,  # choices 0-3: argparse names the flag
    "--tp": "parallelism.tensor_parallel_size",
    "--pp": "parallelism.pipeline_parallel_size",
    "--cp": "parallelism.context_parallel_size",
    "--ep": "parallelism.expert_parallel_size",
    "--lora": "finetuning.lora.r",
    "--qlora": "finetuning.lora.r",
    "--num-labels": "task.num_labels",
    "--apply": None,
}
DECIMAL_FLAGS = {"--gpu-memory-gib": "gpu.memory_gib", "--headroom": "headroom_fraction"}
VALUES = [
    "99999999999999999999999",
    "9" * 400,
    "9" * 5000,
    "-1",
    "0",
    "-0",
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e400",
    "0x10",
    "0b11",
    "\u0663",  # Arabic-Indic three
    "\uff14",  # fullwidth four
    "\u00b2",  # superscript two
    "1_000",
    "4.0",
    " 4",
    "4 ",
    "",
    "+4",
    "1e3",
    "0.5",
    "--",
    "\u202e4",  # right-to-left override
]


def cli_cases() -> list[tuple[str, str, str | None]]:
    flags = {**INTEGER_FLAGS, **DECIMAL_FLAGS}
    return [(flag, value, field) for flag, field in flags.items() for value in VALUES]


def sample(cases: list, size: int, seed: int = 2026) -> list:
    return random.Random(seed).sample(cases, min(size, len(cases)))


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's error
        code = exit_.code if isinstance(exit_.code, int) else 2
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def check_cli(flag: str, value: str, field: str | None, capsys) -> None:
    code, out, err = run_cli([*BASE, f"{flag}={value}"], capsys)
    assert code in (0, 1, 2), (code, err)
    if code in (0, 1):
        assert out.startswith("trainmem ") and err == "", err
        return
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    assert lines[0].startswith("trainmem") and "internal error" not in err and "Traceback" not in err
    assert lines[0].isprintable(), lines[0]
    names = [flag, *([field, field.split(".")[-1]] if field else [])]
    if flag == "--qlora":
        names.append("finetuning")
    assert any(name in lines[0] for name in names), lines[0]


CLI_SAMPLE = sample(cli_cases(), 48)


@pytest.mark.parametrize(("flag", "value", "field"), CLI_SAMPLE, ids=[f"{f}={v[:12]!a}" for f, v, _ in CLI_SAMPLE])
def test_hostile_flag_values_sample(flag, value, field, capsys):
    check_cli(flag, value, field, capsys)


@pytest.mark.slow
def test_hostile_flag_values_sweep(capsys):
    for flag, value, field in cli_cases():
        check_cli(flag, value, field, capsys)


def test_unicode_digits_and_underscores_are_refused_naming_the_flag(capsys):
    for value in ("\u0663", "1_000", "0x10", "4.0"):
        code, _, err = run_cli([*BASE, "--micro-batch-size", value], capsys)
        assert code == 2 and "--micro-batch-size" in err and "decimal digits 0-9" in err, err
    code, _, err = run_cli([*BASE, "--gpu-memory-gib", "1e400"], capsys)
    assert code == 2 and "gpu.memory_gib" in err, err  # non-finite: the Setup names its field
    code, out, _ = run_cli([*BASE, "--micro-batch-size", "+2"], capsys)
    assert code == 0 and "micro-batch 2 " in out
    code, _, err = run_cli([*BASE, "--micro-batch-size=--"], capsys)
    # Python 3.11-3.13's argparse strips the '--' and passes [] (the flag's own "expected a value"); 3.14's (Pyodide)
    # passes '--' to the number type, which refuses it: one line naming the flag either way
    assert code == 2 and "--micro-batch-size" in err and ("expected a value" in err or "got '--'" in err), err


# ---------------------------------------------------------------------------- the page's share link

HASH_FIELDS = [
    "micro_batch_size",
    "sequence_length",
    "gradient_accumulation_steps",
    "parallelism.num_gpus",
    "parallelism.zero_stage",
    "parallelism.tensor_parallel_size",
    "parallelism.context_parallel_size",
    "gpu.memory_gib",
    "headroom_fraction",
    "loss_chunks",
    "finetuning.lora.r",
    "model.num_parameters",
]
HASH_VALUES = [
    "99999999999999999999999",
    "9" * 400,
    "-1",
    "0",
    "NaN",
    "Infinity",
    "1e400",
    "-1e400",
    "1e-400",
    "0x10",
    "%D9%A3",  # Arabic-Indic three, percent-encoded
    "%EF%BC%94",  # fullwidth four
    "1_000",
    "4.0",
    "2.5",
    "true",
    "null",
    "%5B%5D",  # []
    "%7B%7D",  # {}
    "%224%22",  # "4"
    "",
    "%E0%A4%A",  # malformed percent-encoding
]


def hash_cases() -> list[tuple[str, str]]:
    return [(field, value) for field in HASH_FIELDS for value in HASH_VALUES]


needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js to run the page's hash reader")


@pytest.fixture(scope="module")
def bridge():
    sys.path.insert(0, str(ROOT / "web" / "py"))
    import trainmem_web

    return trainmem_web


def page_setups(hashes: list[str], tmp_path: Path) -> list[dict | None]:
    from trainmem.setup import Setup

    defaults = Setup.model_validate({"model": {"preset": "gpt2"}, "sequence_length": 256}).model_dump(mode="json")
    path = tmp_path / "hashes.json"
    path.write_text(json.dumps({"schema": Setup.model_json_schema(), "defaults": defaults, "hashes": hashes}))
    done = subprocess.run(["node", str(HASH_SCRIPT), str(path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["hash"] for row in rows] == hashes
    return [row["setup"] for row in rows]


def check_hashes(cases: list[tuple[str, str]], bridge, tmp_path: Path) -> None:
    hashes = [f"#{field}={value}" for field, value in cases]
    for (field, value), setup in zip(cases, page_setups(hashes, tmp_path)):
        if setup is None:  # nothing readable in the hash: the page keeps its default setup
            continue
        answer = json.loads(bridge.compute(json.dumps(setup), False))
        if answer["ok"]:
            continue
        errors = answer["errors"]
        assert errors, (field, value)
        for error in errors:
            assert "internal error" not in error["message"], (field, value, error)
            assert "\n" not in error["message"] and error["message"].isprintable(), error
        top = field.split(".")[0]
        paths = [error["path"] for error in errors]
        assert any(p == "" or p == field or field.startswith(p) or p.startswith(top) for p in paths), (field, value, errors)


HASH_SAMPLE = sample(hash_cases(), 40)


@needs_node
def test_hostile_hash_values_sample(bridge, tmp_path):
    check_hashes(HASH_SAMPLE, bridge, tmp_path)


@needs_node
@pytest.mark.slow
def test_hostile_hash_values_sweep(bridge, tmp_path):
    check_hashes(hash_cases(), bridge, tmp_path)


@needs_node
def test_hash_numbers_reach_the_core_as_written(tmp_path):
    """A hash value that JSON cannot carry (1e400, 0x10, Unicode digits) stays text, which the core refuses by name."""
    written = ["1e400", "0x10", "%D9%A3", "99999999999999999999999", "1e-400", "4.0", "0", "-0.0", "9007199254740991"]
    setups = page_setups([f"#micro_batch_size={text}" for text in written], tmp_path)
    assert [s["micro_batch_size"] for s in setups] == [
        "1e400", "0x10", "\u0663", "99999999999999999999999", "1e-400", 4, 0, 0, 9007199254740991
    ]
