"""Repeat visits (issue 14): on a first visit the worker copies Python's memory with trainmem imported, after
the engine's first answer while the page is idle, and keeps it in this build's cache (web/js/snapshot.js); a
later visit restores it instead of starting Python and importing trainmem, and computes the same numbers; a
snapshot that does not restore is replaced by a normal boot (and a new snapshot)."""

from __future__ import annotations

import json

import pytest
from browser_helpers import ENGINE_TIMEOUT_MS, assert_page_matches_cli, wait_computed, wait_engine_ready
from conftest import SITE

SNAPSHOT_URL = "() => new URL(JSON.parse(document.getElementById('engine-config').textContent).python.snapshot.url, document.baseURI).href"


def marks(page) -> dict[str, float]:
    """The page's trainmem marks (the worker's are `trainmem:worker-<stage>`): name -> start time (ms)."""
    return dict(page.evaluate(
        "() => performance.getEntriesByType('mark').filter((m) => m.name.startsWith('trainmem:')).map((m) => [m.name, m.startTime])"))


def wait_snapshot_stored(page) -> int:
    """Wait until the worker says it stored its snapshot; its size in Cache Storage in bytes."""
    page.wait_for_function(
        "() => performance.getEntriesByType('mark').some((m) => m.name === 'trainmem:worker-snapshot-stored')",
        timeout=ENGINE_TIMEOUT_MS)
    return page.evaluate(f"async () => {{ const r = await caches.match(({SNAPSHOT_URL})()); return r ? (await r.arrayBuffer()).byteLength : 0; }}")


def change_and_check(page, tmp_path) -> None:
    page.get_by_test_id("input-micro_batch_size").fill("3")
    assert wait_computed(page)["micro_batch_size"] == 3
    assert_page_matches_cli(page, tmp_path)


def assert_restored(page) -> None:
    seen = marks(page)
    assert {"trainmem:worker-snapshot-restored", "trainmem:worker-snapshot-checked"} <= seen.keys()
    assert "trainmem:worker-snapshot-failed" not in seen and "trainmem:worker-snapshot-made" not in seen


def test_a_repeat_visit_restores_the_imported_snapshot_and_computes_the_same(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    size = wait_snapshot_stored(page)
    assert size > 32 * 2**20  # WebAssembly memory with trainmem imported (about 38 MB)
    seen = marks(page)
    # Made after the engine's first answer was on screen, so that it delayed nothing.
    assert seen["trainmem:worker-snapshot-made"] > seen["trainmem:first-answer"]
    assert seen["trainmem:worker-snapshot-stored"] >= seen["trainmem:worker-snapshot-made"]
    version = json.loads((SITE / "manifest.json").read_text())["site_version"]
    assert page.evaluate("caches.keys()") == [f"trainmem-{version}"]  # the service worker's cache of this build
    head = page.evaluate(
        f"""async () => {{
            const bytes = new Uint8Array(await (await caches.match(({SNAPSHOT_URL})())).arrayBuffer());
            const length = new DataView(bytes.buffer).getUint32(0, true);
            return JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + length)));
        }}""")
    [library] = head["libraries"]  # pydantic-core's, with where it was loaded and its dlopen handle
    assert library["path"].endswith(".so") and library["handles"] and library["heap_start"] > library["heap_base"] > 0

    page.reload()
    wait_engine_ready(page)
    assert_restored(page)
    change_and_check(page, tmp_path)
    page.wait_for_timeout(1500)  # past the worker's idle delay: a restored visit makes no new snapshot
    assert "trainmem:worker-snapshot-made" not in marks(page)


# Each rewrites the kept file in the page: bytes -> bytes (the manifest's head: u32 length, JSON padded to 16).
REWRITE_MANIFEST = """(bytes, change) => {
    const length = new DataView(bytes.buffer).getUint32(0, true);
    const manifest = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + length)));
    change(manifest);
    let json = JSON.stringify(manifest);
    json += ' '.repeat((16 - ((4 + json.length) % 16)) % 16);
    const head = new Uint8Array(4 + json.length);
    new DataView(head.buffer).setUint32(0, json.length, true);
    new TextEncoder().encodeInto(json, head.subarray(4));
    const out = new Uint8Array(head.length + bytes.length - 4 - length);
    out.set(head);
    out.set(bytes.subarray(4 + length), head.length);
    return out;
}"""
CORRUPTIONS = {
    # The manifest's head: the file is not one the worker wrote.
    "head": "(bytes) => { bytes.fill(0, 0, 64); return bytes; }",
    # Pyodide's header (magic number, build id): it throws before touching memory.
    "pyodide_header": "(bytes) => { const at = 4 + new DataView(bytes.buffer).getUint32(0, true); bytes.fill(0, at, at + 64); return bytes; }",
    # A consistent length but only the first megabyte of memory: Python's state is not there.
    "truncated": "(bytes) => bytes.slice(0, 1 << 20)",
    # The library did not land where the manifest says (a table slot, a memory base).
    "table_base": f"(bytes) => ({REWRITE_MANIFEST})(bytes, (m) => {{ m.libraries[0].table_base += 1; }})",
    "heap_base": f"(bytes) => ({REWRITE_MANIFEST})(bytes, (m) => {{ m.libraries[0].heap_base += 16; }})",
    # Another format (the earlier "Python started" snapshot's, say).
    "format": f"(bytes) => ({REWRITE_MANIFEST})(bytes, (m) => {{ m.format = 'trainmem-python-started'; }})",
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_a_snapshot_that_does_not_restore_falls_back_to_a_normal_boot(page, guard, site_url, tmp_path, corruption):
    page.goto(site_url)
    wait_engine_ready(page)
    wait_snapshot_stored(page)
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
    assert "trainmem:worker-snapshot-failed" in marks(page)
    change_and_check(page, tmp_path)
    # The bad snapshot was replaced by a good one: the next visit restores it.
    assert wait_snapshot_stored(page) > 32 * 2**20
    page.reload()
    wait_engine_ready(page)
    assert_restored(page)
    change_and_check(page, tmp_path)
