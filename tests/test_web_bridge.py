"""The page's Python bridge (web/py/trainmem_web.py) beyond compute: trainer files read against the
form, the files the core writes, and the fast answer that scales the allocator's reserve."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "web" / "py"))

import trainmem_web  # noqa: E402

from trainmem import estimate, inputs  # noqa: E402

FILES = ROOT / "tests" / "data" / "trainer_files"
LLAMAFACTORY = FILES / "llamafactory" / "examples" / "train_lora" / "llama3_lora_sft_ds3.yaml"
DS_Z3 = FILES / "llamafactory" / "examples" / "deepspeed" / "ds_z3_config.json"
FORM = {
    "model": {"preset": "llama-3.1-8b"},
    "micro_batch_size": 2,
    "gradient_accumulation_steps": 4,
    "precision": "bf16-mixed",
    "parallelism": {"num_gpus": 8, "strategy": "zero", "zero_stage": 2},
    "gpu": "h100-sxm-80gb",
    "headroom_fraction": 0.1,
}


def read(files: dict[str, str], form: dict = FORM) -> dict:
    return json.loads(trainmem_web.read_files(json.dumps(files), json.dumps(form)))


def test_a_trainer_file_is_the_run_as_the_cli_reads_it_with_the_forms_gpu():
    answer = read({LLAMAFACTORY.name: LLAMAFACTORY.read_text(), DS_Z3.name: DS_Z3.read_text()})
    assert answer["ok"] and answer["mode"] == "run"
    cli, keys = inputs.read(LLAMAFACTORY, DS_Z3, overrides={"gpu": "h100-sxm-80gb", "headroom_fraction": 0.1,
                                                             "parallelism": {"num_gpus": 8}})
    assert answer["setup"] == cli.model_dump(mode="json", exclude_unset=True)
    assert answer["kept_from_form"] == ["gpu", "headroom_fraction", "parallelism"]
    assert len(answer["keys"]["entries"]) == len(keys.entries)
    assert [f["kind"] for f in answer["keys"]["files"]] == ["llamafactory", "deepspeed"]


def test_a_trainer_file_naming_no_model_takes_the_forms():
    answer = read({"args.json": json.dumps({"per_device_train_batch_size": 4, "output_dir": "out"})})
    assert answer["ok"] and answer["setup"]["model"] == FORM["model"]
    assert "model" in answer["kept_from_form"]


def test_a_hub_id_without_a_preset_is_not_replaced_by_the_forms_model():
    answer = read({"axolotl.yaml": "base_model: someone/unknown-model-7b\nmicro_batch_size: 1\n"})
    assert not answer["ok"] and "config.json" in answer["errors"][0]["message"]


def test_pieces_change_their_fields_and_autos_read_the_form():
    ds = {"train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
          "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 3}}
    answer = read({"ds.json": json.dumps(ds)})
    assert answer["ok"] and answer["mode"] == "pieces"
    assert answer["setup"]["parallelism"]["zero_stage"] == 3
    assert answer["setup"]["micro_batch_size"] == 2 and answer["setup"]["gradient_accumulation_steps"] == 4
    assert all(f["name"] != "(the form)" for f in answer["keys"]["files"])
    assert any("filled from the form" in e["detail"] for e in answer["keys"]["entries"])


@pytest.mark.parametrize(
    "files, fragment",
    [
        ({"x.yaml": "a: [1\n"}, "not valid YAML"),
        ({"x.json": '{"colour": 1}'}, "the page reads these kinds"),
        ({"x.yaml": "a: " + "[" * 100 + "]" * 100}, "nested deeper"),
        ({f"f{i}.json": "{}" for i in range(17)}, "at most 16"),
        ({"bad\u202ename.json": "{}"}, "printable"),
    ],
)
def test_bad_files_are_one_line(files, fragment):
    answer = read(files)
    assert not answer["ok"]
    (error,) = answer["errors"]
    assert fragment in error["message"] and "\n" not in error["message"]


@pytest.mark.parametrize("arguments", [("not json", "{}"), ('["a"]', "{}"), ('{"a": 1}', "{}"), (1, "{}")])
def test_malformed_arguments_are_one_line(arguments):
    answer = json.loads(trainmem_web.read_files(*arguments))
    assert not answer["ok"] and "internal error" not in answer["errors"][0]["message"]


@pytest.mark.parametrize("file_format", ["deepspeed", "accelerate", "axolotl", "trl"])
def test_written_files_read_back(file_format):
    answer = json.loads(trainmem_web.write_file(json.dumps(FORM), file_format))
    assert answer["ok"] and answer["text"] and answer["filename"]
    back = read({answer["filename"]: answer["text"]})
    assert back["ok"], back


def test_writing_refuses_an_unknown_format_and_a_bad_setup():
    assert "allowed" in json.loads(trainmem_web.write_file(json.dumps(FORM), "megatron"))["errors"][0]["message"]
    bad = json.loads(trainmem_web.write_file(json.dumps({**FORM, "micro_batch_size": 0}), "trl"))
    assert bad["errors"][0]["path"] == "micro_batch_size"


def test_the_fast_answer_scales_the_reserve_and_keeps_the_allocated_peak():
    setup = {**FORM, "micro_batch_size": 3}
    full = estimate(setup, suggestions=False)
    top = full.ranks[full.heaviest_rank]
    fraction = (top.peak_reserved_bytes - top.peak_allocated_bytes) / top.peak_allocated_bytes
    fast = json.loads(trainmem_web.compute(json.dumps(setup), True, fraction))["report"]
    assert fast["suggestions"] == []
    assert fast["peak_allocated_bytes"] == full.peak_allocated_bytes
    assert not fast["ranks"][fast["heaviest_rank"]]["cuda"]["replayed"]
    assert abs(fast["peak_reserved_bytes"] - full.peak_reserved_bytes) <= 1 + full.peak_allocated_bytes * 1e-9


@pytest.mark.parametrize("fraction", [-0.1, 5, float("nan"), True, "0.1"])
def test_a_bad_reserve_fraction_is_refused(fraction):
    answer = json.loads(trainmem_web.compute(json.dumps(FORM), False, fraction))
    assert not answer["ok"] and "reserve_fraction" in answer["errors"][0]["message"]
