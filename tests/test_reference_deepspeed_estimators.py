"""DeepSpeed's own model-state estimators against trainmem, part by part, for a 3B model on 1×1, 1×2 and 1×8 GPUs.

DeepSpeed 0.19 ships ``estimate_zero2_model_states_mem_needs`` (deepspeed/runtime/zero/stage_1_and_2.py)
and ``estimate_zero3_model_states_mem_needs`` (stage3.py): closed forms of the GPU and CPU
bytes per GPU/node for bf16/fp16 training with Adam (per parameter Ψ):

* ZeRO-2: GPU 2Ψ + 18Ψ/N (16-bit params; 16-bit grads, fp32 grads, fp32 params, Adam's two moments,
  all partitioned); with ``offload_optimizer`` GPU 2Ψ, CPU Ψ·max(4N, 16)·1.5 per node; without, CPU
  4Ψ·N·1.5 (the fp32 load).
* ZeRO-3: GPU 4·L + 18Ψ/N (L = the largest layer's parameters); with ``offload_optimizer`` GPU
  4·L + 2Ψ/N, CPU 16Ψ·1.5 per node under ``zero.Init``.

trainmem counts what the step holds, so its figures differ by design; each difference is asserted
below (``DIFFERENCES``): the estimators leave out the reduce bucket (``reduce_bucket_size`` elements,
resident or per backward), ZeRO-Offload's GPU staging buffer (the largest parameter) and the pinned
bit16 staging copy on the host, and fold buffers into a 1.5 factor. The formulas are restated from
DeepSpeed's functions (cross-checked against the installed DeepSpeed when it is importable).
"""

import pytest

from trainmem.plan import Plan
from trainmem.setup import Setup
from trainmem.simulate import model_states

MODEL = {"preset": "llama-3.2-3b"}
PSI = 3_212_749_824
LARGEST = 128_256 * 3_072  # the (tied) embedding: the largest tensor and the largest layer
GPUS = [1, 2, 8]


def ds_zero2(psi: int, gpus: int, offload: bool) -> tuple[int, int]:
    """(cpu, gpu) bytes as estimate_zero2_model_states_mem_needs returns them (one node)."""
    if offload:
        return int(psi * max(4 * gpus, 16) * 1.5), 2 * psi
    return int(psi * 4 * gpus * 1.5), 2 * psi + int(18 * psi / gpus)


def ds_zero3(psi: int, largest: int, gpus: int, offload: bool) -> tuple[int, int]:
    """(cpu, gpu) as estimate_zero3_model_states_mem_needs returns them (zero_init, parameters not offloaded)."""
    if offload:
        return int(psi * 16 * 1.5), 4 * largest + int(2 * psi / gpus)
    return int(largest * 4 * gpus * 1.5), 4 * largest + int(18 * psi / gpus)


def _states(stage: int, gpus: int, offload: bool):
    setup = Setup.model_validate(
        {
            "model": MODEL,
            "precision": "bf16-master-weights",
            "parallelism": {"num_gpus": gpus, "strategy": "zero", "zero_stage": stage, "offload_optimizer": offload},
        }
    )
    plan = Plan(setup)
    assert plan.num_parameters == PSI
    return plan, model_states(plan, plan.stages[0])


def _close(a: int, b: int) -> bool:
    return abs(a - b) <= 16384  # Adam's per-tensor step counters (4 B each, per rank) and integer division


@pytest.mark.parametrize("gpus", GPUS)
def test_zero2_gpu_column_is_trainmems_model_states_part_by_part(gpus):
    plan, states = _states(2, gpus, offload=False)
    _, ds_gpu = ds_zero2(PSI, gpus, offload=False)
    fp32_gradient_partition = PSI * 4 // gpus  # made for the update (stage_1_and_2.py step: .to(fp32))
    trainmem = states.weights + states.gradients + states.master_weights + states.optimizer_states + fp32_gradient_partition
    assert _close(trainmem, ds_gpu)
    # By design on top: the reduce bucket, 5e8 bf16 elements, for each backward (setup_buckets), on one GPU
    # too (measured on one gloo rank: zero2-llama-7m-bf16-w1).
    from trainmem.parallel import deepspeed

    assert deepspeed.reduce_bucket_bytes(plan) == 1_000_000_000


@pytest.mark.parametrize("gpus", GPUS)
def test_zero2_offload_columns_part_by_part(gpus):
    plan, states = _states(2, gpus, offload=True)
    ds_cpu, ds_gpu = ds_zero2(PSI, gpus, offload=True)
    assert states.weights == ds_gpu  # the bf16 weights are the estimator's whole GPU column
    from trainmem.parallel import deepspeed

    # By design on the GPU: temp_grad_buffer_for_gpu_offload, the largest parameter in bf16.
    assert deepspeed.offload_gpu_staging_bytes(plan, states.largest_trainable_numel) == 2 * LARGEST
    parts = dict((name, nbytes) for name, nbytes, _ in states.offloaded_parts)
    per_node = gpus * sum(parts.values())
    # Host per node: fp32 master 4Ψ + Adam 8Ψ + fp32 gradients 4Ψ + pinned bit16 copy 2Ψ = 18Ψ, and each
    # rank's pinned largest-parameter buffer; the estimator writes max(4N, 16)Ψ × 1.5 instead.
    assert _close(per_node, 18 * PSI + gpus * 2 * LARGEST)
    assert _close(parts["bit16 partition staging copy"] * gpus, 2 * PSI)
    assert ds_cpu == int(PSI * max(4 * gpus, 16) * 1.5)


@pytest.mark.parametrize("gpus", GPUS)
def test_zero3_columns_part_by_part(gpus):
    plan, states = _states(3, gpus, offload=False)
    _, ds_gpu = ds_zero3(PSI, LARGEST, gpus, offload=False)
    resident = states.weights + states.gradients + states.master_weights + states.optimizer_states
    # trainmem: 2 + 2 + 4 + 8 = 16Ψ/N resident, and the fp32 gradient copy (4Ψ/N) in the step; the
    # estimator's 18Ψ/N plus 4 bytes of the largest layer (its gathered 16-bit parameters and gradients).
    assert _close(resident, 16 * PSI // gpus)
    assert _close(ds_gpu - 4 * LARGEST, 18 * PSI // gpus)
    _, offload_states = _states(3, gpus, offload=True)
    ds_cpu, ds_gpu_offload = ds_zero3(PSI, LARGEST, gpus, offload=True)
    assert _close(offload_states.weights, ds_gpu_offload - 4 * LARGEST)  # 2Ψ/N of bf16 weights on the GPU
    # Host: master 4 + Adam 8 + bf16 gradient partition 2 + fp32 gradients 4 = 18Ψ per node; the estimator 16Ψ × 1.5.
    assert _close(gpus * offload_states.offloaded_bytes, 18 * PSI)
    assert ds_cpu == int(PSI * 24)


@pytest.mark.torch
def test_the_restated_formulas_are_deepspeeds():
    zero2 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    zero3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    for gpus in GPUS:
        for offload in (True, False):
            assert zero2.estimate_zero2_model_states_mem_needs(PSI, gpus, 1, offload) == ds_zero2(PSI, gpus, offload)
            cpu, gpu, _ = zero3.estimate_zero3_model_states_mem_needs(PSI, LARGEST, gpus, 1, offload, False, True)
            assert (cpu, gpu) == ds_zero3(PSI, LARGEST, gpus, offload)
