"""Make transformers take the same path on real and fake tensors: declare the batch unpacked.

When no attention mask is given, transformers' ``create_causal_mask`` first asks
``find_packed_sequence_indices(position_ids)`` whether several sequences are packed into
one row. On real tensors it evaluates ``(packed[:, -1] == 0).all()``, finds one sequence
per row, and lets SDPA use ``is_causal=True`` with no mask; grouped-query attention then
runs with ``enable_gqa=True``. On fake tensors the value cannot be read, so transformers
assumes packing, builds a (batch, 1, seq, seq) boolean mask, and because a mask is
present repeats K and V to all query heads: a different, larger step.

A measurement's batch is random token ids, one sequence per row, so the answer is known:
not packed. :func:`unpacked_batches` patches the check to say so, in real and fake runs
alike (real runs then skip a few (batch, seq) integer temporaries the check would
allocate, so that both runs execute identical ops).
"""

from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def unpacked_batches() -> Iterator[None]:
    """Within the block, transformers treats every input row as one unpacked sequence."""
    from transformers import masking_utils

    original = masking_utils.find_packed_sequence_indices
    masking_utils.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking_utils.find_packed_sequence_indices = original
