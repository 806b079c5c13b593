"""Property tests over hostile input: generated values anywhere in a setup, through the Python
API, the page bridge and (a few examples) the command line as a subprocess.

What must hold, whatever the input:
* the API raises nothing but ``pydantic.ValidationError``, whose one-line form names each field;
* the bridge never raises, and answers JSON: a report, or errors that are one printable line each;
* the CLI exits 0, 1 or 2, writes at most one line to stderr and never a traceback;
* an accepted setup's report renders as text and JSON, and the JSON round-trips.
No timing threshold: hypothesis' deadline is off (the fuzz script reports slow cases).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from small_models import LLAMA_2_LAYERS

import trainmem
from trainmem.errors import format_validation_error, one_line
from trainmem.field_paths import setup_field_paths
from trainmem.render import render_report

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "web" / "py"))
import trainmem_web  # noqa: E402

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),  # NaN and infinities included
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec=None, categories=["Cc", "Cf", "Cs", "Zl", "Zp"]), max_size=4),
    st.sampled_from(["4", "768", "true", "false", "inf", "1e308", "all-linear", "layers:0-9999999", "gpt2", "zero"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)

# Every Setup field, read from the models (trainmem.field_paths), so a new field is tested the day it
# is added; plus config.json fields and a key no model has.
PATHS = setup_field_paths() + [
    "model.hf_config.hidden_size",
    "model.hf_config.num_hidden_layers",
    "model.hf_config.model_type",
    "model.hf_config.tie_word_embeddings",
    "surprise",
]
BASES = [
    {"model": "gpt2", "sequence_length": 128},
    {"model": "qwen1.5-moe-a2.7b", "sequence_length": 64, "parallelism": {"num_gpus": 4, "zero_stage": 3}},
    {
        "model": {"hf_config": {**LLAMA_2_LAYERS}},
        "sequence_length": 64,
        "finetuning": {"method": "lora"},
    },
    {
        "model": {
            "architecture": {
                "vocab_size": 512,
                "hidden_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 256,
            }
        },
        "sequence_length": 32,
    },
]


def _with(setup: dict, path: str, value) -> dict:
    setup = json.loads(json.dumps(setup))
    node = setup
    keys = path.split(".")
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value
    return setup


mutated = st.builds(
    lambda base, changes: _apply(base, changes),
    st.sampled_from(BASES),
    st.lists(st.tuples(st.sampled_from(PATHS), values), min_size=1, max_size=3),
)


def _apply(base: dict, changes: list) -> dict:
    setup = base
    for path, value in changes:
        setup = _with(setup, path, value)
    return setup


def _one_printable_line(text: str) -> bool:
    return bool(text) and text.isprintable()


def _check_report(report: trainmem.Report) -> None:
    render_report(report).encode("utf-8")
    assert trainmem.Report.model_validate_json(report.model_dump_json()) == report


@SETTINGS
@given(mutated)
def test_the_api_answers_a_report_or_one_line_per_field(setup):
    try:
        report = trainmem.estimate(setup, suggestions=False)
    except ValidationError as error:
        pairs = format_validation_error(error)
        assert pairs and all(path and _one_printable_line(message) for path, message in pairs)
        assert _one_printable_line(one_line(error))
    else:
        _check_report(report)


@SETTINGS
@given(mutated, st.booleans())
def test_the_bridge_never_raises(setup, suggestions):
    try:
        text = json.dumps(setup)  # NaN and Infinity as literals, lone surrogates as escapes
    except (TypeError, ValueError):
        text = repr(setup)
    answer = json.loads(trainmem_web.compute(text, suggestions))
    if answer["ok"]:
        assert answer["report"]["peak_total_bytes"] > 0
    else:
        assert answer["errors"]
        for error in answer["errors"]:
            assert isinstance(error["path"], str) and _one_printable_line(error["message"])
            assert "internal error" not in error["message"]


@SETTINGS
@given(st.text(max_size=200) | st.binary(max_size=50).map(lambda b: b.decode("latin-1")))
def test_the_bridge_takes_any_text(text):
    for answer in (json.loads(trainmem_web.compute(text, False)), json.loads(trainmem_web.architecture(text))):
        assert answer["ok"] in (True, False)
        if not answer["ok"]:
            assert all(_one_printable_line(e["message"]) for e in answer["errors"])


flag_values = st.one_of(
    st.sampled_from(["-1", "0", "1e3", "nan", "inf", "1.5", "", "abc", "99999999999999999999", "\n", "--", "-"]),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6).filter(
        lambda t: "\x00" not in t
    ),
)
FLAGS = [
    "--mbs",
    "--seq-len",
    "--gpus",
    "--tp",
    "--zero",
    "--lora",
    "--gpu",
    "--gpu-memory-gib",
    "--headroom",
    "--precision",
    "--lora-targets",
    "--preset",
    "--bogus",
]


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(FLAGS), flag_values), min_size=1, max_size=3))
def test_the_command_line_fails_in_one_line(pairs):
    argv = ["estimate", "--preset", "gpt2", "--seq-len", "128"]
    for flag, value in pairs:
        argv += [flag, value]
    result = subprocess.run(
        [sys.executable, "-m", "trainmem", *argv],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "core")},
        timeout=120,
    )
    assert result.returncode in (0, 1, 2), result.stderr
    assert b"Traceback" not in result.stderr
    if result.returncode == 2:
        assert len(result.stderr.splitlines()) == 1, result.stderr
    else:
        assert result.stderr == b""
