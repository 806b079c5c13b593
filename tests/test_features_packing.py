"""Packed / padding-free batches (``batch: "packed"``): one row, position_ids restarts, the block mask.

The memory is checked against measured CPU steps in the corpus (tests/test_validation.py); here:
what the knob changes, the refusals, and how the readers map packing keys.
"""

from __future__ import annotations

import pytest
from small_models import LLAMA_14M_MHA as MHA

import trainmem
from trainmem import inputs
from trainmem.errors import one_line
from trainmem.packing import mask_bytes, packed_mask, row_shape
from trainmem.setup import Setup


def setup(**extra) -> Setup:
    data = {
        "model": {"hf_config": MHA},
        "micro_batch_size": 4,
        "sequence_length": 256,
        "precision": "amp-bf16",
        "runtime": {"device": "cpu"},
        **extra,
    }
    return Setup.model_validate(data)


def test_a_packed_micro_batch_is_one_row_with_a_block_mask():
    packed = setup(batch="packed", packed_sequences=4)
    assert row_shape(packed) == (1, 1024) and packed_mask(packed)
    assert mask_bytes(packed) == 1024 * 1024  # (1, 1, T, T) booleans
    assert not packed_mask(setup(batch="packed", packed_sequences=1))  # one sequence: no restart, no mask
    assert not packed_mask(setup())


def test_flash_attention_varlen_needs_no_mask():
    packed = Setup.model_validate(
        {"model": "llama-3-8b", "batch": "packed", "attention": "flash_attention_2", "micro_batch_size": 4}
    )
    assert not packed_mask(packed)
    padded = trainmem.estimate({"model": "llama-3-8b", "attention": "flash_attention_2", "micro_batch_size": 4}, suggestions=False)
    flat = trainmem.estimate(
        {"model": "llama-3-8b", "attention": "flash_attention_2", "micro_batch_size": 4, "batch": "packed"},
        suggestions=False,
    )
    # the same tokens; only the row's position_ids and RoPE tables over the whole row are added
    assert 0 <= flat.peak_allocated_bytes - padded.peak_allocated_bytes < 64 * 2**20


def test_the_mask_costs_memory_with_sdpa():
    one = trainmem.estimate(setup(batch="packed", packed_sequences=1), suggestions=False)
    four = trainmem.estimate(setup(batch="packed", packed_sequences=4), suggestions=False)
    assert four.peak_allocated_bytes > one.peak_allocated_bytes + mask_bytes(setup(batch="packed", packed_sequences=4))


def test_eager_scores_span_the_whole_row():
    """transformers masks the row × row scores; it does not split them per sequence."""
    padded = trainmem.estimate(setup(attention="eager"), suggestions=False)
    packed = trainmem.estimate(setup(attention="eager", batch="packed", packed_sequences=4), suggestions=False)
    assert packed.peak_allocated_bytes > padded.peak_allocated_bytes * 1.1


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"batch": "packed", "packed_sequences": 5000}, "packed_sequences"),
    ],
)
def test_refusals_name_the_field(extra, field):
    with pytest.raises(ValueError) as error:
        setup(**extra)
    assert one_line(error.value).startswith(field + ": ")


def read(name, text):
    return inputs.read_texts({name: text})


@pytest.mark.parametrize(
    "name, text, key",
    [
        ("sft.yaml", "model_name_or_path: meta-llama/Llama-3.1-8B\npacking: true\n", "packing"),
        ("sft.yaml", "model_name_or_path: meta-llama/Llama-3.1-8B\npadding_free: true\n", "padding_free"),
        (
            "axolotl.yaml",
            "base_model: meta-llama/Llama-3.1-8B\nsample_packing: true\nsequence_len: 2048\nmicro_batch_size: 2\n",
            "sample_packing",
        ),
    ],
)
def test_readers_map_packing_to_a_packed_batch(name, text, key):
    result, keys = read(name, text)
    assert result.batch == "packed"
    assert next(e for e in keys.entries if e.key == key).status == "modelled"


def test_packing_without_padding_free_keeps_full_rows():
    result, _ = read("sft.yaml", "model_name_or_path: meta-llama/Llama-3.1-8B\npacking: true\npadding_free: false\n")
    assert result.batch == "padded"
