"""Megatron-Core (megatron/core): the distributed optimizer and the interleaved pipeline schedule.

* **Distributed optimizer** (``megatron/core/optimizer/distrib_optimizer.py``,
  ``DistributedOptimizer``; ``use_distributed_optimizer``): the fp32 main parameters and the
  Adam moments are sharded over the data-parallel ranks, while the bf16 weights and the fp32
  gradient buffer (``megatron/core/distributed/param_and_grad_buffer.py``) stay whole: 6 +
  12/d bytes per parameter with bf16 and Adam (the Megatron-LM docs' table). trainmem
  resolves it in :attr:`trainmem.plan.Plan.sharding` (strategy ``"megatron"``).
* **Interleaved 1F1B** (``megatron/core/pipeline_parallel/schedules.py``,
  ``forward_backward_pipelining_with_interleaving``; ``virtual_pipeline_model_parallel_size``
  = v): each rank holds v model chunks of L/(p·v) layers; in the warm-up the first stage runs
  more forward chunks before its first backward, so its activations total
  L × (1 + (p − 1)/(p·v)) layers' worth instead of the plain 1F1B schedule's L
  (Korthikanti et al. 2022, section 4.2.3).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..plan import Plan, Stage


def interleaving_factor(pipeline_size: int, virtual_stages: int) -> Fraction:
    """Korthikanti et al.'s 1 + (p − 1)/(p·v) for the first stage (1 without interleaving)."""
    if virtual_stages <= 1 or pipeline_size <= 1:
        return Fraction(1)
    return 1 + Fraction(pipeline_size - 1, pipeline_size * virtual_stages)


def earlier_micro_batches_layers(plan: "Plan", stage: "Stage") -> Fraction:
    """Layers' worth of activations that earlier micro-batches hold on ``stage`` while it runs one:
    (in flight − 1) × its layers under 1F1B; the first stage's L × factor − its own layers, interleaved."""
    parallel = plan.parallel
    virtual = parallel.pipeline_virtual_stages
    if stage.index == 0 and virtual > 1 and stage.in_flight_micro_batches > 1:
        total_layers = stage.num_layers * parallel.pipeline_parallel_size
        return total_layers * interleaving_factor(parallel.pipeline_parallel_size, virtual) - stage.num_layers
    return Fraction((stage.in_flight_micro_batches - 1) * stage.num_layers)
