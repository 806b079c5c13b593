"""The hooks the step simulation calls for a vision-language model (``simulate.py``).

* :func:`of_setup`: the vision stack of a setup and what one sample's images become;
* :func:`pixel_values_bytes`: the processor's fp32 ``pixel_values`` of a micro-batch, an input like the token ids;
* :func:`forward` / :func:`backward`: the tower and projector stacks (``trainmem.stacks``) around the language model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from .. import stacks
from ..allocator import rounded
from ..layers import LayerKernels
from ..timeline import MemoryAccount
from .encoders import pixel_values_bytes as encoder_pixel_values_bytes
from .program import vision_stacks
from .tokens import VisualCounts, per_sample
from .tower import VisionStack
from .training import projector_trains, tower_trains

if TYPE_CHECKING:
    from ..plan import Plan
    from ..setup import Setup


def of_setup(setup: Setup) -> tuple[Optional[VisionStack], Optional[VisualCounts]]:
    stack = setup.vision_stack()
    if stack is None or setup.images is None:
        return stack, None
    return stack, per_sample(stack, setup.images)


def pixel_values_bytes(plan: Plan) -> int:
    counts = plan.visual_counts
    if counts is None:  # a vision encoder on its own (vision/encoders.py) or a text model
        return rounded(encoder_pixel_values_bytes(plan), plan.device) if encoder_pixel_values_bytes(plan) else 0
    return rounded(plan.setup.micro_batch_size * counts.pixel_values_numel * 4, plan.device)


def features_require_grad(plan: Plan) -> bool:
    """Whether the image features merged into the language model's embeddings require grad (a trained
    projector or tower): the first decoder layer's input then requires grad even with a frozen embedding."""
    if plan.vision is None or plan.visual_counts is None or not plan.visual_counts.tokens:
        return False
    return tower_trains(plan.setup) or projector_trains(plan.setup)


def _stacks(plan: Plan, kernels: LayerKernels, grads_exist: bool) -> tuple[stacks.Stack, ...]:
    if plan.vision is None or plan.visual_counts is None:
        return ()
    setup = plan.setup
    return vision_stacks(
        plan.vision, plan.visual_counts, setup.micro_batch_size, kernels, tower_trains(setup), projector_trains(setup),
        setup.activation_checkpointing, grads_exist,
    )


def forward(plan: Plan, account: MemoryAccount, micro_batch: int, suffix: str, kernels: LayerKernels,
            grads_exist: bool, merged_bytes: int) -> None:
    """The tower and projector forward, then the merge of the image features into the embeddings."""
    pieces = _stacks(plan, kernels, grads_exist)
    stacks.forward(account, pieces, micro_batch, suffix)
    stacks.merged(account, pieces, micro_batch, suffix, merged_bytes)


def backward(plan: Plan, account: MemoryAccount, micro_batch: int, suffix: str, kernels: LayerKernels,
             grads_exist: bool, stored: Callable[[int], int]) -> None:
    stacks.backward(account, _stacks(plan, kernels, grads_exist), micro_batch, suffix, grads_exist, stored)
