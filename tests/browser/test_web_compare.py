"""Compare mode: pin a setup as A, change the form (B), both shown; the link carries both setups.

Every number of the comparison equals `trainmem compare A.json B.json --json`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from browser_helpers import ENGINE_TIMEOUT_MS, setup_json, wait_computed, wait_engine_ready


def cli_compare(a: dict, b: dict, tmp_path: Path) -> dict:
    paths = []
    for name, setup in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(setup))
        paths.append(str(tmp_path / name))
    done = subprocess.run([sys.executable, "-m", "trainmem", "compare", *paths, "--json"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_compared(page) -> tuple[dict, dict]:
    """Wait until the comparison on screen is of the pinned setup and the form's; return both."""
    page.wait_for_function(
        """() => {
            const shown = JSON.stringify(JSON.parse(document.querySelector('[data-testid="setup-json"]').textContent));
            const pair = document.documentElement.dataset.comparedSetups;
            return pair !== undefined && JSON.stringify(JSON.parse(pair)[1]) === shown;
        }""",
        timeout=ENGINE_TIMEOUT_MS,
    )
    a, b = json.loads(page.evaluate("document.documentElement.dataset.comparedSetups"))
    return a, b


def shown_comparison(page) -> dict:
    section = page.get_by_test_id("compare")
    rows = section.locator("table.compare-table tbody tr").evaluate_all(
        """(rows) => rows.map((row) => [row.dataset.row, ...[...row.querySelectorAll('td')].map((td) => Number(td.dataset.bytes))])"""
    )
    return {
        "peak_a": int(page.get_by_test_id("compare-peak-a").get_attribute("data-bytes")),
        "peak_b": int(page.get_by_test_id("compare-peak-b").get_attribute("data-bytes")),
        "peak_delta": int(page.get_by_test_id("compare-peak-delta").get_attribute("data-bytes")),
        "fit_a": page.get_by_test_id("compare-fit-a").text_content(),
        "fit_b": page.get_by_test_id("compare-fit-b").text_content(),
        "rows": rows,
        "changes": section.locator('[data-testid="compare-changes"] li').evaluate_all("(items) => items.map((li) => li.dataset.path)"),
    }


def expected_comparison(cli: dict) -> dict:
    rows = []
    for category, delta in cli["breakdown"].items():
        rows.append([category, delta["a_bytes"], delta["b_bytes"], delta["delta_bytes"]])
        rows += [[f"{category}/{p['name']}", p["a_bytes"], p["b_bytes"], p["delta_bytes"]]
                 for p in cli["parts"] if p["category"] == category]
    status = {"fits": "Fits", "tight": "Tight", "does_not_fit": "Does not fit"}
    return {
        "peak_a": cli["peak_total"]["a_bytes"],
        "peak_b": cli["peak_total"]["b_bytes"],
        "peak_delta": cli["peak_total"]["delta_bytes"],
        "fit_a": status[cli["a_fit"]["status"]],
        "fit_b": status[cli["b_fit"]["status"]],
        "rows": rows,
        "changes": [change["path"] for change in cli["setup_changes"]],
    }


def test_pin_change_and_both_are_shown_like_the_cli(page, guard, context, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    assert page.get_by_test_id("compare").is_hidden()
    page.get_by_test_id("compare-pin").click()
    a_setup, b_setup = wait_compared(page)
    assert a_setup == b_setup == setup_json(page)
    assert page.get_by_test_id("compare-peak-delta").get_attribute("data-bytes") == "0"

    page.get_by_test_id("input-parallelism.zero_stage").select_option("3")
    wait_computed(page)
    a_setup, b_setup = wait_compared(page)
    assert b_setup["parallelism"]["zero_stage"] == 3 and a_setup != b_setup
    shown = shown_comparison(page)
    assert shown == expected_comparison(cli_compare(a_setup, b_setup, tmp_path))
    assert "parallelism.zero_stage" in shown["changes"]  # and the defaults it implies (zero_overlap_comm)
    assert shown["peak_delta"] < 0  # ZeRO-3 shards the weights
    for chart in ("compare-categories", "compare-timeline"):
        canvas = page.locator(f'canvas[data-chart="{chart}"]')
        assert canvas.is_visible() and "A" in canvas.get_attribute("aria-label")

    # The link carries both setups: a fresh page shows the same comparison.
    page.get_by_test_id("share-link").click()
    link = page.get_by_test_id("share-output").input_value()
    assert "_a=" in link
    fresh = context.new_page()
    fresh.goto(link)
    wait_engine_ready(fresh)
    assert wait_compared(fresh) == (a_setup, b_setup)
    assert shown_comparison(fresh) == shown

    # Stop comparing: the section goes, and so does A from the address.
    fresh.get_by_test_id("compare-unpin").click()
    assert fresh.get_by_test_id("compare").is_hidden()
    assert "_a=" not in fresh.evaluate("location.hash")


def test_a_link_with_a_pinned_setup_other_than_the_default(page, guard, site_url, tmp_path):
    """A is computed by the engine when it is neither the default nor the setup on screen."""
    from urllib.parse import quote

    a_hash = "model.preset=gpt2&finetuning.method=lora"
    page.goto(f"{site_url}#model.preset=gpt2&_a={quote(a_hash, safe='')}")
    wait_engine_ready(page)
    a_setup, b_setup = wait_compared(page)
    assert a_setup == {"model": {"preset": "gpt2"}, "finetuning": {"method": "lora"}}
    assert b_setup == {"model": {"preset": "gpt2"}}
    assert shown_comparison(page) == expected_comparison(cli_compare(a_setup, b_setup, tmp_path))
