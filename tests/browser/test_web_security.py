"""Untrusted input (a crafted URL hash, config.json or embed snapshot) never becomes markup."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from urllib.parse import quote

from browser_helpers import wait_computed, wait_engine_ready

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'


def _assert_not_injected(page) -> None:
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img[src=x]").count() == 0
    assert page.locator("body script:not([type])").count() == 0


def test_csp_allows_only_the_own_origin(page, guard, site_url):
    page.goto(site_url)
    csp = page.locator('meta[http-equiv="Content-Security-Policy"]').get_attribute("content")
    directives = dict(part.strip().split(" ", 1) for part in csp.split(";"))
    assert directives["default-src"] == "'self'"
    # Besides the own origin, only the page's one inline script, by its hash (web/js/early.js).
    early = (ROOT / "web" / "js" / "early.js").read_text(encoding="utf-8")
    early_hash = "'sha256-" + base64.b64encode(hashlib.sha256(early.encode()).digest()).decode() + "'"
    assert directives["script-src"] == f"'self' 'wasm-unsafe-eval' {early_hash}"
    assert page.evaluate("() => [...document.scripts].filter((s) => !s.src && !s.type).map((s) => s.textContent)") == [early]
    assert "unsafe-inline" not in csp and "http" not in csp
    # An injected inline script would not run even if markup got in.
    page.evaluate("""() => { const s = document.createElement('script'); s.textContent = 'window.__inline = 1';
                              document.body.append(s); }""")
    assert page.evaluate("window.__inline") is None
    page.wait_for_timeout(200)
    guard.errors.clear()  # the CSP violation report of that probe is expected


def test_crafted_hash_is_text_not_markup(page, guard, site_url):
    hash_ = "&".join([
        f"model.preset={quote(PAYLOAD)}",
        f"precision={quote(PAYLOAD)}",
        f"gpu={quote(PAYLOAD)}",
        "__proto__.polluted=1",
        "constructor.prototype.polluted=1",
    ])
    page.goto(f"{site_url}#{hash_}")
    wait_engine_ready(page)
    wait_computed(page)
    _assert_not_injected(page)
    assert page.evaluate("({}).polluted") is None
    errors = page.locator(".error:not([hidden]), [data-testid=form-error]:not([hidden])").all_text_contents()
    assert any("unknown preset" in text and "<img" in text for text in errors), errors


def test_crafted_config_json_is_text_not_markup(page, guard, site_url):
    config = {"model_type": PAYLOAD, "hidden_size": 64, "vocab_size": 100, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 128, "_name_or_path": PAYLOAD}
    page.goto(f"{site_url}#model.hf_config={quote(json.dumps(config))}")
    wait_engine_ready(page)
    wait_computed(page)
    _assert_not_injected(page)
    assert json.loads(page.get_by_test_id("setup-json").text_content())["model"]["hf_config"] == config


def test_crafted_embed_snapshot_is_text_not_markup(page, guard, site_url):
    summary = {
        "v": "0", "peak_total_bytes": 1, "peak_allocated_bytes": 1, "num_parameters": 1,
        "num_trainable_parameters": 1,
        "breakdown": {c: 0 for c in ("parameters", "gradients", "optimizer_states", "activations", "overhead")},
        "fit": {"status": "fits", "message": PAYLOAD, "gpu_display_name": PAYLOAD, "capacity_bytes": 2,
                "usable_bytes": 2, "headroom_fraction": 0.1},
    }
    snapshot = base64.urlsafe_b64encode(json.dumps(summary).encode()).decode().rstrip("=")
    page.goto(f"{site_url}embed.html#model.preset=gpt2&_r={snapshot}")
    page.get_by_test_id("fit-verdict").wait_for()
    _assert_not_injected(page)
    assert PAYLOAD in page.get_by_test_id("fit-verdict").text_content()

    bad = base64.urlsafe_b64encode(b'{"peak_total_bytes": "<b>1</b>"}').decode()
    page.goto(f"{site_url}embed.html#model.preset=gpt2&_r={bad}")
    page.reload()
    page.get_by_role("button", name="Compute in the browser").wait_for()
    _assert_not_injected(page)
