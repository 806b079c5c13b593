"""The fuzz of benchmarks/fuzz_setups.py at its small default size: no crash, no hang.

The full run (``python benchmarks/fuzz_setups.py --full``, 100,000 cases) gives the README's
figures; this test keeps every `make test` honest on a few hundred of the same cases. No timing
threshold here: a case counts as hung only when it is interrupted after a minute.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "fuzz_setups.py"


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_setups", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_generated_setups_never_crash_or_hang():
    fuzz = _fuzz_module()
    figures = fuzz.fuzz(
        fuzz.DEFAULT_CASES, seed=0, bound_seconds=float("inf"), interrupt_seconds=60.0, suggestions_every=20
    )
    result = fuzz.summary(figures)
    assert result["failures"] == [] and result["crashes"] == 0 and result["hangs"] == 0
    for shell in ("api", "bridge"):
        valid, hostile = result["outcomes"][shell]["valid"], result["outcomes"][shell]["hostile"]
        assert valid["report"] > valid["rejected"]  # the valid-looking half mostly simulates
        assert hostile["rejected"] > hostile["report"]  # the hostile half is mostly refused
