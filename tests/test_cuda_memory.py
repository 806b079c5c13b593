"""End to end: the allocator replay of simulated steps, the outside-allocator parts and the upper bound.

The issue's evidence: the reserved peak of a simulated step is ≥ its allocated peak and changes
as the documented settings say it should; the report shows allocated, reserved and total with
each outside part and its source; the fit verdict uses the upper bound.
"""

from __future__ import annotations

import pytest

import trainmem
from trainmem.cuda.events import resident_tensors, step_events
from trainmem.cuda.replay import replay_events
from trainmem.plan import Plan
from trainmem.render import render_report
from trainmem.setup import Setup
from trainmem.simulate import simulate_rank
from trainmem.units import MIB

SMALL = {"model": {"preset": "gpt2"}, "micro_batch_size": 4, "sequence_length": 512, "gpu": "a100-80gb"}


def _estimate(**changes):
    setup = {**SMALL, **changes}
    return trainmem.estimate(setup, suggestions=False)


def test_reserved_is_at_least_allocated_and_total_adds_the_outside_parts():
    report = _estimate()
    assert report.peak_reserved_bytes >= report.peak_allocated_bytes
    outside = sum(p.bytes for p in report.ranks[0].cuda.outside_parts)
    assert report.peak_total_bytes == report.peak_reserved_bytes + outside
    assert report.upper_bound_bytes > report.peak_total_bytes
    assert report.fit.required_bytes == report.upper_bound_bytes


def test_the_event_stream_reproduces_the_simulated_allocated_peak():
    for changes in ({}, {"activation_checkpointing": "full"}, {"precision": "amp-bf16", "gradient_accumulation_steps": 2}):
        setup = Setup.model_validate({**SMALL, **changes})
        plan = Plan(setup)
        simulation = simulate_rank(plan, plan.stages[0])
        replay = replay_events(step_events(plan, plan.stages[0], dict(simulation.account.parts), 0))
        assert replay.peak_allocated_bytes == pytest.approx(simulation.account.peak_total, rel=0.03), changes
        assert replay.peak_reserved_bytes >= replay.peak_allocated_bytes


def test_every_event_frees_only_what_was_allocated():
    setup = Setup.model_validate({**SMALL, "precision": "amp-bf16", "activation_checkpointing": "full"})
    plan = Plan(setup)
    simulation = simulate_rank(plan, plan.stages[0])
    live = {}
    for op, key, nbytes, _ in step_events(plan, plan.stages[0], dict(simulation.account.parts), 0):
        if op == "alloc":
            assert key not in live
            live[key] = nbytes
        elif op == "free":
            assert live.pop(key) == nbytes
    # Only the resident tensors outlive the steps: they take the first slots, before the step starts.
    residents = resident_tensors(plan, plan.stages[0], dict(simulation.account.parts), 0)
    assert live and all(slot < sum(1 for _, nbytes in residents if nbytes > 0) for slot in live)


def test_expandable_segments_reserve_no_more_than_the_default():
    default = _estimate()
    expandable = _estimate(runtime={"cuda_alloc_conf": "expandable_segments:True"})
    assert expandable.peak_allocated_bytes == default.peak_allocated_bytes
    assert expandable.peak_reserved_bytes <= default.peak_reserved_bytes


def test_settings_change_the_reserve_as_documented():
    default = _estimate()
    rounded = _estimate(runtime={"cuda_alloc_conf": "roundup_power2_divisions:2"})
    # coarser rounding of every request can only grow the blocks the step holds
    assert rounded.ranks[0].cuda.replay_peak_allocated_bytes >= default.ranks[0].cuda.replay_peak_allocated_bytes
    collected = _estimate(
        runtime={"cuda_alloc_conf": "garbage_collection_threshold:0.6", "cuda_memory_fraction": 0.9}
    )
    assert collected.peak_reserved_bytes <= default.peak_reserved_bytes


def test_the_full_report_compares_expandable_segments():
    report = trainmem.estimate(SMALL)
    (alternative,) = report.ranks[0].cuda.alternatives
    assert alternative.cuda_alloc_conf == "expandable_segments:True"
    text = render_report(report)
    assert "reserved" in text and "upper bound" in text and "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in text


def test_outside_parts_name_their_sources():
    report = _estimate(parallelism={"num_gpus": 2})
    names = {p.name: p for p in report.parts if not p.allocated}
    assert {"CUDA context", "NCCL buffers", "allocator reserve"} <= set(names)
    assert "pytorch/pytorch" in names["CUDA context"].detail
    assert "NVIDIA/nccl#964" in names["NCCL buffers"].detail
    workspace = next(p for p in report.parts if p.name == "cuBLAS workspace")
    assert workspace.allocated and workspace.bytes == 8519680  # :4096:2:16:8 before Hopper


def test_context_depends_on_architecture_module_loading_and_cuda_version():
    def context(**runtime):
        report = _estimate(runtime=runtime)
        return next(p.bytes for p in report.parts if p.name == "CUDA context")

    lazy = context()
    assert context(cuda_module_loading="eager") > lazy
    assert context(cuda_version="11.6") == context(cuda_module_loading="eager")
    assert context(cuda_context_mib=300) == 300 * MIB
    hopper = trainmem.estimate({**SMALL, "gpu": "h100-sxm-80gb"}, suggestions=False)
    assert next(p.bytes for p in hopper.parts if p.name == "CUDA context") > lazy
    assert next(p.bytes for p in hopper.parts if p.name == "cuBLAS workspace") == 32 * MIB


def test_cublas_workspace_config_and_compile_and_graphs():
    report = _estimate(runtime={"cublas_workspace_config": ":4096:8", "torch_compile": True, "cuda_graphs": True})
    names = {p.name: p.bytes for p in report.parts}
    assert names["cuBLAS workspace"] == 32 * MIB
    assert "torch.compile kernels" in names and names["CUDA graph private pool"] > 0


def test_cpu_replays_have_no_cuda_parts():
    report = _estimate(runtime={"device": "cpu"})
    assert report.ranks[0].cuda is None
    assert report.peak_total_bytes == report.peak_allocated_bytes == report.fit.required_bytes
    assert not [p for p in report.parts if not p.allocated]


@pytest.mark.parametrize(
    "runtime, field",
    [
        ({"cuda_alloc_conf": "max_split_size_mb:4"}, "max_split_size_mb must be >= 20"),
        ({"cuda_alloc_conf": "bogus:1"}, "unknown option"),
        ({"cublas_workspace_config": "4096"}, "SIZE_KiB:COUNT"),
        ({"cuda_version": "twelve"}, "MAJOR.MINOR"),
        ({"cuda_memory_fraction": 1.5}, "less than or equal to 1"),
    ],
)
def test_bad_runtime_values_name_the_field(runtime, field):
    from pydantic import ValidationError

    from trainmem.errors import format_validation_error

    with pytest.raises(ValidationError) as error:
        Setup.model_validate({**SMALL, "runtime": runtime})
    ((path, message),) = format_validation_error(error.value)
    assert path.startswith("runtime.")
    assert field in message


def test_deep_models_extrapolate_from_two_truncated_replays():
    report = trainmem.estimate({"model": {"preset": "llama-2-13b"}, "gpu": "a100-80gb"}, suggestions=False)
    cuda = report.ranks[0].cuda
    assert cuda.replayed
    assert report.peak_reserved_bytes >= report.peak_allocated_bytes
    assert cuda.replay_peak_allocated_bytes == pytest.approx(report.peak_allocated_bytes, rel=0.05)


def test_cli_alloc_conf(capsys):
    from trainmem.cli import main

    assert main(["estimate", "--preset", "gpt2", "--alloc-conf", "expandable_segments:True"]) == 0
    assert "allocator replay, expandable_segments:True" in capsys.readouterr().out
    assert main(["estimate", "--preset", "gpt2", "--alloc-conf", "max_split_size_mb:4"]) == 2
    assert capsys.readouterr().err.strip() == (
        "trainmem: error: runtime.cuda_alloc_conf: max_split_size_mb must be >= 20, got 4"
    )
