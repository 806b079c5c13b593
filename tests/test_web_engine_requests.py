"""The page's engine handle (web/js/engine.js) under Node against a fake worker (tests/js/engine_requests.mjs):
one request in the worker at a time; a request past the limit is cancelled alone and the requests waiting
behind it are answered by the restarted worker, each under the limit in force when it is sent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "js" / "engine_requests.mjs"

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")


def test_the_engine_sends_one_request_at_a_time_and_cancels_only_the_one_past_its_limit():
    done = subprocess.run(["node", str(SCRIPT)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "engine_requests: ok" in done.stdout
