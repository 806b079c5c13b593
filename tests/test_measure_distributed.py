"""The distributed measurement: the tracker's additions, the rebased log, and one real 2-rank run.

The storage-resize and log tests need only torch (one process). ``test_a_two_rank_fsdp2_run``
launches two gloo ranks on 127.0.0.1 and is marked ``slow`` (deselected by default; run
with ``-m slow``).
"""

from __future__ import annotations

import pytest
from small_models import TINY_LLAMA

from trainmem.measure.accounting import PART_BUFFERS_BEFORE_STEP, StepLog, account, rebased_at_first_mark
from trainmem.measure.events import ALLOC, FREE, MARK, ROLE_ALLOCATED, ROLE_PARAMETER, Segment, StorageInfo


def _info(nbytes: int, role: str = ROLE_ALLOCATED) -> StorageInfo:
    return StorageInfo(nbytes=nbytes, op="aten.empty", segment=0, dtype="float32", shape=(nbytes // 4,), role=role)


def test_the_log_is_rebased_at_the_first_marker():
    # a warm-up transient (freed), a bucket that survives into the step, a weight, then the step
    storages = [_info(1000), _info(64), _info(400, ROLE_PARAMETER), _info(8)]
    segments = [Segment("start", "start", 0), Segment("forward", "forward embeddings", 1)]
    events = [(ALLOC, 0, 1000), (ALLOC, 1, 64), (ALLOC, 2, 400), (FREE, 0, 1000), (MARK, 1, 0), (ALLOC, 3, 8)]
    log = rebased_at_first_mark(StepLog(storages=storages, events=events, segments=segments))
    assert log.events[:2] == [(ALLOC, 1, 64), (ALLOC, 2, 400)]
    assert log.assigned == {1: ("overhead", PART_BUFFERS_BEFORE_STEP)}
    result = account(log)
    assert result.start_bytes == 464
    assert result.peak_allocated_bytes == 472  # the warm-up's 1000 bytes are not part of the step
    assert result.breakdown.overhead == 64 and result.breakdown.parameters == 400


torch = pytest.importorskip("torch")


@pytest.mark.torch
def test_in_place_storage_resizes_are_counted():
    from trainmem.measure.tracker import StorageTracker, tracking_storage_resizes

    tracker = StorageTracker()
    with tracker, tracking_storage_resizes(tracker):
        tensor = torch.empty(256)
        storage = tensor.untyped_storage()
        storage.resize_(0)  # FSDP2's free_storage
        storage.resize_(1024 * 4)  # alloc_storage, at a new size
    kinds = [(kind, nbytes) for kind, _, nbytes in tracker.events]
    assert kinds == [(ALLOC, 1024), (FREE, 1024), (ALLOC, 0), (FREE, 0), (ALLOC, 4096)]


@pytest.mark.torch
def test_storages_first_seen_as_inputs_are_never_counted():
    from trainmem.measure.tracker import StorageTracker

    outside = torch.empty(1000)  # allocated before the mode: like gloo's C++ staging buffers
    tracker = StorageTracker()
    with tracker:
        view = outside.view(10, 100)[0]  # an op whose output shares the untracked storage
        del view
    assert tracker.untracked_input_bytes == 4000
    assert not tracker.storages


@pytest.mark.torch
@pytest.mark.slow
def test_a_two_rank_fsdp2_run_matches_the_estimate():
    pytest.importorskip("transformers")
    import trainmem
    from trainmem.measure.distributed import measure_distributed
    from trainmem.validate import compare

    setup = {
        "model": {"hf_config": {**TINY_LLAMA, "tie_word_embeddings": False}},
        "micro_batch_size": 2,
        "sequence_length": 32,
        "precision": "fp32",
        "optimizer": {"name": "adamw", "implementation": "for-loop"},
        "parallelism": {"num_gpus": 2, "strategy": "fsdp"},
        "runtime": {"device": "cpu"},
    }
    ranks = measure_distributed(setup, case_id="tiny-fsdp2")
    assert [m.rank for m in ranks] == [0, 1] and ranks[0].id == "tiny-fsdp2-rank0"
    assert ranks[0].framework == "fsdp2" and ranks[0].parts["parameters/fsdp unsharded parameters"] > 0
    comparison = compare(ranks[0], trainmem.estimate(ranks[0].setup, suggestions=False))
    assert abs(comparison.relative_error) <= 0.05


@pytest.mark.torch
@pytest.mark.slow
def test_a_two_rank_dtensor_tp_run_keeps_a_replicated_embedding_gradient_through_the_update():
    """DTensor TP (trainmem.parallel.dtensor_tp): the embedding's ``.grad`` is the whole vocabulary on each rank, so the
    gradients at the update exceed the rank's weights by the other half of the embedding; the estimate's update
    matches the measured one."""
    pytest.importorskip("transformers")
    import trainmem
    from trainmem.measure.distributed import measure_distributed
    from trainmem.validate import report_for_rank

    config = {**TINY_LLAMA, "tie_word_embeddings": False}
    setup = {
        "model": {"hf_config": config},
        "micro_batch_size": 2,
        "sequence_length": 32,
        "precision": "fp32",
        "optimizer": {"name": "adamw", "implementation": "for-loop"},
        "parallelism": {"num_gpus": 2, "tensor_parallel_size": 2, "tensor_parallel_flavor": "dtensor"},
        "runtime": {"device": "cpu"},
    }
    ranks = measure_distributed(setup, case_id="tiny-tp")
    measured = ranks[0].phase_peaks["optimizer"]
    half_embedding = config["vocab_size"] // 2 * config["hidden_size"] * 4
    assert measured.breakdown.gradients - measured.breakdown.parameters >= half_embedding - 1024
    rank = report_for_rank(trainmem.estimate(ranks[0].setup, suggestions=False), ranks[0])
    timeline = rank.timeline
    index = timeline.phases.index("optimizer")
    assert timeline.gradients[index] == measured.breakdown.gradients


def test_setups_a_local_run_cannot_replay_are_refused():
    from trainmem.measure.distributed import check_distributed
    from trainmem.setup import Setup

    base = {"model": {"preset": "tinyllama-1.1b"}, "runtime": {"device": "cpu"}}  # a vocabulary TP 2 divides
    with pytest.raises(ValueError, match="num_gpus"):
        check_distributed(Setup.model_validate({**base, "parallelism": {"num_gpus": 8}}))
    with pytest.raises(ValueError, match="tensor_parallel_flavor"):
        check_distributed(Setup.model_validate({**base, "parallelism": {"num_gpus": 2, "tensor_parallel_size": 2}}))


def test_deepspeed_zero_on_one_rank_is_measured_through_deepspeed():
    """``num_gpus: 1`` with ``strategy: "zero"`` runs DeepSpeed on one gloo rank (its ZeRO optimizer, buckets
    and partitions exist on one GPU too); one rank of anything else is a single-process step."""
    from trainmem.measure.cli import _one_rank_zero
    from trainmem.measure.distributed import check_distributed
    from trainmem.setup import Setup

    base = {"model": {"preset": "tinyllama-1.1b"}, "runtime": {"device": "cpu"}}
    one_rank_zero = {**base, "parallelism": {"num_gpus": 1, "strategy": "zero", "zero_stage": 2}}
    check_distributed(Setup.model_validate(one_rank_zero))
    assert _one_rank_zero(one_rank_zero)
    assert not _one_rank_zero({**base, "parallelism": {"num_gpus": 1}})
    assert not _one_rank_zero({**base, "parallelism": {"num_gpus": 1, "strategy": "zero", "zero_stage": 0}})
    with pytest.raises(ValueError, match="num_gpus"):
        check_distributed(Setup.model_validate({**base, "parallelism": {"num_gpus": 1, "strategy": "ddp"}}))


@pytest.mark.torch
@pytest.mark.slow
def test_a_two_rank_fsdp1_lora_run_gets_gradients_of_the_whole_flat_parameter():
    """PEFT LoRA under FSDP1 (use_orig_params): the distributed measurement builds the PEFT model, records its
    trainable count and resolved targets, and the ranks hold a gradient shard of every layer's whole FlatParameter
    (trainmem.parallel.fsdp.computes_frozen_gradients), as the estimate says."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    import trainmem
    from trainmem.measure.distributed import measure_distributed
    from trainmem.validate import compare

    setup = {
        "model": {"hf_config": {**TINY_LLAMA, "tie_word_embeddings": False}},
        "micro_batch_size": 2,
        "sequence_length": 32,
        "precision": "fp32",
        "optimizer": {"name": "adamw", "implementation": "for-loop"},
        "parallelism": {"num_gpus": 2, "strategy": "fsdp", "fsdp_version": 1},
        "finetuning": {"method": "lora", "lora": {"r": 8}},
        "runtime": {"device": "cpu"},
    }
    ranks = measure_distributed(setup, case_id="tiny-fsdp1-lora")
    heaviest = max(ranks, key=lambda m: m.peak_allocated_bytes)
    assert heaviest.num_trainable_parameters < heaviest.num_parameters // 10
    assert heaviest.setup.finetuning.lora.target_modules == ["q_proj", "v_proj"]
    report = trainmem.estimate(heaviest.setup, suggestions=False)
    assert report.num_trainable_parameters == heaviest.num_trainable_parameters
    assert abs(compare(heaviest, report).relative_error) <= 0.05
    update = heaviest.timeline.labels.index("optimizer")
    assert heaviest.timeline.gradients[update] > heaviest.num_trainable_parameters * 4  # the frozen weights' too


def test_the_distributed_measurement_replays_lora_and_fsdp2_with_tp_and_names_what_it_cannot():
    from trainmem.measure.distributed import check_distributed
    from trainmem.setup import Setup

    def setup(**fields):
        return Setup.model_validate({"model": {"hf_config": TINY_LLAMA}, "runtime": {"device": "cpu"}, **fields})

    lora = {"method": "lora", "lora": {"r": 8}}
    check_distributed(setup(parallelism={"num_gpus": 2, "strategy": "fsdp"}, finetuning=lora))
    check_distributed(setup(parallelism={"num_gpus": 2, "strategy": "zero", "zero_stage": 3}, finetuning=lora))
    two_d = {"num_gpus": 4, "strategy": "fsdp", "tensor_parallel_size": 2, "tensor_parallel_flavor": "dtensor"}
    check_distributed(setup(parallelism={**two_d, "sequence_parallel": True}))
    with pytest.raises(ValueError, match="finetuning.method 'qlora'"):
        check_distributed(setup(parallelism={"num_gpus": 2, "strategy": "ddp"}, finetuning={"method": "qlora"}))
    with pytest.raises(ValueError, match="LoRA under tensor parallelism"):
        check_distributed(setup(parallelism={**two_d, "sequence_parallel": True}, finetuning=lora))
    with pytest.raises(ValueError, match="other than FSDP2"):
        check_distributed(setup(parallelism={**two_d, "fsdp_version": 1, "sequence_parallel": True}))
