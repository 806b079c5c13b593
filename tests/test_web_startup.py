"""The page's Python start-up (issue 14): what ``import trainmem_web`` and the default setup's first
answer import and build, checked in fresh processes (the worker starts Python with
``PYDANTIC_DISABLE_PLUGINS=__all__``), and that none of it changes an answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from trainmem.catalogs import LazyCatalog, Preset, presets
from trainmem.package_data import data_json

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from build_site import DEFAULT_SETUP  # noqa: E402

_PROBE = """
import gc, json, sys
import trainmem_web
from trainmem.catalogs import presets
answer = trainmem_web.compute(sys.argv[1], False)
print(json.dumps({
    "answer": answer,
    "modules": sorted(sys.modules),
    "loader": getattr(sys.modules.get("pydantic.plugin._loader"), "__doc__", None),
    "gc_enabled": gc.isenabled(),
    "presets_built": sorted(presets()._built),
}))
"""

# Modules the default answer (no suggestions) does not need: the readers of trainer files, the
# generation model, the renderers, the suggestions, and what only pydantic's plugin scan imports.
NOT_IMPORTED_BY_THE_DEFAULT_ANSWER = (
    "importlib.metadata",
    "email",
    "csv",
    "yaml",
    "trainmem.inputs",
    "trainmem.inference",
    "trainmem.suggest",
    "trainmem.compare",
    "trainmem.render_markdown",
    "trainmem.model_inputs",
    "trainmem.cli",
    "trainmem.measure",
)


def _probe(plugins_off: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "core"), str(ROOT / "web" / "py")])}
    env.pop("PYDANTIC_DISABLE_PLUGINS", None)
    if plugins_off:
        env["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    command = [sys.executable, "-c", _PROBE, json.dumps(DEFAULT_SETUP)]
    return json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout)


@pytest.fixture(scope="module")
def as_the_worker() -> dict:
    return _probe(plugins_off=True)


def test_the_default_answer_imports_only_what_it_needs(as_the_worker):
    assert json.loads(as_the_worker["answer"])["ok"]
    modules = set(as_the_worker["modules"])
    assert not modules & set(NOT_IMPORTED_BY_THE_DEFAULT_ANSWER)
    assert as_the_worker["loader"] == "trainmem_web's stand-in: plugins are disabled"


def test_the_default_answer_builds_only_its_own_preset(as_the_worker):
    assert as_the_worker["presets_built"] == [DEFAULT_SETUP["model"]["preset"]]


def test_the_collector_is_on_again_after_the_import(as_the_worker):
    assert as_the_worker["gc_enabled"]


def test_with_plugins_on_pydantic_loads_them_and_the_answer_is_the_same(as_the_worker):
    plugins_on = _probe(plugins_off=False)
    assert plugins_on["loader"] != as_the_worker["loader"]  # pydantic's own loader
    assert "importlib.metadata" in plugins_on["modules"]
    assert plugins_on["answer"] == as_the_worker["answer"]


_PYDANTIC_LOADER = """
import inspect, json
from pydantic.plugin import _schema_validator
from pydantic.plugin._loader import get_plugins
print(json.dumps([list(get_plugins()), inspect.getsource(_schema_validator.create_schema_validator)]))
"""


@pytest.mark.parametrize("value", ["__all__", "1", "true"])
def test_the_stand_in_answers_as_pydantics_loader_does(value):
    """pydantic's own get_plugins() returns no plugin for each value the stand-in is used for, and
    pydantic still takes get_plugins from that module (a newer pydantic that does not is caught here)."""
    env = {**os.environ, "PYDANTIC_DISABLE_PLUGINS": value}
    out = subprocess.run([sys.executable, "-c", _PYDANTIC_LOADER], env=env, check=True, capture_output=True, text=True)
    plugins, source = json.loads(out.stdout)
    assert plugins == []
    assert "from ._loader import get_plugins" in source


def test_the_lazy_catalog_is_the_dict_of_its_entries():
    entries = data_json("presets.json")["presets"]
    catalog = presets()
    assert list(catalog) == list(dict.fromkeys(entry["name"] for entry in entries))
    assert len(catalog) == len(entries)
    assert "llama-3.1-8b" in catalog and "no-such-model" not in catalog and 3 not in catalog
    assert catalog.get("no-such-model") is None
    assert catalog["gpt2"] is catalog["gpt2"]  # built once
    assert catalog["gpt2"] == Preset(**next(entry for entry in entries if entry["name"] == "gpt2"))


def test_the_lazy_catalog_keeps_the_last_of_a_repeated_name_and_checks_an_entry_when_looked_up():
    first = {"name": "a", "display_name": "A", "hf_id": "x/a", "config": {}}
    last = {**first, "display_name": "A, again"}
    bad = {"name": "b", "display_name": "B", "hf_id": "x/b", "config": "not a dict"}
    catalog = LazyCatalog(Preset, [first, bad, last])
    assert list(catalog) == ["a", "b"]
    assert catalog["a"].display_name == "A, again"
    with pytest.raises(ValidationError):
        catalog["b"]
    with pytest.raises(KeyError):
        catalog["c"]
