"""Padded rows with an attention_mask (``batch: "padded_masked"``): the input, SDPA's 4-D mask, GQA.

The memory is checked against measured CPU steps in the corpus (tests/test_validation.py, and the
``padmask`` cases below); here: what the knob changes and what it leaves alone.
"""

from __future__ import annotations

import json

import pytest
from small_models import LLAMA_14M as GQA
from small_models import LLAMA_14M_MHA as MHA

import trainmem
from trainmem.errors import one_line
from trainmem.packing import row_shape
from trainmem.padding_mask import attention_mask_input_bytes, mask_bytes, padding_mask
from trainmem.setup import Setup
from trainmem.validate import load_corpus


def setup(config=MHA, **extra) -> Setup:
    data = {
        "model": {"hf_config": config},
        "micro_batch_size": 4,
        "sequence_length": 256,
        "precision": "amp-bf16",
        "optimizer": {"name": "adamw", "implementation": "for-loop"},
        "runtime": {"device": "cpu"},
        **extra,
    }
    return Setup.model_validate(data)


def peak(s: Setup) -> int:
    return trainmem.estimate(s, suggestions=False).peak_allocated_bytes


def test_masked_rows_keep_their_shape_and_add_an_int64_input_and_a_bool_mask():
    masked = setup(batch="padded_masked")
    assert row_shape(masked) == row_shape(setup()) == (4, 256)
    assert padding_mask(masked) and not padding_mask(setup())
    assert attention_mask_input_bytes(masked) == 4 * 256 * 8 and attention_mask_input_bytes(setup()) == 0
    assert mask_bytes(masked) == 4 * 256 * 256  # (b, 1, s, s) booleans


def test_sdpa_keeps_an_additive_mask_per_layer_in_the_autocast_dtype():
    """Measured (CPU, torch 2.13, transformers 5.24): at the backward peak, four layers' bf16 (4, 1, 256, 256)
    additive masks and the int64 attention_mask are the whole difference from unmasked rows."""
    extra = peak(setup(batch="padded_masked")) - peak(setup())
    assert extra == 4 * (4 * 256 * 256 * 2) + 4 * 256 * 8


def test_grouped_query_attention_loses_enable_gqa():
    mha = peak(setup(batch="padded_masked")) - peak(setup())
    gqa = peak(setup(GQA, batch="padded_masked")) - peak(setup(GQA))
    assert gqa > mha  # K and V repeated to all heads and kept for backward


@pytest.mark.parametrize("attention", ["eager", "flash_attention_2"])
def test_kernels_without_an_sdpa_mask_only_add_the_input(attention):
    """eager builds its additive mask with or without padding (measured); flash varlen is taken as unpadded."""
    precision = "fp32" if attention == "eager" else "bf16-mixed"
    device = "cpu" if attention == "eager" else "cuda"
    padded = setup(attention=attention, precision=precision, runtime={"device": device})
    masked = setup(attention=attention, precision=precision, runtime={"device": device}, batch="padded_masked")
    assert not padding_mask(masked)
    assert peak(masked) - peak(padded) == (4 * 256 * 8 if device == "cpu" else 512 * ((4 * 256 * 8 + 511) // 512))


def test_the_report_says_what_is_not_modelled():
    flash = trainmem.estimate(
        {"model": "llama-3-8b", "attention": "flash_attention_2", "batch": "padded_masked"}, suggestions=False
    )
    assert any("unpads" in warning for warning in flash.warnings)
    assert not any("attention_mask" in w for w in trainmem.estimate(setup(batch="padded_masked"), suggestions=False).warnings)


def test_a_masked_batch_costs_several_percent_on_a_gqa_model_without_checkpointing():
    plain = {"model": "tinyllama-1.1b", "micro_batch_size": 4, "sequence_length": 2048}
    padded = trainmem.estimate(plain, suggestions=False).peak_allocated_bytes
    masked = trainmem.estimate({**plain, "batch": "padded_masked"}, suggestions=False).peak_allocated_bytes
    assert 1.02 < masked / padded < 1.10


def test_the_report_names_the_input():
    report = trainmem.estimate(setup(batch="padded_masked"), suggestions=False)
    assert "attention_mask" in json.dumps(report.model_dump(mode="json"))


def test_context_parallelism_is_refused_in_one_line():
    with pytest.raises(ValueError) as error:
        Setup.model_validate(
            {"model": "llama-3-8b", "batch": "padded_masked", "parallelism": {"num_gpus": 2, "context_parallel_size": 2}}
        )
    assert one_line(error.value).startswith("batch: ") and "attention_mask" in one_line(error.value)


def test_an_unknown_batch_kind_names_the_field():
    with pytest.raises(ValueError) as error:
        setup(batch="masked")
    assert one_line(error.value).startswith("batch")


def test_the_measured_cases_replay_to_within_a_few_bytes():
    cases = [case for case in load_corpus() if "padmask" in case.id]
    assert len(cases) >= 5
    for case in cases:
        predicted = trainmem.estimate(case.setup, suggestions=False).peak_allocated_bytes
        # the residue every tiny Llama case shares (12 bytes; + b·s·2 bytes under full checkpointing)
        assert 0 <= case.peak_allocated_bytes - predicted <= 4096, case.id


def test_the_harness_passes_right_padding():
    torch = pytest.importorskip("torch")
    from trainmem.measure.runner import right_padding_mask

    mask = right_padding_mask(4, 16, torch.device("cpu"))
    assert mask.dtype == torch.int64 and tuple(mask.shape) == (4, 16)
    assert mask[:, 0].all() and [int((row == 0).sum()) for row in mask] == [1, 2, 3, 4]
    assert all(bool((row[-int((row == 0).sum()):] == 0).all()) for row in mask)  # the zeros trail
