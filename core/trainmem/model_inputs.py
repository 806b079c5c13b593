"""Which optional inputs a model takes: the setup fields that apply to it, from what the core resolves.

The page shows a field only when the chosen model reads it, and the answer comes from the same
objects the simulation uses, never from a list of model names:

* **images** (``images.*``): the model has a vision tower (``Setup.vision_stack()``, read from the
  config by ``vision/readers.py``). Which image fields count depends on the processor's token rule
  (``vision/tower.py`` ``TokenRule.kind``, used by ``vision/tokens.py per_image``): a ``fixed``-size
  tower (LLaVA-1.5, Gemma 3) resizes every image to one size, so only the count matters;
  ``smart_resize`` (Qwen-VL) reads the size, ``min_pixels``/``max_pixels`` and takes videos;
  ``longest_edge`` (Pixtral / Mistral 3) and ``tiles`` (Idefics3, SmolVLM, Llama 4) read the size and
  the longest edge.
* **target_length**: an encoder-decoder (the architecture has an encoder stack before its decoder
  layers, ``Architecture.encoder_layers`` > 0, T5 in ``models/t5.py``); ``sequence_length`` is then
  the source length.
* **task kinds**: the heads the model's family builds (``family.tasks``, ``tasks.py``) and the one it
  trains by default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Optional

if TYPE_CHECKING:
    from .architecture import Architecture

_IMAGE_FIELDS_BY_RULE: dict[str, tuple[str, ...]] = {
    "fixed": ("images_per_sample",),
    "smart_resize": (
        "images_per_sample", "image_height", "image_width", "min_pixels", "max_pixels",
        "videos_per_sample", "video_frames", "video_height", "video_width",
    ),
    "longest_edge": ("images_per_sample", "image_height", "image_width", "longest_edge"),
    "tiles": ("images_per_sample", "image_height", "image_width", "longest_edge"),
}
"""``ImageInputs`` fields each processor rule reads (``vision/tokens.py``: ``_fixed``, ``_qwen``,
``_pixtral``, ``_tiles``); a rule this table does not know reads them all."""


@dataclass(frozen=True)
class ModelInputs:
    """The optional inputs of one model, as dotted setup paths."""

    fields: tuple[str, ...] = ()
    """Optional setup fields the model reads (``images``, ``images.image_height``, ``target_length``...)."""
    tasks: tuple[str, ...] = ("causal_lm",)
    """``task.kind`` values the family has."""
    default_task: str = "causal_lm"
    vision_wrapper: str = ""
    """The vision-language wrapper (``llava``, ``qwen2_5_vl``...), empty for a text model."""
    image_token_rule: str = ""
    encoder_decoder: bool = False

    def as_dict(self) -> dict:
        return {
            "fields": list(self.fields),
            "tasks": list(self.tasks),
            "default_task": self.default_task,
            "vision_wrapper": self.vision_wrapper,
            "image_token_rule": self.image_token_rule,
            "encoder_decoder": self.encoder_decoder,
        }


def model_inputs(model: Any) -> ModelInputs:
    """What ``model`` (``Setup.model``: a validated preset, config.json, architecture or parameter count)
    takes besides text tokens; a parameter count alone takes nothing and has no head to choose."""
    from .models import family_for
    from .vision.readers import read_vision_stack

    architecture = _architecture_of(model)
    if architecture is None:
        return ModelInputs(tasks=(), default_task="")
    family = family_for(architecture)
    tasks = tuple(getattr(family, "tasks", ("causal_lm",)))
    fields: list[str] = []
    config, where = _config_of(model)
    stack = read_vision_stack(config, where) if config is not None else None
    wrapper = rule = ""
    if stack is not None:
        wrapper, rule = stack.wrapper, stack.tokens.kind
        names = _IMAGE_FIELDS_BY_RULE.get(rule) or tuple(_all_image_fields())
        fields += ["images"] + [f"images.{name}" for name in names]
    encoder_decoder = getattr(architecture, "encoder_layers", 0) > 0  # the field comes with the T5 family
    if encoder_decoder:
        fields.append("target_length")
    return ModelInputs(
        fields=tuple(fields),
        tasks=tasks,
        default_task=tasks[0] if tasks else "",
        vision_wrapper=wrapper,
        image_token_rule=rule,
        encoder_decoder=encoder_decoder,
    )


def _architecture_of(model: Any) -> Optional[Architecture]:
    """As ``Setup.architecture`` reads it, before a task is applied."""
    from .setup import ArchitectureModel, HFConfigModel, PresetModel

    if isinstance(model, (PresetModel, HFConfigModel)):
        return model.architecture()
    if isinstance(model, ArchitectureModel):
        return model.architecture
    return None


def _config_of(model: Any) -> tuple[Optional[Mapping[str, Any]], str]:
    """The config.json a vision stack is read from, as ``Setup.vision_stack`` finds it."""
    from .catalogs import presets
    from .setup import HFConfigModel, PresetModel

    if isinstance(model, PresetModel):
        return presets()[model.preset].config, "model"
    if isinstance(model, HFConfigModel):
        return model.hf_config, "model.hf_config"
    return None, ""


def _all_image_fields() -> list[str]:
    from .vision.inputs import ImageInputs

    return list(ImageInputs.model_fields)
