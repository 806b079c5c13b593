"""The prepared GPU run (scripts/validate_cuda.py) and the CUDA corpus gate, tested on the CPU.

No GPU is needed: the case list is checked for what it must exercise, the dry run for what it
prints, the record assembly and the corpus merge on a measurement of the committed corpus dressed
up as a CUDA one, and the gate on such synthetic cases.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

import trainmem
from trainmem.cuda.gate import compare_cuda, format_cuda_table, is_cuda_case, summarize_cuda, validate_cuda
from trainmem.measure.corpus import load_corpus
from trainmem.measure.record import CudaMemory
from trainmem.setup import Setup

ROOT = Path(__file__).resolve().parent.parent


def _script():
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("validate_cuda", ROOT / "scripts" / "validate_cuda.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


validate_cuda_script = _script()
CASES = validate_cuda_script.CASES


def test_about_thirty_valid_cases_with_unique_ids():
    assert 28 <= len(CASES) <= 40
    assert len({c["id"] for c in CASES}) == len(CASES)
    for case in CASES:
        setup = Setup.model_validate(case["setup"])
        assert setup.runtime.device == "cuda"
        assert case["id"].startswith("cuda-")


def test_the_cases_exercise_every_cuda_specific_part():
    setups = [Setup.model_validate(c["setup"]) for c in CASES]
    assert {"eager", "sdpa", "sdpa-math"} <= {s.attention for s in setups}
    assert {"fp32", "amp-bf16", "amp-fp16", "bf16-pure"} <= {s.precision for s in setups}
    assert {"fused", "foreach", "for-loop"} <= {s.optimizer.implementation for s in setups}
    assert {"adamw-8bit", "paged-adamw-8bit", "sgd"} <= {s.optimizer.name for s in setups}
    assert {"none", "full"} <= {s.activation_checkpointing for s in setups}
    assert {"lora", "qlora"} <= {s.finetuning.method for s in setups}
    assert any(s.parallelism.strategy == "fsdp" for s in setups)
    assert max(s.sequence_length for s in setups) >= 8192
    assert any(s.gradient_accumulation_steps > 1 for s in setups)
    confs = {s.runtime.cuda_alloc_conf for s in setups}
    assert {"expandable_segments:True", "max_split_size_mb:128", "roundup_power2_divisions:4"} <= confs


def test_dry_run_lists_every_case_with_its_prediction(capsys):
    assert validate_cuda_script.main(["--dry-run", "--only", CASES[0]["id"], "--only", CASES[-1]["id"]]) == 0
    out = capsys.readouterr().out
    assert CASES[0]["id"] in out and CASES[-1]["id"] in out
    assert "skipped:" in out  # FSDP2 on one rank is not replayable by trainmem.measure yet
    assert "2 cases" in out


def test_unknown_case_is_an_error():
    with pytest.raises(SystemExit, match="no such case"):
        validate_cuda_script.main(["--dry-run", "--only", "cuda-nope"])


@pytest.mark.parametrize(
    "name, memory_gib, expected",
    [
        ("NVIDIA H100 80GB HBM3", 79.6, "h100-sxm-80gb"),
        ("NVIDIA H200", 139.8, "h200"),
        ("NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"),
        ("NVIDIA A100-SXM4-80GB", 79.2, "a100-80gb"),
        ("Some Future GPU", 96.0, {"name": "measured", "memory_gib": 96.0}),
    ],
)
def test_catalog_gpu_from_the_device_name(name, memory_gib, expected):
    assert validate_cuda_script.catalog_gpu(name, int(memory_gib * 2**30)) == expected


def _as_cuda_case(measurement, allocated=None, reserved=None, used=None):
    allocated = measurement.peak_allocated_bytes if allocated is None else allocated
    cuda = CudaMemory(
        max_memory_allocated=allocated,
        max_memory_reserved=reserved if reserved is not None else int(allocated * 1.1),
        memory_allocated_at_start=0,
        device_used_bytes=used,
        device_total_bytes=80 * 2**30,
    )
    environment = measurement.environment.model_copy(update={"device": "cuda", "fake": False})
    setup = Setup.model_validate({**measurement.setup.model_dump(mode="json"), "runtime": {"device": "cuda"}})
    return measurement.model_copy(update={"cuda": cuda, "environment": environment, "setup": setup})


def _a_real_cpu_case():
    return next(m for m in load_corpus() if not m.environment.fake)


def test_with_device_fills_the_process_figures_and_the_gpu():
    case = _as_cuda_case(_a_real_cpu_case())
    info = {
        "gpu_name": "NVIDIA H100 80GB HBM3",
        "driver_version": "570.1",
        "cuda_version": "12.8",
        "cudnn_version": "90800",
        "library_versions": {"transformers": "5.24.0"},
    }
    filled = validate_cuda_script.with_device(case, info, 500 * 2**20, "h100-sxm-80gb", "expandable_segments:True")
    assert filled.cuda.context_bytes == 500 * 2**20
    assert filled.cuda.gpu_name == "NVIDIA H100 80GB HBM3" and filled.cuda.driver_version == "570.1"
    assert filled.cuda.alloc_conf == "expandable_segments:True"
    assert filled.setup.gpu == "h100-sxm-80gb"


def test_merge_into_corpus_replaces_by_id(tmp_path):
    base = _a_real_cpu_case()
    path = tmp_path / "corpus.jsonl"
    first = _as_cuda_case(base).model_copy(update={"id": "cuda-x"})
    validate_cuda_script.merge_into_corpus([first], path)
    second = _as_cuda_case(base, reserved=base.peak_allocated_bytes * 2).model_copy(update={"id": "cuda-x"})
    validate_cuda_script.merge_into_corpus([second], path)
    (stored,) = load_corpus(path)
    assert stored.cuda.max_memory_reserved == base.peak_allocated_bytes * 2


def test_the_cpu_corpus_has_no_cuda_case_yet_and_the_gate_says_so():
    comparisons, summary = validate_cuda(load_corpus(), lambda setup: trainmem.estimate(setup, suggestions=False))
    assert comparisons == [] and summary.cases == 0 and summary.meets_targets
    assert "not yet run" in format_cuda_table(comparisons, summary)


def test_the_gate_on_synthetic_cuda_cases():
    base = _a_real_cpu_case()
    report = trainmem.estimate(_as_cuda_case(base).setup, suggestions=False)
    exact = _as_cuda_case(
        base,
        allocated=report.peak_allocated_bytes,
        reserved=report.peak_reserved_bytes,
        used=report.peak_total_bytes,
    )
    assert is_cuda_case(exact) and not is_cuda_case(base)
    comparison = compare_cuda(exact, report)
    assert comparison.allocated_error == comparison.reserved_error == comparison.total_error == 0
    assert comparison.bound_held
    over = _as_cuda_case(base, allocated=report.peak_allocated_bytes, used=report.upper_bound_bytes + 1)
    missed = compare_cuda(over, report)
    assert not missed.bound_held
    summary = summarize_cuda([comparison, missed])
    assert summary.bound_held_rate == 0.5 and not summary.meets_targets
    table = format_cuda_table([comparison, missed], summary)
    assert "NO" in table and "CUDA targets NOT met" in table
