"""Two Reports side by side: what changed in the setup, and the difference of every figure.

The question users ask is rarely "how much?" but "how much more or less than that?":
ZeRO-2 or ZeRO-3, LoRA or QLoRA, one H100 or two A100s. :func:`compare` answers it from two
Reports without computing any memory itself: the peaks, the five categories, and every part
of the breakdown, matched by (category, name), as B minus A. A part present on one side only
counts as 0 bytes on the other (QLoRA has a "quantization constants" part that LoRA lacks).

Used by ``trainmem compare`` (cli.py) and mirrored, field for field, by the web page's
compare mode (web/js/compare.js), whose browser test checks it against ``--json``.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from ._base import FrozenModel
from .report import CATEGORIES, Category, Report
from .units import format_bytes

Status = Literal["fits", "tight", "does_not_fit"]


class Delta(FrozenModel):
    """One figure of both reports: ``delta_bytes`` is B − A."""

    a_bytes: int
    b_bytes: int
    delta_bytes: int

    @classmethod
    def of(cls, a_bytes: int, b_bytes: int) -> "Delta":
        return cls(a_bytes=a_bytes, b_bytes=b_bytes, delta_bytes=b_bytes - a_bytes)

    @property
    def relative(self) -> float | None:
        """B − A as a fraction of A; None when A is 0."""
        return self.delta_bytes / self.a_bytes if self.a_bytes else None


class PartDelta(Delta):
    """One part of the breakdown (parts of one category with the same name are summed)."""

    category: Category
    name: str


class SetupChange(FrozenModel):
    """A setup field whose value differs (dotted path, JSON values; None where a side lacks it)."""

    path: str
    a: Any = None
    b: Any = None


class FitSide(FrozenModel):
    gpu: str
    gpu_display_name: str
    usable_bytes: int
    status: Status
    message: str


class Comparison(FrozenModel):
    """Report B against report A."""

    a_label: str
    b_label: str
    setup_changes: list[SetupChange]
    peak_total: Delta
    peak_allocated: Delta
    num_trainable_parameters: Delta
    breakdown: dict[Category, Delta]
    parts: list[PartDelta]
    a_fit: FitSide
    b_fit: FitSide
    a_peak_label: str
    b_peak_label: str
    host_peak: Optional[Delta] = None
    """Host RAM per node (``Report.host.peak_bytes``) where both reports have it."""


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaf values; a model's free-form objects (a config.json) stay whole under ``model``."""
    if not isinstance(value, dict) or prefix == "model.hf_config":
        return {prefix: value}
    out: dict[str, Any] = {}
    for key, item in value.items():
        out.update(_flatten(item, f"{prefix}.{key}" if prefix else key))
    return out


def setup_changes(a: Report, b: Report) -> list[SetupChange]:
    """The fields of the two (validated, defaults filled) setups that differ, in A's field order."""
    flat_a = _flatten(a.setup.model_dump(mode="json"))
    flat_b = _flatten(b.setup.model_dump(mode="json"))
    paths = list(flat_a) + [path for path in flat_b if path not in flat_a]
    return [
        SetupChange(path=path, a=flat_a.get(path), b=flat_b.get(path))
        for path in paths
        if flat_a.get(path) != flat_b.get(path)
    ]


def _part_bytes(report: Report) -> dict[tuple[str, str], int]:
    totals: dict[tuple[str, str], int] = {}
    for part in report.parts:
        key = (part.category, part.name)
        totals[key] = totals.get(key, 0) + part.bytes
    return totals


def part_deltas(a: Report, b: Report) -> list[PartDelta]:
    """Every part of either report, category by category, A's order first, then B's new parts."""
    bytes_a, bytes_b = _part_bytes(a), _part_bytes(b)
    keys = list(bytes_a) + [key for key in bytes_b if key not in bytes_a]
    keys.sort(key=lambda key: CATEGORIES.index(key[0]))  # stable: the order within a category stays
    deltas = []
    for category, name in keys:
        delta = Delta.of(bytes_a.get((category, name), 0), bytes_b.get((category, name), 0))
        deltas.append(PartDelta(category=category, name=name, **delta.model_dump()))
    return deltas


def _fit_side(report: Report) -> FitSide:
    fit = report.fit
    return FitSide(gpu=fit.gpu, gpu_display_name=fit.gpu_display_name, usable_bytes=fit.usable_bytes,
                   status=fit.status, message=fit.message)


def compare(a: Report, b: Report, a_label: str = "A", b_label: str = "B") -> Comparison:
    """Report B against report A (every delta is B − A)."""
    return Comparison(
        a_label=a_label,
        b_label=b_label,
        setup_changes=setup_changes(a, b),
        peak_total=Delta.of(a.peak_total_bytes, b.peak_total_bytes),
        peak_allocated=Delta.of(a.peak_allocated_bytes, b.peak_allocated_bytes),
        num_trainable_parameters=Delta.of(a.num_trainable_parameters, b.num_trainable_parameters),
        breakdown={c: Delta.of(getattr(a.breakdown, c), getattr(b.breakdown, c)) for c in CATEGORIES},
        parts=part_deltas(a, b),
        a_fit=_fit_side(a),
        b_fit=_fit_side(b),
        a_peak_label=a.peak.label,
        b_peak_label=b.peak.label,
        host_peak=Delta.of(a.host.peak_bytes, b.host.peak_bytes) if a.host and b.host else None,
    )


# --------------------------------------------------------------------------- text


CATEGORY_NAMES = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_states": "optimizer states",
    "activations": "activations",
    "overhead": "overhead",
}
STATUS_NAMES = {"fits": "fits", "tight": "tight", "does_not_fit": "does not fit"}


def format_delta(delta: Delta) -> str:
    """B − A with a sign and, where A is not 0, the relative change: "+1.50 GiB (+12.3%)"."""
    if delta.delta_bytes == 0:
        return "0"
    sign = "+" if delta.delta_bytes > 0 else "−"
    text = f"{sign}{format_bytes(abs(delta.delta_bytes))}"
    if delta.relative is not None:
        text += f" ({sign}{abs(delta.relative):.1%})"
    return text


def format_value(value: Any) -> str:
    """A setup value as the setup file writes it (JSON), compact."""
    import json

    return json.dumps(value, separators=(",", ":"), ensure_ascii=False) if not isinstance(value, str) else value


def comparison_rows(comparison: Comparison, parts: bool = True) -> list[tuple[str, str, str, str]]:
    """(figure, A, B, B − A) rows: the peaks, the fit, each category and (indented) its parts."""
    c = comparison
    rows = [
        ("peak total per GPU", format_bytes(c.peak_total.a_bytes), format_bytes(c.peak_total.b_bytes),
         format_delta(c.peak_total)),
        ("peak allocated (PyTorch)", format_bytes(c.peak_allocated.a_bytes), format_bytes(c.peak_allocated.b_bytes),
         format_delta(c.peak_allocated)),
        ("fit", f"{STATUS_NAMES[c.a_fit.status]} ({c.a_fit.gpu})", f"{STATUS_NAMES[c.b_fit.status]} ({c.b_fit.gpu})",
         "same" if c.a_fit.status == c.b_fit.status else "changed"),
        ("peak happens at", c.a_peak_label, c.b_peak_label, "same" if c.a_peak_label == c.b_peak_label else "moved"),
    ]
    if c.host_peak is not None:
        rows.append(("host RAM per node", format_bytes(c.host_peak.a_bytes), format_bytes(c.host_peak.b_bytes),
                     format_delta(c.host_peak)))
    for category in CATEGORIES:
        delta = c.breakdown[category]
        rows.append((CATEGORY_NAMES[category], format_bytes(delta.a_bytes), format_bytes(delta.b_bytes),
                     format_delta(delta)))
        if parts:
            for part in (p for p in c.parts if p.category == category):
                rows.append((f"  {part.name}", format_bytes(part.a_bytes), format_bytes(part.b_bytes),
                             format_delta(part)))
    return rows


def render_comparison(comparison: Comparison) -> str:
    """The comparison as aligned text for a terminal."""
    c = comparison
    lines = [f"trainmem compare: {c.b_label} against {c.a_label} (differences are B − A)"]
    if c.setup_changes:
        lines.append("Setup changes:")
        lines += [f"  {ch.path}: {format_value(ch.a)} → {format_value(ch.b)}" for ch in c.setup_changes]
    else:
        lines.append("The two setups are the same.")
    header = ("", f"A: {c.a_label}", f"B: {c.b_label}", "B − A")
    rows = [header, *comparison_rows(c)]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines.append("")
    for index, row in enumerate(rows):
        lines.append(
            f"{row[0]:<{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]:>{widths[3]}}".rstrip()
        )
        if index == 0:
            lines.append("-" * (sum(widths) + 6))
    lines += ["", f"A: {c.a_fit.message}", f"B: {c.b_fit.message}"]
    return "\n".join(lines)
