"""Downloads: the breakdown chart and the timeline as PNG and SVG, the report (and a comparison)
as Markdown, each with the numbers of `trainmem estimate --json`."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ET
from pathlib import Path

from browser_helpers import cli_report, setup_json, wait_computed, wait_engine_ready

from trainmem.compare import compare
from trainmem.render_markdown import render_comparison_markdown, render_report_markdown
from trainmem.report import Report
from trainmem.units import format_bytes

SVG = "{http://www.w3.org/2000/svg}"


def download(page, testid: str) -> tuple[str, bytes]:
    with page.expect_download() as info:
        page.get_by_test_id(testid).click()
    item = info.value
    return item.suggested_filename, Path(item.path()).read_bytes()


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def svg_texts(data: bytes) -> list[str]:
    root = ET.fromstring(data)  # well-formed XML, or this raises
    assert root.tag == f"{SVG}svg"
    return [node.text or "" for node in root.iter() if node.tag in (f"{SVG}text", f"{SVG}title", f"{SVG}desc")]


def test_chart_pictures_and_markdown_carry_the_report_numbers(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    page.get_by_test_id("input-micro_batch_size").fill("2")
    setup = wait_computed(page)
    report = cli_report(setup, tmp_path)

    for chart in ("capacity", "timeline"):
        name, data = download(page, f"download-{chart}-png")
        assert name.endswith(".png")
        width, height = png_size(data)
        assert width > 300 and height > 100

    name, data = download(page, "download-capacity-svg")
    assert name.endswith("-breakdown.svg")
    texts = " ".join(svg_texts(data))
    assert format_bytes(report["peak_total_bytes"]) in texts
    for value in report["breakdown"].values():
        assert format_bytes(value) in texts
    assert report["fit"]["message"] in texts

    name, data = download(page, "download-timeline-svg")
    assert name.endswith("-timeline.svg")
    texts = " ".join(svg_texts(data))
    assert f"peak {format_bytes(report['peak_allocated_bytes'])}" in texts
    assert report["peak"]["label"] in texts

    name, data = download(page, "download-markdown")
    assert name.endswith(".md")
    markdown = data.decode()
    title = markdown.splitlines()[0].removeprefix("### ")
    assert markdown == render_report_markdown(Report.model_validate(report), title)
    assert f"| Peak per GPU (total) | {format_bytes(report['peak_total_bytes'])} |" in markdown


def test_comparison_markdown(page, guard, site_url, tmp_path):
    page.goto(site_url)
    wait_engine_ready(page)
    assert page.get_by_test_id("download-compare-markdown").is_hidden()
    a_setup = setup_json(page)
    page.get_by_test_id("compare-pin").click()
    page.get_by_test_id("input-finetuning.method").select_option("lora")
    b_setup = wait_computed(page)
    page.wait_for_function(
        "(b) => (document.documentElement.dataset.comparedSetups || '').endsWith(b + ']')",
        arg=__import__("json").dumps(b_setup, separators=(",", ":")),
    )
    name, data = download(page, "download-compare-markdown")
    markdown = data.decode()
    a, b = (Report.model_validate(cli_report(s, tmp_path)) for s in (a_setup, b_setup))
    first_table = [line for line in markdown.splitlines() if line.startswith("|  | A: ")][0]
    a_label, b_label = (cell.strip()[3:] for cell in first_table.split("|")[2:4])
    assert markdown == render_comparison_markdown(compare(a, b, a_label, b_label))
    assert "`finetuning.method`" in markdown
