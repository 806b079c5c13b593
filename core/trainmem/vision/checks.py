"""Setup checks for vision-language models: each problem is one line naming its field."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import limits
from ..errors import FieldError
from .tokens import per_sample

if TYPE_CHECKING:
    from ..setup import Setup

SUPPORTED_WRAPPERS = "llava, gemma3, idefics3, smolvlm, mistral3, qwen2_5_vl, qwen3_vl, llama4"


def check_vision_setup(setup: Setup) -> None:
    """Images only on a vision-language model, within the processor's limits, and a sequence that fits the bounds."""
    stack = setup.vision_stack()
    finetuning = setup.finetuning
    if stack is None:
        architecture = setup.architecture()
        if architecture is not None and architecture.image_size:  # a vision encoder: vision/encoder_checks.py
            return
        if setup.images is not None:
            raise FieldError(
                "images", f"the model is a text-only model; images need a vision-language model ({SUPPORTED_WRAPPERS})"
            )
        for name in ("vision_tower", "projector"):
            if getattr(finetuning, name) is not None:
                raise FieldError(f"finetuning.{name}", "applies to vision-language models only; the model has no vision tower")
        return
    parallel = setup.parallelism
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size"):
        if getattr(parallel, name) > 1:
            raise FieldError(
                f"parallelism.{name}",
                f"a vision-language model ({stack.wrapper}) is simulated without tensor, pipeline or context "
                "parallelism; use data parallelism, ZeRO or FSDP",
            )
    if setup.images is None:
        return
    if not stack.images_modelled:
        raise FieldError(
            "images",
            f"the {stack.wrapper} vision tower's forward is not modelled: its weights are counted for text-only "
            "fine-tunes; leave images out",
        )
    counts = per_sample(stack, setup.images)
    total = setup.sequence_length + counts.tokens
    if total > limits.SEQUENCE.maximum:
        raise FieldError(
            "images", f"the images add {counts.tokens:,} tokens per sample: sequence of {total:,} tokens, {limits.SEQUENCE.describe()}"
        )
    if setup.micro_batch_size * total > limits.TOKENS_PER_MICRO_BATCH.maximum:
        raise FieldError(
            "images",
            f"micro_batch_size × (sequence_length + {counts.tokens:,} image tokens) is too large; "
            f"{limits.TOKENS_PER_MICRO_BATCH.describe()}",
        )
