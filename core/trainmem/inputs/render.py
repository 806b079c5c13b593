"""The key report as text: what trainmem read from each file, what it ignored, and what it assumed."""

from __future__ import annotations

import json
from typing import Any

from .record import KeyReport

_STATUS_WIDTH = 14
_KEY_WIDTH = 44


def render_key_report(report: KeyReport) -> str:
    counts = ", ".join(f"{report.count(s)} {s}" for s in ("modelled", "memory-neutral", "not modelled"))
    lines = [f"Read from your files ({counts}):"]
    for file in report.files:
        origin = f", named by {file.linked_from}" if file.linked_from else ""
        lines.append(f"  {file.name} — {file.kind} ({file.framework}{origin})")
        entries = [e for e in report.entries if e.file == file.name]
        for entry in entries:
            if entry.status == "memory-neutral" or entry.default:
                continue
            lines.append(_row(entry.status, f"{entry.key} = {_value(entry.value)}", entry.detail))
        defaults = [e for e in entries if e.default]
        for entry in defaults:
            lines.append(
                _row("default", f"{entry.key} (not in the file)", entry.detail.removeprefix("not in the file: "))
            )
        neutral = [e.key for e in entries if e.status == "memory-neutral"]
        if neutral:
            lines.append(f"    {'memory-neutral':<{_STATUS_WIDTH}} " + ", ".join(neutral))
    if report.notes:
        lines.append("  Notes:")
        lines += [f"    • {note}" for note in report.notes]
    return "\n".join(lines)


def _row(status: str, what: str, detail: str) -> str:
    if len(what) > _KEY_WIDTH:
        what = what[: _KEY_WIDTH - 1] + "…"
    return f"    {status:<{_STATUS_WIDTH}} {what:<{_KEY_WIDTH}} {detail}"


def _value(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)
