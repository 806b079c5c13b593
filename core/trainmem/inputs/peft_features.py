"""The PEFT options every reader maps the same way: ``modules_to_save`` and ``use_dora``.

Each trainer spells them its own way: PEFT's ``adapter_config.json`` and TRL's ModelConfig
(``modules_to_save`` / ``lora_modules_to_save``, ``use_dora``), Axolotl (``lora_modules_to_save``,
``peft_use_dora``), LLaMA-Factory (``additional_target``, a comma-separated string that
``LoraConfig(modules_to_save=...)`` receives, and ``use_dora``). Both are modelled
(``trainmem.modules_to_save``, ``trainmem.dora``).
"""

from __future__ import annotations

from typing import Any

from .record import InputError, Recorder


def module_names(rec: Recorder, key: str) -> list[str]:
    """A list of module names, or one comma-separated string of them."""
    value: Any = rec.get(key)
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    if isinstance(value, list) and all(isinstance(name, str) for name in value):
        return [name.strip() for name in value if name.strip()]
    raise InputError(f"{rec.file}: {key}: expected a list of module names, got {value!r}")


def read_modules_to_save(rec: Recorder, key: str) -> None:
    value = rec.get(key)
    if value in (None, [], ""):
        if key in rec.data:
            rec.neutral(key, "none")
        return
    rec.set(
        key,
        "finetuning.lora.modules_to_save",
        module_names(rec, key),
        "trained full copies next to the frozen originals (weights, gradients, optimizer states)",
    )


def read_use_dora(rec: Recorder, key: str) -> None:
    value = rec.get(key)
    if value is True:
        rec.set(key, "finetuning.lora.use_dora", True, "magnitude vectors, the materialised B@A and the saved norms")
    elif value is not None:
        rec.neutral(key, "off")
