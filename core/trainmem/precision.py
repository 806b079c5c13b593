"""Precision recipes: which dtype each copy of the model lives in.

"Mixed precision" names different recipes in different frameworks, and the bytes per
parameter differ between them (Megatron-LM's distributed-optimizer docs tabulate 16, 18 and
20 bytes for the same optimizer):

=================================  =======  ====  =======  =========  ===========================
recipe                             weights  grads  master  autocast   used by
=================================  =======  ====  =======  =========  ===========================
fp32                               fp32     fp32   —        —          plain PyTorch
amp-bf16 / amp-fp16                fp32     fp32   —        bf16/fp16  torch.autocast (DDP, HF Trainer)
fsdp-mixed-bf16 / -fp16            fp32*    fp32*  —        —          FSDP MixedPrecision: *sharded
                                                                       fp32, gathered in 16 bits
bf16/fp16-master-weights           16-bit   16-bit fp32     —          DeepSpeed, ZeRO paper (2+2+12)
bf16-master-weights-fp32-grads     bf16     fp32   fp32     —          Megatron-LM (main_grad)
bf16-pure                          bf16     bf16   —        —          everything in bf16
fp8-mixed                          bf16     bf16   fp32     fp8 GEMMs  Transformer Engine (Hopper and newer)
=================================  =======  ====  =======  =========  ===========================

``bf16-mixed``/``fp16-mixed`` resolve to the recipe of the chosen framework: DeepSpeed ZeRO
uses master weights, FSDP its MixedPrecision policy, tensor/pipeline parallel runs follow
Megatron-LM, and everything else (DDP, a single GPU) uses autocast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from .setup import Setup


@dataclass(frozen=True)
class PrecisionPlan:
    """The resolved recipe: dtypes of every copy of the model."""

    recipe: str
    description: str
    stored_weight_dtype: str
    """How the model's weights are stored between steps (sharded, under FSDP)."""
    compute_weight_dtype: str
    """The dtype the forward reads the weights in (gathered, under FSDP mixed precision)."""
    gradient_dtype: str
    master_weights: bool
    """An fp32 copy of the trainable weights kept by the optimizer."""
    optimizer_state_dtype: str
    autocast: Optional[str]
    fp8_matmuls: bool = False
    """Linear layers run their GEMMs in fp8 (NVIDIA Transformer Engine)."""

    @property
    def stream_dtype(self) -> str:
        """The residual stream's dtype: the embedding output has the embedding weight's dtype."""
        return self.compute_weight_dtype


_RECIPES = {
    "fp32": PrecisionPlan("fp32", "fp32 everywhere", "fp32", "fp32", "fp32", False, "fp32", None),
    "amp-bf16": PrecisionPlan(
        "amp-bf16", "autocast to bf16 over fp32 weights", "fp32", "fp32", "fp32", False, "fp32", "bf16"
    ),
    "amp-fp16": PrecisionPlan(
        "amp-fp16", "autocast to fp16 over fp32 weights, gradient scaler", "fp32", "fp32", "fp32", False, "fp32", "fp16"
    ),
    "fsdp-mixed-bf16": PrecisionPlan(
        "fsdp-mixed-bf16",
        "FSDP MixedPrecision: fp32 shards, bf16 gathered weights and compute",
        "fp32",
        "bf16",
        "fp32",
        False,
        "fp32",
        None,
    ),
    "fsdp-mixed-fp16": PrecisionPlan(
        "fsdp-mixed-fp16",
        "FSDP MixedPrecision: fp32 shards, fp16 gathered weights and compute",
        "fp32",
        "fp16",
        "fp32",
        False,
        "fp32",
        None,
    ),
    "bf16-master-weights": PrecisionPlan(
        "bf16-master-weights",
        "bf16 weights and gradients, fp32 master weights",
        "bf16",
        "bf16",
        "bf16",
        True,
        "fp32",
        None,
    ),
    "fp16-master-weights": PrecisionPlan(
        "fp16-master-weights",
        "fp16 weights and gradients, fp32 master weights",
        "fp16",
        "fp16",
        "fp16",
        True,
        "fp32",
        None,
    ),
    "bf16-master-weights-fp32-grads": PrecisionPlan(
        "bf16-master-weights-fp32-grads",
        "bf16 weights, fp32 gradients and master weights (Megatron-LM)",
        "bf16",
        "bf16",
        "fp32",
        True,
        "fp32",
        None,
    ),
    "bf16-pure": PrecisionPlan(
        "bf16-pure", "bf16 weights, gradients and optimizer states", "bf16", "bf16", "bf16", False, "bf16", None
    ),
    "fp8-mixed": PrecisionPlan(
        "fp8-mixed",
        "Transformer Engine fp8 GEMMs over bf16 weights, fp32 master weights",
        "bf16",
        "bf16",
        "bf16",
        True,
        "fp32",
        None,
        fp8_matmuls=True,
    ),
}


def resolve_precision(setup: Setup) -> PrecisionPlan:
    """The recipe ``setup.precision`` names, with bf16-mixed/fp16-mixed resolved by framework."""
    name = setup.precision
    if name in ("bf16-mixed", "fp16-mixed"):
        half = name.split("-")[0]
        parallel = setup.parallelism
        if parallel.strategy == "zero":
            name = f"{half}-master-weights"
        elif parallel.strategy == "fsdp":
            name = f"fsdp-mixed-{half}"
        elif parallel.strategy == "megatron" or parallel.tensor_parallel_size > 1 or parallel.pipeline_parallel_size > 1:
            name = "bf16-master-weights-fp32-grads" if half == "bf16" else "fp16-master-weights"
        else:
            name = f"amp-{half}"
    return _RECIPES[name]
