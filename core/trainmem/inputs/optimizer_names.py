"""Optimizer names as trainer files spell them (``optim: adamw_torch_fused``) -> the optimizer catalog.

The table is data (``data/trainer_optimizers.json``): transformers 5.24 ``OptimizerNames``,
Axolotl 0.19's extra optimizers and DeepSpeed's ``optimizer.type``. Names that map onto a
catalog entry only approximately are marked ``not modelled`` there, with the assumption.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Optional


@dataclass(frozen=True)
class TrainerOptimizer:
    optimizer: str
    implementation: Optional[str]
    modelled: bool
    note: str


@cache
def _table() -> dict[str, TrainerOptimizer]:
    raw = json.loads(
        resources.files("trainmem").joinpath("data").joinpath("trainer_optimizers.json").read_text(encoding="utf-8")
    )
    return {
        name: TrainerOptimizer(e["optimizer"], e["implementation"], e["status"] == "modelled", e["note"])
        for name, e in raw["names"].items()
    }


def trainer_optimizer(name: str, amsgrad: bool = False) -> Optional[TrainerOptimizer]:
    """The catalog optimizer for a trainer's optimizer name; ``amsgrad`` picks the three-state variant."""
    entry = _table().get(str(name).strip().lower())
    if entry is None:
        return None
    if amsgrad and entry.optimizer in ("adam", "adamw"):
        return TrainerOptimizer(
            entry.optimizer + "-amsgrad",
            entry.implementation,
            entry.modelled,
            entry.note + " with amsgrad=True (a third state, max_exp_avg_sq)",
        )
    return entry


def deepspeed_optimizer(type_name: str, amsgrad: bool = False) -> Optional[TrainerOptimizer]:
    return trainer_optimizer("deepspeed:" + str(type_name).strip().lower(), amsgrad)


def known_names() -> list[str]:
    return [name for name in _table() if not name.startswith("deepspeed:")]
