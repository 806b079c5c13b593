"""Which parts of a vision-language model train, and the tensors they put on a rank.

Defaults follow what the frameworks do when nothing else is said: full fine-tuning trains every
parameter (``model.parameters()`` all require grad), so the tower and the projector train; PEFT's
``get_peft_model`` freezes everything it does not adapt, so under LoRA/QLoRA both are frozen unless
``finetuning.projector = "trained"`` (PEFT's ``modules_to_save``; LLaVA's recipe trains the projector).
``finetuning.vision_tower`` / ``projector`` override either.

Assumptions (stated in the report): LoRA adapters are placed on the language model only (PEFT's
``all-linear`` also matches the tower's and projector's ``nn.Linear`` modules, which trainmem does not
adapt); under QLoRA the tower and projector stay in the compute dtype (not quantised).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .tower import VisionStack

if TYPE_CHECKING:
    from ..plan import Slice
    from ..setup import Setup

VISION_GROUPS = ("vision_tower", "projector")
"""``ParameterTensor.group`` of the vision stack's tensors."""


def tower_trains(setup: Setup) -> bool:
    choice = setup.finetuning.vision_tower
    if choice is not None:
        return choice == "trained"
    return setup.finetuning.method == "full"


def projector_trains(setup: Setup) -> bool:
    choice = setup.finetuning.projector
    if choice is not None:
        return choice == "trained"
    return setup.finetuning.method == "full"


def vision_slices(stack: VisionStack, setup: Setup) -> list[Slice]:
    """The tower's and projector's tensors as rank slices (whole on every rank; sharded like the rest by ZeRO/FSDP)."""
    from ..plan import Slice

    tower, projector = tower_trains(setup), projector_trains(setup)
    if not stack.images_modelled:  # a text-only step (images are refused): the towers never run, get no gradient
        tower = projector = False
    slices = [Slice(t, t.numel, 1, tower, False, False) for t in stack.prelude]
    # Tensors on no path to the loss get no gradient: the optimizer keeps no state for them (as if frozen).
    slices += [Slice(t, t.numel, 1, tower and t.name not in stack.unused_postlude, False, False) for t in stack.postlude]
    used = stack.num_layers - stack.unused_layers
    slices += [Slice(t, t.numel, used, tower, False, False) for t in stack.layer if used]
    slices += [Slice(t, t.numel, stack.unused_layers, False, False, False) for t in stack.layer if stack.unused_layers]
    slices += [Slice(t, t.numel, 1, projector, False, False) for t in stack.projector]
    slices += [Slice(t, t.numel, 1, False, False, False) for t in stack.other_towers]  # Gemma 4's audio tower
    return slices


def trainable_numel(stack: VisionStack, setup: Setup) -> int:
    if not stack.images_modelled:
        return 0
    return (stack.tower_numel if tower_trains(setup) else 0) + (stack.projector_numel if projector_trains(setup) else 0)
