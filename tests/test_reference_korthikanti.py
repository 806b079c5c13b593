"""Korthikanti et al. 2022 activation counts, reproduced op by op by the layer replay.

"Reducing Activation Recomputation in Large Transformer Models" (arXiv:2205.05198), §4:
a GPT layer with 16-bit activations, 1-byte dropout masks, a 4h GeLU MLP, two LayerNorms
and eager attention saves sbh(34 + 5as/h) bytes; with tensor parallelism t
sbh(10 + 24/t + 5as/(ht)); with sequence parallelism too sbh(34/t + 5as/(ht)); selective
recomputation drops the 5as²b attention-core term. The paper leaves out LayerNorm's fp32
mean and rstd (4 bytes each per row, two LayerNorms: 16sb bytes, ÷ t under sequence
parallelism); the replay counts them, and the test adds them to the formula explicitly.
"""

import pytest

from trainmem.architecture import Architecture
from trainmem.layers import LayerKernels, LayerShape, Trainability, trace_layer

SEQ, BATCH, HIDDEN, HEADS = 2048, 4, 4096, 32
SBH = SEQ * BATCH * HIDDEN


def gpt_block() -> Architecture:
    """A Megatron GPT block: LayerNorm, fused QKV, GeLU MLP of 4h, biases, dropout everywhere."""
    return Architecture(
        model_type="custom",
        vocab_size=51200,
        hidden_size=HIDDEN,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        intermediate_size=4 * HIDDEN,
        mlp="plain",
        hidden_act="gelu",
        norm="layernorm",
        attention_qkv_bias=True,
        attention_output_bias=True,
        mlp_bias=True,
        fused_qkv=True,
        position_embedding="learned",
        attention_dropout=0.1,
        residual_dropout=0.1,
        embedding_dropout=0.1,
    )


def saved_bytes(tensor_parallel: int, sequence_parallel: bool, selective: bool) -> int:
    t = tensor_parallel
    shape = LayerShape(
        batch=BATCH,
        seq=SEQ,
        kv_seq=SEQ,
        heads=HEADS // t,
        kv_heads=HEADS // t,
        head_dim=HIDDEN // HEADS,
        hidden=HIDDEN,
        intermediate=4 * HIDDEN // t,
        stream_tokens=BATCH * SEQ // t if sequence_parallel else BATCH * SEQ,
    )
    kernels = LayerKernels(
        device="cuda",
        autocast=None,
        weight_dtype="bf16",
        stream_dtype="bf16",
        attention="eager",
        selective_recompute=selective,
    )
    trace = trace_layer(gpt_block(), shape, kernels, Trainability(lambda m: True, lambda m: False), True)
    return trace.saved_activation_bytes


def layernorm_statistics(t: int, sequence_parallel: bool) -> float:
    return 16 * SEQ * BATCH / (t if sequence_parallel else 1)


@pytest.mark.parametrize(
    ("t", "sequence_parallel", "selective", "formula"),
    [
        (1, False, False, SBH * (34 + 5 * HEADS * SEQ / HIDDEN)),
        (8, False, False, SBH * (10 + 24 / 8 + 5 * HEADS * SEQ / (HIDDEN * 8))),
        (8, True, False, SBH * (34 / 8 + 5 * HEADS * SEQ / (HIDDEN * 8))),
        (8, False, True, SBH * (10 + 24 / 8)),
        (8, True, True, SBH * 34 / 8),
        (1, False, True, SBH * 34),
    ],
)
def test_per_layer_activations(t, sequence_parallel, selective, formula):
    expected = formula + layernorm_statistics(t, sequence_parallel)
    assert saved_bytes(t, sequence_parallel, selective) == expected


def test_full_recomputation_keeps_one_input_per_layer():
    """Full recomputation keeps each layer's 16-bit input: 2sbh per layer (the paper's §4.1)."""
    import trainmem

    report = trainmem.estimate(
        {
            "model": {"architecture": gpt_block().model_dump()},
            "micro_batch_size": BATCH,
            "sequence_length": SEQ,
            "precision": "bf16-master-weights",
            "activation_checkpointing": "full",
        },
        suggestions=False,
    )
    timeline = report.timeline
    # After the forward of layer 1 (the second point of the layers), one more 2sbh input is kept.
    forward = [i for i, label in enumerate(timeline.labels) if label.startswith("layer") and "forward" in label]
    first, second = forward[0], forward[1]
    assert timeline.activations[second] - timeline.activations[first] == 2 * SBH
