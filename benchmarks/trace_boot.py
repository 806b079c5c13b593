#!/usr/bin/env python3
"""Where a cold start of the web calculator goes, from a Chrome trace (a benchmark, not a test).

    python benchmarks/trace_boot.py [--site _site] [--out /tmp/boot-trace.json]

Serves the built site on 127.0.0.1 (as benchmarks/bench_site.py does), loads it once in a fresh
Chromium profile with tracing on (Playwright's `browser.start_tracing`), and prints, in seconds from
navigation: each request's start and end (the resource timings the trace records for the page and
its worker), the V8 WebAssembly compile events (Liftoff baseline and TurboFan tier-up, with the
thread each ran on), the worker's own stage marks (web/js/worker.js `trainmem:worker-*`, sent to the
page with its timestamps), and the busiest long tasks of each thread. The raw trace is written to
--out for chrome://tracing or Perfetto.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from collections import defaultdict
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_site import CHROMIUM, FLAGS, warm_compressed_files  # noqa: E402
from build_site import SiteHandler  # noqa: E402

CATEGORIES = [
    "devtools.timeline", "disabled-by-default-devtools.timeline", "v8", "v8.wasm", "v8.execute",
    "blink.user_timing", "loading", "netlog", "blink.resource",
    "toplevel",
]
DETAILED = ["disabled-by-default-v8.wasm.detailed"]  # every lazy compile: slows the load several times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--site", type=Path, default=ROOT / "_site")
    parser.add_argument("--detailed", action="store_true", help="trace each WebAssembly function's lazy compile too")
    parser.add_argument("--out", type=Path, default=Path("/tmp/boot-trace.json"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SiteHandler, directory=str(args.site.resolve())))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    warm_compressed_files(url, args.site.resolve())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context(service_workers="block")
        page = context.new_page()
        page.goto("about:blank")
        browser.start_tracing(page=page, path=str(args.out), categories=CATEGORIES + (DETAILED if args.detailed else []))
        page.goto(url)
        page.wait_for_function("() => performance.getEntriesByName('trainmem:interactive').length > 0", timeout=180_000)
        marks = page.evaluate("() => performance.getEntriesByType('mark').map((m) => [m.name, m.startTime / 1000])")
        resources = page.evaluate("""() => performance.getEntriesByType('resource').map((r) =>
            [r.name.split('/').slice(-2).join('/'), r.startTime / 1000, r.responseStart / 1000, r.responseEnd / 1000, r.initiatorType])""")
        browser.stop_tracing()
        context.close()
        browser.close()
    server.shutdown()
    report(json.loads(args.out.read_text()), marks, resources)


def report(trace: dict, marks: list, resources: list) -> None:
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    # The page's time origin: a user-timing mark's trace timestamp less its startTime.
    mark_ts = {e["name"]: e["ts"] for e in events if e.get("name", "").startswith("trainmem:")}
    anchor = next(name for name, _ in marks if name in mark_ts)
    nav = mark_ts[anchor] - 1e6 * dict(marks)[anchor]
    print("page marks (s from navigation):")
    for name, t in sorted(marks, key=lambda m: m[1]):
        print(f"  {t:7.3f}  {name}")
    print("resources of the page (start, first byte, end; s) [the worker's are in the trace below]:")
    for name, start, first, end, kind in sorted(resources, key=lambda r: r[1]):
        print(f"  {start:7.3f} {first:7.3f} {end:7.3f}  {kind:<10} {name}")
    sends = {}
    for e in events:
        if e.get("name") == "ResourceSendRequest":
            data = e.get("args", {}).get("data", {})
            sends[data.get("requestId")] = (e["ts"], data.get("url", ""))
    finishes = {}
    for e in events:
        if e.get("name") == "ResourceFinish":
            data = e.get("args", {}).get("data", {})
            finishes[data.get("requestId")] = e["ts"]
    print("requests in the trace (sent, finished; s from navigation):")
    for rid, (ts, url) in sorted(sends.items(), key=lambda kv: kv[1][0]):
        if not url.startswith("http://127.0.0.1"):
            continue  # the browser's own pages (headless Chromium loads its omnibox's WebUI meanwhile)
        end = finishes.get(rid)
        print(f"  {(ts - nav) / 1e6:7.3f} {((end - nav) / 1e6) if end else float('nan'):7.3f}  {url.split('/', 3)[-1][:70]}")
    print("WebAssembly and script compile events (s from navigation, ms, thread):")
    by_name = defaultdict(list)
    for e in events:
        name = e.get("name", "")
        if e.get("ph") in ("X", "B") and ("wasm" in name.lower() or "Wasm" in name or name in ("v8.compile", "V8.CompileCode", "v8.compileModule", "EvaluateScript", "v8.evaluateModule")):
            by_name[(name, names.get((e["pid"], e["tid"]), str(e["tid"])))].append(e)
    for (name, thread), items in sorted(by_name.items(), key=lambda kv: kv[1][0]["ts"]):
        total = sum(e.get("dur", 0) for e in items) / 1000
        first = (items[0]["ts"] - nav) / 1e6
        last = (max(e["ts"] + e.get("dur", 0) for e in items) - nav) / 1e6
        print(f"  {first:7.3f}-{last:7.3f} {total:8.1f} ms x{len(items):<5} {thread[:28]:<28} {name}")
    print("busy time per thread between navigation and interactive (ms of top-level tasks):")
    end = nav + 1e6 * max(t for _, t in marks)
    busy = defaultdict(float)
    for e in events:
        if e.get("ph") == "X" and e.get("name") in ("ThreadControllerImpl::RunTask", "RunTask") and nav <= e["ts"] <= end:
            busy[names.get((e["pid"], e["tid"]), str(e["tid"]))] += e.get("dur", 0) / 1000
    for thread, ms in sorted(busy.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {ms:8.1f}  {thread}")


if __name__ == "__main__":
    main()
