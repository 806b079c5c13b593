"""The charts follow the numbers: drawn in the animation frame after them, redrawn only when what they
show changed, and after a burst of changes they show the last report (web/js/main.js scheduleCharts,
charts.js upsert)."""

from __future__ import annotations

from browser_helpers import CATEGORIES, cli_report, wait_computed, wait_engine_ready

GIB = 2**30

# What the two charts of the results hold, read from Chart.js once the next frames have run.
CHART_DATA = """() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(() => {
  const chart = (name) => window.Chart.getChart(document.querySelector(`#results canvas[data-chart="${name}"]`));
  const capacity = chart("capacity");
  const timeline = chart("timeline");
  resolve({
    capacity: capacity.data.datasets.map((set) => set.data[0]),
    timeline_points: timeline.data.labels.length,
    timeline_first: timeline.data.datasets.map((set) => set.data[0]),
  });
})))"""


def _change(page, value: int) -> None:
    page.evaluate(
        """(value) => {
            const input = document.querySelector('[data-testid="input-micro_batch_size"]');
            input.value = String(value);
            input.dispatchEvent(new Event("input", { bubbles: true }));
        }""",
        value,
    )


def test_after_a_burst_of_changes_the_charts_show_the_last_report(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    wait_computed(page)
    for value in (2, 3, 5):  # faster than the engine answers: earlier answers are superseded
        _change(page, value)
    setup = wait_computed(page)
    assert setup["micro_batch_size"] == 5
    report = cli_report(setup, tmp_path)
    charts = page.evaluate(CHART_DATA)
    breakdown = [report["breakdown"][category] / GIB for category in CATEGORIES]
    assert charts["capacity"] == breakdown
    timeline = report["ranks"][report["heaviest_rank"]]["timeline"]
    assert charts["timeline_points"] == len(timeline["labels"])
    assert charts["timeline_first"] == [timeline[category][0] / GIB for category in CATEGORIES]
