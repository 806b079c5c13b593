"""Padded rows passed with an attention_mask (``batch: "padded_masked"``).

A padding collator (``DataCollatorWithPadding``, ``DataCollatorForLanguageModeling``, TRL's and Axolotl's
padding collators) gives ``micro_batch_size`` rows of ``sequence_length`` tokens and an ``attention_mask``
whose zeros mark the padding. ``batch: "padded"`` is the same rows without the mask (causal only). What
the mask changes in memory, read from transformers 5.24 and measured (torch 2.13, CPU):

* the ``attention_mask`` itself is an input next to the token ids: ``(b, s)`` int64;
* SDPA: ``create_causal_mask`` → ``sdpa_mask`` cannot skip the mask once a padding zero is present
  (masking_utils.py ``_ignore_causal_mask_sdpa`` requires ``padding_mask.all()``), so instead of
  ``is_causal`` it builds ``causal & padding`` as a ``(b, 1, s, s)`` boolean tensor (``and_masks`` with
  ``padding_mask_function``), once per forward, shared by all layers. SDPA then behaves as with the
  block-diagonal mask of a packed row (``trainmem.packing``): it keeps an additive copy per layer for
  backward, in the dtype it runs in, and grouped-query attention cannot use ``enable_gqa``
  (integrations/sdpa_attention.py ``use_gqa_in_sdpa``), so ``repeat_kv`` copies K and V to every head;
* eager: ``eager_mask`` builds the additive mask whether or not there is padding, so only the input
  ``attention_mask`` is new (measured);
* sdpa-math (SDPA's fallback with a mask): not measured; only the input is counted (an assumption);
* flash_attention_2 (CUDA): transformers unpads q, k and v (``_upad_input``: gathered copies of the
  real tokens) and runs the varlen kernel: not modelled, taken as unpadded rows (an assumption, not measured).

How many tokens are padding does not change these sizes (the rows keep their length).
"""

from __future__ import annotations


MASK_DETAIL = "the (b, 1, s, s) boolean causal & padding mask transformers builds from the attention_mask"


def padding_mask(setup) -> bool:
    """Whether transformers builds a (b, 1, s, s) mask for SDPA from the padding zeros."""
    return setup.batch == "padded_masked" and setup.attention == "sdpa"


def attention_mask_input_bytes(setup) -> int:
    """The collator's (b, s) int64 attention_mask, an input of the step."""
    return setup.micro_batch_size * setup.sequence_length * 8 if setup.batch == "padded_masked" else 0


def mask_bytes(setup) -> int:
    """The boolean (b, 1, s, s) mask ``sdpa_mask`` builds once per forward."""
    if not padding_mask(setup):
        return 0
    return setup.micro_batch_size * setup.sequence_length * setup.sequence_length


def padding_warnings(setup) -> list[str]:
    """What a masked batch leaves out, said in the report."""
    if setup.batch != "padded_masked":
        return []
    if setup.attention == "flash_attention_2":
        return [
            "flash_attention_2 with an attention_mask unpads q, k and v (gathered copies of the real tokens): "
            "not modelled, counted as unpadded rows."
        ]
    if setup.attention == "sdpa-math":
        return ["SDPA's math path with a padding mask is not modelled: only the attention_mask input is added."]
    return []
