"""TRL 1.16's fused LM head, replayed on a tape: per-token log-probs without the (rows, seq, vocab) logits.

Every TRL 1.16 trainer modelled here patches the model with ``trl.trainer.utils.add_fused_lm_head`` and
calls it with ``fused_lm_head=True``: the backbone runs as usual (its final norm included), then
``trl.kernels.chunked_logprob.ChunkedLogProbFunction`` projects the hidden states through the head
in tiles and folds each tile into online log-sum-exp statistics. What it allocates (read from
``chunked_logprob.py``):

* the scored hidden states: on CUDA (Triton) ``hidden_states[mask]``, a copy of the scored tokens
  only (completion tokens: TRL masks the prompt with -100); elsewhere every position is scored and
  ``hidden_states[:, :-1].reshape(-1, H)`` copies when there is more than one row. It is saved for
  backward with the int64 targets, the fp32 ``log_z`` and (when entropy is an output) the entropy;
* seven fp32 per-token vectors while the tiles run, and one tile buffer ``mm_buf`` of
  ``min(N, 4096) × 32768`` elements in the compute dtype (``TOKEN_CHUNK_SIZE`` × TRL's
  ``_CHUNKED_LOGPROB_CHUNK_SIZE``), whatever the vocabulary; casts of the hidden chunk and of each
  head-weight chunk to the compute dtype when they differ (an fp32 model under autocast);
* on CUDA the fold is a Triton kernel that allocates nothing; without Triton (the CPU) the fold is
  torch code on the whole tile: ``_forward_tile`` holds three fp32 tiles at its high-water mark
  (the scaled logits, ``z - max`` and its ``exp``; a bool tile more when ``is_top1`` is an output),
  ``_backward_tile`` seven fp32 tiles and a bool one;
* backward: fp32 accumulators for the hidden-state gradient (``N × H``) and, when the head trains,
  the head weight's (``V × H``), the tile buffer again, and the casts; the accumulators are cast to
  the inputs' dtypes at the end.

Nothing of size rows × seq × vocab exists, so the logits term of the supervised step is gone; at
long context with a large vocabulary that is most of the difference between an SFT step of
transformers' loss and a TRL step.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..architecture import Architecture
from ..layers import LayerKernels, LayerShape, Trace, Trainability
from ..tape import DTYPE_BYTES, Sym

TOKEN_CHUNK_SIZE = 4096
"""trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE: tokens per projection tile."""
VOCAB_CHUNK_SIZE = 32768
"""trl/trainer/utils.py _CHUNKED_LOGPROB_CHUNK_SIZE: vocabulary columns per tile (and of the tile buffer)."""
RUNNING_VECTORS = 7
"""running_max, sum_exp, x_sum_exp, sq_sum_exp, z_sum, max_before_target, target_logit (fp32, one per token)."""
POLICY_OUTPUTS = ("log_probs", "entropy", "mean_logits", "is_top1")
"""DPOTrainer's policy outputs; the reference computes ("log_probs",) only."""


@dataclass(frozen=True)
class HeadShape:
    """The tokens the fused head scores and how its tiles come out."""

    rows: int
    seq: int
    scored_tokens: int
    """N: tokens whose log-prob is computed (every next-token position off CUDA; the completion ones on CUDA)."""
    vocab: int
    compute_dtype: str
    hidden_dtype: str
    weight_dtype: str
    triton: bool

    @property
    def tile_rows(self) -> int:
        return min(self.scored_tokens, TOKEN_CHUNK_SIZE)

    @property
    def tile_columns(self) -> int:
        return min(self.vocab, VOCAB_CHUNK_SIZE)

    @property
    def buffer_bytes(self) -> int:
        return self.tile_rows * VOCAB_CHUNK_SIZE * DTYPE_BYTES[self.compute_dtype]

    def fp32_tiles(self, count: int) -> int:
        return count * self.tile_rows * self.tile_columns * 4

    def bool_tiles(self, count: int) -> int:
        return count * self.tile_rows * self.tile_columns

    def casts_bytes(self, hidden: int) -> int:
        """The hidden chunk and the head-weight chunk cast to the compute dtype (when their dtypes differ)."""
        total = 0
        element = DTYPE_BYTES[self.compute_dtype]
        if self.hidden_dtype != self.compute_dtype:
            total += self.tile_rows * hidden * element
        if self.weight_dtype != self.compute_dtype:
            total += self.tile_columns * hidden * element
        return total

    def forward_scratch_bytes(self, hidden: int, outputs: tuple[str, ...]) -> int:
        """Everything the forward holds besides what it saves, at its high-water mark."""
        vectors = RUNNING_VECTORS * self.scored_tokens * 4
        tiles = 0 if self.triton else self.fp32_tiles(3) + (self.bool_tiles(1) if "is_top1" in outputs else 0)
        return vectors + self.buffer_bytes + self.casts_bytes(hidden) + tiles

    def backward_scratch_bytes(self, hidden: int, head_trains: bool) -> int:
        """What the backward holds besides the input gradients it returns (which the tape counts).

        In fp32 the accumulators are the returned gradients. Otherwise the tile loop holds the fp32
        accumulators with the buffer, casts and tiles, and only after the loop are they cast to the
        inputs' dtypes (``grad_hidden.to(hidden.dtype)``): the larger of the two moments, less the returned
        gradients."""
        loop = self.buffer_bytes + self.casts_bytes(hidden)
        if not self.triton:
            loop += self.fp32_tiles(7) + self.bool_tiles(1)
        accumulators = returned = 0
        if self.hidden_dtype != "fp32":
            accumulators += self.scored_tokens * hidden * 4
            returned += self.scored_tokens * hidden * DTYPE_BYTES[self.hidden_dtype]
        if head_trains and self.weight_dtype != "fp32":
            accumulators += self.vocab * hidden * 4
            returned += self.vocab * hidden * DTYPE_BYTES[self.weight_dtype]
        if not accumulators:
            return loop
        return max(loop + accumulators - returned, accumulators)


def head_shape(arch: Architecture, shape: LayerShape, kernels: LayerKernels, vocab: int, scored_fraction: float = 1.0) -> HeadShape:
    """The fused head's sizes for ``shape`` (rows = shape.batch). On CUDA TRL scores only the tokens whose
    label is not -100 (``scored_fraction`` of the next-token positions: the completion)."""
    triton = kernels.device == "cuda"
    positions = shape.batch * (shape.seq - 1)
    scored = max(1, int(positions * scored_fraction)) if triton else positions
    hidden_dtype = kernels.stream_dtype
    compute = kernels.autocast or hidden_dtype
    return HeadShape(shape.batch, shape.seq, scored, vocab, compute, hidden_dtype, kernels.weight_dtype, triton)


def trace_fused_head(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    vocab: int,
    parameter_grads_exist: bool = False,
    outputs: tuple[str, ...] = POLICY_OUTPUTS,
    scored_fraction: float = 1.0,
) -> Trace:
    """The final norm and ``ChunkedLogProbFunction`` of the policy, forward and backward."""
    from ..ends import _finish, _head_trains, _tape_through_final_norm

    tape, x, normed = _tape_through_final_norm(arch, shape, kernels, trainability)
    h = shape.hidden
    sizes = head_shape(arch, shape, kernels, vocab, scored_fraction)
    n = sizes.scored_tokens
    if sizes.triton:
        hidden = tape.gather(normed, n * h, n)  # hidden_states[mask]
        tape.release(normed)
    elif shape.batch > 1:
        hidden = tape.copy(normed, n * h)  # hidden_states[:, :-1].reshape(-1, H) of a strided slice
        tape.release(normed)
    else:
        hidden = normed.view(n * h)  # a view: the saved slice keeps the whole norm output alive
    head_trains = _head_trains(arch, trainability)
    weight = Sym(vocab * h, kernels.weight_dtype, head_trains, "parameter")
    targets = tape.new(n, "int64", False)  # labels.clamp(min=0) / labels[mask]
    saved = [hidden, targets, tape.new(n, "fp32", False)]  # log_z
    if "entropy" in outputs:
        saved.append(tape.new(n, "fp32", False))
    scratch = tape.new(sizes.forward_scratch_bytes(h, outputs), "uint8", False)
    tape.release(scratch)
    per_token = [tape.new(n, "fp32", True)]  # log_probs, then the masked copy the caller keeps
    per_token += [tape.new(n, "fp32", False) for _ in outputs[1:]]
    tape.record("chunked_logprob", saved, [hidden, weight], per_token[:1], sizes.backward_scratch_bytes(h, head_trains))
    tape.release(hidden, targets, *saved[2:])
    total = tape.new(1, "fp32", True)
    tape.record("sum", [], per_token[:1], [total])
    tape.release(*per_token)
    return _finish(tape, total, parameter_grads_exist, x)


def reference_head_forward_bytes(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    vocab: int,
    scored_fraction: float = 1.0,
    outputs: tuple[str, ...] = ("log_probs",),
) -> int:
    """High-water bytes of the final norm and fused head under ``no_grad`` (the reference asks for log-probs
    only; KTO's KL pass runs the policy's head, which adds an fp32 vector per extra output): the norm output,
    the scored hidden states (a copy unless one row off CUDA), targets, the scratch."""
    sizes = head_shape(arch, shape, kernels, vocab, scored_fraction)
    h = shape.hidden
    element = DTYPE_BYTES[kernels.stream_dtype]
    normed = shape.stream_tokens * h * element
    copy = sizes.scored_tokens * h * element if (sizes.triton or shape.batch > 1) else 0
    extra = sizes.scored_tokens * 4 * (len(outputs) - 1)
    return normed + copy + sizes.scored_tokens * (8 + 4) + extra + sizes.forward_scratch_bytes(h, outputs)


def trace_score_head(
    arch: Architecture,
    shape: LayerShape,
    kernels: LayerKernels,
    trainability: Trainability,
    parameter_grads_exist: bool = False,
) -> Trace:
    """A reward model's head (``LlamaForSequenceClassification``, ``num_labels=1``, TRL RewardTrainer):
    the final norm, ``score`` (hidden → 1) over every position, the logit of each row's last token
    gathered (``logits[arange(rows), last_non_pad_token]``), then ``-logsigmoid(chosen − rejected)``."""
    from ..ends import _finish, _tape_through_final_norm

    tape, x, normed = _tape_through_final_norm(arch, shape, kernels, trainability)
    h = shape.hidden
    weight = Sym(h, kernels.weight_dtype, True, "parameter")  # score is trained (a new head)
    logits = tape.linear(normed, weight, 1)
    tape.release(normed)
    pooled = tape.gather(logits, shape.batch, shape.batch)
    tape.release(logits)
    loss = tape.new(1, "fp32", True)
    tape.record("logsigmoid", [pooled], [pooled], [loss])
    tape.release(pooled)
    return _finish(tape, loss, parameter_grads_exist, x)
