"""Repeat visits (issue 14): the worker copies Python's memory right after loadPyodide on a first visit
and keeps it in this build's cache (web/js/snapshot.js); a later visit restores it instead of starting
Python again and computes the same numbers; a snapshot that does not restore is replaced by a normal
boot (and a new snapshot)."""

from __future__ import annotations

import json
import time

import pytest
from browser_helpers import assert_page_matches_cli, wait_computed, wait_engine_ready
from conftest import SITE

SNAPSHOT_URL = "() => new URL(JSON.parse(document.getElementById('engine-config').textContent).python.snapshot.url, document.baseURI).href"


def worker_marks(page) -> set[str]:
    return set(page.evaluate(
        "() => performance.getEntriesByType('mark').map((m) => m.name).filter((n) => n.startsWith('trainmem:worker-'))"))


def wait_snapshot_kept(page, timeout_s: float = 120) -> int:
    """Wait until the snapshot is in Cache Storage (and not the 1 MB a test put there); its size in bytes."""
    size = f"async () => {{ const r = await caches.match(({SNAPSHOT_URL})()); return r ? (await r.arrayBuffer()).byteLength : 0; }}"
    deadline = time.monotonic() + timeout_s
    while (kept := page.evaluate(size)) <= 16 * 2**20 and time.monotonic() < deadline:
        page.wait_for_timeout(250)
    return kept


def change_and_check(page, tmp_path) -> None:
    page.get_by_test_id("input-micro_batch_size").fill("3")
    assert wait_computed(page)["micro_batch_size"] == 3
    assert_page_matches_cli(page, tmp_path)


def test_a_repeat_visit_restores_the_snapshot_and_computes_the_same(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    assert "trainmem:worker-snapshot-made" in worker_marks(page)
    size = wait_snapshot_kept(page)
    assert size > 16 * 2**20  # WebAssembly memory after loadPyodide (about 31 MB)
    version = json.loads((SITE / "manifest.json").read_text())["site_version"]
    assert page.evaluate("caches.keys()") == [f"trainmem-{version}"]  # the service worker's cache of this build

    page.reload()
    wait_engine_ready(page)
    marks = worker_marks(page)
    assert "trainmem:worker-snapshot-restored" in marks
    assert "trainmem:worker-snapshot-failed" not in marks and "trainmem:worker-snapshot-made" not in marks
    change_and_check(page, tmp_path)


CORRUPTIONS = {
    # Pyodide's header is checked (magic number, build id): it throws before touching memory.
    "header": "(bytes) => { bytes.fill(0, 0, 64); return bytes; }",
    # A consistent length but only the first megabyte of memory: Python's state is not there.
    "truncated": "(bytes) => bytes.slice(0, 1 << 20)",
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_snapshot_that_does_not_restore_falls_back_to_a_normal_boot(page, guard, site_url, tmp_path, corruption):
    page.goto(site_url)
    wait_engine_ready(page)
    wait_snapshot_kept(page)
    page.evaluate(
        f"""async () => {{
            const url = ({SNAPSHOT_URL})();
            const name = (await caches.keys()).find((n) => n.startsWith('trainmem-'));
            const cache = await caches.open(name);
            const corrupt = ({CORRUPTIONS[corruption]})(new Uint8Array(await (await cache.match(url)).arrayBuffer()));
            const headers = {{ 'X-Snapshot-Bytes': String(corrupt.byteLength) }};
            await cache.put(url, new Response(corrupt, {{ headers }}));
        }}"""
    )
    page.reload()
    wait_engine_ready(page)
    marks = worker_marks(page)
    assert {"trainmem:worker-snapshot-failed", "trainmem:worker-snapshot-made"} <= marks
    change_and_check(page, tmp_path)
    # The bad snapshot was replaced by a good one: the next visit restores it.
    assert wait_snapshot_kept(page) > 16 * 2**20
    page.reload()
    wait_engine_ready(page)
    assert "trainmem:worker-snapshot-restored" in worker_marks(page)
    change_and_check(page, tmp_path)
