"""``Setup.images``: the images (and video frames) of one sample, in the terms users give them.

The sizes are those of the images as they come from the data set; the model's processor resizes
them (``vision/tokens.py``). ``min_pixels``/``max_pixels`` are the Qwen-VL processors' arguments
(``Qwen2VLImageProcessor(min_pixels=..., max_pixels=...)``), ``longest_edge`` Pixtral's and
Idefics3/SmolVLM's ``size={"longest_edge": ...}``; left out, the processor's default applies.
"""

from __future__ import annotations

from typing import Optional

from pydantic import ConfigDict, Field, model_validator

from .._base import FrozenModel
from ..errors import FieldError

MAX_IMAGE_SIDE_PX = 32768
"""A bound on an image side (px), not a model fact: above any camera or scan in common data sets."""
MAX_IMAGES_PER_SAMPLE = 256
"""A bound on images per sample (multi-image interleaved data sets use up to a few dozen)."""
MAX_VIDEO_FRAMES = 4096
"""A bound on frames per video (Qwen-VL samples at 2 fps: about 34 minutes)."""
MAX_PIXELS_BOUND = MAX_IMAGE_SIDE_PX * MAX_IMAGE_SIDE_PX


class ImageInputs(FrozenModel):
    """What one sample of the micro-batch carries besides its text tokens."""

    model_config = ConfigDict(strict=True)

    images_per_sample: int = Field(default=1, ge=0, le=MAX_IMAGES_PER_SAMPLE, description="Images in each sample.")
    image_height: int = Field(default=448, ge=1, le=MAX_IMAGE_SIDE_PX, description="Image height in pixels, before the processor resizes it.")
    image_width: int = Field(default=448, ge=1, le=MAX_IMAGE_SIDE_PX, description="Image width in pixels, before the processor resizes it.")
    min_pixels: Optional[int] = Field(
        default=None, ge=1, le=MAX_PIXELS_BOUND, description="Qwen-VL processors: the smallest image after resizing (pixels)."
    )
    max_pixels: Optional[int] = Field(
        default=None, ge=1, le=MAX_PIXELS_BOUND,
        description="Qwen-VL processors: the largest image after resizing (pixels); default 28·28·1280.",
    )
    longest_edge: Optional[int] = Field(
        default=None, ge=1, le=MAX_IMAGE_SIDE_PX,
        description="Pixtral / Mistral 3, Idefics3 / SmolVLM processors: the longest edge after resizing (pixels).",
    )
    videos_per_sample: int = Field(default=0, ge=0, le=64, description="Videos in each sample (Qwen-VL).")
    video_frames: int = Field(
        default=0, ge=0, le=MAX_VIDEO_FRAMES, description="Frames sampled per video (duration × fps; Qwen-VL samples 2 fps)."
    )
    video_height: Optional[int] = Field(default=None, ge=1, le=MAX_IMAGE_SIDE_PX, description="Frame height (default: image_height).")
    video_width: Optional[int] = Field(default=None, ge=1, le=MAX_IMAGE_SIDE_PX, description="Frame width (default: image_width).")

    @model_validator(mode="after")
    def _consistent(self) -> ImageInputs:
        if self.min_pixels is not None and self.max_pixels is not None and self.min_pixels > self.max_pixels:
            raise FieldError(
                "images.min_pixels", f"min_pixels ({self.min_pixels:,}) cannot exceed max_pixels ({self.max_pixels:,})"
            )
        if self.videos_per_sample and not self.video_frames:
            raise FieldError("images.video_frames", "videos_per_sample needs video_frames (frames sampled per video)")
        return self

    @property
    def frame_size(self) -> tuple[int, int]:
        return (self.video_height or self.image_height, self.video_width or self.image_width)
