"""Liger's fused linear cross-entropy (``loss: "liger"``): its chunk rule and what the head holds.

Liger needs Triton and a GPU, so no step of it is measured here; the head follows its source
(liger_kernel/ops/fused_linear_cross_entropy.py, see trainmem.liger).
"""

from __future__ import annotations

import pytest

import trainmem
from trainmem.liger import liger_chunk_rows


@pytest.mark.parametrize(
    "tokens, vocab, hidden, expected",
    [
        (4096 * 4, 32000, 4096, (2048, 8)),  # the example in Liger's source comment
        (4096, 128256, 4096, (128, 32)),  # Llama 3: inc_factor 32
        (100, 32000, 4096, (16, 7)),  # chunks are powers of two; the last is shorter
        (8, 1000, 4096, (8, 1)),  # a vocabulary smaller than the hidden size: one chunk
    ],
)
def test_chunk_rule(tokens, vocab, hidden, expected):
    assert liger_chunk_rows(tokens, vocab, hidden) == expected


def estimate(loss: str, **extra):
    setup = {
        "model": "llama-3-8b",
        "micro_batch_size": 4,
        "sequence_length": 4096,
        "activation_checkpointing": "full",
        "finetuning": {"method": "lora"},
        "loss": loss,
        **extra,
    }
    return trainmem.estimate(setup, suggestions=False)


def test_liger_never_holds_the_whole_logits():
    standard, liger = estimate("standard"), estimate("liger")
    logits_bytes = 4 * 4096 * 128256 * 2
    assert standard.peak_allocated_bytes - liger.peak_allocated_bytes > logits_bytes


def test_liger_keeps_a_trained_heads_weight_gradient():
    """Full fine-tuning: grad_weight = zeros_like(lm_head.weight) lives from the forward on."""
    frozen_head = estimate("liger", finetuning={"method": "full", "frozen": ["lm_head"]})
    trained_head = estimate("liger", finetuning={"method": "full"})
    assert trained_head.peak_allocated_bytes > frozen_head.peak_allocated_bytes
