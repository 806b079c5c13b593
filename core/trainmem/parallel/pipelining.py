"""Pipeline parallelism as ``torch.distributed.pipelining`` runs it (PyTorch 2.13).

A rank holds one ``PipelineStage`` (``ScheduleGPipe``, ``Schedule1F1B``) or
``pipeline_virtual_stages`` of them (``ScheduleInterleaved1F1B``: rank r holds stages r, r + p, …,
torchtitan's ``"loop"`` placement). What its memory holds beyond the stage's weights, gradients
and optimizer states (torch/distributed/pipelining/stage.py and schedules.py):

* **micro-batches in flight** — forwards whose activations wait for their backward:
  GPipe runs all ``n_microbatches`` forwards before any backward
  (``ScheduleGPipe._step_microbatches``); 1F1B runs ``min(n, p − r)`` warm-up forwards on
  rank r and then one backward before each further forward (``Schedule1F1B``: "1B1F");
  interleaved 1F1B runs ``min((v − 1)·k + 2(p − 1 − r), n·v)`` warm-up chunk forwards, with
  k = n / max(1, n // p) micro-batches per round (``_get_warmup_ops``), then one more forward
  before each backward (``_get_1f1b_rank_ops``), so ``warm-up + 1`` chunks are in flight when
  any steady-state op remains. Each chunk holds L/(p·v) layers.
* **receive buffers** — every non-first stage allocates one activation receive buffer per
  micro-batch when it first runs (``PipelineStage._setup_forward_recv_info``), and every
  non-last stage one gradient receive buffer per micro-batch (``_create_grad_recv_info``);
  they live as long as the schedule. The activation buffers are autograd leaves, so
  backward leaves the input's gradient in their ``.grad`` until the next step's
  ``clear_runtime_states``.
* **the last stage's output** — ``fwd_cache`` keeps each micro-batch's stage output (the
  logits) from its forward until its backward; the single-process step drops the logits
  after the loss. ``step(return_outputs=False)`` (torchtitan's call) keeps no merged outputs.

On CUDA, NCCL's send/recv go through its own channel buffers (``NCCL_BUFFSIZE``, 4 MiB per
channel and peer, outside the caching allocator); gloo on CPU has none; the NCCL part is
:mod:`trainmem.parallel.nccl`'s assumption, not measured here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import FieldError

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan, Stage

SCHEDULE_CLASSES = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved_1f1b": "ScheduleInterleaved1F1B",
}


def check_schedule(parallel: Any) -> None:
    """A schedule needs a pipeline; interleaving needs virtual stages, and only interleaving has them."""
    schedule = parallel.pipeline_schedule
    if schedule is None:
        return
    if parallel.pipeline_parallel_size == 1:
        raise FieldError(
            "parallelism.pipeline_schedule",
            f"pipeline_schedule {schedule!r} needs pipeline_parallel_size > 1 (a schedule without pipeline parallelism)",
        )
    if schedule == "interleaved_1f1b" and parallel.pipeline_virtual_stages < 2:
        raise FieldError(
            "parallelism.pipeline_virtual_stages",
            "pipeline_schedule 'interleaved_1f1b' needs pipeline_virtual_stages ≥ 2 (stages per rank)",
        )
    if schedule != "interleaved_1f1b" and parallel.pipeline_virtual_stages > 1:
        raise FieldError(
            "parallelism.pipeline_virtual_stages",
            f"pipeline_schedule {schedule!r} runs one stage per rank; pipeline_virtual_stages > 1 needs 'interleaved_1f1b'",
        )


def check_micro_batches(micro_batches: int, parallel: Any) -> None:
    """``ScheduleInterleaved1F1B`` runs max(1, n // p) rounds and refuses an n they do not divide."""
    if parallel.pipeline_schedule != "interleaved_1f1b":
        return
    rounds = max(1, micro_batches // parallel.pipeline_parallel_size)
    if micro_batches % rounds:
        raise FieldError(
            "gradient_accumulation_steps",
            f"ScheduleInterleaved1F1B needs the micro-batches per step (gradient_accumulation_steps {micro_batches}) "
            f"to be a multiple of its rounds, max(1, {micro_batches} // pipeline_parallel_size) = {rounds}",
        )


def check_layers(num_hidden_layers: int, parallel: Any) -> None:
    """Every stage needs whole layers: p ≤ L, and L/p divisible by the virtual stages (Megatron-LM's
    validate_args asserts the same for ``--num-layers-per-virtual-pipeline-stage``)."""
    pp, virtual = parallel.pipeline_parallel_size, parallel.pipeline_virtual_stages
    if pp > num_hidden_layers:
        raise FieldError(
            "parallelism.pipeline_parallel_size",
            f"parallelism.pipeline_parallel_size ({pp}) cannot exceed num_hidden_layers ({num_hidden_layers}): "
            "every stage needs at least one layer",
        )
    if virtual > 1 and num_hidden_layers % (pp * virtual):
        raise FieldError(
            "parallelism.pipeline_virtual_stages",
            f"parallelism.pipeline_virtual_stages ({virtual}) must divide the layers per pipeline stage "
            f"(num_hidden_layers {num_hidden_layers} / pipeline_parallel_size {pp})",
        )


def runs_torch_pipelining(plan: "Plan") -> bool:
    return plan.parallel.pipeline_parallel_size > 1 and plan.parallel.pipeline_schedule is not None


def in_flight_chunks(schedule: str, rank: int, pipeline_size: int, virtual_stages: int, micro_batches: int) -> int:
    """Chunk forwards (of L/(p·v) layers each) whose activations rank ``rank`` holds at once."""
    if schedule == "gpipe":
        return micro_batches
    if schedule == "1f1b":
        return min(micro_batches, pipeline_size - rank)
    warmup, steady = _interleaved_phases(rank, pipeline_size, virtual_stages, micro_batches)
    return warmup + 1 if steady else warmup


def _interleaved_phases(rank: int, pipeline_size: int, virtual_stages: int, micro_batches: int) -> tuple[int, int]:
    """(warm-up chunk forwards, steady forward-backward pairs) of ScheduleInterleaved1F1B on ``rank``."""
    rounds = max(1, micro_batches // pipeline_size)
    per_round = micro_batches // rounds
    total = micro_batches * virtual_stages
    warmup = min((virtual_stages - 1) * per_round + 2 * (pipeline_size - 1 - rank), total)
    return warmup, total - warmup


def interleaved_order(rank: int, pipeline_size: int, virtual_stages: int, micro_batches: int) -> list[tuple[str, int]]:
    """The rank's chunk operations in order, ("F" | "B", local chunk): warm-up forwards, then a forward
    and a backward per step, then the cool-down backwards; forwards walk the local chunks first to last,
    backwards last to first, one round of micro-batches at a time (torch's ``_get_1f1b_rank_ops`` with
    ``ScheduleInterleaved1F1B``'s stage-index rules)."""
    rounds = max(1, micro_batches // pipeline_size)
    per_round = micro_batches // rounds
    warmup, steady = _interleaved_phases(rank, pipeline_size, virtual_stages, micro_batches)
    forward = lambda step: (step // per_round) % virtual_stages  # noqa: E731
    backward = lambda step: virtual_stages - 1 - ((step - warmup) // per_round) % virtual_stages  # noqa: E731
    order = [("F", forward(step)) for step in range(warmup)]
    for step in range(warmup, warmup + steady):
        order += [("F", forward(step)), ("B", backward(step))]
    order += [("B", backward(step)) for step in range(warmup + steady, warmup + steady + warmup)]
    return order


class ChunkMoment(NamedTuple):
    """The state of a rank under interleaved 1F1B at the backward of one of its chunks."""

    in_flight: int  # chunk forwards whose activations wait for their backward (this one included)
    with_gradients: frozenset  # local chunks that have had a backward: their .grad tensors exist
    sent: int  # hidden-state tensors held by send works: outputs and input gradients already sent
    received: int  # chunks in flight whose input is a receive buffer (their first layer saves no copy)


def sends_output(rank: int, pipeline_size: int, virtual_stages: int, chunk: int) -> bool:
    """Every stage but the last (the head's, on the last rank's last chunk) sends its output on."""
    return not (rank == pipeline_size - 1 and chunk == virtual_stages - 1)


def receives_input(rank: int, chunk: int) -> bool:
    """Every stage but the first (rank 0's first chunk, with the embedding) receives its input."""
    return not (rank == 0 and chunk == 0)


def interleaved_backward_moments(
    rank: int, pipeline_size: int, virtual_stages: int, micro_batches: int
) -> dict[tuple[int, int], ChunkMoment]:
    """Walk the rank's order (:func:`interleaved_order`) and note the :class:`ChunkMoment` at the backward of
    each (local chunk, micro-batch), micro-batches counted from 1 per chunk in the order the chunk runs them.

    A chunk's ``.grad`` tensors appear at its first backward and stay until the optimizer step. The
    sends: ``ScheduleInterleaved1F1B`` runs on ``_PipelineScheduleRuntime``, whose ``_step_microbatches``
    (torch/distributed/pipelining/schedules.py) keeps every send's work in ``send_ops`` and waits on them
    only when the step's actions are done, so each output sent on (``get_fwd_send_ops``, a detached view
    of the output) outlives its backward, and each input gradient sent back (``get_bwd_send_ops``) its
    chunk's backward (measured: ``pp-interleaved-v2-llama-*``, one hidden state left per backward of a
    chunk that sends its output, one more where it also received its input)."""
    forwards_in_flight = 0
    sent = 0
    received = 0
    backwards = [0] * virtual_stages
    with_gradients: set[int] = set()
    moments: dict[tuple[int, int], ChunkMoment] = {}
    for kind, chunk in interleaved_order(rank, pipeline_size, virtual_stages, micro_batches):
        if kind == "F":
            forwards_in_flight += 1
            received += receives_input(rank, chunk)
            continue
        backwards[chunk] += 1
        moments[(chunk, backwards[chunk])] = ChunkMoment(forwards_in_flight, frozenset(with_gradients), sent, received)
        forwards_in_flight -= 1
        received -= receives_input(rank, chunk)
        with_gradients.add(chunk)
        sent += sends_output(rank, pipeline_size, virtual_stages, chunk) + receives_input(rank, chunk)
    return moments


def interleaved_chunk_moments(
    rank: int, pipeline_size: int, virtual_stages: int, micro_batches: int, later: bool
) -> list[ChunkMoment]:
    """Per local chunk (index = chunk), the moment of the rank's order that the step simulation's pass
    stands for at that chunk's backward (:func:`interleaved_backward_moments`):

    * the first pass (micro-batch 1): each chunk's first backward — the chunks after it have their
      gradients, it makes its own, the chunks before it have none yet;
    * the later pass (micro-batches 2 … n): of each chunk's later backwards the one with the most
      chunks in flight, the latest on a tie (more gradients and sends exist by then). In the first
      round (k = n / rounds micro-batches) the chunks before it still have no gradients: on the last
      rank of 4 × 2 the head's chunk runs all its backwards before the other chunk's first (measured:
      ``pp-interleaved-v2-llama-8l-fp32-mb4-w4``, rank 3 at its fourth head backward without the other
      chunk's gradients)."""
    moments = interleaved_backward_moments(rank, pipeline_size, virtual_stages, micro_batches)
    chosen = []
    for chunk in range(virtual_stages):
        if not later:
            chosen.append(moments[(chunk, 1)])
            continue
        candidates = [(moments[(chunk, j)].in_flight, j) for j in range(2, micro_batches + 1)]
        _, j = max(candidates) if candidates else (0, 1)
        chosen.append(moments[(chunk, j)])
    return chosen


def chunk_moments(plan: "Plan", stage: "Stage", micro_batch: int) -> "list[ChunkMoment] | None":
    """:func:`interleaved_chunk_moments` for a simulated stage's pass (``micro_batch`` 1, or 2 for the later
    ones); None outside interleaved 1F1B."""
    parallel = plan.parallel
    if not runs_torch_pipelining(plan) or parallel.pipeline_virtual_stages == 1:
        return None
    micro_batches = plan.setup.gradient_accumulation_steps
    if micro_batch > 1 and micro_batches == 1:
        return None
    return interleaved_chunk_moments(
        rank_of(stage, parallel.pipeline_parallel_size),
        parallel.pipeline_parallel_size,
        parallel.pipeline_virtual_stages,
        micro_batches,
        later=micro_batch > 1,
    )


def rank_of(stage: "Stage", pipeline_size: int) -> int:
    """The pipeline rank a simulated stage stands for (a middle stage carries its first rank as index)."""
    if stage.has_head and stage.index > 0:
        return pipeline_size - 1
    return stage.index


def receive_buffers(plan: "Plan", stage: "Stage") -> tuple[int, int]:
    """(activation, gradient) receive buffers a rank of ``stage`` allocates: one per micro-batch and
    per local stage that has a neighbour on that side."""
    parallel = plan.parallel
    virtual = parallel.pipeline_virtual_stages
    micro_batches = plan.setup.gradient_accumulation_steps
    rank = rank_of(stage, parallel.pipeline_parallel_size)
    last = parallel.pipeline_parallel_size - 1
    activation_stages = virtual - (1 if rank == 0 else 0)
    gradient_stages = virtual - (1 if rank == last else 0)
    return activation_stages * micro_batches, gradient_stages * micro_batches


BUFFERS_DETAIL = (
    "PipelineStage receive buffers, one per micro-batch (torch.distributed.pipelining stage.py: "
    "_setup_forward_recv_info, _create_grad_recv_info)"
)
INPUT_GRADS_DETAIL = "the stage input's gradient left in each activation receive buffer's .grad (sent back, kept until the next step)"
OUTPUT_DETAIL = "the last stage's output (logits) kept in PipelineStage.fwd_cache until its backward"


def middle_groups(parallel: Any, micro_batches: int) -> list[tuple[int, int]]:
    """The middle ranks 1 … p − 2 as runs (first rank, last rank) that hold the same chunks in flight:
    under 1F1B rank r holds min(n, p − r), so middle ranks differ; each run is simulated once."""
    groups: list[tuple[int, int]] = []
    previous = None
    for rank in range(1, parallel.pipeline_parallel_size - 1):
        chunks = in_flight_chunks(
            parallel.pipeline_schedule, rank, parallel.pipeline_parallel_size, parallel.pipeline_virtual_stages, micro_batches
        )
        if chunks == previous:
            groups[-1] = (groups[-1][0], rank)
        else:
            groups.append((rank, rank))
        previous = chunks
    return groups


def with_schedule(plan: "Plan", stages: list) -> list:
    """The plan's stages with the chunks in flight of the torch schedule, one middle stage per run of
    middle ranks that hold the same number (:func:`middle_groups`)."""
    if not runs_torch_pipelining(plan):
        return stages
    from dataclasses import replace

    parallel = plan.parallel
    micro_batches = plan.setup.gradient_accumulation_steps
    first, last = stages[0], stages[-1]
    middles = [replace(first, index=rank, has_embedding=False) for rank, _ in middle_groups(parallel, micro_batches)]
    return [
        replace(
            stage,
            in_flight_micro_batches=in_flight_chunks(
                parallel.pipeline_schedule,
                rank_of(stage, parallel.pipeline_parallel_size),
                parallel.pipeline_parallel_size,
                parallel.pipeline_virtual_stages,
                micro_batches,
            ),
        )
        for stage in [first, *middles, last]
    ]


def middle_name(plan: "Plan", stage: "Stage") -> str:
    """``middle pipeline stages`` with the ranks it stands for, when the torch schedule tells them apart."""
    groups = middle_groups(plan.parallel, plan.setup.gradient_accumulation_steps)
    if not runs_torch_pipelining(plan) or len(groups) < 2:
        return "middle pipeline stages"
    first, last = next(group for group in groups if group[0] == stage.index)
    return f"middle pipeline stage (rank {first})" if first == last else f"middle pipeline stages (ranks {first}–{last})"


def middle_ranks(plan: "Plan", stage: "Stage") -> int:
    """Pipeline ranks a middle stage stands for (0 when the Megatron path's one middle stage does)."""
    if not runs_torch_pipelining(plan):
        return 0
    first, last = next(group for group in middle_groups(plan.parallel, plan.setup.gradient_accumulation_steps) if group[0] == stage.index)
    return last - first + 1


def report_rank_of(parallel: Any, micro_batches: int, pipeline_rank: int) -> int:
    """Which of a report's ranks (first, middles in order, last) a pipeline rank is."""
    if pipeline_rank == 0:
        return 0
    groups = middle_groups(parallel, micro_batches) if parallel.pipeline_schedule else [(1, parallel.pipeline_parallel_size - 2)]
    if pipeline_rank == parallel.pipeline_parallel_size - 1:
        return len(groups) + 1
    return 1 + next(i for i, (first, last) in enumerate(groups) if first <= pipeline_rank <= last)


def later_in_flight(plan: "Plan", stage: "Stage") -> int:
    """Chunks in flight at the backward of a later micro-batch (gradients exist by then): one fewer than
    all the rank's chunks are left to run forward, so min(in flight, n·v − 1) — 1F1B's rank 0 with
    n = p holds one micro-batch at its last backward, GPipe n − 1 at its second."""
    parallel = plan.parallel
    micro_batches = plan.setup.gradient_accumulation_steps
    moments = chunk_moments(plan, stage, 2)
    if moments is not None:  # interleaved 1F1B: at the later pass's backward of the rank's last chunk
        return moments[-1][0]
    return max(1, min(stage.in_flight_micro_batches, micro_batches - 1))


def earlier_layers(plan: "Plan", stage: "Stage", in_flight: int) -> int:
    """Layers' worth of activations of the other chunks in flight while the rank runs one micro-batch
    through all its layers."""
    return max(0, in_flight * stage.num_layers // plan.parallel.pipeline_virtual_stages - stage.num_layers)


def _stream_bytes(plan: "Plan") -> int:
    from ..allocator import rounded
    from ..tape import DTYPE_BYTES

    setup = plan.setup
    return rounded(
        setup.micro_batch_size * setup.sequence_length * plan.architecture.hidden_size * DTYPE_BYTES[plan.precision.stream_dtype],
        plan.device,
    )


def receive_buffer_bytes(plan: "Plan", stage: "Stage") -> int:
    """The stage's activation and gradient receive buffers (each one micro-batch's hidden states)."""
    if not runs_torch_pipelining(plan) or plan.architecture is None:
        return 0
    return sum(receive_buffers(plan, stage)) * _stream_bytes(plan)


def output_bytes(plan: "Plan", stage: "Stage") -> int:
    """The last stage's output, the logits of one micro-batch, that ``fwd_cache`` keeps until its backward."""
    if not runs_torch_pipelining(plan) or not stage.has_head or plan.architecture is None:
        return 0
    from ..allocator import rounded
    from ..tape import DTYPE_BYTES

    setup = plan.setup
    vocabulary = plan.architecture.vocab_size // plan.parallel.tensor_parallel_size
    return rounded(
        setup.micro_batch_size * setup.sequence_length * vocabulary * DTYPE_BYTES[plan.precision.stream_dtype], plan.device
    )


def earlier_outputs_bytes(plan: "Plan", stage: "Stage", in_flight: int, head_saved_bytes: int, rotary_bytes: int) -> int:
    """What each earlier chunk in flight keeps besides its layers' saved tensors: its own rotary cos/sin
    (every stage module computes them), and its output in ``fwd_cache`` — the hidden states, or on
    GPipe's last stage the logits with the loss's saved tensors (the loss waits for the drain); on a
    stage that receives its input, less that input, which is a receive buffer.
    (The current chunk's output on a non-last stage stands where the single-process step counts the
    incoming activation gradient, which here is the gradient receive buffer.)"""
    if not runs_torch_pipelining(plan):
        return 0
    earlier = in_flight - 1
    if stage.has_head and plan.parallel.pipeline_schedule == "gpipe":
        kept = output_bytes(plan, stage) + head_saved_bytes
    else:
        kept = _stream_bytes(plan)
    if stage.index > 0 and plan.parallel.pipeline_virtual_stages == 1:
        # The chunk's input, which its first layer saves, is its activation receive buffer (counted apart).
        kept -= _stream_bytes(plan)
    return earlier * (kept + rotary_bytes)


def chunk_groups(plan: "Plan", stage: "Stage", indices: list[int]) -> list[list[int]]:
    """``indices`` (ascending layers of the rank) cut where one of its interleaved chunks ends, last chunk
    first, so that the step simulation can set each chunk's moment (:func:`chunk_held_bytes`) as its backward starts."""
    virtual = plan.parallel.pipeline_virtual_stages
    if not runs_torch_pipelining(plan) or virtual == 1 or not indices:
        return [indices]
    chunk_layers = stage.num_layers // virtual
    groups: dict[int, list[int]] = {}
    for index in indices:
        groups.setdefault((index - stage.first_layer) // chunk_layers, []).append(index)
    return [groups[chunk] for chunk in sorted(groups, reverse=True)]


def chunk_of(plan: "Plan", stage: "Stage", indices: list[int]) -> int:
    """The local interleaved chunk that a group of :func:`chunk_groups` belongs to."""
    chunk_layers = max(1, stage.num_layers // plan.parallel.pipeline_virtual_stages)
    return (min(indices) - stage.first_layer) // chunk_layers


def chunk_held_bytes(plan: "Plan", stage: "Stage", chunk: int, moment: ChunkMoment, stage_kept_bytes: int, rotary_bytes: int) -> int:
    """Other chunks' activations alive at the backward of local chunk ``chunk`` of the simulated micro-batch
    (:func:`interleaved_chunk_moments`): the saved tensors of ``in_flight − 1 − chunk`` chunks (the
    micro-batch's own chunks 0 … chunk − 1 are the pass's own), the output in ``fwd_cache`` with its rotary
    tables of every other chunk in flight (``in_flight − 1``), as :func:`earlier_layers` and
    :func:`earlier_outputs_bytes` count them at the first chunk's backward, and the hidden states that
    send works still hold (``sent``); less, for each chunk in flight whose input is a receive buffer
    (``received``, this micro-batch's included), the input its first layer saves, which is that buffer
    (counted apart, :func:`receive_buffer_bytes`)."""
    virtual = plan.parallel.pipeline_virtual_stages
    stream = _stream_bytes(plan)
    others = max(0, moment.in_flight - 1)
    kept = max(0, moment.in_flight - 1 - chunk) * (stage_kept_bytes // virtual) + others * (stream + rotary_bytes)
    return max(0, kept + (moment.sent - moment.received) * stream)


def sent_outputs_held(plan: "Plan", stage: "Stage") -> int:
    """Outputs of micro-batches already backwarded that a forward send work still holds at the backward of a
    later micro-batch (one rank chunk per stage, 1F1B and GPipe; interleaved 1F1B counts its sends in
    :func:`interleaved_chunk_moments`). The send tensor is a detached view of the output
    (stage.py ``get_fwd_send_ops``), and a ``dist.Work`` keeps its tensors until it is dropped:

    * GPipe (schedules.py ``ScheduleGPipe._step_microbatches``) keeps every forward send in
      ``fwd_sends_to_wait`` through the whole backward loop: at micro-batch k's backward, k outputs (the
      later pass stands for the second micro-batch, which holds the most: one);
    * 1F1B (``Schedule1F1B._step_microbatches``) waits each warm-up send but keeps the last fired one,
      micro-batch w − 2 of the w = min(n, p − stage) warm-up forwards, in ``send_work`` until the 1B1F loop
      is over: it outlives its own backward when the loop runs backward k with w − 2 < k ≤ n − w.
    The last stage sends nothing forward. Measured: the output of micro-batch 1 alive at micro-batch 2's
    backward (pp-1f1b-llama-7m-fp32-mb4-w2 rank 0, tracker's peak tensors)."""
    parallel = plan.parallel
    if not runs_torch_pipelining(plan) or parallel.pipeline_virtual_stages > 1 or stage.has_head:
        return 0
    micro_batches = plan.setup.gradient_accumulation_steps
    if parallel.pipeline_schedule == "gpipe":
        return 1 if micro_batches > 1 else 0
    warmup = min(micro_batches, parallel.pipeline_parallel_size - stage.index)
    return 1 if warmup >= 2 and max(1, warmup - 1) <= micro_batches - warmup else 0


def sent_outputs_bytes(plan: "Plan", stage: "Stage") -> int:
    """:func:`sent_outputs_held` in bytes (hidden states of one micro-batch each)."""
    held = sent_outputs_held(plan, stage)
    return held * _stream_bytes(plan) if held else 0


HELD_OUTPUT_DETAIL = (
    "the chunk's output, which PipelineStage.backward_one_chunk holds (stage_output) while the layers below "
    "its top one run backward (torch.distributed.pipelining stage.py)"
)


def received_gradient_layers(plan: "Plan", stage: "Stage") -> frozenset[int]:
    """The top layer of each of the rank's chunks that gets its output gradient from the next stage (all but
    the pipeline's last chunk, which holds the head).

    ``PipelineStage.backward_one_chunk`` pops ``(stage_output, input_values)`` from ``fwd_cache`` and keeps
    ``stage_output`` in ``bwd_kwargs`` through ``stage_backward`` (stage.py, _backward.py), so the chunk's output
    stays alive for its whole backward. At the top layer it stands where the single-process step counts the
    incoming gradient (which here is the receive buffer, counted apart); from the layer below on, the incoming
    gradient is a new tensor (the residual add's out-of-place sum) and the output is one hidden state more.
    Measured: pp-1f1b-llama-7m-fp32-mb4-w4 rank 0 peaks at the embedding backward of micro-batch 2."""
    if not runs_torch_pipelining(plan) or stage.num_layers == 0:
        return frozenset()
    virtual = plan.parallel.pipeline_virtual_stages
    chunk_layers = max(1, stage.num_layers // virtual)
    tops = {stage.first_layer + (chunk + 1) * chunk_layers - 1 for chunk in range(virtual)}
    if stage.has_head:
        tops.discard(stage.stop_layer - 1)  # the pipeline's last chunk: its gradient comes from the loss
    return frozenset(i for i in tops if stage.first_layer <= i < stage.stop_layer)
