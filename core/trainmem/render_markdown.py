"""A report (or a comparison of two) as Markdown: tables to paste into a GitHub issue or a blog post.

GitHub-flavoured Markdown tables (https://github.github.com/gfm/#tables-extension-): a pipe
inside a cell is escaped as ``\\|`` and a line break becomes a space, so any part name or
detail stays inside its cell. The figures are the Report's own, formatted like the terminal
report (:func:`trainmem.units.format_bytes`). The web page's "Download Markdown" button runs
this same function in Pyodide.
"""

from __future__ import annotations

from .compare import CATEGORY_NAMES, Comparison, comparison_rows, format_value
from .report import CATEGORIES, Report
from .units import format_bytes, format_count

STATUS_NAMES = {"fits": "Fits", "tight": "Tight", "does_not_fit": "Does not fit"}


def cell(text: object) -> str:
    """Text safe inside one table cell (no pipe ends it, no "<" opens a tag)."""
    return " ".join(str(text).split()).replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;")


def table(header: list[str], rows: list[list[str]], right: set[int] = frozenset()) -> list[str]:
    """A GFM table; columns in ``right`` are right-aligned (numbers)."""
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "–"


def render_report_markdown(report: Report, title: str = "") -> str:
    """The verdict, the headline figures and the breakdown (each category, then its parts)."""
    setup, fit, total = report.setup, report.fit, report.peak_total_bytes
    lines = [f"### {cell(title) if title else 'trainmem: ' + cell(report.resolved.model_description)}", ""]
    lines.append(f"**{STATUS_NAMES[fit.status]}** — {cell(fit.message)}")
    lines.append("")
    lines += table(
        ["", ""],
        [
            ["Peak per GPU (total)", format_bytes(report.peak_total_bytes)],
            ["Peak allocated by PyTorch", format_bytes(report.peak_allocated_bytes)],
            ["Usable on the GPU", f"{format_bytes(fit.usable_bytes)} of {format_bytes(fit.capacity_bytes)} "
                                  f"({fit.gpu_display_name}, {fit.headroom_fraction:.0%} headroom)"],
            ["Parameters", f"{format_count(report.num_parameters)} ({format_count(report.num_trainable_parameters)}"
                           " trainable)"],
            ["Micro-batch", f"{setup.micro_batch_size} × {setup.sequence_length} tokens"],
            ["Peak happens at", report.peak.label],
        ],
    )
    lines.append("")
    rows = []
    for category in CATEGORIES:
        value = getattr(report.breakdown, category)
        rows.append([f"**{CATEGORY_NAMES[category]}**", f"**{format_bytes(value)}**", _share(value, total)])
        for part in (p for p in report.parts if p.category == category):
            name = f"&nbsp;&nbsp;{part.name}" + (f" ({part.detail})" if part.detail else "")
            rows.append([name, format_bytes(part.bytes), _share(part.bytes, total)])
    rows.append(["**total at the peak**", f"**{format_bytes(total)}**", "100.0%"])
    lines += table(["Category and part", "Memory", "Share"], rows, right={1, 2})
    lines += _host_lines(report)
    lines += ["", f"<sub>trainmem {cell(report.trainmem_version)} · {cell(report.resolved.model_description)} · "
                  f"{cell(report.resolved.precision_recipe)}</sub>"]
    return "\n".join(lines) + "\n"


def _host_lines(report: Report) -> list[str]:
    """Host RAM per node (``Report.host``): training and model-load totals with their parts, the budget."""
    host = report.host
    if host is None:
        return []
    rows = []
    for title, parts, total in (("during training", host.steady_parts, host.steady_bytes),
                                ("while the model loads", host.load_parts, host.load_bytes)):
        rows.append([f"**{title}**", f"**{format_bytes(total)}**"])
        rows += [[f"&nbsp;&nbsp;{cell(p.name)}" + (f" ({cell(p.detail)})" if p.detail else ""), format_bytes(p.bytes)]
                 for p in parts]
    if host.nvme_bytes:
        rows.append(["**NVMe (ZeRO-Infinity)**", f"**{format_bytes(host.nvme_bytes)}**"])
    lines = ["", f"**Host RAM per node** ({host.ranks_per_node} ranks): {format_bytes(host.peak_bytes)}"]
    if host.budget_bytes is not None:
        lines[-1] += f" — {'fits' if host.fits else 'does not fit'} in {format_bytes(host.budget_bytes)}"
    lines.append("")
    lines += table(["Phase and part", "Host RAM"], rows, right={1})
    if host.message:
        lines += ["", cell(host.message)]
    return lines


def render_comparison_markdown(comparison: Comparison) -> str:
    """What changed in the setup, then every figure of A and B with B − A."""
    c = comparison
    lines = [f"### trainmem compare: {cell(c.b_label)} against {cell(c.a_label)}", ""]
    if c.setup_changes:
        lines += table(["Setup field", "A", "B"],
                       [[f"`{ch.path}`", format_value(ch.a), format_value(ch.b)] for ch in c.setup_changes])
    else:
        lines.append("The two setups are the same.")
    lines.append("")
    rows = [list(row) for row in comparison_rows(c)]
    for row in rows:
        if row[0].startswith("  "):
            row[0] = "&nbsp;&nbsp;" + row[0].strip()
    lines += table(["", f"A: {c.a_label}", f"B: {c.b_label}", "B − A"], rows, right={1, 2, 3})
    return "\n".join(lines) + "\n"
