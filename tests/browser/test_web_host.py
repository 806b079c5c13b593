"""Host RAM per node on the page (Report.host): the results section, and the compare view's row."""

from __future__ import annotations

from urllib.parse import quote

from browser_helpers import cli_report, wait_computed, wait_engine_ready

OFFLOAD = "model.preset=gpt2&parallelism.num_gpus=4&parallelism.zero_stage=3&parallelism.offload_optimizer=true" \
          "&parallelism.host_ram_gib_per_node=1"


def _bytes(page, testid: str) -> int:
    return int(page.get_by_test_id(testid).get_attribute("data-bytes"))


def test_the_host_section_shows_the_core_figures_and_budget(page, guard, site_url, tmp_path):
    page.goto(f"{site_url}#{OFFLOAD}")
    wait_engine_ready(page)
    setup = wait_computed(page)
    assert setup["parallelism"]["offload_optimizer"] is True
    host = cli_report(setup, tmp_path)["host"]
    assert _bytes(page, "host-peak") == host["peak_bytes"]
    assert _bytes(page, "host-steady") == host["steady_bytes"]
    assert _bytes(page, "host-load") == host["load_bytes"]
    verdict = page.get_by_test_id("host-verdict")
    assert verdict.get_attribute("data-status") == ("fits" if host["fits"] else "does_not_fit")
    table = page.get_by_test_id("host-table").text_content()
    assert all(part["name"] in table for part in host["steady_parts"] + host["load_parts"])
    assert any(part["name"].startswith("offloaded ") for part in host["steady_parts"])


def test_the_compare_view_has_the_host_ram_row(page, guard, site_url, tmp_path):
    a_hash = "model.preset=gpt2&parallelism.num_gpus=4&parallelism.zero_stage=3"
    page.goto(f"{site_url}#{OFFLOAD}&_a={quote(a_hash, safe='')}")
    wait_engine_ready(page)
    row = page.get_by_test_id("compare-host")
    row.wait_for(timeout=120_000)
    a = cli_report({"model": {"preset": "gpt2"}, "parallelism": {"num_gpus": 4, "zero_stage": 3}}, tmp_path)["host"]
    cells = row.locator("td").evaluate_all("(cells) => cells.map((td) => Number(td.dataset.bytes))")
    assert cells[0] == a["peak_bytes"] and cells[2] == cells[1] - cells[0]
