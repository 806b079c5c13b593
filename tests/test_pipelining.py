"""Pipeline parallelism as torch.distributed.pipelining runs it (trainmem.parallel.pipelining).

The measured cases (corpus_distributed.jsonl, ids ``pp-*``: 2 and 4 gloo ranks, a 4- or 8-layer Llama split
by layers, ScheduleGPipe, Schedule1F1B with 2 and 4 micro-batches, ScheduleInterleaved1F1B with
2 stages per rank) are gated per rank in tests/test_validation_distributed.py; here: the schedule
rules against torch's own schedule definitions, that the default (Megatron) path is unchanged,
and the one-line errors of the CLI.
"""

from __future__ import annotations

import json

import pytest
from small_models import LLAMA_7M as LLAMA

import trainmem
from trainmem.cli import main
from trainmem.parallel.pipelining import in_flight_chunks


def setup(schedule=None, micro_batches=4, pipeline=2, virtual=1, layers=4):
    parallelism = {"num_gpus": pipeline, "pipeline_parallel_size": pipeline, "pipeline_virtual_stages": virtual}
    if schedule is not None:
        parallelism["pipeline_schedule"] = schedule
    return {
        "model": {"hf_config": {**LLAMA, "num_hidden_layers": layers}},
        "micro_batch_size": 2,
        "sequence_length": 128,
        "gradient_accumulation_steps": micro_batches,
        "precision": "fp32",
        "parallelism": parallelism,
        "runtime": {"device": "cpu"},
    }


@pytest.mark.parametrize(
    ("schedule", "rank", "pipeline", "virtual", "micro_batches", "expected"),
    [
        ("gpipe", 0, 2, 1, 4, 4),  # fill-drain: every forward before any backward
        ("gpipe", 1, 2, 1, 4, 4),
        ("1f1b", 0, 2, 1, 4, 2),  # warm-up min(n, p − r)
        ("1f1b", 1, 2, 1, 4, 1),
        ("1f1b", 0, 4, 1, 2, 2),
        ("interleaved_1f1b", 0, 2, 2, 4, 5),  # warm-up (v−1)·k + 2(p−1−r) = 4, then one more forward
        ("interleaved_1f1b", 1, 2, 2, 4, 3),
        ("interleaved_1f1b", 0, 4, 2, 2, 4),  # capped at n·v: no steady state left
    ],
)
def test_chunks_in_flight_follow_torchs_schedules(schedule, rank, pipeline, virtual, micro_batches, expected):
    assert in_flight_chunks(schedule, rank, pipeline, virtual, micro_batches) == expected


def test_interleaved_rank0_matches_korthikanti_factor_when_warmup_fills_the_rounds():
    """Rank 0 of interleaved 1F1B with n = p holds L(1 + (p − 1)/(p·v)) layers' worth (Korthikanti §4.2.3)
    when its warm-up covers p·(v − 1) + 2(p − 1) chunk forwards plus one: for p = 2, v = 2, 5 chunks of L/4."""
    chunks = in_flight_chunks("interleaved_1f1b", 0, 2, 2, 4)
    assert chunks / 4 == 1 + (2 - 1) / (2 * 2)


def test_the_default_schedule_is_megatrons_and_unchanged():
    """No pipeline_schedule: Megatron-Core's 1F1B as before (no receive buffers, no kept logits)."""
    report = trainmem.estimate(setup(), suggestions=False)
    names = {part.name for rank in report.ranks for part in rank.parts}
    assert "pipeline receive buffers" not in names and "pipeline stage output" not in names


def test_torch_pipelining_adds_receive_buffers_and_the_kept_logits():
    report = trainmem.estimate(setup("1f1b"), suggestions=False)
    first, last = report.ranks
    hidden = 2 * 128 * 256 * 4
    buffers = {rank.name: sum(p.bytes for p in rank.parts if p.name == "pipeline receive buffers") for rank in report.ranks}
    assert buffers == {first.name: 4 * hidden, last.name: 4 * hidden}  # one per micro-batch
    kept = [p.bytes for p in last.parts if p.name == "pipeline stage output"]
    assert kept in ([2 * 128 * 8000 * 4], [0])  # the logits, alive at the last stage's peak
    assert last.peak_allocated_bytes > first.peak_allocated_bytes


def test_gpipe_holds_more_than_1f1b():
    gpipe = trainmem.estimate(setup("gpipe"), suggestions=False)
    one_f_one_b = trainmem.estimate(setup("1f1b"), suggestions=False)
    assert gpipe.ranks[0].peak_allocated_bytes > one_f_one_b.ranks[0].peak_allocated_bytes
    assert gpipe.ranks[-1].peak_allocated_bytes > one_f_one_b.ranks[-1].peak_allocated_bytes


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"pipeline": 8, "layers": 4, "micro_batches": 8}, "parallelism.pipeline_parallel_size"),
        ({"virtual": 3, "schedule": "interleaved_1f1b"}, "parallelism.pipeline_virtual_stages"),
        ({"virtual": 2, "layers": 6}, "parallelism.pipeline_virtual_stages"),  # 3 layers per stage
        ({"schedule": "interleaved_1f1b"}, "parallelism.pipeline_virtual_stages"),
        ({"schedule": "1f1b", "virtual": 2}, "parallelism.pipeline_virtual_stages"),
        ({"schedule": "gpipe", "pipeline": 1}, "parallelism.pipeline_schedule"),
        ({"schedule": "interleaved_1f1b", "virtual": 2, "micro_batches": 5}, "gradient_accumulation_steps"),  # 2 rounds
    ],
)
def test_bad_pipeline_layouts_are_one_line_errors(tmp_path, capsys, overrides, field):
    data = setup(**overrides)
    if overrides.get("pipeline") == 1:
        data["parallelism"] = {"pipeline_schedule": overrides["schedule"]}
    path = tmp_path / "setup.json"
    path.write_text(json.dumps(data))
    code = main(["estimate", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and err.startswith("trainmem: error: ")
    assert field.split(".")[-1] in err, err


def test_pp_larger_than_the_layers_names_the_layer_count(tmp_path, capsys):
    path = tmp_path / "setup.json"
    path.write_text(json.dumps(setup(pipeline=8, layers=4, micro_batches=8)))
    assert main(["estimate", str(path)]) == 2
    assert "cannot exceed num_hidden_layers (4)" in capsys.readouterr().err


def test_1f1b_middle_ranks_are_told_apart():
    """Rank r of Schedule1F1B holds min(n, p − r) micro-batches: ranks 1 and 2 of 4 differ, so each is
    simulated (Megatron's path keeps one middle stage); the ranks add up to the GPUs."""
    report = trainmem.estimate(setup("1f1b", micro_batches=4, pipeline=4), suggestions=False)
    names = [rank.name for rank in report.ranks]
    assert names == [
        "first pipeline stage",
        "middle pipeline stage (rank 1)",
        "middle pipeline stage (rank 2)",
        "last pipeline stage",
    ]
    assert sum(rank.num_ranks for rank in report.ranks) == 4
    assert report.ranks[1].peak_allocated_bytes > report.ranks[2].peak_allocated_bytes
    megatron = trainmem.estimate(setup(micro_batches=4, pipeline=4), suggestions=False)
    assert [rank.name for rank in megatron.ranks][1:-1] == ["middle pipeline stages"]


def test_setups_a_local_pipeline_run_cannot_replay_are_refused():
    from trainmem.measure.pipelining import check_pipeline
    from trainmem.setup import Setup

    mixed = Setup.model_validate({**setup("1f1b"), "precision": "amp-bf16"})
    with pytest.raises(ValueError, match="precision 'amp-bf16'"):
        check_pipeline(mixed)
    with_data_parallel = setup("1f1b")
    with_data_parallel["parallelism"] = {**with_data_parallel["parallelism"], "num_gpus": 4}
    with pytest.raises(ValueError, match="combined with data"):
        check_pipeline(Setup.model_validate(with_data_parallel))


@pytest.mark.torch
@pytest.mark.slow
def test_a_two_rank_1f1b_run_matches_the_estimate():
    """A real 2-rank Schedule1F1B run on gloo (about 80 s on two cores), each rank against its stage."""
    pytest.importorskip("torch")
    from trainmem.measure.distributed import measure_distributed
    from trainmem.validate import compare, report_for_rank

    measurements = measure_distributed(setup("1f1b", micro_batches=2))
    assert [m.id.rsplit("-", 1)[-1] for m in measurements] == ["rank0", "rank1"]
    for measurement in measurements:
        assert measurement.framework == "pipelining" and measurement.parts["pipeline receive buffers"] == 2 * 2 * 128 * 256 * 4
        report = report_for_rank(trainmem.estimate(measurement.setup, suggestions=False), measurement)
        assert abs(compare(measurement, report).relative_error) <= 0.01


@pytest.mark.torch
@pytest.mark.parametrize(("pipeline", "virtual", "micro_batches"), [(2, 2, 4), (4, 2, 4), (4, 2, 8), (2, 3, 2), (4, 3, 6)])
def test_interleaved_order_is_torchs(pipeline, virtual, micro_batches):
    """trainmem's order of chunk forwards and backwards per rank equals the pipeline_order torch builds
    (ScheduleInterleaved1F1B._calculate_single_rank_operations, evaluated on a stand-in schedule)."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    from types import SimpleNamespace

    from trainmem.parallel.pipelining import interleaved_order

    rounds = max(1, micro_batches // pipeline)
    stand_in = SimpleNamespace(
        n_local_stages=virtual,
        microbatches_per_round=micro_batches // rounds,
        pp_group_size=pipeline,
        _n_microbatches=micro_batches,
    )
    for rank in range(pipeline):
        actions = schedules.ScheduleInterleaved1F1B._calculate_single_rank_operations(stand_in, rank)
        theirs = [
            ("F" if action.computation_type == schedules._ComputationType.FORWARD else "B", action.stage_index // pipeline)
            for action in actions
            if action is not None
        ]
        assert interleaved_order(rank, pipeline, virtual, micro_batches) == theirs


def test_interleaved_moments_follow_the_ranks_order():
    """ScheduleInterleaved1F1B on 4 ranks × 2 chunks, 4 micro-batches (one round): the last rank runs all four
    backwards of its head chunk before the first of its other chunk; its later pass stands for the fourth
    (5 chunks in flight, the tie broken towards the later one), when only the head chunk has gradients and
    three input gradients sent back are still held by their send works."""
    from trainmem.parallel.pipelining import interleaved_chunk_moments

    first = interleaved_chunk_moments(3, 4, 2, 4, later=False)
    later = interleaved_chunk_moments(3, 4, 2, 4, later=True)
    assert [m.in_flight for m in first] == [4, 5] and first[1].with_gradients == frozenset()
    assert later[1].in_flight == 5 and later[1].with_gradients == {1} and later[1].sent == 3
    assert later[0].with_gradients == {0, 1}  # at the other chunk's second backward, its own first is done
    # rank 0: every forward runs before the first backward (no steady state); its chunk 0 receives nothing
    rank0 = interleaved_chunk_moments(0, 4, 2, 4, later=False)
    assert rank0[1].in_flight == 8 and rank0[1].received == 4
    assert rank0[0].in_flight == 4 and rank0[0].sent == 8  # four backwards of chunk 1: outputs and input grads


INTERLEAVED_W4 = "pp-interleaved-v2-llama-8l-fp32-mb4-w4"


def test_each_four_rank_interleaved_rank_has_the_gradients_of_the_chunks_that_ran_backward():
    """Each rank of the 4 × 2 interleaved run peaks while only some of its chunks have gradients (rank 0 and 1
    in the first backward of their last chunk, rank 2 at its second, rank 3 at the fourth of its head chunk);
    the gradient category at the predicted peak is the measured one to the byte."""
    from trainmem.measure.corpus import default_corpus_path, load_corpus
    from trainmem.validate import report_for_rank

    ranks = [m for m in load_corpus(default_corpus_path(distributed=True)) if m.id.startswith(INTERLEAVED_W4 + "-rank")]
    assert [m.rank for m in ranks] == [0, 1, 2, 3]
    report = trainmem.estimate(ranks[0].setup, suggestions=False)
    for measurement in ranks:
        rank = report_for_rank(report, measurement)
        assert rank.breakdown.gradients == measurement.breakdown.gradients < measurement.num_parameters * 4


def _plan(schedule, micro_batches, pipeline, virtual=1, layers=4):
    from trainmem.plan import Plan
    from trainmem.setup import Setup

    return Plan(Setup.model_validate(setup(schedule, micro_batches, pipeline, virtual, layers)))


@pytest.mark.parametrize(
    ("schedule", "pipeline", "micro_batches", "index", "expected"),
    [
        ("1f1b", 2, 4, 0, 1),  # warm-up 2: micro-batch 1's send work outlives its backward until the 1B1F loop ends
        ("1f1b", 4, 4, 2, 1),
        ("1f1b", 4, 4, 1, 0),  # warm-up 3: the kept send (micro-batch 2) is backwarded only after the loop
        ("1f1b", 4, 4, 0, 0),  # warm-up 4 = n: the loop ends at the first backward
        ("1f1b", 2, 2, 0, 0),
        ("gpipe", 2, 4, 0, 1),  # every forward send waits in fwd_sends_to_wait through the backward
    ],
)
def test_outputs_held_by_forward_send_works_follow_torchs_schedules(schedule, pipeline, micro_batches, index, expected):
    from trainmem.parallel.pipelining import sent_outputs_held
    from trainmem.plan import Stage

    plan = _plan(schedule, micro_batches, pipeline)
    stage = Stage(index, 4 // pipeline, index == 0, False, 1)
    assert sent_outputs_held(plan, stage) == expected
    last = Stage(pipeline - 1, 4 // pipeline, False, True, 1)
    assert sent_outputs_held(plan, last) == 0  # the last stage sends nothing forward


def test_the_output_is_held_below_the_top_layer_of_each_chunk_that_receives_its_gradient():
    from trainmem.parallel.pipelining import received_gradient_layers
    from trainmem.plan import Stage

    plan = _plan("1f1b", 4, 2)
    assert received_gradient_layers(plan, Stage(0, 2, True, False, 2)) == {1}
    assert received_gradient_layers(plan, Stage(1, 2, False, True, 1)) == set()
    interleaved = _plan("interleaved_1f1b", 4, 2, virtual=2, layers=8)
    assert received_gradient_layers(interleaved, Stage(0, 4, True, False, 5)) == {1, 3}
    assert received_gradient_layers(interleaved, Stage(1, 4, False, True, 3)) == {5}  # not the head's chunk
    assert received_gradient_layers(_plan(None, 4, 2), Stage(0, 2, True, False, 2)) == set()  # Megatron's path
