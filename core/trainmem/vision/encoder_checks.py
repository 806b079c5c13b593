"""Setup checks of a vision encoder on its own (``models/vision_encoders.py``): its sequence comes from the image.

The processor resizes every image to the model's input (``Architecture.image_size``), so the tower's sequence
is ``(image_size / patch_size)²`` patches plus its class tokens whatever the images' own size: ``sequence_length``
is derived from it. Left out, it is set; given, it must agree (one line naming it otherwise). ``images``, when
given, describes one image per sample (these models take exactly one). Under the ``contrastive`` task
(CLIP, SigLIP) ``sequence_length`` is the text's, at most the text tower's ``max_position_embeddings``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import FieldError

if TYPE_CHECKING:
    from ..architecture import Architecture
    from ..setup import Setup


def image_sequence_length(setup: Setup, arch: Architecture) -> int:
    """The tower's tokens per image; a FieldError when the setup says otherwise."""
    tokens = arch.image_tokens
    images = setup.images
    if images is not None:
        if images.images_per_sample != 1:
            raise FieldError(
                "images.images_per_sample",
                f"a {arch.model_type} encoder takes one image per sample, got {images.images_per_sample}",
            )
        if images.videos_per_sample:
            raise FieldError("images.videos_per_sample", f"a {arch.model_type} encoder takes no video input")
    text = arch.text_tower if arch.task == "contrastive" else None
    if text is not None:  # a dual encoder's sequence_length is its text's (text_tower.py); left out: the whole table
        if setup.activation_checkpointing != "none":  # the text tower is replayed inside the head (vision/contrastive.py)
            raise FieldError(
                "activation_checkpointing",
                f"activation checkpointing of a {arch.model_type} dual encoder's text tower is not modelled yet; use none",
            )
        if "sequence_length" not in setup.model_fields_set:
            return text.max_position_embeddings
        if setup.sequence_length > text.max_position_embeddings:
            raise FieldError(
                "sequence_length",
                f"sequence_length ({setup.sequence_length}) exceeds the {text.max_position_embeddings} text positions "
                f"of this {arch.model_type} model (text_config.max_position_embeddings)",
            )
        return setup.sequence_length
    if "sequence_length" in setup.model_fields_set and setup.sequence_length != tokens:
        side, patch = arch.image_size, arch.patch_size
        extra = f" + {arch.class_tokens} class token{'s' if arch.class_tokens > 1 else ''}" if arch.class_tokens else ""
        raise FieldError(
            "sequence_length",
            f"a {arch.model_type} encoder's sequence is set by its input images: {tokens} tokens "
            f"(({side} px / {patch} px patches)²{extra}); leave sequence_length out or give {tokens}",
        )
    return tokens
