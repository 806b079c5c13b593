"""Issue 14's recompute: the page shows a fast answer first (the allocator's reserve scaled from the
last replay: the replay is most of an estimate's time), then the replayed numbers, which are the CLI's."""

from __future__ import annotations

from browser_helpers import assert_page_matches_cli, wait_computed, wait_engine_ready

# Change the micro-batch and catch the page at its fast answer (html[data-fast-setup] is written
# right after it is on screen): what the results show then.
FAST_ANSWER = """(value) => new Promise((resolve) => {
  const root = document.documentElement;
  const observer = new MutationObserver(() => {
    observer.disconnect();
    const results = document.getElementById("results");
    resolve({
      setup: JSON.parse(root.dataset.fastSetup),
      cuda: results.dataset.cuda,
      allocated: Number(results.querySelector('[data-testid="peak-allocated"]').dataset.bytes),
    });
  });
  observer.observe(root, { attributes: true, attributeFilter: ["data-fast-setup"] });
  const input = document.querySelector('[data-testid="input-micro_batch_size"]');
  input.value = String(value);
  input.dispatchEvent(new Event("input", { bubbles: true }));
})"""


def test_the_fast_answer_comes_first_and_the_replay_completes_it(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    wait_computed(page)
    fast = page.evaluate(FAST_ANSWER, 3)
    assert fast["setup"]["micro_batch_size"] == 3
    assert fast["cuda"] == "pending"
    assert wait_computed(page)["micro_batch_size"] == 3
    assert page.locator("#results").get_attribute("data-cuda") == "replayed"
    report = assert_page_matches_cli(page, tmp_path)
    assert fast["allocated"] == report["peak_allocated_bytes"]  # only the reserve was scaled
