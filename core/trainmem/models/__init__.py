"""Model families as plug-ins: one module per transformers family, registered here.

``FAMILIES`` maps each supported ``model_type`` to its :class:`~trainmem.models.family.DecoderFamily`;
``family_for(architecture)`` is how the rest of trainmem reaches a family's code (names, layer
program, PEFT and bitsandbytes rules), and :func:`architecture_from_hf_config` reads a
``config.json`` through the family's reader. Multimodal wrappers (LLaVA, Mistral 3, Gemma 3,
Qwen-VL, Llama 4) are read through their ``text_config``: the language model is counted, the vision
tower and projector are stated as not counted.

To add a family: write ``trainmem/models/<family>.py`` with a ``DecoderFamily`` subclass (config
reader with the transformers class's defaults, inventory from the shared blocks, a ``LayerProgram``
subclass for ops of its own), add it to ``FAMILY_MODULES`` below, add a preset and small measured
corpus cases (scripts/corpus_cases.py), and run tests/test_families.py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from importlib import import_module
from typing import Any

from ..architecture import Architecture
from ..errors import FieldError
from .family import DecoderFamily
from .fields import ConfigFields, describe
from .llama import Llama

FAMILY_MODULES: dict[str, tuple[str, str]] = {
    "gpt2": ("gpt2", "GPT2"),
    "llama": ("llama", "Llama"),
    "mistral": ("mistral", "Mistral"),
    "mixtral": ("mistral", "Mixtral"),
    "ministral3": ("ministral3", "Ministral3"),
    "mistral4": ("mistral4", "Mistral4"),
    "minimax_m2": ("minimax_m2", "MiniMaxM2"),
    "qwen2": ("qwen2", "Qwen2"),
    "qwen2_moe": ("qwen2", "Qwen2Moe"),
    "qwen3": ("qwen3", "Qwen3"),
    "qwen3_moe": ("qwen3", "Qwen3Moe"),
    "gemma2": ("gemma", "Gemma2"),
    "gemma3_text": ("gemma", "Gemma3Text"),
    "gemma4_text": ("gemma4", "Gemma4Text"),
    "phi3": ("phi3", "Phi3"),
    "phimoe": ("phimoe", "Phimoe"),
    "olmo2": ("olmo2", "Olmo2"),
    "olmo3": ("olmo3", "Olmo3"),
    "olmo_hybrid": ("olmo_hybrid", "OlmoHybrid"),
    "smollm3": ("smollm3", "SmolLM3"),
    "starcoder2": ("starcoder2", "Starcoder2"),
    "granite": ("granite", "Granite"),
    "llama4_text": ("llama4", "Llama4Text"),
    "gpt_neox": ("gpt_neox", "GPTNeoX"),
    "deepseek_v2": ("deepseek", "DeepseekV2"),
    "deepseek_v3": ("deepseek", "DeepseekV3"),
    "deepseek_v32": ("deepseek_v32", "DeepseekV32"),
    "glm4": ("glm4", "Glm4"),
    "glm4_moe": ("glm4_moe", "Glm4Moe"),
    "glm4_moe_lite": ("glm4_moe_lite", "Glm4MoeLite"),
    "gpt_oss": ("gpt_oss", "GptOss"),
    "qwen3_next": ("qwen3_next", "Qwen3Next"),
    "qwen3_5_text": ("qwen3_5", "Qwen3_5Text"),
    "qwen3_5_moe_text": ("qwen3_5", "Qwen3_5MoeText"),
    "qwen4_exp_text": ("qwen4_exp", "Qwen4ExpText"),
    "cohere": ("cohere", "Cohere"),
    "granitemoehybrid": ("granitemoehybrid", "GraniteMoeHybrid"),
    "nemotron_h": ("nemotron_h", "NemotronH"),
    "mamba2": ("mamba2", "Mamba2"),
    "ernie4_5": ("ernie4_5", "Ernie4_5"),
    "ernie4_5_moe": ("ernie4_5_moe", "Ernie4_5Moe"),
    "apertus": ("apertus", "Apertus"),
    "hunyuan_v1_dense": ("hunyuan_v1", "HunyuanV1Dense"),
    "hunyuan_v1_moe": ("hunyuan_v1", "HunyuanV1Moe"),
    "exaone4": ("exaone4", "Exaone4"),
    "seed_oss": ("seed_oss", "SeedOss"),
    "falcon": ("falcon", "Falcon"),
    "falcon_h1": ("falcon_h1", "FalconH1"),
    "lfm2": ("lfm2", "Lfm2"),
    "lfm2_moe": ("lfm2_moe", "Lfm2Moe"),
    "bert": ("bert", "Bert"),
    "roberta": ("roberta", "Roberta"),
    "xlm-roberta": ("roberta", "XLMRoberta"),
    "distilbert": ("distilbert", "DistilBert"),
    "modernbert": ("modernbert", "ModernBert"),
    "vit": ("vision_encoders", "Vit"),
    "dinov2": ("vision_encoders", "Dinov2"),
    "dinov2_with_registers": ("vision_encoders", "Dinov2WithRegisters"),
    "clip_vision_model": ("vision_encoders", "ClipVision"),
    "clip": ("vision_encoders", "Clip"),
    "siglip_vision_model": ("vision_encoders", "SiglipVision"),
    "siglip": ("vision_encoders", "Siglip"),
    "t5": ("t5", "T5"),
    "mt5": ("t5", "MT5"),
    "bart": ("bart", "Bart"),
    "whisper": ("whisper", "Whisper"),
    "deberta-v2": ("deberta_v2", "DebertaV2"),
}
"""Supported ``model_type`` -> (module of ``trainmem.models``, its :class:`DecoderFamily` subclass).

A family's module is imported when a config of its ``model_type`` is first read (or its family is
first asked for), not when trainmem is imported: the web page then starts without the other
families' code (tests/test_family_registry.py checks this table against the classes' ``model_type``)."""


class _FamilyRegistry(Mapping[str, DecoderFamily]):
    """``model_type`` -> family, importing the family's module on first access (see FAMILY_MODULES)."""

    def __init__(self, modules: Mapping[str, tuple[str, str]]) -> None:
        self._modules = modules
        self._families: dict[str, DecoderFamily] = {}

    def __getitem__(self, model_type: str) -> DecoderFamily:
        family = self._families.get(model_type)
        if family is None:
            module, name = self._modules[model_type]
            family = self._families[model_type] = getattr(import_module(f"{__name__}.{module}"), name)()
        return family

    def __contains__(self, model_type: object) -> bool:
        return model_type in self._modules

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __len__(self) -> int:
        return len(self._modules)


FAMILIES: Mapping[str, DecoderFamily] = _FamilyRegistry(FAMILY_MODULES)
"""Supported ``model_type`` values and their family (each family's module imported at first use)."""

MODEL_TYPE_ALIASES: dict[str, str] = {
    "kimi_k2": "deepseek_v3",
}
"""``model_type`` values of remote-code configs that a transformers class reads as another family:
Kimi-K2's config has DeepSeek-V3's fields and architecture (transformers' ``Kimi_K25Config`` rewrites a
``kimi_k2`` text config to ``deepseek_v3``)."""

MULTIMODAL_TEXT_MODEL_TYPES: dict[str, str] = {
    "gemma3": "gemma3_text",
    "gemma4": "gemma4_text",
    "llama4": "llama4_text",
    "llava": "llama",
    "llava_next": "llama",
    "mistral3": "mistral",
    "qwen2_vl": "qwen2",
    "qwen2_5_vl": "qwen2",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "qwen4_exp": "qwen4_exp_text",
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
