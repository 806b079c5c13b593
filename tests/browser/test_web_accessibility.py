"""Accessibility: an axe-core audit (the npm package, injected from web/node_modules) of both
pages in the light and the dark scheme finds no violation; the charts have text equivalents;
the page is usable from the keyboard."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_helpers import wait_computed, wait_engine_ready

AXE = Path(__file__).resolve().parents[2] / "web" / "node_modules" / "axe-core" / "axe.min.js"
# WCAG 2.0/2.1/2.2 A and AA, and axe's best practices.
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]


def audit(page) -> list[str]:
    """Every violation as one line: rule, impact, and the first elements it names."""
    if not AXE.exists():
        pytest.skip("no web/node_modules/axe-core (cd web && npm ci)")
    # Audit the settled page: while a compute runs the results (.stale) and the suggestions (.pending) are dimmed on purpose, which
    # axe would report as low contrast.
    page.wait_for_function("() => !document.querySelector('.stale, .pending')", timeout=180_000)
    page.evaluate(AXE.read_text(encoding="utf-8"))  # evaluated by the test, so the page's CSP does not apply
    result = page.evaluate("(tags) => axe.run(document, { runOnly: { type: 'tag', values: tags } })", TAGS)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} — " + "; ".join(" ".join(n["target"]) + " " + n.get("html", "")[:160] for n in v["nodes"][:4])
        for v in result["violations"]
    ]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_calculator_has_no_axe_violations(browser, site_url, scheme):
    context = browser.new_context(color_scheme=scheme, viewport={"width": 1280, "height": 900}, service_workers="block")
    page = context.new_page()
    page.goto(site_url)
    wait_engine_ready(page)
    assert audit(page) == []
    # Compare mode, with a difference, and the share output open.
    page.get_by_test_id("compare-pin").click()
    page.get_by_test_id("input-parallelism.zero_stage").select_option("3")
    wait_computed(page)
    page.get_by_test_id("compare").locator("table").wait_for()
    page.get_by_test_id("share-command").click()
    assert audit(page) == []
    context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_phone_layout_has_no_axe_violations(browser, site_url, scheme):
    context = browser.new_context(color_scheme=scheme, viewport={"width": 390, "height": 844}, is_mobile=True,
                                  has_touch=True, service_workers="block")
    page = context.new_page()
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("drawer-toggle").tap()
    assert audit(page) == []
    context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_embed_has_no_axe_violations(browser, site_url, scheme):
    context = browser.new_context(color_scheme=scheme, viewport={"width": 720, "height": 480}, service_workers="block")
    page = context.new_page()
    page.goto(f"{site_url}embed.html")
    page.get_by_test_id("fit-verdict").wait_for()
    page.wait_for_timeout(300)  # the charts' first draw
    assert audit(page) == []
    context.close()


def test_every_chart_has_a_text_equivalent(page, guard, site_url):
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("compare-pin").click()
    page.get_by_test_id("compare").locator("canvas").first.wait_for()
    charts = page.locator("canvas").evaluate_all(
        "(nodes) => nodes.map((c) => [c.dataset.chart, c.getAttribute('role'), c.getAttribute('aria-label') || ''])"
    )
    assert {name for name, _, _ in charts} >= {"capacity", "timeline", "compare-categories", "compare-timeline"}
    for name, role, label in charts:
        assert role == "img" and len(label) > 40, f"chart {name} has no text equivalent"
    # The numbers behind every chart are in tables too.
    assert page.locator("table.breakdown").count() == 2


def test_keyboard_pins_compares_and_downloads(page, guard, site_url):
    """Tab reaches every control of the results; Enter and Space press them."""
    page.goto(site_url)
    wait_engine_ready(page)
    reached = []
    for _ in range(80):
        page.keyboard.press("Tab")
        testid = page.evaluate("document.activeElement.dataset.testid || document.activeElement.id")
        reached.append(testid)
        if testid == "compare-pin":
            break
    assert "compare-pin" in reached, reached
    page.keyboard.press("Enter")
    page.get_by_test_id("compare").wait_for()
    assert page.get_by_test_id("compare-unpin").is_visible()
    page.get_by_test_id("download-markdown").focus()
    with page.expect_download() as info:
        page.keyboard.press("Space")
    assert info.value.suggested_filename.endswith(".md")
