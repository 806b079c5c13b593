"""How many patches the vision tower sees and how many tokens the language model gets, per image.

Each rule follows the wrapper's image processor in transformers 5.24:

* ``fixed`` (CLIP/SigLIP towers: LLaVA-1.5, Gemma 3): every image is resized to the tower's
  ``image_size``; patches ``(image_size / patch_size)²`` (+1 class token for CLIP), tokens
  ``image_seq_length`` (576 for LLaVA-1.5) or Gemma 3's ``mm_tokens_per_image`` (256, average-pooled);
* ``smart_resize`` (``qwen2_vl/image_processing_qwen2_vl.py`` ``smart_resize``): height and width rounded
  to multiples of ``patch_size × merge_size`` (28 for Qwen2.5-VL, 32 for Qwen3-VL) and scaled into
  ``[min_pixels, max_pixels]``; an image is one temporal patch (the frame repeated
  ``temporal_patch_size`` times), a video ``ceil(frames / temporal_patch_size)``; patches
  ``grid_t × (H/p) × (W/p)``, tokens ``patches / merge_size²``; aspect ratios above 200 are refused;
* ``longest_edge`` (``pixtral/image_processing_pixtral.py`` ``get_resize_output_image_size``): scaled down
  (never up) so that both sides fit ``longest_edge``, sides rounded up to patches; the Mistral 3 patch merger
  turns ``rows × cols`` patches into ``rows/m × cols/m`` features, and the processor adds one
  ``[IMG_BREAK]`` per row (the last one ``[IMG_END]``): tokens ``rows/m × (cols/m + 1)``;
* ``tiles``: Idefics3/SmolVLM (``idefics3/image_processing_idefics3.py``): the longest edge is rescaled to
  ``longest_edge`` (4 × the tile by default), both sides rounded up to tiles, ``rows × cols`` tiles plus one
  global tile when there is more than one; Llama 4 (``llama4/image_processing_llama4.py``
  ``get_best_fit``, ``resize_to_max_canvas=False``): the canvas of at most ``max_patches`` (16) tiles that
  needs the least upscaling (or least downscaling), plus a global tile when there is more than one. Each tile
  is a ``tile_size`` tower input; the text tokens around the image (``<fake_token_around_image>``, row/column
  markers, ``<|image_start|>``) are counted with the text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import FieldError
from .inputs import ImageInputs
from .tower import TokenRule, VisionStack

QWEN_MAX_ASPECT_RATIO = 200
"""``smart_resize`` raises for ``max(h, w) / min(h, w) > 200``."""
QWEN2_VL_VIDEO_MIN_PIXELS = 128 * 28 * 28
QWEN2_VL_VIDEO_MAX_PIXELS = 28 * 28 * 768
"""Qwen2VLVideoProcessor ``size`` defaults (per frame; ``qwen2_vl/video_processing_qwen2_vl.py``)."""
IDEFICS3_MAX_IMAGE_SIZE = 4096
"""idefics3 / smolvlm image processors: ``MAX_IMAGE_SIZE``, the absolute bound after resizing."""


@dataclass(frozen=True)
class VisualCounts:
    """What the images of one sample become."""

    tower_sequences: int
    """Tower inputs (images or tiles; for Qwen-VL, the images and videos, each its own attention span)."""
    tower_patches: int
    """Patches (tower tokens) over all tower inputs of the sample."""
    tokens: int
    """Tokens added to the language model's sequence (image features plus the break/end tokens of Pixtral)."""
    features: int
    """Rows the projector outputs (what replaces the image placeholder tokens)."""
    pixel_values_numel: int
    """Elements of the processor's ``pixel_values`` for the sample (fp32)."""

    def __add__(self, other: VisualCounts) -> VisualCounts:
        return VisualCounts(
            self.tower_sequences + other.tower_sequences,
            self.tower_patches + other.tower_patches,
            self.tokens + other.tokens,
            self.features + other.features,
            self.pixel_values_numel + other.pixel_values_numel,
        )

    def times(self, count: int) -> VisualCounts:
        return VisualCounts(
            self.tower_sequences * count, self.tower_patches * count, self.tokens * count,
            self.features * count, self.pixel_values_numel * count,
        )


NONE = VisualCounts(0, 0, 0, 0, 0)


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Qwen2-VL's ``smart_resize`` (transformers 5.24 ``qwen2_vl/image_processing_qwen2_vl.py``)."""
    if max(height, width) / min(height, width) > QWEN_MAX_ASPECT_RATIO:
        raise FieldError(
            "images.image_height",
            f"the image's aspect ratio {max(height, width) / min(height, width):.0f} is above the processor's limit "
            f"of {QWEN_MAX_ASPECT_RATIO} (smart_resize refuses it)",
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def _fixed(rule: TokenRule, channels: int) -> VisualCounts:
    side = rule.image_size // rule.patch_size
    return VisualCounts(1, side * side + int(rule.class_token), rule.tokens_per_image, rule.tokens_per_image,
                        channels * rule.image_size * rule.image_size)


def _qwen(rule: TokenRule, images: ImageInputs, height: int, width: int, frames: int, channels: int) -> VisualCounts:
    factor = rule.patch_size * rule.merge
    video = frames > 1
    min_default, max_default = (QWEN2_VL_VIDEO_MIN_PIXELS, QWEN2_VL_VIDEO_MAX_PIXELS) if video else (rule.min_pixels, rule.max_pixels)
    min_pixels = images.min_pixels if images.min_pixels is not None else min_default
    max_pixels = images.max_pixels if images.max_pixels is not None else max(max_default, min_pixels)
    if max_pixels < factor * factor:
        raise FieldError("images.max_pixels", f"max_pixels ({max_pixels:,}) is below one merged patch ({factor}×{factor} px)")
    h, w = smart_resize(height, width, factor, min_pixels, max_pixels)
    grid_t = max(1, math.ceil(frames / rule.temporal_patch_size))
    patches = grid_t * (h // rule.patch_size) * (w // rule.patch_size)
    tokens = patches // (rule.merge * rule.merge)
    pixel_values = patches * channels * rule.temporal_patch_size * rule.patch_size * rule.patch_size
    return VisualCounts(1, patches, tokens, tokens, pixel_values)


def _pixtral(rule: TokenRule, images: ImageInputs, channels: int) -> VisualCounts:
    longest = images.longest_edge or rule.longest_edge
    height, width = images.image_height, images.image_width
    ratio = max(height / longest, width / longest)
    if ratio > 1:
        height, width = int(math.floor(height / ratio)), int(math.floor(width / ratio))
    rows, cols = (height - 1) // rule.patch_size + 1, (width - 1) // rule.patch_size + 1
    merged_rows, merged_cols = rows // rule.merge, cols // rule.merge
    features = merged_rows * merged_cols
    return VisualCounts(
        1, rows * cols, merged_rows * (merged_cols + 1), features,
        channels * rows * rule.patch_size * cols * rule.patch_size,
    )


def _idefics3_tiles(rule: TokenRule, images: ImageInputs) -> int:
    longest = images.longest_edge or rule.resize_longest_edge
    height, width = images.image_height, images.image_width
    aspect = width / height
    if width >= height:  # _resize_output_size_rescale_to_max_len
        width = longest
        height = int(width / aspect)
        height += height % 2
    else:
        height = longest
        width = int(height * aspect)
        width += width % 2
    height, width = max(height, 1), max(width, 1)
    if max(height, width) > IDEFICS3_MAX_IMAGE_SIZE:  # _resize_output_size_scale_below_upper_bound
        scale = IDEFICS3_MAX_IMAGE_SIZE / max(height, width)
        height, width = max(1, int(height * scale)), max(1, int(width * scale))
    tile = rule.tile_size
    rows, cols = math.ceil(height / tile), math.ceil(width / tile)
    return rows * cols + (1 if rows * cols > 1 else 0)


def _llama4_tiles(rule: TokenRule, images: ImageInputs) -> int:
    tile, height, width = rule.tile_size, images.image_height, images.image_width
    canvases = [(r, c) for r in range(1, rule.max_tiles + 1) for c in range(1, rule.max_tiles + 1) if r * c <= rule.max_tiles]
    scales = {canvas: min(canvas[0] * tile / height, canvas[1] * tile / width) for canvas in canvases}
    upscales = [s for s in scales.values() if s >= 1]
    chosen = min(upscales) if upscales else max(scales.values())
    rows, cols = min((c for c, s in scales.items() if s == chosen), key=lambda c: c[0] * c[1])
    return rows * cols + (1 if rows * cols > 1 else 0)


def _tiles(rule: TokenRule, images: ImageInputs, channels: int) -> VisualCounts:
    count = _llama4_tiles(rule, images) if rule.class_token else _idefics3_tiles(rule, images)
    side = rule.tile_size // rule.patch_size
    per_tile = VisualCounts(1, side * side + int(rule.class_token), rule.tokens_per_tile, rule.tokens_per_tile,
                            channels * rule.tile_size * rule.tile_size)
    return per_tile.times(count)


def per_image(stack: VisionStack, images: ImageInputs, channels: int = 3) -> VisualCounts:
    """What one image of ``images`` becomes for ``stack``."""
    rule = stack.tokens
    if rule.kind == "fixed":
        return _fixed(rule, channels)
    if rule.kind == "smart_resize":
        return _qwen(rule, images, images.image_height, images.image_width, 1, channels)
    if rule.kind == "longest_edge":
        return _pixtral(rule, images, channels)
    return _tiles(rule, images, channels)


def per_sample(stack: VisionStack, images: ImageInputs) -> VisualCounts:
    """Everything the images and videos of one sample become."""
    counts = per_image(stack, images).times(images.images_per_sample) if images.images_per_sample else NONE
    if images.videos_per_sample:
        if stack.tokens.kind != "smart_resize":
            raise FieldError("images.videos_per_sample", f"{stack.wrapper} takes no video input here; only Qwen-VL models do")
        height, width = images.frame_size
        video = _qwen(stack.tokens, images, height, width, images.video_frames, 3)
        counts = counts + video.times(images.videos_per_sample)
    return counts
