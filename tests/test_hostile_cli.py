"""Hostile command lines and files: each exits with status 2 and exactly one line on stderr.

The table runs ``trainmem.cli.main`` in-process (fast); a few cases at the end run the real
console script as a subprocess (encoding, closed pipes, the interpreter's own exit path).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from small_models import LLAMA_2_LAYERS as LLAMA_CONFIG

from trainmem.cli import main
from trainmem.files import MAX_FILE_BYTES

ROOT = Path(__file__).resolve().parents[1]


#: name -> bytes of a file the table refers to as ``@name``.
FILES: dict[str, bytes] = {
    "malformed.json": b'{"model": "gpt2",',
    "trailing.json": b'{"model": "gpt2"} extra',
    "empty.json": b"",
    "whitespace.json": b"  \n\t ",
    "binary.json": bytes(range(256)) * 4,
    "nul.json": b'{"model": "gpt2"}\x00',
    "bom_bad.json": b"\xef\xbb\xbf{not json",
    "utf16.json": '{"model": "gpt2"}'.encode("utf-16"),
    "latin1.json": '{"model": "gpt2", "gpu": {"name": "caf\xe9", "memory_gib": 8}}'.encode("latin-1"),
    "deep.json": b"[" * 100_000 + b"]" * 100_000,
    "deep_value.json": b'{"model": "gpt2", "micro_batch_size": ' + b"[" * 300 + b"]" * 300 + b"}",
    "array.json": b'["gpt2"]',
    "string.json": b'"gpt2"',
    "number.json": b"4",
    "null.json": b"null",
    "nan.json": b'{"model": "gpt2", "headroom_fraction": NaN}',
    "infinity.json": b'{"model": "gpt2", "gpu": {"memory_gib": Infinity}}',
    "huge_float.json": b'{"model": "gpt2", "runtime": {"cuda_context_mib": 1e308}}',
    "huge_int.json": b'{"model": "gpt2", "micro_batch_size": 1' + b"0" * 400 + b"}",
    "surrogate.json": b'{"model": "gpt2", "gpu": {"name": "\\ud800", "memory_gib": 8}}',
    "control_name.json": b'{"model": "gpt2", "gpu": {"name": "a\\u202eb", "memory_gib": 8}}',
    "long_string.json": b'{"model": "' + b"x" * 10_000 + b'"}',
    "string_number.json": b'{"model": "gpt2", "micro_batch_size": "4"}',
    "string_bool.json": b'{"model": "gpt2", "parallelism": {"sequence_parallel": "false"}}',
    "unknown_field.json": b'{"model": "gpt2", "micro_bacth_size": 4}',
    "no_model.json": b'{"micro_batch_size": 4}',
    "two_models.json": b'{"model": {"preset": "gpt2", "num_parameters": 5}}',
    "layers_huge.json": json.dumps(
        {
            "model": {
                "architecture": {
                    **{k: v for k, v in LLAMA_CONFIG.items() if k != "model_type"},
                    "num_hidden_layers": 10**9,
                }
            }
        }
    ).encode(),
    "narrow_mlp.json": json.dumps(
        {
            "model": {
                "architecture": {
                    "vocab_size": 1024,
                    "hidden_size": 1024,
                    "num_hidden_layers": 2,
                    "num_attention_heads": 32,
                    "intermediate_size": 16,
                }
            },
            "parallelism": {"num_gpus": 32, "tensor_parallel_size": 32},
        }
    ).encode(),
    "config_list.json": b'[{"model_type": "llama"}]',
    "config_model_type_list.json": json.dumps({**LLAMA_CONFIG, "model_type": ["llama"]}).encode(),
    "config_n_embd_dict.json": json.dumps({"model_type": "gpt2", "n_embd": {"a": 1}}).encode(),
    "config_bert.json": b'{"model_type": "mamba"}',
    "config_deep.json": b'{"model_type": "llama", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
}


def _files(tmp: Path) -> dict[str, str]:
    paths = {}
    for name, data in FILES.items():
        path = tmp / name
        path.write_bytes(data)
        paths[name] = str(path)
    huge = tmp / "huge.json"
    with huge.open("wb") as handle:  # sparse: larger than the limit without writing it all
        handle.truncate(MAX_FILE_BYTES + 1)
    paths["huge.json"] = str(huge)
    fifo = tmp / "fifo.json"
    try:  # a reader that opened it would block for ever: it must be refused first
        os.mkfifo(fifo)
        paths["fifo.json"] = str(fifo)
    except (AttributeError, OSError):  # no FIFOs on this platform (Pyodide's file system)
        paths["fifo.json"] = None
    (tmp / "directory.json").mkdir()
    paths["directory.json"] = str(tmp / "directory.json")
    try:
        (tmp / "zero-link.json").symlink_to("/dev/zero")
        paths["zero-link.json"] = str(tmp / "zero-link.json")
    except OSError:
        paths["zero-link.json"] = None
    paths["missing.json"] = str(tmp / "missing.json")
    return paths


E = ["estimate"]
G = ["estimate", "--preset", "gpt2"]

#: (id, argv with ``@file`` placeholders, a word the message must contain or None)
CASES: list[tuple[str, list[str], str | None]] = [
    # --- files given as the setup
    ("malformed", E + ["@malformed.json"], "not valid JSON"),
    ("trailing-garbage", E + ["@trailing.json"], "not valid JSON"),
    ("empty", E + ["@empty.json"], "not valid JSON"),
    ("whitespace", E + ["@whitespace.json"], "not valid JSON"),
    ("binary", E + ["@binary.json"], "binary"),
    ("nul-byte", E + ["@nul.json"], "binary"),
    ("bom-then-junk", E + ["@bom_bad.json"], "not valid JSON"),
    ("utf16", E + ["@utf16.json"], "UTF-16"),
    ("latin1", E + ["@latin1.json"], "UTF-8"),
    ("deep-document", E + ["@deep.json"], "nested"),
    ("deep-value", E + ["@deep_value.json"], "nested"),
    ("top-level-array", E + ["@array.json"], "JSON object"),
    ("top-level-string", E + ["@string.json"], "JSON object"),
    ("top-level-number", E + ["@number.json"], "JSON object"),
    ("top-level-null", E + ["@null.json"], "JSON object"),
    ("nan-literal", E + ["@nan.json"], "finite"),
    ("infinity-literal", E + ["@infinity.json"], "finite"),
    ("huge-float", E + ["@huge_float.json"], "runtime.cuda_context_mib"),
    ("huge-int", E + ["@huge_int.json"], "micro_batch_size"),
    ("lone-surrogate", E + ["@surrogate.json"], "surrogate"),
    ("format-character", E + ["@control_name.json"], "gpu.name"),
    ("long-string", E + ["@long_string.json"], "longer than"),
    ("string-for-int", E + ["@string_number.json"], "micro_batch_size"),
    ("string-for-bool", E + ["@string_bool.json"], "parallelism.sequence_parallel"),
    ("unknown-field", E + ["@unknown_field.json"], "micro_bacth_size"),
    ("no-model", E + ["@no_model.json"], "model"),
    ("two-models", E + ["@two_models.json"], "model"),
    ("a-billion-layers", E + ["@layers_huge.json"], "num_hidden_layers"),
    ("huge-file", E + ["@huge.json"], "limit"),
    ("fifo", E + ["@fifo.json"], "not a regular file"),
    ("directory", E + ["@directory.json"], "directory"),
    ("dev-zero", E + ["/dev/zero"], "not a regular file"),
    ("dev-null", E + ["/dev/null"], "not a regular file"),
    ("link-to-dev-zero", E + ["@zero-link.json"], "not a regular file"),
    ("missing-file", E + ["@missing.json"], "setup"),
    # --- files given as --hf-config
    ("config-fifo", E + ["--hf-config", "@fifo.json"], "model.hf_config"),
    ("config-dev-zero", E + ["--hf-config", "/dev/zero"], "model.hf_config"),
    ("config-directory", E + ["--hf-config", "@directory.json"], "model.hf_config"),
    ("config-binary", E + ["--hf-config", "@binary.json"], "model.hf_config"),
    ("config-deep", E + ["--hf-config", "@config_deep.json"], "model.hf_config"),
    ("config-list", E + ["--hf-config", "@config_list.json"], "model.hf_config"),
    ("config-model-type-list", E + ["--hf-config", "@config_model_type_list.json"], "model_type"),
    ("config-n-embd-object", E + ["--hf-config", "@config_n_embd_dict.json"], "model.hf_config"),
    ("config-unsupported", E + ["--hf-config", "@config_bert.json"], "model_type"),
    ("config-missing", E + ["--hf-config", "@missing.json"], "model.hf_config"),
    # --- usage errors
    ("no-command", [], "command"),
    ("unknown-command", ["estimat"], "estimat"),
    ("unknown-flag", G + ["--bogus"], "--bogus"),
    ("flag-missing-value", G + ["--mbs"], "--mbs"),
    ("not-an-int", G + ["--mbs", "abc"], "--mbs"),
    ("float-for-int", G + ["--mbs", "1.5"], "--mbs"),
    ("exponent-for-int", G + ["--mbs", "1e3"], "--mbs"),
    ("bad-choice", G + ["--zero", "5"], "--zero"),
    ("bad-fsdp-choice", G + ["--fsdp", "EVERYTHING"], "--fsdp"),
    ("bad-checkpointing", G + ["--checkpointing", "some"], "--checkpointing"),
    ("missing-trainer-files", G + ["a.json", "b.json"], "cannot read file"),  # several FILEs are trainer files
    ("schema-extra-argument", ["schema", "--json"], "unrecognized"),
    ("catalog-extra-flag", ["presets", "--yaml"], "unrecognized"),
    ("newline-in-argument", G + ["--bogus\nsecond line"], "--bogus"),
    ("measure-unknown-flag", ["measure", "--bogus"], "--bogus"),
    ("measure-no-setup", ["measure"], "give a setup"),
    ("measure-dev-zero", ["measure", "/dev/zero"], "not a regular file"),
    ("measure-fifo", ["measure", "@fifo.json"], "not a regular file"),
    ("measure-inline-junk", ["measure", "{not json"], "not valid JSON"),
    ("validate-unknown-flag", ["validate", "--bogus"], "--bogus"),
    ("validate-corpus-dev-zero", ["validate", "--corpus", "/dev/zero"], "not a regular file"),
    ("validate-corpus-directory", ["validate", "--corpus", "@directory.json"], "directory"),
    ("validate-unknown-case", ["validate", "--case", "no-such-case"], "no-such-case"),
    # --- conflicting flags
    ("flag-twice", G + ["--mbs", "2", "--mbs", "4"], "more than once"),
    ("alias-twice", G + ["--mbs", "2", "--micro-batch-size", "4"], "more than once"),
    ("switch-twice", G + ["--ddp", "--ddp"], "more than once"),
    ("lora-and-qlora", G + ["--lora", "8", "--qlora", "8"], "finetuning.method"),
    ("ddp-and-zero", G + ["--ddp", "--zero", "2", "--gpus", "2"], "parallelism.strategy"),
    ("zero-and-fsdp", G + ["--zero", "2", "--fsdp", "--gpus", "2"], "parallelism.strategy"),
    ("gpu-and-memory", G + ["--gpu", "h200", "--gpu-memory-gib", "80"], "gpu"),
    ("two-model-flags", E + ["--preset", "gpt2", "--num-parameters", "5"], "model"),
    # --- bad values
    ("unknown-preset", E + ["--preset", "llama-9"], "model.preset"),
    ("empty-preset", E + ["--preset", ""], "model.preset"),
    ("preset-with-newline", E + ["--preset", "gpt2\nmalicious"], "model.preset"),
    ("negative-batch", G + ["--mbs", "-1"], "micro_batch_size"),
    ("zero-batch", G + ["--mbs", "0"], "micro_batch_size"),
    ("huge-batch", G + ["--mbs", "99999999999"], "micro_batch_size"),
    ("huge-sequence", G + ["--seq-len", str(2**25)], "sequence_length"),
    ("tokens-per-gpu", G + ["--mbs", "65536", "--seq-len", "16384"], "micro_batch_size"),
    ("zero-gpus", G + ["--gpus", "0"], "parallelism.num_gpus"),
    ("a-trillion-gpus", G + ["--gpus", str(10**12)], "parallelism.num_gpus"),
    ("infinite-gpu", G + ["--gpu-memory-gib", "inf"], "gpu.memory_gib"),
    ("nan-gpu", G + ["--gpu-memory-gib", "nan"], "gpu.memory_gib"),
    ("huge-gpu", G + ["--gpu-memory-gib", "1e308"], "gpu.memory_gib"),
    ("negative-gpu", G + ["--gpu-memory-gib", "-8"], "gpu.memory_gib"),
    ("nan-headroom", G + ["--headroom", "nan"], "headroom_fraction"),
    ("headroom-too-large", G + ["--headroom", "2"], "headroom_fraction"),
    ("lora-rank-zero", G + ["--lora", "0"], "finetuning.lora.r"),
    ("lora-rank-huge", G + ["--lora", str(10**9)], "finetuning.lora.r"),
    ("lora-target-junk", G + ["--lora", "8", "--lora-targets", "q_proj;rm -rf"], "finetuning.lora.target_modules"),
    ("lora-target-newline", G + ["--lora", "8", "--lora-targets", "q\nv"], "finetuning.lora.target_modules"),
    ("unknown-gpu", G + ["--gpu", "a200"], "gpu"),
    ("unknown-optimizer", G + ["--optimizer", ""], "optimizer.name"),
    ("unknown-precision", G + ["--precision", "fp64"], "precision"),
    ("parameters-zero", E + ["--num-parameters", "0"], "model.num_parameters"),
    ("parameters-400-digits", E + ["--num-parameters", "9" * 400], "model.num_parameters"),
    # --- divisibility, before anything is simulated
    ("tp-not-dividing-heads", E + ["--preset", "llama-2-7b", "--tp", "3", "--gpus", "3"], "num_attention_heads"),
    ("tp-not-dividing-vocab", G + ["--tp", "2", "--gpus", "2"], "vocab_size"),
    ("tp-wider-than-mlp", E + ["@narrow_mlp.json"], "intermediate_size"),
    ("pp-not-dividing-layers", G + ["--pp", "5", "--gpus", "5", "--grad-accum", "8"], "num_hidden_layers"),
    ("cp-not-dividing-sequence", G + ["--cp", "3", "--gpus", "3", "--seq-len", "1024"], "context_parallel_size"),
    ("ep-without-experts", G + ["--ep", "2", "--gpus", "2"], "expert_parallel_size"),
    ("sp-without-tp", G + ["--sequence-parallel"], "sequence_parallel"),
    ("offload-params-with-ddp", G + ["--offload-params", "--gpus", "2"], "offload_parameters"),
    ("gpus-not-multiple", G + ["--gpus", "6", "--tp", "4"], "parallelism.num_gpus"),
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return _files(tmp_path_factory.mktemp("hostile"))


def _argv(argv: list[str], files: dict[str, str]) -> list[str]:
    needed = [word[1:] for word in argv if word.startswith("@")]
    if any(files[name] is None for name in needed):
        pytest.skip(f"this platform cannot make {', '.join(name for name in needed if files[name] is None)}")
    return [files[word[1:]] if word.startswith("@") else word for word in argv]


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 2
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_table_is_large_enough():
    assert len(CASES) >= 50 and len({name for name, _, _ in CASES}) == len(CASES)


@pytest.mark.parametrize(("name", "argv", "mentions"), CASES, ids=[name for name, _, _ in CASES])
def test_hostile_command_line_is_one_line_and_exit_2(name, argv, mentions, files, capsys):
    code, out, err = _run(_argv(argv, files), capsys)
    lines = err.splitlines()
    assert code == 2, (code, err)
    assert len(lines) == 1 and err.endswith("\n"), err
    assert "Traceback" not in err and "internal error" not in err
    assert lines[0].startswith("trainmem"), err
    assert lines[0].isprintable()
    assert out == ""
    if mentions is not None:
        assert mentions in lines[0], lines[0]


def test_a_byte_order_mark_is_accepted(tmp_path, capsys):
    setup = tmp_path / "bom.json"
    setup.write_bytes(b"\xef\xbb\xbf" + json.dumps({"model": "gpt2", "sequence_length": 128}).encode())
    code, out, err = _run(["estimate", str(setup)], capsys)
    assert code == 0 and err == "" and "gpt2" in out


def _console(*argv: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PYTHONPATH": str(ROOT / "core"), **(env or {})}
    environment.pop("TRAINMEM_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-m", "trainmem", *argv], capture_output=True, env=environment, timeout=120, **kwargs
    )


def test_the_console_script_fails_in_one_line_too(files):
    result = _console("estimate", files["fifo.json"])
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and result.stdout == b""
    result = _console("estimate", "--preset", "gpt2", "--mbs", "2", "--mbs", "3")
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1


def test_a_terminal_without_unicode_still_gets_the_report():
    result = _console("estimate", "--preset", "gpt2", "--seq-len", "128", env={"PYTHONIOENCODING": "ascii"})
    assert result.returncode == 0, result.stderr
    assert b"gpt2" in result.stdout and result.stderr == b""


def test_a_closed_pipe_is_not_an_error():
    with subprocess.Popen(
        [sys.executable, "-m", "trainmem", "estimate", "--preset", "gpt2", "--seq-len", "128", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT / "core")},
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        process.stdout.read(10)
        process.stdout.close()  # like `| head -c 10`
        err = process.stderr.read()
        process.wait(timeout=120)
    assert process.returncode in (0, -13, 120), err  # SIGPIPE or a clean exit, never a traceback
    assert b"Traceback" not in err
