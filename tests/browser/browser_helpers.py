"""Helpers of the browser tests: wait for the engine, read the page's numbers, ask the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ENGINE_TIMEOUT_MS = 120_000  # Pyodide on a busy 2-core machine; tests assert no timings

RESULT_TESTIDS = (
    "peak-allocated",
    "peak-total",
    "breakdown-parameters",
    "breakdown-gradients",
    "breakdown-optimizer_states",
    "breakdown-activations",
    "breakdown-overhead",
)
CATEGORIES = ("parameters", "gradients", "optimizer_states", "activations", "overhead")


def wait_engine_ready(page) -> None:
    page.wait_for_selector("html[data-engine=ready]", state="attached", timeout=ENGINE_TIMEOUT_MS)


def setup_json(page) -> dict:
    return json.loads(page.get_by_test_id("setup-json").text_content())


def wait_computed(page) -> dict:
    """Wait until the engine has answered for the setup the form shows now; return that setup."""
    page.wait_for_function(
        """() => {
            const shown = document.querySelector('[data-testid="setup-json"]').textContent;
            const done = document.documentElement.dataset.computedSetup;
            return done !== undefined && JSON.stringify(JSON.parse(shown)) === done;
        }""",
        timeout=ENGINE_TIMEOUT_MS,
    )
    return setup_json(page)


def page_numbers(page) -> dict:
    numbers = {testid: int(page.get_by_test_id(testid).get_attribute("data-bytes")) for testid in RESULT_TESTIDS}
    verdict = page.get_by_test_id("fit-verdict")
    numbers["fit-status"] = verdict.get_attribute("data-status")
    numbers["fit-text"] = verdict.text_content()
    return numbers


def cli_report(setup: dict, tmp_path: Path) -> dict:
    """`trainmem estimate SETUP.json --json`, the command-line tool, for a setup."""
    path = tmp_path / f"setup-{abs(hash(json.dumps(setup, sort_keys=True)))}.json"
    path.write_text(json.dumps(setup))
    done = subprocess.run(
        [sys.executable, "-m", "trainmem", "estimate", str(path), "--json"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert done.returncode == 0, f"trainmem estimate failed for {setup}: {done.stderr}"
    return json.loads(done.stdout)


def expected_numbers(report: dict) -> dict:
    """What the page must show for a report of `trainmem estimate --json`."""
    numbers = {"peak-allocated": report["peak_allocated_bytes"], "peak-total": report["peak_total_bytes"]}
    numbers.update({f"breakdown-{category}": report["breakdown"][category] for category in CATEGORIES})
    numbers["fit-status"] = report["fit"]["status"]
    return numbers


def assert_page_matches_cli(page, tmp_path: Path) -> dict:
    """Every number on the page equals the CLI's for the setup the page shows (setup-json)."""
    setup = setup_json(page)
    report = cli_report(setup, tmp_path)
    shown = page_numbers(page)
    assert report["fit"]["message"] in shown.pop("fit-text")
    assert shown == expected_numbers(report), f"page and CLI disagree for {setup}"
    return report


