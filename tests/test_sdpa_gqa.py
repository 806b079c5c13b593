"""SDPA with grouped-query attention: when transformers repeats K/V (``sdpa_repeats_kv``).

transformers 5.24 ``integrations/sdpa_attention.py`` ``use_gqa_in_sdpa``: on CPU/CUDA ``enable_gqa`` is
used only without a mask and with head_dim <= 256; otherwise ``repeat_kv`` copies K and V. The corpus
cases below were measured op by op (torch 2.13 CPU): each masked GQA layer holds two ``aten.clone``
(the repeated K and V) and one ``aten.where`` (the additive mask, in the dtype SDPA runs in).
"""

import pytest

import trainmem
from trainmem.layers import LayerShape, sdpa_repeats_kv
from trainmem.measure.corpus import load_corpus
from trainmem.validate import compare


def _shape(heads=8, kv_heads=4, head_dim=32, mask=False, packed=False) -> LayerShape:
    return LayerShape(
        batch=2, seq=256, kv_seq=256, heads=heads, kv_heads=kv_heads, head_dim=head_dim, hidden=256,
        intermediate=688, stream_tokens=512, attention_mask=mask, packed_row=packed,
    )


def test_no_mask_uses_enable_gqa():
    assert not sdpa_repeats_kv(_shape())


@pytest.mark.parametrize("packed", [False, True])
def test_a_mask_repeats_grouped_kv(packed):
    assert sdpa_repeats_kv(_shape(mask=True, packed=packed))


def test_a_head_wider_than_256_repeats_without_a_mask():
    assert sdpa_repeats_kv(_shape(head_dim=512))
    assert not sdpa_repeats_kv(_shape(head_dim=256))


def test_one_kv_head_repeats_as_a_view():
    assert not sdpa_repeats_kv(_shape(heads=8, kv_heads=1, mask=True, head_dim=512))


def test_multi_head_attention_never_repeats():
    assert not sdpa_repeats_kv(_shape(heads=8, kv_heads=8, mask=True, head_dim=512))


MASKED_GQA_CASES = [
    "mistral-window-small-ampbf16-adamw-b2-s512",  # was +0.23%: the mask was counted in q's fp32
    "olmo3-small-fp32-adamw-b2-s256",  # was -0.33%: the repeated K/V were missing
    "gemma3-small-ampbf16-adamw-b2-s256",  # exact before and after: fp32 mask == bf16 mask + repeated K/V
    "llama-14m-ampbf16-adamw-padmask-b4-s256",
    "mistral-window-small-fp32-adamw-d64-b2-s384",  # was -0.4%: sizes differ (mask 1.1 MiB, repeated K 768 KiB)
    "mistral-small-fp32-adamw-d320-b2-s256",  # was -1.5%: no mask, but heads wider than 256
    "mistral-mqa-small-fp32-adamw-d320-b2-s256",  # one K/V head: repeat_kv is a view
    "exaone4-small-fp32-adamw-b2-s256",  # was -0.66%: repeated K/V, and the global NoPE layer's q/k norms
]


@pytest.mark.parametrize("case_id", MASKED_GQA_CASES)
def test_masked_gqa_cases_are_exact(case_id):
    (measurement,) = [m for m in load_corpus() if m.id == case_id]
    comparison = compare(measurement, trainmem.estimate(measurement.setup, suggestions=False))
    assert abs(comparison.relative_error) < 1e-4
