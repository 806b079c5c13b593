"""Megatron-LM's ``theoretical_memory_usage`` for GPT-3 175B against trainmem's first pipeline stage.

``megatron/training/theoretical_memory_usage.py`` (NVIDIA/Megatron-LM), ``compute_weight_and_optimizer_memory``:
the most loaded model shard (the first stage: L/p layers plus the embedding, ÷ t) times
6 + 12/d bytes per parameter with the distributed optimizer (bf16 weights 2, fp32 main_grad 4,
fp32 master weights and Adam's moments 12, sharded over the d data-parallel ranks). The recipe:
GPT-3 175B (h = 12288, 96 layers, 96 heads, vocabulary 51200, sequence 2048), TP 8, PP 8, DP 16,
distributed optimizer, sequence parallelism and selective recomputation.

Megatron's parameter count is a formula; trainmem counts the tensors transformers builds (here
GPT-2's modules at GPT-3's sizes). The differences, by design, are stated and checked: the learned
position embedding (2048 × h, on the first stage, not in Megatron's formula), the biases of the
attention and MLP projections, and the LayerNorms that stay whole on every tensor-parallel rank
(Megatron's formula divides them by t), and the final LayerNorm, which the formula spreads over
all stages (it lives on the last). The bytes per parameter are the same.
"""

import trainmem
from trainmem.plan import Plan
from trainmem.setup import Setup
from trainmem.simulate import model_states

H, LAYERS, VOCAB, SEQ = 12288, 96, 51200, 2048
TP, PP, DP = 8, 8, 16
GPT3 = {"model_type": "gpt2", "n_embd": H, "n_layer": LAYERS, "n_head": 96, "n_positions": SEQ, "vocab_size": VOCAB}
SETUP = {
    "model": {"hf_config": GPT3},
    "micro_batch_size": 1,
    "sequence_length": SEQ,
    "gradient_accumulation_steps": 8,
    "precision": "bf16-master-weights-fp32-grads",
    "activation_checkpointing": "selective",
    "gpu": "a100-80gb",
    "parallelism": {
        "num_gpus": TP * PP * DP,
        "strategy": "megatron",
        "use_distributed_optimizer": True,
        "tensor_parallel_size": TP,
        "pipeline_parallel_size": PP,
        "sequence_parallel": True,
    },
}


def megatron_most_loaded_shard_parameters() -> float:
    """``num_parameters_on_most_loaded_model_shard`` for this recipe (LayerNorm: norm_size 2, tied embedding)."""
    per_layer = 2 * H * (4 * H + 2) + 2 * H * H * 2  # MLP and LayerNorms, then attention (no GQA)
    block = per_layer * LAYERS + 2 * H  # + the final LayerNorm
    return (block / PP + H * VOCAB) / TP


def megatron_weight_and_optimizer_bytes() -> float:
    return megatron_most_loaded_shard_parameters() * (6 + 12 / DP)


def test_the_bytes_per_parameter_are_megatrons():
    plan = Plan(Setup.model_validate(SETUP))
    states = model_states(plan, plan.stages[0])
    numel = states.trainable_numel
    assert states.weights == 2 * numel and states.gradients == 4 * numel  # bf16 weights, fp32 main_grad
    assert abs(states.master_weights + states.optimizer_states - 12 * numel / DP) < 0.001 * numel


def test_first_stage_weight_and_optimizer_memory_part_by_part():
    plan = Plan(Setup.model_validate(SETUP))
    states = model_states(plan, plan.stages[0])
    trainmem_bytes = states.weights + states.gradients + states.master_weights + states.optimizer_states
    megatron = megatron_weight_and_optimizer_bytes()
    assert round(megatron / 2**20, 1) == 18002.7  # MB as report_theoretical_memory prints it
    difference = states.trainable_numel - megatron_most_loaded_shard_parameters()
    position_embedding = SEQ * H
    layers = LAYERS // PP
    column_biases = (3 * H + 4 * H) // TP  # qkv and fc1 biases, sharded with their weights
    row_biases = H + H  # attention output and fc2 biases, whole on every rank
    layernorms = 2 * 2 * H * (1 - 1 / TP)  # two LayerNorms (weight, bias), whole instead of ÷ t
    final_norm_share = 2 * H / (PP * TP)  # Megatron spreads the final LayerNorm over the stages; it is the last one's
    expected = position_embedding + layers * (column_biases + row_biases + layernorms) - final_norm_share
    assert abs(difference - expected) <= 16
    assert abs(trainmem_bytes - megatron - expected * (6 + 12 / DP)) < 1e-4 * megatron


def test_the_first_stage_is_the_most_loaded():
    report = trainmem.estimate(SETUP, suggestions=False)
    first = report.ranks[0]
    assert first.name == "first pipeline stage"
    assert all(first.peak_allocated_bytes >= rank.peak_allocated_bytes for rank in report.ranks)
