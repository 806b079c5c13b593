"""Trainer files on the page (issue 10): dropped, picked or pasted; the form shows the setup they
describe, the key report what was read; the files the core writes are downloads; hostile files get
one inline line and leave the page working."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml
from browser_helpers import (
    assert_page_matches_cli,
    expected_numbers,
    page_numbers,
    setup_json,
    wait_computed,
    wait_engine_ready,
)

from trainmem import inputs

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "tests" / "data" / "trainer_files"
LLAMAFACTORY = FILES / "llamafactory" / "examples" / "train_lora" / "llama3_lora_sft_ds3.yaml"
DS_Z3 = FILES / "llamafactory" / "examples" / "deepspeed" / "ds_z3_config.json"
DEFAULT_GPU = "h100-sxm-80gb"  # build_site.DEFAULT_SETUP: 8 of them


def _drop(page, files: dict[str, str]) -> None:
    """Drop files ({name: text}) on the page, as a file manager does."""
    transfer = page.evaluate_handle(
        """(files) => { const data = new DataTransfer();
                        for (const [name, text] of Object.entries(files)) data.items.add(new File([text], name));
                        return data; }""",
        files,
    )
    page.dispatch_event("#results", "drop", {"dataTransfer": transfer})


def _wait_read(page, names: list[str]) -> None:
    """Wait until the panel has answered for these files (a key report or an error)."""
    page.wait_for_function(
        """(names) => document.getElementById("trainer-files").dataset.read === JSON.stringify(names)""",
        arg=names,
        timeout=120_000,
    )


def _files_error(page) -> str:
    error = page.get_by_test_id("files-error")
    return "" if error.is_hidden() else error.text_content()


def _cli_files_report(paths: list[Path], tmp_path: Path, *flags: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "trainmem", "estimate", *map(str, paths), *flags, "--json"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_dropped_trainer_files_become_the_run_with_their_key_report(page, guard, site_url, tmp_path):
    """A LLaMA-Factory YAML that names its DeepSpeed config: dropped alone, the page asks for that file in
    one line; dropped next, both are read; the numbers are the CLI's for the same files (with the form's
    GPU model and number of GPUs, which no trainer file carries), and the key report lists every key."""
    page.goto(site_url)
    wait_engine_ready(page)
    wait_computed(page)
    _drop(page, {LLAMAFACTORY.name: LLAMAFACTORY.read_text()})
    _wait_read(page, [LLAMAFACTORY.name])
    assert "add that file too" in _files_error(page)
    _drop(page, {DS_Z3.name: DS_Z3.read_text()})
    _wait_read(page, [LLAMAFACTORY.name, DS_Z3.name])
    assert _files_error(page) == ""
    setup = wait_computed(page)
    assert setup["finetuning"]["method"] == "lora"
    assert setup["parallelism"]["strategy"] == "zero" and setup["parallelism"]["zero_stage"] == 3
    assert setup["parallelism"]["num_gpus"] == 8  # kept from the form

    cli = _cli_files_report([LLAMAFACTORY, DS_Z3], tmp_path, "--gpu", DEFAULT_GPU, "--gpus", "8")
    shown = page_numbers(page)
    shown.pop("fit-text")
    assert shown == expected_numbers(cli)
    assert_page_matches_cli(page, tmp_path)

    kinds = page.locator('[data-testid="files-read"] li').evaluate_all("(items) => items.map((li) => li.dataset.kind)")
    assert kinds == ["llamafactory", "deepspeed"]
    _, keys = inputs.read(LLAMAFACTORY, DS_Z3, overrides={"gpu": DEFAULT_GPU, "parallelism": {"num_gpus": 8}})
    rows = page.locator('[data-testid="files-keys"] tbody tr')
    assert rows.count() == len(keys.entries)
    for status in ("modelled", "memory-neutral", "not modelled"):
        assert page.locator(f'[data-testid="files-keys"] tr[data-status="{status}"]').count() == keys.count(status)
    assert page.locator('[data-testid="files-keys"] tr[data-key="finetuning_type"]').get_attribute("data-status") == "modelled"
    assert "kept from the form" in page.get_by_test_id("files-mode").text_content()
    # The share link carries the resulting setup.
    assert "parallelism.zero_stage=3" in page.evaluate("location.hash")


def test_a_pasted_piece_changes_only_its_fields(page, guard, site_url, tmp_path):
    """An Accelerate config is a piece of a run: the launch (FSDP on 8 processes, bf16) changes, the
    model and the batch of the form stay."""
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("input-micro_batch_size").fill("2")
    wait_computed(page)
    page.locator("details.files-paste > summary").click()
    page.get_by_test_id("files-paste-name").fill("accelerate.yaml")
    page.get_by_test_id("files-paste-text").fill(
        "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 4\n"
        "fsdp_config:\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n"
    )
    page.get_by_test_id("files-paste-read").click()
    _wait_read(page, ["accelerate.yaml"])
    assert _files_error(page) == ""
    setup = wait_computed(page)
    assert setup["model"] == {"preset": "llama-3.1-8b"} and setup["micro_batch_size"] == 2
    assert setup["parallelism"]["strategy"] == "fsdp"
    assert setup["parallelism"]["fsdp_sharding_strategy"] == "SHARD_GRAD_OP"
    assert setup["parallelism"]["num_gpus"] == 4
    assert_page_matches_cli(page, tmp_path)
    page.get_by_test_id("files-clear").click()
    assert page.get_by_test_id("files-report").is_hidden()


#: (file name, bytes, a fragment of the one line the panel must show)
HOSTILE_FILES = [
    ("binary.yaml", b"\x7fELF\x02\x01\x01\x00\x00\x00" * 20, "binary"),
    ("utf16.yaml", "base_model: x\n".encode("utf-16"), "UTF-16"),
    ("latin1.yaml", "base_model: caf\xe9\n".encode("latin-1"), "not UTF-8"),
    ("huge.json", b" " * (4 * 2**20 + 1), "MiB limit"),
    ("deep.yaml", (b"a: " + b"[" * 200 + b"]" * 200 + b"\n"), "nested deeper"),
    ("broken.yaml", b"micro_batch_size: [1, 2\n", "not valid YAML"),
    ("unknown.json", b'{"colour": "blue"}', "cannot tell what kind of file"),
    ("empty.yaml", b"", "cannot tell"),
    ("list.yaml", b"- 1\n- 2\n", "cannot tell"),
    ("ds.json", b'{"train_micro_batch_size_per_gpu": -3}', "train_micro_batch_size_per_gpu"),
]


def test_hostile_files_get_one_inline_line_and_the_page_keeps_working(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    before = wait_computed(page)
    picker = page.get_by_test_id("files-input")
    for name, data, fragment in HOSTILE_FILES:
        picker.set_input_files([{"name": name, "mimeType": "application/octet-stream", "buffer": data}])
        page.get_by_test_id("files-error").wait_for()
        # This file's own answer: its name and fragment in the line, and the panel no longer busy (two files in
        # a row can share a fragment, so the last file's line alone would match while this one is still read).
        page.wait_for_function(
            """([name, fragment]) => {
                const text = document.querySelector('[data-testid="files-error"]').textContent;
                const busy = document.querySelector('[data-testid="trainer-files"]').getAttribute("aria-busy");
                return text.includes(name) && text.includes(fragment) && busy === "false";
            }""",
            arg=[name, fragment],
            timeout=120_000,
        )
        message = _files_error(page)
        assert "\n" not in message and "Traceback" not in message and "internal error" not in message, message
        assert setup_json(page) == before  # nothing applied
        assert page.get_by_test_id("trainer-files").get_attribute("aria-busy") == "false"
    # Contradictory files: two batch sizes.
    _drop(page, {
        "train.yaml": "model_name_or_path: meta-llama/Llama-3.1-8B\nper_device_train_batch_size: 2\ndeepspeed: ds.json\n",
        "ds.json": json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}),
    })
    _wait_read(page, ["train.yaml", "ds.json"])
    assert "contradicts" in _files_error(page)
    assert setup_json(page) == before
    # The page still computes.
    page.get_by_test_id("input-micro_batch_size").fill("3")
    assert wait_computed(page)["micro_batch_size"] == 3
    assert_page_matches_cli(page, tmp_path)


def _download(page, testid: str) -> tuple[str, str]:
    with page.expect_download() as info:
        page.get_by_test_id(testid).click()
    item = info.value
    return item.suggested_filename, Path(item.path()).read_text(encoding="utf-8")


def test_the_files_trainmem_writes_are_downloads_that_read_back(page, guard, site_url, tmp_path):
    """DeepSpeed JSON, Accelerate, Axolotl and TRL YAML of the setup on screen: each parses, says what
    the setup says, and reads back (trainmem.inputs) to the same values of the fields it carries."""
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("input-micro_batch_size").fill("2")
    setup = wait_computed(page)

    name, text = _download(page, "download-deepspeed")
    assert name == "ds_config.json"
    ds = json.loads(text)
    assert ds["zero_optimization"]["stage"] == 2 and ds["train_micro_batch_size_per_gpu"] == 2

    for testid, expected_name in (("download-accelerate", "accelerate_config.yaml"), ("download-axolotl", "axolotl.yaml"),
                                  ("download-trl", "sft_config.yaml")):
        name, text = _download(page, testid)
        assert name == expected_name
        assert isinstance(yaml.safe_load(text), dict)
        (tmp_path / name).write_text(text, encoding="utf-8")
        read, _ = inputs.read(tmp_path / name, overrides={"model": setup["model"]})
        if testid == "download-accelerate":
            assert read.parallelism.num_gpus == 8 and read.parallelism.zero_stage == 2
        else:
            assert read.micro_batch_size == 2 and read.sequence_length == 4096
            assert read.activation_checkpointing == "full"
    assert "Saved sft_config.yaml" in page.locator("#share-status").text_content()
