"""Issue 14's prefetch: while the reader is idle the page computes the setups one control step away
(web/js/prefetch.js), and a change to one of them is answered from the worker's kept answers, without
a fast answer first; the numbers are the CLI's either way."""

from __future__ import annotations

from browser_helpers import assert_page_matches_cli, wait_computed, wait_engine_ready

IDLE = """() => document.documentElement.dataset.prefetchRemaining === "0" """


def change_micro_batch(page, value: int) -> None:
    page.get_by_test_id("input-micro_batch_size").fill(str(value))


def test_a_prefetched_change_is_answered_from_the_kept_answer(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    wait_computed(page)
    page.wait_for_function(IDLE, timeout=120_000)
    before = page.evaluate("() => document.documentElement.dataset.lastFastMs ?? null")
    change_micro_batch(page, 2)  # the default's micro-batch + 1: prefetched
    assert wait_computed(page)["micro_batch_size"] == 2
    root = page.locator("html")
    assert root.get_attribute("data-last-prefetched") == "true"
    assert page.evaluate("() => document.documentElement.dataset.lastFastMs ?? null") == before  # no fast answer
    assert page.locator("#results").get_attribute("data-cuda") == "replayed"
    assert_page_matches_cli(page, tmp_path)
    page.wait_for_function(IDLE, timeout=120_000)
    change_micro_batch(page, 6)  # no neighbour of 2: computed as before
    assert wait_computed(page)["micro_batch_size"] == 6
    assert root.get_attribute("data-last-prefetched") == "false"
    assert_page_matches_cli(page, tmp_path)
