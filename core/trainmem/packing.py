"""Packed and padding-free batches (``batch: "packed"``): one row of micro-batch × sequence tokens.

Sequence packing (TRL ``packing``/``padding_free``, Axolotl ``sample_packing``, LLaMA-Factory
``packing``) and ``DataCollatorWithFlattening`` put the micro-batch's tokens in one row of
``micro_batch_size × sequence_length`` tokens; ``position_ids`` restart at every sequence and mark where
one ends (flash-attention's varlen kernels get the cumulative sequence lengths from them). What that
changes in memory, read from transformers 5.24:

* the row is ``(1, T)`` with ``T = micro_batch_size · sequence_length``: RoPE's cos/sin are computed for
  the ``(1, T)`` position_ids (``T`` positions, not ``sequence_length``), and the ``position_ids``
  themselves (``T`` int64) are an input next to the token ids;
* SDPA and eager: ``create_causal_mask`` finds the restarts (masking_utils.py
  ``find_packed_sequence_indices``: ``(diff(position_ids) != 1).cumsum(-1)``) and builds a block-diagonal
  causal mask over the whole row, a ``(1, 1, T, T)`` boolean tensor, instead of SDPA's ``is_causal``.
  With a mask present, SDPA turns it into an additive one per layer and keeps it for backward, and
  grouped-query attention can no longer use ``enable_gqa`` (integrations/sdpa_attention.py
  ``use_gqa_in_sdpa``): the layer program's masked path (``LayerShape.attention_mask``). The math and
  eager paths compute the scores over the whole row (``T × T``), masked, not per sequence;
* flash_attention_2 (CUDA): ``_flash_attention_forward`` runs the varlen kernel from the position_ids
  (modeling_flash_attention_utils.py ``prepare_fa_kwargs_from_position_ids``): no mask, memory as for
  unpadded rows.

A row holding one sequence (``packed_sequences`` 1) has no restart: no mask.
"""

from __future__ import annotations

from .errors import FieldError


MASK_DETAIL = "the block-diagonal (1, 1, T, T) boolean mask transformers builds from the packed position_ids"


def row_shape(setup) -> tuple[int, int]:
    """(rows, tokens per row) of one micro-batch."""
    if setup.batch == "packed":
        return 1, setup.micro_batch_size * setup.sequence_length
    return setup.micro_batch_size, setup.sequence_length


def packed_mask(setup) -> bool:
    """Whether transformers builds a block-diagonal (1, 1, T, T) mask for the packed row."""
    return setup.batch == "packed" and setup.packed_sequences > 1 and setup.attention != "flash_attention_2"


def position_ids_bytes(setup) -> int:
    """The explicit position_ids of a packed row (int64); padded rows pass none."""
    return setup.micro_batch_size * setup.sequence_length * 8 if setup.batch == "packed" else 0


def mask_bytes(setup) -> int:
    """The boolean (1, 1, T, T) mask ``sdpa_mask`` builds once per forward (eager: the same shape in the
    model's dtype is made per layer from it)."""
    if not packed_mask(setup):
        return 0
    tokens = setup.micro_batch_size * setup.sequence_length
    return tokens * tokens


def check_packing(setup) -> None:
    if setup.batch == "padded_masked" and setup.parallelism.context_parallel_size > 1:
        raise FieldError("batch", "padded batches with an attention_mask under context parallelism are not modelled")
    if setup.batch != "packed":
        return
    tokens = setup.micro_batch_size * setup.sequence_length
    if setup.packed_sequences > tokens:
        raise FieldError(
            "packed_sequences",
            f"packed_sequences ({setup.packed_sequences}) cannot exceed the row's {tokens:,} tokens "
            "(micro_batch_size × sequence_length)",
        )
    if setup.parallelism.context_parallel_size > 1:
        raise FieldError("batch", "packed batches under context parallelism are not modelled")
