"""The page's schema-driven form (web/js/form.js) under Node with linkedom: a synthetic schema with
a discriminated union, an optional union and optional nested objects (tests/js/form_schema.mjs), and
the real Setup schema, whose defaults must read back unchanged through the form."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "js" / "form_schema.mjs"
LINKEDOM = ROOT / "web" / "node_modules" / "linkedom"

pytestmark = pytest.mark.skipif(
    shutil.which("node") is None or not LINKEDOM.exists(), reason="needs Node.js and web/node_modules (npm ci in web/)"
)


def test_the_form_handles_unions_and_optional_objects_generically(tmp_path):
    sys.path.insert(0, str(ROOT / "web" / "py"))
    import trainmem_web

    from trainmem.setup import Setup

    real = {
        "schema": Setup.model_json_schema(),
        "defaults": Setup.model_validate({"model": {"preset": "gpt2"}}).model_dump(mode="json"),
        "catalogs": trainmem_web.catalogs(),
    }
    path = tmp_path / "setup_schema.json"
    path.write_text(json.dumps(real))
    done = subprocess.run(["node", str(SCRIPT), str(path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "form_schema: ok" in done.stdout
