"""The lazy family registry (trainmem.models.FAMILY_MODULES): the table matches the real modules,
and a family's module is imported only when a config of its model_type is read."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import trainmem.models as models
from trainmem.models import FAMILIES, FAMILY_MODULES, DecoderFamily

ROOT = Path(__file__).resolve().parents[1]


def _family_classes_in_package() -> dict[str, type[DecoderFamily]]:
    """Every concrete family class defined in a module of trainmem.models, by its model_type."""
    found: dict[str, type[DecoderFamily]] = {}
    for info in pkgutil.iter_modules(models.__path__):
        module = importlib.import_module(f"trainmem.models.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, DecoderFamily) and cls.__module__ == module.__name__ and "model_type" in vars(cls):
                if isinstance(vars(cls)["model_type"], str) and vars(cls)["model_type"]:
                    found[cls.model_type] = cls
    return found


def test_each_entry_names_the_class_of_its_model_type():
    for model_type, (module, name) in FAMILY_MODULES.items():
        cls = getattr(importlib.import_module(f"trainmem.models.{module}"), name)
        assert issubclass(cls, DecoderFamily), model_type
        assert cls.model_type == model_type, (model_type, module, name)
        assert type(FAMILIES[model_type]) is cls
        assert FAMILIES[model_type] is FAMILIES[model_type]  # one instance per family


def test_every_family_class_is_registered():
    classes = _family_classes_in_package()
    missing = sorted(set(classes) - set(FAMILY_MODULES) - {"custom"})
    assert not missing, f"family classes not in FAMILY_MODULES: {missing}"
    for model_type, cls in classes.items():
        if model_type in FAMILY_MODULES:
            assert FAMILY_MODULES[model_type] == (cls.__module__.rsplit(".", 1)[1], cls.__name__)


def test_registry_is_a_mapping():
    assert len(FAMILIES) == len(FAMILY_MODULES)
    assert list(FAMILIES) == list(FAMILY_MODULES)
    assert "llama" in FAMILIES and "no-such-family" not in FAMILIES and 3 not in FAMILIES
    assert FAMILIES.get("no-such-family") is None
    assert dict(FAMILIES.items()).keys() == FAMILY_MODULES.keys()


_PROBE = """
import json, sys
import trainmem
from trainmem.models import FAMILY_MODULES
families = {f"trainmem.models.{module}" for module, _ in FAMILY_MODULES.values()}
loaded = lambda: sorted(name for name in families if name in sys.modules)
after_import = loaded()
trainmem.estimate({"model": {"preset": "llama-3.1-8b"}, "sequence_length": 512})
after_llama = loaded()
trainmem.estimate({"model": {"preset": "gpt2"}, "sequence_length": 128})
print(json.dumps([after_import, after_llama, loaded()]))
"""


def test_family_modules_are_imported_at_first_use():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "core")}
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, check=True, capture_output=True, text=True).stdout
    after_import, after_llama, after_gpt2 = json.loads(out)
    assert after_import == ["trainmem.models.llama"]  # the custom-architecture layout's family
    assert after_llama == ["trainmem.models.llama"]
    assert after_gpt2 == ["trainmem.models.gpt2", "trainmem.models.llama"]
