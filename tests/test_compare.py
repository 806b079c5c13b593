"""Two reports compared part by part (trainmem.compare), as Markdown, and `trainmem compare`."""

from __future__ import annotations

import json

import pytest

import trainmem
from trainmem.cli import main
from trainmem.compare import compare, render_comparison
from trainmem.render_markdown import cell, render_comparison_markdown, render_report_markdown

BASE = {
    "model": {"preset": "llama-3.2-1b"},
    "micro_batch_size": 2,
    "sequence_length": 1024,
    "parallelism": {"num_gpus": 8, "strategy": "zero", "zero_stage": 2},
    "gpu": "a100-80gb",
}
ZERO3 = {**BASE, "parallelism": {"num_gpus": 8, "strategy": "zero", "zero_stage": 3}}


@pytest.fixture(scope="module")
def reports():
    return trainmem.estimate(BASE, suggestions=False), trainmem.estimate(ZERO3, suggestions=False)


def test_deltas_are_b_minus_a_and_add_up(reports):
    a, b = reports
    c = compare(a, b)
    assert c.peak_total.delta_bytes == b.peak_total_bytes - a.peak_total_bytes
    assert c.peak_allocated.delta_bytes == b.peak_allocated_bytes - a.peak_allocated_bytes
    for category, delta in c.breakdown.items():
        assert (delta.a_bytes, delta.b_bytes) == (getattr(a.breakdown, category), getattr(b.breakdown, category))
        parts = [p for p in c.parts if p.category == category]
        assert sum(p.a_bytes for p in parts) == delta.a_bytes
        assert sum(p.b_bytes for p in parts) == delta.b_bytes
        assert sum(p.delta_bytes for p in parts) == delta.delta_bytes
    assert sum(d.delta_bytes for d in c.breakdown.values()) == c.peak_total.delta_bytes


def test_a_part_on_one_side_only_counts_zero_on_the_other(reports):
    a, b = reports
    c = compare(a, b)
    gathered = [p for p in c.parts if p.name == "gathered weights"]
    assert gathered and gathered[0].a_bytes == 0 and gathered[0].b_bytes > 0  # ZeRO-3 gathers, ZeRO-2 does not
    names_a = {(p.category, p.name) for p in a.parts}
    names_b = {(p.category, p.name) for p in b.parts}
    assert {(p.category, p.name) for p in c.parts} == names_a | names_b


def test_setup_changes_name_the_fields_that_differ(reports):
    c = compare(*reports)
    assert [(ch.path, ch.a, ch.b) for ch in c.setup_changes] == [("parallelism.zero_stage", 2, 3)]
    same = compare(reports[0], reports[0])
    assert same.setup_changes == [] and same.peak_total.delta_bytes == 0


def test_text_and_markdown_show_every_part(reports):
    c = compare(*reports)
    text = render_comparison(c)
    markdown = render_comparison_markdown(c)
    for part in c.parts:
        assert part.name in text and part.name in markdown
    assert "parallelism.zero_stage: 2 → 3" in text
    assert "| `parallelism.zero_stage` | 2 | 3 |" in markdown
    table_lines = [line for line in markdown.splitlines() if line.startswith("|")]
    assert all(line.count(" | ") >= 2 for line in table_lines)


def test_report_markdown_is_a_table_with_the_report_numbers(reports):
    report = reports[0]
    markdown = render_report_markdown(report)
    assert markdown.startswith("### ")
    assert "| Category and part | Memory | Share |" in markdown
    from trainmem.units import format_bytes

    assert f"| Peak per GPU (total) | {format_bytes(report.peak_total_bytes)} |" in markdown
    for part in report.parts:
        assert part.name in markdown


def test_markdown_cells_escape_pipes_and_tags():
    assert cell("a|b\nc <img>") == "a\\|b c &lt;img>"


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_compares_two_files_and_flags_against_a_base(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(BASE))
    b.write_text(json.dumps(ZERO3))
    code, out_files, err = run(["compare", str(a), str(b), "--json"], capsys)
    assert code == 0 and not err
    by_files = json.loads(out_files)
    code, out_flags, _ = run(["compare", str(a), "--zero", "3", "--json"], capsys)
    by_flags = json.loads(out_flags)
    assert code == 0
    assert by_files["peak_total"] == by_flags["peak_total"]
    assert by_files["parts"] == by_flags["parts"]
    expected = compare(trainmem.estimate(BASE), trainmem.estimate(ZERO3))
    assert by_files["peak_total"] == expected.peak_total.model_dump()
    assert by_files["setup_changes"] == [{"path": "parallelism.zero_stage", "a": 2, "b": 3}]

    code, text, _ = run(["compare", str(a), str(b)], capsys)
    assert code == 0 and "B − A" in text and "gathered weights" in text
    code, markdown, _ = run(["compare", str(a), str(b), "--markdown"], capsys)
    assert code == 0 and markdown.startswith("### trainmem compare")


def test_cli_reads_a_saved_report(tmp_path, capsys):
    a, saved = tmp_path / "a.json", tmp_path / "report.json"
    a.write_text(json.dumps(BASE))
    saved.write_text(trainmem.estimate(ZERO3).model_dump_json())
    code, out, _ = run(["compare", str(a), str(saved), "--json"], capsys)
    assert code == 0
    assert json.loads(out)["peak_total"]["b_bytes"] == trainmem.estimate(ZERO3).peak_total_bytes
    # Flags on top of a saved report re-estimate its setup.
    code, out, _ = run(["compare", str(a), str(saved), "--zero", "1", "--json"], capsys)
    assert json.loads(out)["setup_changes"] == [{"path": "parallelism.zero_stage", "a": 2, "b": 1}]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["compare"], "setup: give the first setup file"),
        (["compare", "A"], "compare: give a second setup file, or flags"),
        (["compare", "A", "--json", "--markdown", "--zero", "3"], "compare: give only one of --json, --markdown"),
        (["compare", "A", "--zero", "3", "--micro-batch-size", "0"], "micro_batch_size:"),
        (["compare", "missing.json", "--zero", "3"], "setup:"),
    ],
)
def test_cli_bad_input_is_one_line_with_status_2(argv, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "A").write_text(json.dumps(BASE))
    code, out, err = run(argv, capsys)
    assert code == 2 and not out
    assert err.startswith("trainmem: error: ") and message in err and err.count("\n") == 1


def test_cli_fail_if_not_fit_looks_at_b(tmp_path, capsys):
    a = tmp_path / "a.json"
    a.write_text(json.dumps(BASE))
    code, _, _ = run(["compare", str(a), "--gpu", "t4", "--micro-batch-size", "16", "--fail-if-not-fit"], capsys)
    assert code == 1
    code, _, _ = run(["compare", str(a), "--zero", "3", "--fail-if-not-fit"], capsys)
    assert code == 0
