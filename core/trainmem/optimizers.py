"""Optimizer states and the scratch memory of ``optimizer.step()``.

States (what stays between steps), per trainable tensor of ``n`` elements:

* torch.optim keeps ``full_state_tensors`` tensors like the parameter (SGD 0, momentum 1,
  Adam/AdamW 2, Lion 1) in the parameter's dtype — fp32 master weights when the recipe
  keeps them, bf16 for pure bf16 training;
* bitsandbytes 8-bit optimizers quantise each state block-wise: 1 byte per value plus one
  fp32 absmax per block of 256 values (``optimizer_update_8bit_blockwise``); tensors with
  fewer than ``min_8bit_size`` = 4096 elements keep 32-bit states;
* Adafactor (Shazeer & Stern 2018; transformers.optimization.Adafactor) keeps, for a
  matrix, one value per row and per column (the factored second moment) and for a vector
  a full second moment; no first moment unless beta1 is set.

Temporaries of ``step()`` (read off each implementation's source, checked by measurement):

* Adam/AdamW *foreach*: ``torch._foreach_sqrt(exp_avg_sqs)`` materialises one tensor per
  parameter at once: 1 × all parameters;
* Adam/AdamW *for-loop*: ``(exp_avg_sq.sqrt() / bias_correction2_sqrt)`` holds two
  tensors the size of the parameter being updated: 2 × the largest parameter;
* Adafactor and Lion update one parameter at a time with a few parameter-sized tensors;
* *fused* kernels and SGD update in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .allocator import rounded
from .catalogs import OptimizerKind
from .tape import DTYPE_BYTES

BNB_BLOCK_SIZE = 256
BNB_MIN_8BIT_SIZE = 4096


@dataclass(frozen=True)
class TrainableTensor:
    """A trainable parameter tensor as the optimizer on one rank sees it."""

    shape: tuple[int, ...]
    count: int = 1
    """How many identical tensors (one per layer)."""

    @property
    def numel(self) -> int:
        total = 1
        for size in self.shape:
            total *= size
        return total


def state_bytes(kind: OptimizerKind, tensors: Iterable[TrainableTensor], state_dtype: str, device: str = "cpu") -> int:
    """Bytes of optimizer state for ``tensors`` (whole, unsharded), each state tensor as ``device``'s allocator
    counts it."""
    value_bytes = DTYPE_BYTES["fp32" if kind.upcasts_to_fp32 else state_dtype]
    total = 0
    for tensor in tensors:
        n = tensor.numel
        if kind.factored_second_moment:
            if len(tensor.shape) >= 2:  # one value per row and one per column
                per_tensor = rounded(tensor.shape[0] * value_bytes, device) + rounded(
                    n // tensor.shape[0] * value_bytes, device
                )
            else:
                per_tensor = rounded(n * value_bytes, device)
            per_tensor += kind.full_state_tensors * rounded(n * value_bytes, device)
        elif kind.quantized_state_bits and n >= BNB_MIN_8BIT_SIZE:
            blocks = -(-n // BNB_BLOCK_SIZE)
            per_tensor = kind.full_state_tensors * (
                rounded(n * kind.quantized_state_bits // 8, device) + rounded(blocks * 4, device)
            )
        elif kind.quantized_state_bits:
            per_tensor = kind.full_state_tensors * rounded(n * 4, device)
        else:
            per_tensor = kind.full_state_tensors * rounded(n * value_bytes, device)
        total += per_tensor * tensor.count
    return total


@dataclass(frozen=True)
class StepTemporaries:
    """Scratch memory during ``optimizer.step()``."""

    bytes: int
    description: str


def step_temporaries(
    kind: OptimizerKind, implementation: str, tensors: list[TrainableTensor], state_dtype: str, shard_factor: int
) -> StepTemporaries:
    """The peak scratch memory of one ``step()`` on a rank holding 1/shard_factor of ``tensors``."""
    value_bytes = DTYPE_BYTES[state_dtype]
    rule = {
        "foreach": kind.temporaries.foreach,
        "for-loop": kind.temporaries.for_loop,
        "fused": kind.temporaries.fused,
    }[implementation]
    if kind.upcasts_to_fp32:
        # Adafactor updates fp32 copies of a 16-bit parameter and of its gradient: two more tensors.
        if value_bytes < 4:
            rule += 2
        value_bytes = 4
    if not rule or not tensors:
        return StepTemporaries(0, "updates in place")
    if implementation == "foreach" and not kind.factored_second_moment:
        all_bytes = sum(t.numel * t.count for t in tensors) * value_bytes // shard_factor
        return StepTemporaries(int(rule * all_bytes), f"{rule:g}× all parameters (foreach)")
    largest_tensor = max(tensors, key=lambda t: t.numel)
    extra = 0
    if kind.factored_second_moment and len(largest_tensor.shape) >= 2:
        # Adafactor's _approx_sq_grad also builds the row and column factors of that tensor.
        extra = (largest_tensor.shape[0] + largest_tensor.numel // largest_tensor.shape[0]) * value_bytes
    previous = 1 if kind.loop_keeps_previous_denominator else 0
    peak_numel = max(rule * current + previous * before for before, current in _consecutive_numels(tensors))
    return StepTemporaries(
        int(peak_numel * value_bytes // shard_factor) + extra,
        f"{rule:g}× the parameter being updated"
        + (" + the previous one's update" if previous else "")
        + f" ({implementation})",
    )


def _consecutive_numels(tensors: list[TrainableTensor]):
    """(previous, current) element counts in the order the optimizer visits the parameters.

    ``tensors`` lists a model's trainable tensors in ``model.parameters()`` order, a tensor with
    ``count`` > 1 standing for one per layer; consecutive tensors with the same count > 1 form
    one layer, repeated ``count`` times.
    """
    before = 0
    index = 0
    while index < len(tensors):
        count = tensors[index].count
        end = index
        while end < len(tensors) and tensors[end].count == count and count > 1:
            end += 1
        block = tensors[index:end] if end > index else [tensors[index]]
        for _ in range(min(count, 2) if count > 1 else 1):
            for tensor in block:
                yield before, tensor.numel
                before = tensor.numel
        index += len(block)
