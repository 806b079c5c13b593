"""Bad trainer files: one line on stderr that names the file and the key, exit status 2, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmem import inputs
from trainmem.cli import main

yaml = pytest.importorskip("yaml")  # trainer files are YAML; PyYAML is a runtime dependency

DATA = Path(__file__).parent / "data" / "trainer_files"


def run(argv, capsys):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(code, out, err, *fragments):
    assert code == 2
    assert out == ""
    assert err.startswith("trainmem: error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


TRAINER = "model_name_or_path: meta-llama/Llama-3.2-1B\nper_device_train_batch_size: 2\nmax_length: 512\n"


@pytest.mark.parametrize(
    "name, text, fragment",
    [
        ("train.yaml", "per_device_train_batch_size: [1, 2\n", "is not valid YAML"),
        ("ds.json", '{"zero_optimization": {"stage": 2},', "is not valid JSON"),
        ("what.yaml", "colour: blue\nsize: 3\n", "cannot tell what kind of file this is"),
        ("list.yaml", "- per_device_train_batch_size\n", "cannot tell what kind of file this is"),
    ],
)
def test_unreadable_or_unknown_file(tmp_path, capsys, name, text, fragment):
    path = write(tmp_path, name, text)
    code, out, err = run(["estimate", path, "--emit", "trl", "--emit-to", tmp_path / "out.yaml"], capsys)
    one_line_error(code, out, err, name, fragment)
    assert not (tmp_path / "out.yaml").exists()


def test_two_batch_sizes_contradict(tmp_path, capsys):
    trainer = write(tmp_path, "train.yaml", TRAINER)
    ds = write(
        tmp_path, "ds.json", json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}})
    )
    out_file = tmp_path / "out.json"
    code, out, err = run(["estimate", trainer, ds, "--emit", "deepspeed", "--emit-to", out_file], capsys)
    one_line_error(
        code,
        out,
        err,
        "ds.json: train_micro_batch_size_per_gpu = 4",
        "train.yaml: per_device_train_batch_size = 2",
        "micro_batch_size",
    )
    assert not out_file.exists()


def test_trainer_naming_a_contradicting_deepspeed_config(tmp_path, capsys):
    write(tmp_path, "ds.json", json.dumps({"gradient_accumulation_steps": 8, "bf16": {"enabled": "auto"}}))
    trainer = write(tmp_path, "train.yaml", TRAINER + "gradient_accumulation_steps: 2\ndeepspeed: ds.json\n")
    code, out, err = run(["estimate", trainer], capsys)
    one_line_error(code, out, err, "gradient_accumulation_steps = 8", "contradicts")


def test_auto_that_nothing_fills(tmp_path, capsys):
    ds = DATA / "axolotl/deepspeed_configs/zero3_bf16.json"
    code, out, err = run(["estimate", ds, "--preset", "llama-3.2-1b"], capsys)
    one_line_error(code, out, err, "zero3_bf16.json: train_micro_batch_size_per_gpu", '"auto"', "--micro-batch-size")
    code, out, err = run(["estimate", ds, "--preset", "llama-3.2-1b", "--mbs", "2"], capsys)
    one_line_error(code, out, err, "zero3_bf16.json: gradient_accumulation_steps", "--grad-accum")
    code, _, _ = run(["estimate", ds, "--preset", "llama-3.2-1b", "--mbs", "2", "--grad-accum", "1"], capsys)
    assert code == 0


def test_hub_id_without_preset_asks_for_its_config(capsys):
    name = DATA / "llamafactory/examples/train_lora/qwen3_lora_sft.yaml"
    code, out, err = run(["estimate", name], capsys)
    one_line_error(
        code, out, err, "qwen3_lora_sft.yaml: model_name_or_path", "'Qwen/Qwen3-4B-Instruct-2507'", "config.json"
    )


def test_missing_linked_file(tmp_path, capsys):
    trainer = write(tmp_path, "train.yaml", TRAINER + "deepspeed: configs/zero9.json\n")
    code, out, err = run(["estimate", trainer], capsys)
    one_line_error(code, out, err, "train.yaml: deepspeed", "configs/zero9.json")


@pytest.mark.parametrize(
    "extra, fragment",
    [
        ("bf16: true\nfp16: true\n", "train.yaml: bf16"),
        ("gradient_accumulation_steps: -1\n", "train.yaml: gradient_accumulation_steps: must be a positive integer"),
        ("optim: adamw_torch\nload_in_4bit: true\n", "train.yaml: load_in_4bit"),
    ],
)
def test_bad_values_name_the_key(tmp_path, capsys, extra, fragment):
    trainer = write(tmp_path, "train.yaml", TRAINER + extra)
    code, out, err = run(["estimate", trainer], capsys)
    one_line_error(code, out, err, fragment)


def test_setup_validation_errors_point_at_the_file_key(tmp_path, capsys):
    trainer = write(tmp_path, "train.yaml", TRAINER + "use_peft: true\nlora_target_modules: [c_attn]\n")
    code, out, err = run(["estimate", trainer], capsys)
    one_line_error(code, out, err, "train.yaml: lora_target_modules", "match no linear module")


def test_bad_command_line_combinations(tmp_path, capsys):
    trainer = write(tmp_path, "train.yaml", TRAINER)
    code, out, err = run(["estimate", trainer, "--apply", "99"], capsys)
    one_line_error(code, out, err, "apply:")
    code, out, err = run(["estimate", trainer, "--emit", "trl", "--json"], capsys)
    one_line_error(code, out, err, "emit:")
    code, out, err = run(["estimate", trainer, "--emit-to", tmp_path / "x.yaml"], capsys)
    one_line_error(code, out, err, "emit-to:")
    assert not (tmp_path / "x.yaml").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["estimate", str(trainer), "--from", "nonsense"])
    assert exit_info.value.code == 2 and "--from" in capsys.readouterr().err


def test_api_raises_one_line_value_errors(tmp_path):
    with pytest.raises(ValueError, match=r"^a.yaml is not valid YAML"):
        inputs.read_texts({"a.yaml": "x: [1,"})
    with pytest.raises(inputs.InputError, match="names 'ds.json'; add that file too"):
        inputs.read_texts({"t.yaml": TRAINER + "deepspeed: ds.json\n"})
    with pytest.raises(ValueError, match="unknown kind"):
        inputs.read_texts({"t.yaml": TRAINER}, kind="megatron")
