"""The calculator page (index.html): pre-rendered result, recompute in Pyodide, errors, sharing."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from browser_helpers import (
    RESULT_TESTIDS,
    assert_page_matches_cli,
    cli_report,
    expected_numbers,
    page_numbers,
    setup_json,
    wait_computed,
    wait_engine_ready,
)

ROOT = Path(__file__).resolve().parents[2]
SHELL_PATH = f"{Path(sys.executable).parent}:/usr/bin:/bin"  # the venv's trainmem first
# ... importing the trainmem of this test run (a PYTHONPATH checkout, not only the installed one).
SHELL_ENV = {"PATH": SHELL_PATH, **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {})}
sys.path.insert(0, str(ROOT))
from build_site import DEFAULT_SETUP  # noqa: E402


def test_prerendered_result_is_in_the_html(browser, site_url, tmp_path):
    """Without any JavaScript the page already shows the default setup's real numbers."""
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(site_url)
    expected = expected_numbers(cli_report(DEFAULT_SETUP, tmp_path))
    shown = page_numbers(page)
    shown.pop("fit-text")
    assert shown == expected
    assert page.locator("table.breakdown tbody tr.part-row").count() > 5
    context.close()


def test_prerendered_result_shows_before_the_engine(page, guard, site_url):
    page.goto(site_url)
    page.get_by_test_id("peak-total").wait_for()
    assert page.evaluate("document.documentElement.dataset.engine") != "ready"
    assert page.get_by_test_id("engine-progress").count() == 1
    wait_engine_ready(page)


def test_changes_recompute_and_match_the_cli(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    first = assert_page_matches_cli(page, tmp_path)
    seen = {json.dumps(page_numbers(page), sort_keys=True)}

    page.get_by_test_id("input-model.preset").select_option("llama-2-13b")
    assert wait_computed(page)["model"] == {"preset": "llama-2-13b"}
    assert_page_matches_cli(page, tmp_path)
    seen.add(json.dumps(page_numbers(page), sort_keys=True))

    page.get_by_test_id("input-micro_batch_size").fill("4")
    assert wait_computed(page)["micro_batch_size"] == 4
    assert_page_matches_cli(page, tmp_path)
    seen.add(json.dumps(page_numbers(page), sort_keys=True))

    page.get_by_test_id("input-parallelism.zero_stage").select_option("3")
    setup = wait_computed(page)
    assert setup["parallelism"]["zero_stage"] == 3 and setup["parallelism"]["strategy"] == "zero"
    last = assert_page_matches_cli(page, tmp_path)
    seen.add(json.dumps(page_numbers(page), sort_keys=True))

    assert len(seen) == 4, "every change must change the numbers"
    for testid in ("peak-total", "breakdown-parameters", "breakdown-activations"):
        field = {"peak-total": "peak_total_bytes"}.get(testid)
        before = first[field] if field else first["breakdown"][testid.removeprefix("breakdown-")]
        after = last[field] if field else last["breakdown"][testid.removeprefix("breakdown-")]
        assert before != after


def test_every_setup_field_has_an_input(page, guard, site_url):
    """The form is generated from Setup's JSON Schema: each leaf field has an input-<path>."""
    from trainmem.setup import Setup

    page.goto(site_url)
    schema = Setup.model_json_schema()
    missing = []
    for name, spec in schema["properties"].items():
        if name == "model":
            continue
        ref = spec.get("$ref")
        if ref:
            for child in schema["$defs"][ref.split("/")[-1]]["properties"]:
                if page.get_by_test_id(f"input-{name}.{child}").count() == 0 and \
                        page.locator(f'[data-testid^="input-{name}.{child}."]').count() == 0:
                    missing.append(f"{name}.{child}")
        elif page.get_by_test_id(f"input-{name}").count() == 0:
            missing.append(name)
    assert missing == []
    # Every control has a label a screen reader announces.
    unlabelled = page.evaluate(
        """() => [...document.querySelectorAll('#setup-form input, #setup-form select, #setup-form textarea')]
              .filter((el) => el.type !== 'file' && el.labels.length === 0 && !el.getAttribute('aria-label'))
              .map((el) => el.name)"""
    )
    assert unlabelled == []


def test_invalid_value_shows_the_core_message_and_the_page_recovers(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    before = page_numbers(page)

    page.get_by_test_id("input-micro_batch_size").fill("0")
    wait_computed(page)
    error = page.get_by_test_id("error-micro_batch_size")
    error.wait_for()
    assert "greater than 0" in error.text_content()
    assert page.get_by_test_id("input-micro_batch_size").get_attribute("aria-invalid") == "true"
    assert page_numbers(page) == before  # the last valid result stays, marked stale
    assert "stale" in page.locator("#results").get_attribute("class")

    # A check across fields lands next to a field too (or on top of the form).
    page.get_by_test_id("input-micro_batch_size").fill("2")
    page.get_by_test_id("input-parallelism.num_gpus").fill("3")
    wait_computed(page)
    page.locator('fieldset[data-group="parallelism"] details.advanced').evaluate("d => { d.open = true; }")
    page.get_by_test_id("input-parallelism.tensor_parallel_size").fill("2")
    wait_computed(page)
    message = page.locator('.error:not([hidden]), [data-testid="form-error"]:not([hidden])').first
    assert "multiple of" in message.text_content()

    page.get_by_test_id("input-parallelism.tensor_parallel_size").fill("1")
    wait_computed(page)
    assert page.get_by_test_id("error-micro_batch_size").is_hidden()
    assert page.locator(".error:not([hidden])").count() == 0
    assert setup_json(page)["micro_batch_size"] == 2
    assert_page_matches_cli(page, tmp_path)


def test_share_link_reproduces_the_page(page, guard, context, site_url, tmp_path):
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=site_url.rstrip("/"))
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("input-model.preset").select_option("mistral-7b")
    wait_computed(page)
    page.get_by_test_id("input-sequence_length").fill("8192")
    wait_computed(page)
    page.get_by_test_id("input-finetuning.method").select_option("lora")
    wait_computed(page)
    numbers = page_numbers(page)

    page.get_by_test_id("share-link").click()
    link = page.get_by_test_id("share-output").input_value()
    assert link == page.evaluate("navigator.clipboard.readText()")
    assert link.startswith(site_url) and "#" in link

    fresh = context.new_page()
    fresh.goto(link)
    wait_engine_ready(fresh)
    assert setup_json(fresh) == setup_json(page)
    assert page_numbers(fresh) == numbers
    assert_page_matches_cli(fresh, tmp_path)


def test_copied_command_and_python_reproduce_the_numbers(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("input-micro_batch_size").fill("2")
    wait_computed(page)
    numbers = page_numbers(page)

    page.get_by_test_id("share-command").click()
    command = page.get_by_test_id("share-output").input_value()
    assert command.startswith("trainmem estimate --preset llama-3.1-8b")
    done = subprocess.run(f"{command} --json", shell=True, capture_output=True, text=True, cwd=tmp_path,
                          env=SHELL_ENV)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    shown = dict(numbers)
    shown.pop("fit-text")
    assert shown == expected_numbers(report)

    page.get_by_test_id("share-python").click()
    snippet = page.get_by_test_id("share-output").input_value()
    done = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, check=True)
    assert report["fit"]["message"] in done.stdout

    page.get_by_test_id("share-json").click()
    copied = json.loads(page.get_by_test_id("share-output").input_value())
    assert copied["peak_total_bytes"] == numbers["peak-total"]


def test_a_pasted_config_json_is_the_model(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("input-model.preset").select_option("@hf_config")
    textarea = page.get_by_test_id("input-model.hf_config")
    textarea.wait_for()
    prefilled = json.loads(textarea.input_value())
    assert prefilled["hidden_size"] == 4096  # the selected preset's config.json, to edit
    config = {
        "model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
        "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4,
        "max_position_embeddings": 2048, "tie_word_embeddings": False,
    }
    textarea.fill(json.dumps(config))
    setup = wait_computed(page)
    assert setup["model"] == {"hf_config": config}
    assert_page_matches_cli(page, tmp_path)

    # No flag takes a config.json's contents: the command writes the setup to a file first.
    page.get_by_test_id("share-command").click()
    command = page.get_by_test_id("share-output").input_value()
    assert command.startswith("echo '") and command.endswith("> setup.json && trainmem estimate setup.json")
    done = subprocess.run(f"{command} --json", shell=True, capture_output=True, text=True, cwd=tmp_path,
                          env=SHELL_ENV)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["peak_total_bytes"] == page_numbers(page)["peak-total"]

    textarea.fill('{"model_type": "llama", ')
    page.get_by_test_id("error-model.hf_config").wait_for()
    assert "not valid JSON" in page.get_by_test_id("error-model.hf_config").text_content()


def test_suggestion_applies_its_patch(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("input-micro_batch_size").fill("16")
    setup = wait_computed(page)
    # The numbers come first, the suggestions (each a re-run of the simulation) right after.
    page.wait_for_function(
        "(asked) => document.documentElement.dataset.suggestedSetup === asked",
        arg=json.dumps(setup, separators=(",", ":")),
    )
    report = cli_report(setup, tmp_path)
    titles = page.locator('[data-part="suggestions"] li strong').all_text_contents()
    assert titles == [suggestion["title"] for suggestion in report["suggestions"]]
    assert titles, "a 16-sequence micro-batch of an 8B model on one node should get suggestions"
    page.locator("button[data-suggestion]").first.click()
    patched = wait_computed(page)
    assert patched != setup
    assert_page_matches_cli(page, tmp_path)


def test_phone_width_and_dark_mode(browser, site_url):
    context = browser.new_context(viewport={"width": 390, "height": 844}, color_scheme="dark")
    page = context.new_page()
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(site_url)
    page.get_by_test_id("peak-total").wait_for()
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px at phone width"
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(15, 20, 26)"  # --bg of the dark palette
    assert all(page.get_by_test_id(t).is_visible() for t in RESULT_TESTIDS[:2])
    assert errors == []
    context.close()


def test_keyboard_reaches_the_form(page, guard, site_url):
    page.goto(site_url)
    page.keyboard.press("Tab")  # the skip link comes first
    assert page.evaluate("document.activeElement.className") == "skip-link"
    for _ in range(10):
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.dataset.testid") == "input-model.preset":
            break
    assert page.evaluate("document.activeElement.dataset.testid") == "input-model.preset"
    assert re.search(r"\d", page.get_by_test_id("peak-total").text_content())


def test_a_link_reads_like_the_core(page, guard, site_url, tmp_path):
    """A hand-written link with only zero_stage means DeepSpeed ZeRO, as Setup infers it."""
    page.goto(f"{site_url}#model.preset=gpt2&parallelism.num_gpus=4&parallelism.zero_stage=3")
    wait_engine_ready(page)
    assert page.get_by_test_id("input-parallelism.strategy").input_value() == "zero"
    assert page.get_by_test_id("input-parallelism.zero_stage").input_value() == "3"
    assert wait_computed(page)["parallelism"] == {"num_gpus": 4, "strategy": "zero", "zero_stage": 3}
    assert_page_matches_cli(page, tmp_path)


def _wait_layers(page, layers: int) -> None:
    page.wait_for_function(
        """(layers) => JSON.parse(document.querySelector('[data-testid="setup-json"]').textContent).model.hf_config
                       ?.num_hidden_layers === layers""",
        arg=layers,
        timeout=120_000,
    )


def test_a_dropped_or_chosen_config_json_is_the_model(page, guard, site_url, tmp_path):
    config = {
        "model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896, "intermediate_size": 4864,
        "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2,
        "max_position_embeddings": 32768, "tie_word_embeddings": True,
    }
    page.goto(site_url)
    wait_engine_ready(page)
    transfer = page.evaluate_handle(
        """(text) => { const data = new DataTransfer();
                       data.items.add(new File([text], "config.json", { type: "application/json" }));
                       return data; }""",
        json.dumps(config),
    )
    page.dispatch_event("#results", "drop", {"dataTransfer": transfer})
    # The file is read asynchronously (and, dropped, by the engine's trainer-file reader): wait for it.
    _wait_layers(page, 24)
    assert wait_computed(page)["model"] == {"hf_config": config}
    assert_page_matches_cli(page, tmp_path)

    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "num_hidden_layers": 12}))
    page.locator("#config-file").set_input_files(str(path))
    _wait_layers(page, 12)
    assert wait_computed(page)["model"]["hf_config"]["num_hidden_layers"] == 12
    assert_page_matches_cli(page, tmp_path)
