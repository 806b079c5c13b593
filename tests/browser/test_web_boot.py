"""The start-up (issue 14): the head's inline script starts Python's worker, the page's engine takes
that worker over, the worker's stage marks reach the page, and Pyodide's big files are requested once
(loadPyodide's own requests take the worker's early fetches)."""

from __future__ import annotations

from collections import Counter

from browser_helpers import wait_engine_ready

BIG_FILES = ("pyodide/pyodide.asm.wasm", "pyodide/python_stdlib.zip", "pyodide/pyodide.asm.mjs", "pyodide/pyodide.mjs",
             "python/site-packages.zip")


def test_the_early_worker_is_taken_over_and_fetches_each_file_once(page, guard, site_url):
    page.goto(site_url)
    wait_engine_ready(page)
    marks = page.evaluate("() => Object.fromEntries(performance.getEntriesByType('mark').map((m) => [m.name, m.startTime]))")
    # The worker's own clock of its stages reaches the page (which of the worker and main.js starts
    # first is the scheduler's business, so it is measured by benchmarks/bench_site.py, not asserted).
    assert marks["trainmem:worker-start"] <= marks["trainmem:worker-loader"] <= marks["trainmem:worker-imported"]
    stages = ["boot", "runtime-script", "wasm-instantiated", "runtime-initialized", "python-main", "loadpyodide", "files"]
    times = [marks[f"trainmem:worker-{stage}"] for stage in stages]
    assert times == sorted(times)
    # One worker, the early one: no second boot, and the hand-over is done.
    assert page.evaluate("() => 'trainmemEarlyWorker' in window") is False
    assert len(page.workers) == 1
    served = Counter(url.removeprefix(site_url) for url in guard.requests)
    assert {name: served[name] for name in BIG_FILES} == dict.fromkeys(BIG_FILES, 1)
    assert served["js/worker.js"] == 1
