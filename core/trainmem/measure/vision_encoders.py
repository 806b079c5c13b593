"""Measuring a vision encoder on its own (``models/vision_encoders.py``): its model class and batch.

* the model is ``AutoModelForImageClassification.from_config`` (``ViTForImageClassification``,
  ``Dinov2ForImageClassification``, ``CLIPForImageClassification``, ``SiglipForImageClassification``); a
  ``clip_vision_model`` / ``siglip_vision_model`` config is wrapped as the ``vision_config`` of its dual model,
  whose classifier builds only the vision tower;
* the batch: random fp32 ``pixel_values`` of ``(b, C, image_size, image_size)``, as the processor hands them
  over, and int64 labels ``(b,)``; the loss is the model's (``labels=``).
"""

from __future__ import annotations

from typing import Any

import torch

from ..architecture import Architecture

DUAL_MODELS = {"clip_vision_model": "clip", "siglip_vision_model": "siglip"}


def dual_encoder_config(fields: dict[str, Any]) -> dict[str, Any]:
    """A tower's config as its dual model's (``{"model_type": "clip", "vision_config": ...}``), else as given."""
    dual = DUAL_MODELS.get(fields.get("model_type", ""))
    if dual is None:
        return fields
    vision = {k: v for k, v in fields.items() if k not in ("num_labels", "id2label", "label2id", "use_cache")}
    wrapped: dict[str, Any] = {"model_type": dual, "vision_config": vision}
    for key in ("num_labels", "id2label", "label2id"):
        if key in fields:
            wrapped[key] = fields[key]
    return wrapped


def image_batch(arch: Architecture, micro_batch_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    side = arch.image_size
    pixel_values = torch.randn(micro_batch_size, arch.num_channels, side, side, device=device)
    labels = torch.randint(0, arch.num_labels, (micro_batch_size,), device=device)
    return pixel_values, labels
