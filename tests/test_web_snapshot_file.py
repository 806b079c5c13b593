"""The repeat-visit snapshot's file (web/js/snapshot.js) under Node (tests/js/snapshot_file.mjs): the manifest
and Pyodide's snapshot round-trip with the alignment Pyodide needs, a damaged head is refused (the worker then
boots as on a first visit), and a library loaded anywhere but where the manifest says is named."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "js" / "snapshot_file.mjs"

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")


def test_the_snapshot_file_round_trips_and_refuses_damage():
    done = subprocess.run(["node", str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "snapshot_file: ok" in done.stdout
