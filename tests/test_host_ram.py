"""Host RAM per node (trainmem.parallel.host) against what users reported and what DeepSpeed's source allocates.

* **DeepSpeed#3448** ("try to finetune a llama 33b on 8*A100 40G, 600G RAM. But always OOM on RAM"): LLaMA-33B
  (32.5B parameters), 8 GPUs on one node, ZeRO-3 with ``offload_optimizer`` and ``offload_param`` to the CPU
  (Stanford Alpaca's ``default_offload_opt_param.json``), bf16, sequence 2048. 600 GB ran out; the reporter
  then "used 750G ~ 800G RAM for training and saving".
* **DeepSpeed's estimator** for the same run (``estimate_zero3_model_states_mem_needs`` with
  ``cpu_offload_params`` and ``zero_init``): 18Ψ × 1.5 per node.
* **Pinned buffers**: DeepSpeed pins through ``tensor.pin_memory()``, and PyTorch's ``CachingHostAllocator``
  rounds each pinned block up to a power of two (aten/src/ATen/core/CachingHostAllocator.h).
* **The model load**: every rank a full copy, rank 0 only, or each rank its shard (``zero.Init``).
"""

import pytest
from small_models import LLAMA_7M

import trainmem
from trainmem.parallel import deepspeed
from trainmem.plan import Plan
from trainmem.setup import Setup

GB = 10**9
LLAMA_33B = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 6656,
    "intermediate_size": 17920,
    "num_hidden_layers": 60,
    "num_attention_heads": 52,
    "num_key_value_heads": 52,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}
PSI_33B = 32_528_943_616


def _setup_3448(**parallelism):
    return {
        "model": {"hf_config": LLAMA_33B},
        "micro_batch_size": 1,
        "sequence_length": 2048,
        "precision": "bf16-mixed",
        "parallelism": {
            "num_gpus": 8,
            "zero_stage": 3,
            "offload_optimizer": True,
            "offload_parameters": True,
            **parallelism,
        },
    }


def _parts(parts):
    return {part.name: part.bytes for part in parts}


def test_deepspeed_3448_runs_out_of_600_gb_and_needs_750_to_800_with_saving():
    report = trainmem.estimate(_setup_3448(host_ram_gib_per_node=600 * GB / 2**30), suggestions=False)
    assert report.num_parameters == PSI_33B
    host = report.host
    steady = _parts(host.steady_parts)
    # Per node, part by part: fp32 master 4Ψ, Adam 8Ψ, bf16 gradient partition 2Ψ, its fp32 copy 4Ψ, bf16 weights 2Ψ.
    offloaded = sum(nbytes for name, nbytes in steady.items() if name.startswith("offloaded "))
    assert abs(offloaded - 20 * PSI_33B) <= 8 * 64  # 20Ψ = 650.6 GB, within the per-rank integer division
    assert steady["offloaded weights"] == pytest.approx(2 * PSI_33B, abs=16)
    # The reporter's 600 GB ran out; trainmem says so.
    assert host.fits is False and host.steady_bytes > 600 * GB
    # "750G ~ 800G for training and saving": saving with stage3_gather_16bit_weights_on_model_save gathers the
    # full 16-bit state dict (2Ψ) on rank 0 on top of the training state.
    saving = 2 * PSI_33B
    assert 750 * GB <= host.steady_bytes + saving <= 800 * GB
    # Training is the larger moment: 8 bf16 copies (16Ψ) while loading are less than the 20Ψ offloaded.
    assert host.peak_bytes == host.steady_bytes > host.load_bytes


def test_deepspeed_3448_is_below_deepspeeds_own_estimate():
    """estimate_zero3_model_states_mem_needs(cpu_offload=True, cpu_offload_params=True, zero_init=True): 18Ψ × 1.5
    per node (deepspeed/runtime/zero/stage3.py); trainmem counts the 20Ψ DeepSpeed allocates, the pinned
    rounding and the processes instead of a 1.5 buffer factor — below the estimate and above the 600 GB that
    ran out."""
    host = trainmem.estimate(_setup_3448(model_load="sharded"), suggestions=False).host
    estimator_cpu = int(PSI_33B * 18 * 1.5)
    assert 600 * GB < host.peak_bytes < estimator_cpu


def test_pinned_buffers_are_rounded_to_a_power_of_two():
    """13B on 8 GPUs, ZeRO-3 offload_optimizer: each rank pins its bf16 gradient partition (3.25 GB -> 4 GiB)
    and its fp32 gradient in sub_group_size pieces (1e9 elements = 4 GB -> 4 GiB, and the rest)."""
    setup = Setup.model_validate(
        {
            "model": {"preset": "llama-2-13b"},
            "precision": "bf16-mixed",
            "parallelism": {"num_gpus": 8, "zero_stage": 3, "offload_optimizer": True},
        }
    )
    plan = Plan(setup)
    report = trainmem.estimate(setup, suggestions=False)
    parts = report.ranks[0]
    partition = plan.num_parameters // 8
    offloaded = (
        ("gradient partition", partition * 2, ""),
        ("fp32 gradient partition", partition * 4, ""),
        ("optimizer states", partition * 8, ""),
    )
    sizes = deepspeed.pinned_allocations(plan, offloaded)
    assert sizes == [partition * 2, 4 * 10**9, partition * 4 - 4 * 10**9]
    expected = sum(deepspeed.power_of_two_ceil(size) - size for size in sizes)
    assert deepspeed.power_of_two_ceil(partition * 2) == 4 * 2**30
    host = _parts(report.host.steady_parts)
    assert host["pinned-memory rounding"] == pytest.approx(8 * expected, rel=1e-6)
    assert parts.cpu_offload_bytes > 0
    # On a CPU-only run nothing is page-locked.
    cpu = Plan(Setup.model_validate({**setup.model_dump(), "runtime": {**setup.runtime.model_dump(), "device": "cpu"}}))
    assert deepspeed.pinned_rounding_bytes(cpu, offloaded) == 0


def test_the_model_load_every_rank_rank0_or_sharded():
    """``from_pretrained`` in every process holds one full copy per rank; FSDP's ``sync_module_states`` /
    ``cpu_ram_efficient_loading`` one per node; ``zero.Init`` each rank's partition."""
    loads = {}
    for load in ("every_rank", "rank0", "sharded"):
        host = trainmem.estimate(_setup_3448(model_load=load), suggestions=False).host
        loads[load] = _parts(host.load_parts)["model load"]
    assert loads["every_rank"] == 8 * 2 * PSI_33B
    assert loads["rank0"] == 2 * PSI_33B
    assert loads["sharded"] == pytest.approx(2 * PSI_33B, abs=16)


def test_the_host_report_json_shape():
    """The page reads Report.host: these keys, bytes as integers, parts as name/bytes/detail."""
    data = trainmem.estimate(_setup_3448(host_ram_gib_per_node=1024), suggestions=False).model_dump(mode="json")["host"]
    assert set(data) == {
        "ranks_per_node",
        "peak_bytes",
        "steady_bytes",
        "load_bytes",
        "steady_parts",
        "load_parts",
        "nvme_bytes",
        "budget_bytes",
        "fits",
        "message",
    }
    assert data["fits"] is True and data["budget_bytes"] == 1024 * 2**30
    assert all(set(part) == {"name", "bytes", "detail"} for part in data["steady_parts"] + data["load_parts"])
    assert data["peak_bytes"] == max(data["steady_bytes"], data["load_bytes"])


# Measured with ``python -m trainmem.measure.model_load SETUP.json`` on 2 gloo ranks (torch 2.13.0 CPU,
# DeepSpeed 0.19.8, transformers 5.24), the 7M Llama of the distributed corpus, ZeRO-3 bf16: the setups of
# ``zero3-llama-7m-bf16-w2`` (a plain build) and ``zero3-llama-7m-bf16-init-w2`` (``model_load: sharded``,
# built under ``deepspeed.zero.Init``). Same figures on both ranks.
MEASURED_LOAD = {
    "every_rank": {"build_peak_bytes": 27_993_344, "after_build_bytes": 27_993_344},
    "sharded": {"build_peak_bytes": 17_238_400, "after_build_bytes": 6_998_400},
}


def test_the_measured_model_load_with_and_without_zero_init():
    """A plain build holds the whole model on every rank; under zero.Init a rank keeps its bf16 shard, and while
    a module is built its weights exist in full (the head last: the other shards + the head in fp32 and bf16,
    because from_config builds in fp32 and zero.Init casts; trainmem counts the load dtype's copy)."""
    numel = 6_998_272
    buffers = 256  # RoPE inv_freq and original_inv_freq, fp32 (measured with the model, not loaded)
    head = 8000 * 256

    def host(load):
        return trainmem.estimate(
            {
                "model": {"hf_config": LLAMA_7M},
                "micro_batch_size": 2,
                "sequence_length": 128,
                "precision": "bf16-master-weights",
                "parallelism": {"num_gpus": 2, "zero_stage": 3, "model_load": load, "gpus_per_node": 2},
                "runtime": {"host_process_mib": 0},
            },
            suggestions=False,
        ).host

    every_rank = _parts(host("every_rank").load_parts)
    # measured in fp32 (from_config); trainmem's load dtype is the checkpoint's bf16: half of it, every rank
    assert MEASURED_LOAD["every_rank"]["after_build_bytes"] == numel * 4 + buffers
    assert every_rank["model load"] == 2 * numel * 2
    sharded = _parts(host("sharded").load_parts)
    # the bf16 shard, and 128 B of the two RoPE buffers
    assert MEASURED_LOAD["sharded"]["after_build_bytes"] == numel * 2 // 2 + buffers // 2
    assert sharded["model load"] == 2 * (numel * 2 // 2)  # exact, per rank
    others = numel * 2 // 2 - head * 2 // 2  # every shard but the head's
    assert MEASURED_LOAD["sharded"]["build_peak_bytes"] == others + buffers // 2 + head * 4 + head * 2
    assert sharded["module being partitioned"] == 2 * head * 2


@pytest.mark.torch
@pytest.mark.slow
def test_the_model_load_measurement_reproduces_its_figures():
    """Re-measures MEASURED_LOAD['sharded'] (two gloo ranks, DeepSpeed's CPU accelerator; a few minutes)."""
    pytest.importorskip("deepspeed")
    from trainmem.measure.model_load import measure_model_load

    setup = {
        "model": {"hf_config": LLAMA_7M},
        "micro_batch_size": 2,
        "sequence_length": 128,
        "precision": "bf16-master-weights",
        "optimizer": {"name": "adamw", "implementation": "for-loop"},
        "parallelism": {"num_gpus": 2, "strategy": "zero", "zero_stage": 3, "model_load": "sharded"},
        "runtime": {"device": "cpu"},
    }
    for rank in measure_model_load(setup):
        assert {k: rank[k] for k in ("build_peak_bytes", "after_build_bytes")} == MEASURED_LOAD["sharded"]
