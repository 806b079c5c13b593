"""The form shows a model's optional inputs only where the core says the model reads them
(trainmem.model_inputs): image fields for vision-language models, by their processor's rule."""

from __future__ import annotations

from browser_helpers import wait_computed, wait_engine_ready


def _visible(page, testid: str) -> bool:
    return page.get_by_test_id(testid).is_visible()


def _not_hidden(page, testid: str) -> bool:
    """Not hidden by a condition (an advanced field may still be folded away)."""
    return page.get_by_test_id(testid).evaluate("(node) => node.closest('[hidden]') === null")


def test_image_fields_appear_for_a_vlm_and_follow_its_processor(page, guard, site_url):
    page.goto(site_url)
    # The pre-rendered text model: no image fields, in the HTML already.
    assert page.get_by_test_id("input-images").count() == 1
    assert not _visible(page, "input-images")
    wait_engine_ready(page)

    page.get_by_test_id("input-model.preset").select_option("qwen2.5-vl-7b")
    page.get_by_test_id("input-images").wait_for(state="visible")
    page.get_by_test_id("input-images").select_option("set")
    for name in ("images_per_sample", "image_height", "max_pixels"):
        assert _visible(page, f"input-images.{name}"), name
    page.get_by_test_id("input-images.images_per_sample").fill("4")
    setup = wait_computed(page)
    assert setup["model"] == {"preset": "qwen2.5-vl-7b"} and setup["images"]["images_per_sample"] == 4
    assert int(page.get_by_test_id("peak-allocated").get_attribute("data-bytes")) > 0

    # LLaVA-1.5 resizes every image to 336 px: only the count is a field.
    page.get_by_test_id("input-model.preset").select_option("llava-1.5-7b")
    page.get_by_test_id("input-images.image_height").wait_for(state="hidden")
    assert _visible(page, "input-images.images_per_sample")
    assert not _visible(page, "input-images.max_pixels")

    # Back to a text model: the images field goes (its value is kept, as for every hidden field).
    page.get_by_test_id("input-model.preset").select_option("llama-3.1-8b")
    page.get_by_test_id("input-images").wait_for(state="hidden")


def test_target_length_shows_only_for_encoder_decoders(page, guard, site_url):
    """The field arrives with the T5 family (Setup.target_length); until then the form has none."""
    from trainmem.setup import Setup

    page.goto(site_url)
    wait_engine_ready(page)
    if "target_length" not in Setup.model_json_schema()["properties"]:
        assert page.get_by_test_id("input-target_length").count() == 0
        return
    assert not _visible(page, "input-target_length")
    t5 = next((name for name in ("t5-small", "flan-t5-base", "t5-base") if page.locator(
        f'[data-testid="input-model.preset"] option[value="{name}"]').count()), None)
    if t5 is None:
        return
    page.get_by_test_id("input-model.preset").select_option(t5)
    page.get_by_test_id("input-target_length").wait_for(state="visible")


def test_the_head_is_a_choice_only_for_families_with_several(page, guard, site_url):
    page.goto(site_url)
    assert not _visible(page, "input-task.kind")  # a decoder trains its language-model head
    wait_engine_ready(page)
    page.get_by_test_id("input-model.preset").select_option("bert-base-uncased")
    page.get_by_test_id("input-task.kind").wait_for(state="visible")
    # Sequence classification, the encoder's default, has labels (a field under "More options").
    assert _not_hidden(page, "input-task.num_labels")
    page.get_by_test_id("input-task.kind").select_option("masked_lm")
    page.wait_for_function(
        """() => document.querySelector('[data-testid="input-task.num_labels"]').closest('[hidden]') !== null"""
    )
