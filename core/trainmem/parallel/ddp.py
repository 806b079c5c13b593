"""PyTorch DistributedDataParallel (torch 2.13): the Reducer's gradient buckets.

``torch/csrc/distributed/c10d/reducer.cpp``, ``Reducer::initialize_buckets``: every bucket
holds one flat ``gradients`` tensor of its parameters' gradient dtype, allocated when the
buckets are built (at construction, and rebuilt once in arrival order at the start of the
second step, ``Reducer::rebuild_buckets``). With ``gradient_as_bucket_view=False`` (the
default) ``param.grad`` is a separate tensor that is copied into the bucket, so the buckets
add one more gradient-sized copy that lives for the whole run. Measured on 2 gloo ranks
(``ddp-llama-7m-*`` in the distributed corpus): the peak matches to the byte.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan

DETAIL = "DDP copies gradients into flat all-reduce buckets (gradient_as_bucket_view=False)"


def gradient_bucket_bytes(plan: "Plan", gradient_bytes: int) -> int:
    """Bytes of DDP's resident buckets on a rank: one copy of its gradients (0 without data parallelism)."""
    parallel = plan.parallel
    if parallel.strategy != "ddp" or plan.data_parallel_size == 1:
        return 0
    return gradient_bytes
