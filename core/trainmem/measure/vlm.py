"""Measuring a vision-language model: the model, its inputs and which parts train.

* the model is ``AutoModelForImageTextToText.from_config`` of the whole wrapper config (transformers 5.24);
* inputs: ``input_ids`` of ``sequence_length`` text tokens plus, per image, the placeholder tokens the
  processor would insert (``image_token_index`` / ``image_token_id`` repeated as many times as the image has
  tokens, after Qwen-VL's ``vision_start_token_id``), random ``pixel_values`` shaped as the processor makes
  them (``(images, C, H, W)`` for fixed-size towers, ``(patches, C·T·p·p)`` with ``image_grid_thw`` for
  Qwen-VL), labels = input_ids;
* trainability: ``finetuning.vision_tower`` / ``projector`` (and their defaults, ``trainmem.vision.training``)
  set ``requires_grad`` on the tower's and projector's parameters; LoRA adapts the language model only
  (``target_modules`` as a regular expression over ``language_model`` module paths), as trainmem assumes.
"""

from __future__ import annotations

import re
from typing import Any

import torch

from ..setup import Setup
from ..vision.tokens import per_image, smart_resize
from ..vision.tower import VisionStack
from ..vision.training import projector_trains, tower_trains


def _tower_and_projector(model: torch.nn.Module, stack: VisionStack) -> tuple[list[torch.nn.Parameter], list[torch.nn.Parameter]]:
    tower, projector = [], []
    projector_marks = ("multi_modal_projector", "connector", "merger")
    for name, parameter in model.named_parameters():
        if "language_model" in name or "text_model" in name or name.startswith("lm_head") or ".lm_head" in name:
            continue
        if "lora_" in name:
            continue
        (projector if any(mark in name for mark in projector_marks) else tower).append(parameter)
    return tower, projector


def build_vlm(setup: Setup, config: dict[str, Any], implementation: str, on_meta: bool) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForImageTextToText

    stack = setup.vision_stack()
    assert stack is not None
    import copy

    fields = copy.deepcopy(dict(config))  # transformers may fill nested dicts (rope_scaling) in place
    hf_config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    if on_meta:
        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(hf_config, attn_implementation=implementation, dtype=torch.float32)
    else:
        model = AutoModelForImageTextToText.from_config(hf_config, attn_implementation=implementation, dtype=torch.float32)
    if setup.precision == "bf16-pure":
        model = model.to(torch.bfloat16)
    if setup.finetuning.method == "lora":
        from peft import LoraConfig, get_peft_model

        lora = setup.finetuning.lora
        targets = lora.target_modules
        if targets is None or isinstance(targets, str):
            raise ValueError("measuring a VLM with LoRA needs an explicit list of target_modules (the language model's)")
        pattern = rf".*language_model.*\.({'|'.join(re.escape(t) for t in targets)})"
        peft_config = LoraConfig(r=lora.r, target_modules=pattern, lora_dropout=lora.lora_dropout, task_type="CAUSAL_LM")
        model = get_peft_model(model, peft_config)
    tower, projector = _tower_and_projector(model, stack)
    for parameter in tower:
        parameter.requires_grad_(tower_trains(setup))
    for parameter in projector:
        parameter.requires_grad_(projector_trains(setup))
    return model


def _token_ids(config: dict[str, Any]) -> dict[str, int]:
    ids = {}
    for key in ("image_token_index", "image_token_id", "vision_start_token_id", "vision_end_token_id"):
        if isinstance(config.get(key), int):
            ids[key] = config[key]
    return ids


def vlm_inputs(
    setup: Setup, config: dict[str, Any], vocab_size: int, device: torch.device
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """(input_ids, extra forward kwargs) for a micro-batch of the setup's images."""
    stack = setup.vision_stack()
    images = setup.images
    assert stack is not None and images is not None
    counts = per_image(stack, images)
    ids = _token_ids(config)
    image_token = ids.get("image_token_index", ids.get("image_token_id"))
    specials = set(ids.values())
    per_sample_images = images.images_per_sample
    text = setup.sequence_length
    rows = []
    qwen = stack.tokens.kind == "smart_resize"
    for _ in range(setup.micro_batch_size):
        row: list[int] = []
        for _ in range(per_sample_images):
            if qwen:
                row.append(ids["vision_start_token_id"])
            row += [image_token] * counts.tokens
            if qwen:
                row.append(ids["vision_end_token_id"])
        filler = torch.randint(0, vocab_size, (text - (len(row) - counts.tokens * per_sample_images),)).tolist()
        row += [token if token not in specials else 0 for token in filler]
        rows.append(row)
    input_ids = torch.tensor(rows, device=device)
    count = setup.micro_batch_size * per_sample_images
    if qwen:
        rule = stack.tokens
        factor = rule.patch_size * rule.merge
        from ..vision.readers import QWEN2_VL_MAX_PIXELS, QWEN2_VL_MIN_PIXELS

        h, w = smart_resize(
            images.image_height, images.image_width, factor,
            images.min_pixels or QWEN2_VL_MIN_PIXELS, images.max_pixels or QWEN2_VL_MAX_PIXELS,
        )
        grid = [1, h // rule.patch_size, w // rule.patch_size]
        width = 3 * rule.temporal_patch_size * rule.patch_size * rule.patch_size
        pixel_values = torch.randn(count * grid[1] * grid[2], width, device=device)
        return input_ids, {"pixel_values": pixel_values, "image_grid_thw": torch.tensor([grid] * count, device=device)}
    side = stack.tokens.image_size
    return input_ids, {"pixel_values": torch.randn(count, 3, side, side, device=device)}
