"""The web page's Python side: JSON text in, JSON text out.

The same module runs twice: under CPython when ``build_site.py`` pre-renders the default
setup into the HTML, and under Pyodide in the page's Web Worker for every change. It only
calls the core (``trainmem.estimate``, its error formatting, the catalogs and the Setup
schema); it computes no memory itself.

Answers of :func:`compute` are one of::

    {"ok": true, "report": {...Report...}}
    {"ok": false, "errors": [{"path": "parallelism.zero_stage", "message": "..."}, ...]}
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

import trainmem
from trainmem.catalogs import gpus, optimizers, presets
from trainmem.errors import format_validation_error
from trainmem.setup import Setup


def field_errors(exc: ValidationError) -> list[dict[str, str]]:
    """The core's (dotted field path, message) pairs; "" for a check across the whole setup."""
    return [
        {"path": "" if path == "setup" else path, "message": message}
        for path, message in format_validation_error(exc)
    ]


def compute(setup_json: str, suggestions: bool = True) -> str:
    """Validate a setup (JSON text) and estimate it; the answer is JSON text.

    Suggestions re-run the simulation for each candidate change (most of estimate's time), so
    the page first asks without them, shows the numbers, then asks again with them.
    """
    try:
        setup = Setup.model_validate_json(setup_json)
    except ValidationError as exc:
        return json.dumps({"ok": False, "errors": field_errors(exc)})
    try:
        report = trainmem.estimate(setup, suggestions=suggestions)
    except ValidationError as exc:
        return json.dumps({"ok": False, "errors": field_errors(exc)})
    except ValueError as exc:  # a setup the simulator cannot model: say why, next to the form
        return json.dumps({"ok": False, "errors": [{"path": "", "message": str(exc)}]})
    return '{"ok":true,"report":' + report.model_dump_json() + "}"


def architecture(model_json: str) -> str:
    """The Architecture the core reads from a model spec (to prefill custom-architecture fields)."""
    try:
        setup = Setup.model_validate({"model": json.loads(model_json)})
    except ValidationError as exc:
        return json.dumps({"ok": False, "errors": field_errors(exc)})
    found = setup.architecture()
    return json.dumps({"ok": True, "architecture": found.model_dump(mode="json") if found else None})


def markdown(report_json: str, title: str = "") -> str:
    """A report (JSON text, as compute() answered it) as the core's Markdown tables."""
    from trainmem.render_markdown import render_report_markdown

    return render_report_markdown(trainmem.Report.model_validate_json(report_json), title)


def compare_markdown(a_json: str, b_json: str, a_label: str = "A", b_label: str = "B") -> str:
    """Report B against report A (JSON texts) as the core's Markdown comparison."""
    from trainmem.compare import compare
    from trainmem.render_markdown import render_comparison_markdown

    a, b = (trainmem.Report.model_validate_json(text) for text in (a_json, b_json))
    return render_comparison_markdown(compare(a, b, a_label, b_label))


def catalogs() -> dict[str, Any]:
    """The catalogs the form offers, straight from the core's data files."""
    return {
        "presets": [
            {"name": p.name, "display_name": p.display_name, "hf_id": p.hf_id, "config": p.config}
            for p in presets().values()
        ],
        "gpus": [
            {"name": g.name, "display_name": g.display_name, "memory_bytes": g.memory_bytes, "vendor": g.vendor}
            for g in gpus().values()
        ],
        "optimizers": [{"name": o.name, "display_name": o.display_name} for o in optimizers().values()],
    }


def page_data(default_setup: dict[str, Any]) -> dict[str, Any]:
    """Everything the page needs before Python runs in the browser (computed at build time)."""
    answer = json.loads(compute(json.dumps(default_setup)))
    if not answer["ok"]:
        raise ValueError(f"the page's default setup is invalid: {answer['errors']}")
    return {
        "trainmem_version": trainmem.__version__,
        "schema": Setup.model_json_schema(),
        "catalogs": catalogs(),
        "default_setup": default_setup,
        "default_report": answer["report"],
    }
