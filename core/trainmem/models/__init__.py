"""Model families as plug-ins: one module per transformers family, registered here.

``FAMILIES`` maps each supported ``model_type`` to its :class:`~trainmem.models.family.DecoderFamily`;
``family_for(architecture)`` is how the rest of trainmem reaches a family's code (names, layer
program, PEFT and bitsandbytes rules), and :func:`architecture_from_hf_config` reads a
``config.json`` through the family's reader. Multimodal wrappers (LLaVA, Mistral 3, Gemma 3,
Qwen-VL, Llama 4) are read through their ``text_config``: the language model is counted, the vision
tower and projector are stated as not counted.

To add a family: write ``trainmem/models/<family>.py`` with a ``DecoderFamily`` subclass (config
reader with the transformers class's defaults, inventory from the shared blocks, a ``LayerProgram``
subclass for ops of its own), add it to ``_FAMILY_CLASSES`` below, add a preset and small measured
corpus cases (scripts/corpus_cases.py), and run tests/test_families.py.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..architecture import Architecture
from ..errors import FieldError
from .cohere import Cohere
from .falcon import Falcon
from .bert import Bert
from .deberta_v2 import DebertaV2
from .deepseek import DeepseekV2, DeepseekV3
from .distilbert import DistilBert
from .family import DecoderFamily
from .fields import ConfigFields, describe
from .gemma import Gemma2, Gemma3Text
from .gpt2 import GPT2
from .gpt_neox import GPTNeoX
from .granite import Granite
from .gpt_oss import GptOss
from .llama import Llama
from .llama4 import Llama4Text
from .mistral import Mistral, Mixtral
from .modernbert import ModernBert
from .olmo2 import Olmo2
from .phi3 import Phi3
from .phimoe import Phimoe
from .qwen2 import Qwen2, Qwen2Moe
from .qwen3 import Qwen3, Qwen3Moe
from .qwen3_next import Qwen3Next
from .qwen3_5 import Qwen3_5MoeText, Qwen3_5Text
from .roberta import Roberta, XLMRoberta
from .starcoder2 import Starcoder2
from .vision_encoders import VISION_ENCODER_FAMILIES
from .t5 import MT5, T5
from .bart import Bart
from .whisper import Whisper

_FAMILY_CLASSES: tuple[type[DecoderFamily], ...] = (
    GPT2,
    Llama,
    Mistral,
    Mixtral,
    Qwen2,
    Qwen2Moe,
    Qwen3,
    Qwen3Moe,
    Gemma2,
    Gemma3Text,
    Phi3,
    Phimoe,
    Olmo2,
    Starcoder2,
    Granite,
    Llama4Text,
    GPTNeoX,
    DeepseekV2,
    DeepseekV3,
    GptOss,
    Qwen3Next,
    Qwen3_5Text,
    Qwen3_5MoeText,
    Cohere,
    Falcon,
    Bert,
    Roberta,
    XLMRoberta,
    DistilBert,
    ModernBert,
    *VISION_ENCODER_FAMILIES,
    T5,
    MT5,
    Bart,
    Whisper,
    DebertaV2,
)

FAMILIES: dict[str, DecoderFamily] = {cls.model_type: cls() for cls in _FAMILY_CLASSES}
"""Supported ``model_type`` values and their family."""

MODEL_TYPE_ALIASES: dict[str, str] = {
    "kimi_k2": "deepseek_v3",
}
"""``model_type`` values of remote-code configs that a transformers class reads as another family:
Kimi-K2's config has DeepSeek-V3's fields and architecture (transformers' ``Kimi_K25Config`` rewrites a
``kimi_k2`` text config to ``deepseek_v3``)."""

MULTIMODAL_TEXT_MODEL_TYPES: dict[str, str] = {
    "gemma3": "gemma3_text",
    "llama4": "llama4_text",
    "llava": "llama",
    "llava_next": "llama",
    "mistral3": "mistral",
    "qwen2_vl": "qwen2",
    "qwen2_5_vl": "qwen2",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "idefics3": "llama",
    "smolvlm": "llama",
}
"""Multimodal ``model_type`` -> the family of its language model when ``text_config`` names none
(the default ``text_config`` class of the transformers wrapper), or when the language model's fields
sit at the top level of the file (Qwen2-VL and Qwen2.5-VL checkpoints are written so)."""

TEXT_MODEL_ALIASES: dict[str, str] = {
    "qwen2_vl_text": "qwen2",
    "qwen2_5_vl_text": "qwen2",
    "qwen3_vl_text": "qwen3",
    "qwen3_vl_moe_text": "qwen3_moe",
}
"""Language models of multimodal wrappers whose parameters are laid out as another family's
(checked on the meta device: the same tensors as Qwen2 / Qwen3; their multimodal RoPE changes the
positions, not the shapes)."""

REMOTE_CODE_MODEL_TYPES: dict[str, str] = {
    "internlm2": "InternLM2 is remote code only: internlm/internlm2-* ship their modeling code with the checkpoint "
    "(trust_remote_code) and transformers 5.24 has no internlm2 class (its internlm3 is another architecture)",
}
"""``model_type`` values whose model exists only as remote code: refused in one line that says so."""


class _Custom(Llama):
    """Explicit architectures (``model_type`` "custom" or not a family's): Llama's module names,
    and attention in the scores' dtype as Megatron-style blocks compute it."""

    model_type = "custom"
    eager_softmax_in_fp32 = False


_CUSTOM = _Custom()


def supported_model_types() -> list[str]:
    return sorted({*FAMILIES, *MODEL_TYPE_ALIASES})


def family_for(arch: Architecture) -> DecoderFamily:
    """The family whose code builds and runs ``arch`` (the Llama layout for custom architectures)."""
    return FAMILIES.get(arch.model_type, _CUSTOM)


def architecture_from_hf_config(config: Mapping[str, Any], prefix: str = "") -> Architecture:
    """The Architecture a Hugging Face ``config.json`` describes, read by its family.

    Raises :class:`~trainmem.errors.FieldError` naming the field (``model_type``, or the field of
    the family's config that is wrong).
    """
    if not isinstance(config, Mapping):
        raise FieldError(prefix or "hf_config", f"a config.json must be a JSON object, got {describe(config)}")
    fields = ConfigFields(config, prefix)
    model_type = config.get("model_type")
    if model_type is not None and not isinstance(model_type, str):
        raise fields.fail("model_type", f"expected a string, got {describe(model_type)}")
    if model_type in MODEL_TYPE_ALIASES:
        family = FAMILIES[MODEL_TYPE_ALIASES[model_type]]
        return _read(family, ConfigFields({**config, "model_type": family.model_type}, prefix), ())
    if model_type in FAMILIES:
        return _read(FAMILIES[model_type], fields, ())
    if model_type in TEXT_MODEL_ALIASES:
        family = FAMILIES[TEXT_MODEL_ALIASES[model_type]]
        arch = _read(family, ConfigFields({**config, "model_type": family.model_type}, prefix), ())
        return arch
    text_config = fields.mapping("text_config")
    if text_config is None and model_type in MULTIMODAL_TEXT_MODEL_TYPES and "hidden_size" in config:
        text_type = MULTIMODAL_TEXT_MODEL_TYPES[model_type]
        arch = _read(FAMILIES[text_type], ConfigFields({**config, "model_type": text_type}, prefix), ())
        if _vision_is_read(model_type):
            return arch
        return arch.model_copy(update={"not_counted": (f"the vision tower and projector of {model_type}",)})
    if text_config is not None:
        text_fields = dict(text_config)
        text_type = text_fields.get("model_type")
        if text_type is None:
            text_type = MULTIMODAL_TEXT_MODEL_TYPES.get(model_type or "")
            if text_type is not None:
                text_fields["model_type"] = text_type
        if text_type in TEXT_MODEL_ALIASES or text_type in FAMILIES or text_type is None:
            arch = architecture_from_hf_config(text_fields, fields.path("text_config"))
            wrapper = model_type or "multimodal"
            if _vision_is_read(model_type):
                return arch  # trainmem.vision reads the tower and projector (Setup.vision_stack)
            return arch.model_copy(
                update={"not_counted": (*arch.not_counted, f"the vision tower and projector of {wrapper}")}
            )
    if model_type in REMOTE_CODE_MODEL_TYPES:
        raise fields.fail("model_type", f"{model_type!r} is not supported: {REMOTE_CODE_MODEL_TYPES[model_type]}")
    tried = [repr(model_type)]
    if text_config is not None:
        tried.append(f"text_config.model_type {text_config.get('model_type')!r}")
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures:
        tried.append(f"architectures {architectures[0]!r}")
    raise fields.fail(
        "model_type",
        f"{' / '.join(tried)} is not supported; supported model types: {', '.join(supported_model_types())}",
    )


def _vision_is_read(model_type: Any) -> bool:
    """Whether ``trainmem.vision`` reads this wrapper's vision tower and projector."""
    from ..vision.readers import VISION_READERS  # vision imports models' blocks: imported late

    return model_type in VISION_READERS


def _read(family: DecoderFamily, fields: ConfigFields, notes: tuple[str, ...]) -> Architecture:
    """The family's reader; a cross-field check of the Architecture is re-raised naming its field."""
    from pydantic import ValidationError

    try:
        return family.read_config(fields)
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        cause = (problem.get("ctx") or {}).get("error")
        if isinstance(cause, FieldError):
            raise fields.fail(cause.field, str(cause)) from None
        location = ".".join(str(part) for part in problem["loc"]) or "model_type"
        raise fields.fail(location, problem["msg"].removeprefix("Value error, ")) from None


__all__ = ["FAMILIES", "DecoderFamily", "architecture_from_hf_config", "family_for", "supported_model_types"]
