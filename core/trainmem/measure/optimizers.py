"""Build the optimizer a Setup names, with an explicit implementation of its step().

``optimizer.name`` -> class and keyword arguments (the learning rate is fixed: it changes
no memory):

========================  ===========================================================
sgd                       ``torch.optim.SGD(lr=1e-3, momentum=0)``
sgd-momentum              ``torch.optim.SGD(lr=1e-3, momentum=0.9)``
adam                      ``torch.optim.Adam(lr=1e-3)``
adamw                     ``torch.optim.AdamW(lr=1e-3)`` (weight_decay 0.01, its default)
adam-amsgrad, adamw-amsgrad  the same with ``amsgrad=True``
adafactor                 ``transformers.optimization.Adafactor(lr=1e-3, scale_parameter=False,
                          relative_step=False, warmup_init=False)``; its step is a loop
                          over parameters ("for-loop")
adamw-8bit, lion-8bit,    ``bitsandbytes.optim.AdamW8bit`` / ``Lion8bit`` / ``PagedAdamW8bit`` /
paged-adamw(-8bit)        ``PagedAdamW`` (lr=1e-3; CUDA only), recorded as "fused"
========================  ===========================================================

``optimizer.implementation``: ``foreach`` -> ``foreach=True`` (one multi-tensor kernel per
operation, so each temporary exists for all parameters at once), ``for-loop`` ->
``foreach=False`` (one parameter at a time), ``fused`` -> ``fused=True``. ``None`` asks
torch what it would pick for these parameters (``_default_to_fused_or_foreach``: foreach
on CUDA, the for-loop on CPU), and the answer is recorded, so every corpus case names
the implementation that ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch

LEARNING_RATE = 1e-3
TORCH_OPTIMIZERS = {
    "sgd": (torch.optim.SGD, {"momentum": 0.0}),
    "sgd-momentum": (torch.optim.SGD, {"momentum": 0.9}),
    "adam": (torch.optim.Adam, {}),
    "adamw": (torch.optim.AdamW, {}),
    "adam-amsgrad": (torch.optim.Adam, {"amsgrad": True}),
    "adamw-amsgrad": (torch.optim.AdamW, {"amsgrad": True}),
}
ADAFACTOR_KWARGS = {"scale_parameter": False, "relative_step": False, "warmup_init": False}


@dataclass
class BuiltOptimizer:
    optimizer: torch.optim.Optimizer
    implementation: str
    qualified_class: str
    kwargs: dict[str, Any]


def default_implementation(parameters: list[torch.Tensor]) -> str:
    """What torch.optim picks when neither foreach nor fused is given, for these parameters."""
    from torch.optim.optimizer import _default_to_fused_or_foreach

    fused, foreach = _default_to_fused_or_foreach(parameters, differentiable=False, use_fused=False)
    return "fused" if fused else "foreach" if foreach else "for-loop"


def build_optimizer(name: str, implementation: Optional[str], parameters: list[torch.Tensor]) -> BuiltOptimizer:
    """The optimizer over ``parameters`` (the trainable ones), and the implementation it runs."""
    if name == "adafactor":
        if implementation not in (None, "for-loop"):
            raise ValueError(f"Adafactor has only a per-parameter loop, not {implementation!r}")
        from transformers.optimization import Adafactor

        kwargs = {"lr": LEARNING_RATE, **ADAFACTOR_KWARGS}
        return BuiltOptimizer(Adafactor(parameters, **kwargs), "for-loop", _qualified(Adafactor), kwargs)
    if name in BITSANDBYTES_OPTIMIZERS:
        return _bitsandbytes_optimizer(name, implementation, parameters)
    if name not in TORCH_OPTIMIZERS:
        measurable = [*TORCH_OPTIMIZERS, "adafactor", *BITSANDBYTES_OPTIMIZERS]
        raise ValueError(f"optimizer {name!r} cannot be measured; measurable: {', '.join(measurable)}")
    cls, extra = TORCH_OPTIMIZERS[name]
    chosen = implementation or default_implementation(parameters)
    switches = {"foreach": {"foreach": True}, "for-loop": {"foreach": False}, "fused": {"fused": True}}[chosen]
    kwargs = {"lr": LEARNING_RATE, **extra, **switches}
    return BuiltOptimizer(cls(parameters, **kwargs), chosen, _qualified(cls), kwargs)


BITSANDBYTES_OPTIMIZERS = {
    "adamw-8bit": "AdamW8bit",
    "paged-adamw-8bit": "PagedAdamW8bit",
    "paged-adamw": "PagedAdamW",
    "lion-8bit": "Lion8bit",
}
"""bitsandbytes.optim classes (CUDA only; ``pip install bitsandbytes``): one fused kernel per parameter."""


def _bitsandbytes_optimizer(name: str, implementation: Optional[str], parameters: list[torch.Tensor]):
    if implementation not in (None, "fused"):
        raise ValueError(f"bitsandbytes' {name} steps with one fused kernel per parameter, not {implementation!r}")
    try:
        import bitsandbytes as bnb
    except ImportError:
        raise ValueError(f"optimizer {name!r} needs bitsandbytes (pip install bitsandbytes)") from None
    cls = getattr(bnb.optim, BITSANDBYTES_OPTIMIZERS[name])
    kwargs = {"lr": LEARNING_RATE}
    return BuiltOptimizer(cls(parameters, **kwargs), "fused", _qualified(cls), kwargs)


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"
