"""The embed view (embed.html#<setup>): renders from its URL, loads Pyodide only on interaction."""

from __future__ import annotations

import json
import re

from browser_helpers import (
    assert_page_matches_cli,
    cli_report,
    expected_numbers,
    page_numbers,
    wait_computed,
    wait_engine_ready,
)


def _embed_url_from_main_page(page) -> str:
    page.get_by_test_id("share-embed").click()
    snippet = page.get_by_test_id("share-output").input_value()
    match = re.search(r'<iframe src="([^"]+)"', snippet)
    assert match, snippet
    assert 'title="trainmem: ' in snippet and 'loading="lazy"' in snippet
    return match.group(1).replace("&amp;", "&")


def _python_requests(guard) -> list[str]:
    return [url for url in guard.requests if re.search(r"pyodide|wheels/|worker\.js", url)]


def test_embed_renders_from_its_url_without_python(page, guard, context, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("input-model.preset").select_option("qwen2.5-7b")
    wait_computed(page)
    page.get_by_test_id("input-micro_batch_size").fill("3")
    setup = wait_computed(page)
    url = _embed_url_from_main_page(page)
    assert url.startswith(f"{site_url}embed.html#")

    guard.requests.clear()
    embed = context.new_page()
    embed.set_viewport_size({"width": 640, "height": 440})
    embed.goto(url)
    embed.get_by_test_id("peak-total").wait_for()
    shown = page_numbers(embed)
    assert setup["model"]["preset"] == "qwen2.5-7b"
    expected = expected_numbers(cli_report(setup, tmp_path))
    assert {k: v for k, v in shown.items() if k != "fit-text"} == expected
    embed.wait_for_timeout(500)
    assert embed.evaluate("document.documentElement.dataset.engine") == "idle"
    assert _python_requests(guard) == [], "the embed must not load Pyodide before the reader interacts"

    # Interaction: Pyodide loads, recomputes, and every number comes from the engine.
    embed.get_by_test_id("input-micro_batch_size").fill("1")
    wait_engine_ready(embed)
    embed.wait_for_function("document.documentElement.dataset.computedSetup !== undefined")
    computed = json.loads(embed.evaluate("document.documentElement.dataset.computedSetup"))
    assert computed.get("micro_batch_size", 1) == 1 and computed["model"] == {"preset": "qwen2.5-7b"}
    report = cli_report(computed, tmp_path)
    assert {k: v for k, v in page_numbers(embed).items() if k != "fit-text"} == expected_numbers(report)
    assert _python_requests(guard) != []


def test_embed_of_the_default_setup_is_prerendered(page, guard, site_url, tmp_path):
    page.goto(f"{site_url}embed.html")
    page.get_by_test_id("peak-total").wait_for()
    assert page.evaluate("document.documentElement.dataset.engine") == "idle"
    link = page.locator("#open-full").get_attribute("href")
    assert link.startswith("index.html#model.preset=")


def test_embed_without_a_result_computes_on_click(page, guard, site_url, tmp_path):
    page.goto(f"{site_url}embed.html#model.preset=gpt2&micro_batch_size=8&gpu=l4")
    button = page.get_by_role("button", name="Compute in the browser")
    button.wait_for()
    assert page.evaluate("document.documentElement.dataset.engine") == "idle"
    button.click()
    wait_engine_ready(page)
    page.get_by_test_id("peak-total").wait_for()
    report = cli_report({"model": {"preset": "gpt2"}, "micro_batch_size": 8, "gpu": "l4"}, tmp_path)
    assert {k: v for k, v in page_numbers(page).items() if k != "fit-text"} == expected_numbers(report)


def test_main_page_opens_from_an_embed_link(page, guard, site_url, tmp_path):
    page.goto(f"{site_url}index.html#model.preset=gpt2-medium&micro_batch_size=6")
    wait_engine_ready(page)
    wait_computed(page)
    assert_page_matches_cli(page, tmp_path)
