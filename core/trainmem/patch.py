"""Applying a partial setup on top of another: the JSON merge patch of RFC 7396 (minus deletion)."""

from __future__ import annotations

from typing import Any


def merge_patch(base: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``patch`` on top: nested objects merge, every other value replaces."""
    merged = dict(base)
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_patch(merged[key], value)
        else:
            merged[key] = value
    return merged
