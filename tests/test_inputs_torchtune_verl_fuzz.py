"""Property tests over mutated copies of the real torchtune and verl files: a key dropped, its value swapped for another
type, a huge or non-finite number, a launch script's override given any text. Reading must give a Setup or one
``ValueError`` line (the CLI's ``trainmem: error: ...``), never another exception. No timing threshold."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainmem import inputs

yaml = pytest.importorskip("yaml")

DATA = Path(__file__).parent / "data" / "trainer_files"
QWEN = {"model": {"preset": "qwen2.5-7b"}, "micro_batch_size": 4}
YAML_FILES = sorted(
    [p for p in (DATA / "torchtune").rglob("*.yaml") if "phi4" not in p.parts]
    + list((DATA / "verl").rglob("*.yaml"))
)
SCRIPTS = sorted((DATA / "verl").rglob("*.sh"))
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["bf16", "fp16", "fsdp2", "megatron", "grpo", "gae", "vllm", "hf", "${oc.select:a.b,3}", "${x.y}", "???", "$VAR"]),
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6
)


def _paths(data: Any, prefix: tuple = ()) -> list[tuple]:
    out = []
    if isinstance(data, dict):
        for key, child in data.items():
            out.append(prefix + (key,))
            out += _paths(child, prefix + (key,))
    return out


def _parsed(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


PARSED = {path: _parsed(path) for path in YAML_FILES}


def _read_or_one_line(texts: dict[str, str], overrides: dict) -> None:
    try:
        inputs.read_texts(texts, overrides=overrides)
    except ValueError as error:  # InputError and pydantic's ValidationError are ValueErrors
        message = str(error) if isinstance(error, inputs.InputError) else ""
        assert "\n" not in message and "Traceback" not in message, message


@SETTINGS
@given(data=st.data())
def test_mutated_yaml_files_never_traceback(data):
    path = data.draw(st.sampled_from(YAML_FILES))
    document = copy.deepcopy(PARSED[path])
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        keys = _paths(document)
        if not keys:
            break
        chosen = data.draw(st.sampled_from(keys))
        parent = document
        for part in chosen[:-1]:
            parent = parent[part]
        if data.draw(st.booleans()):
            parent.pop(chosen[-1], None)
        else:
            parent[chosen[-1]] = data.draw(values)
    try:
        text = json.dumps(document, allow_nan=True)
    except (TypeError, ValueError):
        return
    overrides = QWEN if "verl" in path.parts else {}
    _read_or_one_line({path.name.replace(".yaml", ".json"): text}, overrides)


@SETTINGS
@given(data=st.data())
def test_mutated_launch_scripts_never_traceback(data):
    path = data.draw(st.sampled_from(SCRIPTS))
    lines = path.read_text().splitlines(keepends=True)
    overrides = [i for i, line in enumerate(lines) if "=" in line and "." in line.split("=", 1)[0]]
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        index = data.draw(st.sampled_from(overrides))
        key = lines[index].split("=", 1)[0]
        choice = data.draw(st.sampled_from(["drop", "value", "huge"]))
        if choice == "drop":
            lines[index] = " \\\n"
        else:
            value = data.draw(st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\\\n\r "), max_size=10)) if choice == "value" else str(data.draw(st.integers(min_value=2**40, max_value=2**80)))
            lines[index] = f"{key}={value} \\\n"
    _read_or_one_line({path.name: "".join(lines)}, {"model": {"preset": "qwen2.5-7b"}})
