"""A base model named in a trainer file: a Hub id (resolved through ``data/hub_ids.json``) or a local folder.

A local folder or ``config.json`` is read as another file. A Hub id without a preset cannot be
resolved offline: the merge asks for that model's config.json in one line, unless another
file (a config.json) or a flag gives the model.
"""

from __future__ import annotations

from .hub import preset_for_hub_id
from .record import Recorder


def read_model_reference(rec: Recorder, key: str) -> None:
    name = str(rec.get(key)).strip()
    preset = preset_for_hub_id(name)
    if preset is not None:
        rec.set(key, "model", {"preset": preset}, f"Hub id {name!r} (data/hub_ids.json)")
        return
    if name.startswith((".", "/", "~")) or name.endswith(".json"):
        reference = name if name.endswith(".json") else name.rstrip("/") + "/config.json"
        rec.modelled(key, f"local model: reads {reference}")
        rec.link("model", key, reference)
        return
    rec.modelled(key, f"Hub id {name!r}: no preset matches; the model comes from a config.json or a flag")
    rec.facts.setdefault("unresolved_models", []).append((key, name))
