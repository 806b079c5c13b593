"""The core under WebAssembly: the wheels the web page's Python bundle is made from, run in
Pyodide under Node (build_site.py keeps them in .cache/site-wheels/, out of the site; that the
site's python/ is made of exactly these is checked in test_site_stdlib.py).

Two checks catch a break that only shows in the browser's Python:
  * a matrix of setups estimated in Pyodide gives exactly the reports CPython gives;
  * the core's own test-suite passes inside Pyodide (tests needing PyTorch or subprocesses
    are skipped there; see pyodide_pytest_plugin.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SITE = ROOT / "_site"
SITE_WHEELS = ROOT / ".cache" / "site-wheels"  # build_site.SITE_WHEELS
TEST_WHEELS = ROOT / ".cache" / "pyodide-test-wheels"
PLATFORM = ["--platform", "pyemscripten_2026_0_wasm32", "--python-version", "3.14", "--implementation", "cp",
            "--abi", "cp314"]

pytestmark = pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")

CASES = [
    {"model": {"preset": "llama-3.1-8b"}},
    {"model": {"preset": "llama-3.1-8b"}, "micro_batch_size": 2, "sequence_length": 4096,
     "activation_checkpointing": "full", "parallelism": {"num_gpus": 8, "zero_stage": 3}, "gpu": "h100-sxm-80gb"},
    {"model": {"preset": "llama-2-13b"}, "parallelism": {"num_gpus": 8, "strategy": "fsdp"}, "precision": "amp-bf16"},
    {"model": {"preset": "mistral-7b"}, "finetuning": {"method": "lora", "lora": {"r": 64, "target_modules": "all-linear"}}},
    {"model": {"preset": "llama-3-8b"}, "finetuning": {"method": "qlora"}, "gpu": "rtx-4090", "optimizer": "adamw-8bit"},
    {"model": {"preset": "mixtral-8x7b"}, "parallelism": {"num_gpus": 16, "zero_stage": 3, "offload_optimizer": True}},
    {"model": {"preset": "gpt2"}, "micro_batch_size": 16, "sequence_length": 1024, "attention": "eager", "precision": "fp32"},
    {"model": {"preset": "qwen2.5-7b"}, "loss": "chunked", "gradient_accumulation_steps": 4, "optimizer": "sgd"},
    {"model": {"preset": "gemma-2-9b"}, "activation_checkpointing": "selective", "gpu": {"memory_gib": 96}},
    {"model": {"preset": "llama-3.1-70b"}, "parallelism": {"num_gpus": 64, "tensor_parallel_size": 8,
     "pipeline_parallel_size": 4, "sequence_parallel": True}, "gradient_accumulation_steps": 8},
    {"model": {"num_parameters": 7_000_000_000}, "parallelism": {"num_gpus": 4, "zero_stage": 2}},
    {"model": {"hf_config": {"model_type": "llama", "vocab_size": 32000, "hidden_size": 2048, "intermediate_size": 5632,
                             "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4}}},
    {"model": {"preset": "llama-3.1-8b"}, "micro_batch_size": 0},  # invalid: the error is part of the answer
]


def _pip_download(requirements: Path, destination: Path) -> None:
    destination.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
         "--only-binary=:all:", *PLATFORM, "--require-hashes", "-r", str(requirements), "-d", str(destination)],
        check=True,
    )


@pytest.fixture(scope="module")
def site_wheels() -> Path:
    """The wheels of the built site, bytecode and all (rebuilt when older than the core)."""
    sys.path.insert(0, str(ROOT))
    from build_site import is_stale

    if is_stale(SITE) or not any(SITE_WHEELS.glob("trainmem-*.whl")):
        subprocess.run([sys.executable, str(ROOT / "build_site.py")], check=True)
    return SITE_WHEELS


@pytest.fixture(scope="module")
def test_wheels() -> Path:
    wanted = len([line for line in (HERE / "requirements.txt").read_text().splitlines() if "--hash=" in line])
    if len(list(TEST_WHEELS.glob("*.whl"))) < wanted:
        _pip_download(HERE / "requirements.txt", TEST_WHEELS)
    return TEST_WHEELS


def _cpython_answers() -> list[dict]:
    sys.path[:0] = [str(ROOT / "web" / "py")]
    import trainmem_web

    return [json.loads(trainmem_web.compute(json.dumps(setup))) for setup in CASES]


def test_estimates_in_pyodide_equal_cpython(site_wheels, tmp_path):
    cases = tmp_path / "cases.json"
    answers = tmp_path / "answers.json"
    cases.write_text(json.dumps(CASES))
    subprocess.run(["node", str(HERE / "run_in_pyodide.mjs"), "estimate", str(site_wheels), str(cases), str(answers)],
                   check=True, timeout=600)
    *in_pyodide, platform = json.loads(answers.read_text())
    assert platform["platform"].startswith("emscripten 3.14"), platform
    expected = _cpython_answers()
    for setup, wasm, cpython in zip(CASES, in_pyodide, expected):
        assert wasm == cpython, f"Pyodide and CPython disagree for {setup}"
    assert [answer["ok"] for answer in in_pyodide] == [True] * (len(CASES) - 1) + [False]


def test_core_tests_pass_in_pyodide(site_wheels, test_wheels):
    done = subprocess.run(
        ["node", str(HERE / "run_in_pyodide.mjs"), "pytest", str(site_wheels), str(test_wheels), str(ROOT),
         "-q", "-m", "not torch and not browser and not slow", "/repo/tests",
         "--ignore=/repo/tests/browser", "--ignore=/repo/tests/pyodide"],
        capture_output=True, text=True, timeout=1200,
    )
    summary = "\n".join(done.stdout.splitlines()[-15:])
    print(summary)
    # 5: no tests collected (a checkout whose core tests all need PyTorch); anything else must pass.
    assert done.returncode in (0, 5), f"core tests failed inside Pyodide:\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"
