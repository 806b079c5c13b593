"""Offline: after one visit the service worker has cached the build; with the server stopped the
page still loads, starts Python and computes. A new build (a new sw.js) replaces the cache."""

from __future__ import annotations

import json
import shutil
import sys
import threading
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from browser_helpers import assert_page_matches_cli, wait_computed, wait_engine_ready
from conftest import SITE, _ensure_site

from build_site import SiteHandler, stamp_service_worker, write_manifest  # noqa: E402


class Server:
    """The site on a fixed port of 127.0.0.1 that a test can stop and start again (same origin)."""

    def __init__(self, directory: Path, port: int = 0):
        self.directory = directory
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), partial(SiteHandler, directory=str(directory)))
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def wait_offline_ready(page) -> None:
    page.wait_for_function("() => document.documentElement.dataset.offline === 'ready'", timeout=120_000)
    page.wait_for_function("() => navigator.serviceWorker.controller !== null", timeout=60_000)


def cache_names(page) -> list[str]:
    return page.evaluate("caches.keys()")


def test_the_calculator_works_with_the_server_stopped(browser, tmp_path):
    _ensure_site()
    server = Server(SITE)
    context = browser.new_context(service_workers="allow")
    page = context.new_page()
    try:
        page.goto(server.url)
        wait_engine_ready(page)
        wait_offline_ready(page)
        version = json.loads((SITE / "manifest.json").read_text())["site_version"]
        assert cache_names(page) == [f"trainmem-{version}"]
    finally:
        server.stop()

    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.reload()
    page.get_by_test_id("peak-total").wait_for()
    wait_engine_ready(page)
    page.get_by_test_id("input-micro_batch_size").fill("2")
    assert wait_computed(page)["micro_batch_size"] == 2
    assert_page_matches_cli(page, tmp_path)
    assert errors == []
    context.close()


def test_a_new_build_replaces_the_cache(browser, tmp_path):
    _ensure_site()
    site = tmp_path / "site"
    shutil.copytree(SITE, site)
    server = Server(site)
    context = browser.new_context(service_workers="allow")
    page = context.new_page()
    try:
        page.goto(server.url)
        wait_engine_ready(page)
        wait_offline_ready(page)
        first = cache_names(page)

        # "A new build": one file changes, so the version in sw.js and the manifest change.
        with (site / "css" / "style.css").open("a") as css:
            css.write("\n/* rebuilt */\n")
        data = {"trainmem_version": json.loads((site / "manifest.json").read_text())["trainmem_version"]}
        write_manifest(site, data)
        version = json.loads((site / "manifest.json").read_text())["site_version"]
        assert [f"trainmem-{version}"] != first
        assert stamp_service_worker(site) == version  # the same files give the same version

        page.evaluate("navigator.serviceWorker.getRegistration().then((r) => r.update())")
        page.wait_for_function(
            "(name) => caches.keys().then((names) => names.length === 1 && names[0] === name)",
            arg=f"trainmem-{version}",
            timeout=120_000,
        )
        page.reload()
        wait_engine_ready(page)
        css = page.evaluate("fetch('css/style.css').then((r) => r.text())")
        assert css.endswith("/* rebuilt */\n")
    finally:
        server.stop()
        context.close()
