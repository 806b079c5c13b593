"""Expert parallelism × expert-tensor parallelism (Megatron-Core's rule): routed experts' weights,
gradients and optimizer states are divided by EP × ETP, the dense parts by TP; ETP defaults to TP
(megatron/core/transformer/transformer_config.py ``expert_tensor_parallel_size``)."""

from __future__ import annotations

import pytest

from trainmem.plan import Plan
from trainmem.setup import Setup

MIXTRAL = {"model_type": "mixtral", "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_local_experts": 4, "num_experts_per_tok": 2}


def _plan(**parallelism) -> Plan:
    return Plan(Setup.model_validate({"model": {"hf_config": MIXTRAL}, "micro_batch_size": 1, "sequence_length": 64,
                                      "parallelism": {"strategy": "megatron", **parallelism}}))


def _expert_numel(plan: Plan) -> int:
    group = plan.inventory.layer_groups[0]
    return sum(plan._tp_numel(t) for t in group.tensors if t.group == "experts")


def _attention_numel(plan: Plan) -> int:
    group = plan.inventory.layer_groups[0]
    return sum(plan._tp_numel(t) for t in group.tensors if t.group == "attention")


def test_experts_split_over_ep_times_etp_and_attention_over_tp():
    full = _expert_numel(_plan(num_gpus=1))
    default = _plan(num_gpus=4, tensor_parallel_size=2, expert_parallel_size=2)
    no_expert_tp = _plan(num_gpus=4, tensor_parallel_size=2, expert_parallel_size=2, expert_tensor_parallel_size=1)
    assert _expert_numel(default) == full // 4  # ETP = TP = 2
    assert _expert_numel(no_expert_tp) == full // 2  # EP only
    assert _attention_numel(default) == _attention_numel(no_expert_tp) == _attention_numel(_plan(num_gpus=1)) // 2


def test_expert_grid_must_divide_the_gpus():
    with pytest.raises(Exception) as error:
        _plan(num_gpus=4, tensor_parallel_size=2, expert_parallel_size=2, expert_tensor_parallel_size=3)
    assert "expert_tensor_parallel_size" in str(error.value)


def test_etp_must_divide_the_expert_width():
    config = {**MIXTRAL, "intermediate_size": 90}
    setup = {"model": {"hf_config": config}, "parallelism": {"strategy": "megatron", "num_gpus": 4,
                                                             "expert_parallel_size": 1, "expert_tensor_parallel_size": 4}}
    with pytest.raises(ValueError, match=r"parallelism\.expert_tensor_parallel_size \(4\) must divide intermediate_size"):
        Setup.model_validate(setup)
