"""The page on a 390 × 844 phone: the verdict and headline numbers first, the form in a drawer,
every control a 44 px touch target."""

from __future__ import annotations

from browser_helpers import wait_computed, wait_engine_ready

PHONE = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True, "service_workers": "block"}

# Every visible control (the visually-hidden file input is reached through its button).
SMALL_TARGETS = """() => [...document.querySelectorAll('button, select, input, textarea, summary, a[href]')]
  .filter((el) => el.getClientRects().length && getComputedStyle(el).visibility !== 'hidden'
                  && !el.classList.contains('visually-hidden') && !el.classList.contains('skip-link'))
  .map((el) => {
    const target = el.type === 'checkbox' ? el.closest('.control') : el;  // a checkbox's target is its row
    const box = target.getBoundingClientRect();
    return { what: el.dataset.testid || el.id || el.textContent.trim().slice(0, 30), width: box.width, height: box.height };
  })
  .filter((box) => box.width < 44 || box.height < 44)"""


def in_view(page, testid: str) -> dict:
    return page.get_by_test_id(testid).evaluate(
        "(el) => { const r = el.getBoundingClientRect(); return { top: r.top, bottom: r.bottom, height: innerHeight }; }"
    )


def test_verdict_and_headline_are_visible_without_scrolling(browser, site_url):
    context = browser.new_context(**PHONE)
    page = context.new_page()
    page.goto(site_url)
    for testid in ("fit-verdict", "peak-total", "peak-allocated"):
        box = in_view(page, testid)
        assert 0 <= box["top"] and box["bottom"] <= box["height"], f"{testid} is below the fold: {box}"
    toggle = page.get_by_test_id("drawer-toggle").bounding_box()
    verdict = page.get_by_test_id("fit-verdict").bounding_box()
    assert verdict["y"] + verdict["height"] <= toggle["y"], "the drawer button covers the verdict"
    assert page.get_by_test_id("input-model.preset").is_hidden(), "the form is in the closed drawer"
    assert page.evaluate("document.documentElement.scrollWidth - innerWidth") <= 0
    context.close()


def test_the_drawer_edits_while_the_numbers_stay_in_view(browser, site_url):
    context = browser.new_context(**PHONE)
    page = context.new_page()
    page.goto(site_url)
    wait_engine_ready(page)
    toggle = page.get_by_test_id("drawer-toggle")
    toggle.tap()
    assert toggle.get_attribute("aria-expanded") == "true"
    assert page.evaluate("document.activeElement.dataset.testid") == "input-model.preset"
    before = page.get_by_test_id("peak-total").get_attribute("data-bytes")
    page.get_by_test_id("input-micro_batch_size").fill("3")
    assert wait_computed(page)["micro_batch_size"] == 3
    assert page.get_by_test_id("peak-total").get_attribute("data-bytes") != before
    drawer_top = page.locator("#setup-panel").bounding_box()["y"]
    verdict = page.get_by_test_id("fit-verdict").bounding_box()
    assert verdict["y"] >= 0 and verdict["y"] + verdict["height"] <= drawer_top, "the drawer hides the verdict"

    small = page.evaluate(SMALL_TARGETS)
    assert small == [], f"touch targets under 44 px: {small}"

    page.keyboard.press("Escape")
    assert toggle.get_attribute("aria-expanded") == "false"
    assert page.get_by_test_id("input-model.preset").is_hidden()
    assert page.evaluate("document.activeElement.id") == "drawer-toggle"
    toggle.tap()
    page.get_by_test_id("drawer-close").tap()
    assert page.get_by_test_id("input-model.preset").is_hidden()
    context.close()


def test_results_controls_are_touch_targets(browser, site_url):
    context = browser.new_context(**PHONE)
    page = context.new_page()
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("compare-pin").tap()
    page.get_by_test_id("compare").wait_for()
    small = page.evaluate(SMALL_TARGETS)
    assert small == [], f"touch targets under 44 px: {small}"
    assert page.evaluate("document.documentElement.scrollWidth - innerWidth") <= 0
    context.close()
