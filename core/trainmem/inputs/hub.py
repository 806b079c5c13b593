"""A base model named by its Hugging Face Hub id resolves to a preset (``data/hub_ids.json``).

The table lists each preset's own repository plus mirrors, renamed repositories and
chat/instruct fine-tunes with the same config.json shapes. Any other id cannot be resolved
offline: the reader asks for that model's config.json.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Optional


@cache
def hub_ids() -> dict[str, str]:
    """Lower-cased hub id -> preset name."""
    raw = json.loads(resources.files("trainmem").joinpath("data").joinpath("hub_ids.json").read_text(encoding="utf-8"))
    return {hub_id.lower(): entry["preset"] for hub_id, entry in raw["hub_ids"].items()}


def preset_for_hub_id(name: str) -> Optional[str]:
    """The preset a hub id (or a preset name) stands for, or None."""
    from ..catalogs import presets

    key = name.strip().strip("/").lower()
    for prefix in ("hf://", "https://huggingface.co/"):
        key = key.removeprefix(prefix)
    if key in hub_ids():
        return hub_ids()[key]
    return key if key in presets() else None


def hub_id_for_preset(preset: str) -> str:
    from ..catalogs import presets

    return presets()[preset].hf_id
