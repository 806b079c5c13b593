"""Fixtures for the browser tests: the built site served on 127.0.0.1, Debian's Chromium
driven by Playwright, a guard that fails a test on any console error or any request that
leaves 127.0.0.1, and helpers that compare the page's numbers with `trainmem estimate --json`.
"""

from __future__ import annotations

import json
import os
import shutil
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
ENGINE_TIMEOUT_MS = 120_000  # Pyodide on a busy 2-core machine; tests assert no timings
RESULT_TESTIDS = (
    "peak-allocated",
    "peak-total",
    "breakdown-parameters",
    "breakdown-gradients",
    "breakdown-optimizer_states",
    "breakdown-activations",
    "breakdown-overhead",
)
RESULT_FIELDS = {
    "peak-allocated": lambda r: r["peak_allocated_bytes"],
    "peak-total": lambda r: r["peak_total_bytes"],
    **{f"breakdown-{c}": (lambda c: lambda r: r["breakdown"][c])(c) for c in
       ("parameters", "gradients", "optimizer_states", "activations", "overhead")},
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.browser)


# --------------------------------------------------------------------------- the site


def _ensure_site() -> Path:
    if not (SITE / "manifest.json").exists():
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


# --------------------------------------------------------------------------- helpers


def wait_engine_ready(page) -> None:
    page.wait_for_selector("html[data-engine=ready]", state="attached", timeout=ENGINE_TIMEOUT_MS)


def setup_json(page) -> dict:
    return json.loads(page.get_by_test_id("setup-json").text_content())


def wait_computed(page) -> dict:
    """Wait until the engine has answered for the setup the form shows now; return that setup."""
    page.wait_for_function(
        """() => {
            const shown = document.querySelector('[data-testid="setup-json"]').textContent;
            const done = document.documentElement.dataset.computedSetup;
            return done !== undefined && JSON.stringify(JSON.parse(shown)) === done;
        }""",
        timeout=ENGINE_TIMEOUT_MS,
    )
    return setup_json(page)


def page_numbers(page) -> dict:
    numbers = {testid: int(page.get_by_test_id(testid).get_attribute("data-bytes")) for testid in RESULT_TESTIDS}
    verdict = page.get_by_test_id("fit-verdict")
    numbers["fit-status"] = verdict.get_attribute("data-status")
    numbers["fit-text"] = verdict.text_content()
    return numbers


def cli_report(setup: dict, tmp_path: Path) -> dict:
    """`trainmem estimate SETUP.json --json`, the command-line tool, for a setup."""
    path = tmp_path / f"setup-{abs(hash(json.dumps(setup, sort_keys=True)))}.json"
    path.write_text(json.dumps(setup))
    done = subprocess.run(
        [sys.executable, "-m", "trainmem", "estimate", str(path), "--json"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert done.returncode == 0, f"trainmem estimate failed for {setup}: {done.stderr}"
    return json.loads(done.stdout)


def expected_numbers(report: dict) -> dict:
    numbers = {testid: field(report) for testid, field in RESULT_FIELDS.items()}
    numbers["fit-status"] = report["fit"]["status"]
    return numbers


def assert_page_matches_cli(page, tmp_path: Path) -> dict:
    """Every number on the page equals the CLI's for the setup the page shows (setup-json)."""
    setup = setup_json(page)
    report = cli_report(setup, tmp_path)
    shown = page_numbers(page)
    assert report["fit"]["message"] in shown.pop("fit-text")
    assert shown == expected_numbers(report), f"page and CLI disagree for {setup}"
    return report


@pytest.fixture
def trainmem_cli() -> str:
    return shutil.which("trainmem") or f"{sys.executable} -m trainmem"
