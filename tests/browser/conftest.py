"""Fixtures for the browser tests: the built site served on 127.0.0.1, Debian's Chromium
driven by Playwright, and a guard that fails a test on any console error or any request that
leaves 127.0.0.1. Helpers that compare the page's numbers with `trainmem estimate --json` are
in browser_helpers.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from functools import partial
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = Path(os.environ.get("TRAINMEM_SITE", ROOT / "_site"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.browser)


# --------------------------------------------------------------------------- the site


def _ensure_site() -> Path:
    """The site, rebuilt when it is missing or older than the core or the page it is built from."""
    from build_site import is_stale

    if is_stale(SITE):
        subprocess.run([sys.executable, str(ROOT / "build_site.py"), "--out", str(SITE)], check=True)
    return SITE


@pytest.fixture(scope="session")
def site_url() -> str:
    """The built _site/ (built now if missing) served on a free port of 127.0.0.1."""
    sys.path.insert(0, str(ROOT))
    from build_site import SiteHandler

    site = _ensure_site()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SiteHandler, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


# --------------------------------------------------------------------------- the browser


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_FLAGS}


@pytest.fixture(scope="session")
def browser_context_args(browser_context_args: dict) -> dict:
    return {**browser_context_args, "viewport": {"width": 1280, "height": 900}, "service_workers": "block"}


class Guard:
    """Console errors, uncaught exceptions and requests to anywhere but 127.0.0.1."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.external: list[str] = []
        self.requests: list[str] = []

    def watch_context(self, context) -> None:
        context.on("request", self._request)
        context.on("page", self.watch_page)
        for page in context.pages:
            self.watch_page(page)

    def watch_page(self, page) -> None:
        page.on("console", lambda message: message.type == "error" and self.errors.append(message.text))
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        page.on("worker", lambda worker: worker.on("console", lambda m: m.type == "error" and self.errors.append(m.text)))

    def _request(self, request) -> None:
        self.requests.append(request.url)
        parsed = urlparse(request.url)
        if parsed.scheme in ("data", "blob", "about"):
            return
        if parsed.hostname != "127.0.0.1":
            self.external.append(request.url)


@pytest.fixture
def guard(context) -> Guard:
    """Fails the test on a console error or a request that leaves 127.0.0.1."""
    watcher = Guard()
    watcher.watch_context(context)
    # Anything not on 127.0.0.1 is refused before it reaches the network.
    context.route(
        lambda url: urlparse(url).hostname not in ("127.0.0.1", None),
        lambda route: route.abort(),
    )
    yield watcher
    assert watcher.external == [], f"requests left 127.0.0.1: {watcher.external}"
    assert watcher.errors == [], f"console errors: {watcher.errors}"
