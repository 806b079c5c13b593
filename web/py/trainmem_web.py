"""The web page's Python side: JSON text in, JSON text out.

The same module runs twice: under CPython when ``build_site.py`` pre-renders the default
setup into the HTML, and under Pyodide in the page's Web Worker for every change. It only
calls the core (``trainmem.estimate``, its error formatting, the catalogs and the Setup
schema); it computes no memory itself.

Answers of :func:`compute` are one of::

    {"ok": true, "report": {...Report...}}
    {"ok": false, "errors": [{"path": "parallelism.zero_stage", "message": "..."}, ...]}

Neither function ever raises: whatever the URL hash, the form or a pasted config.json holds
(text that is not JSON, nesting 100,000 deep, a lone surrogate, a size of 10³⁰⁰, a path where
the config's contents go), the answer is ``ok: false`` with one printable message per field.
Input is read with the limits of ``trainmem.files`` (size, nesting, string length, finite
numbers). A failure inside trainmem itself is answered as an ``internal error`` message.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

import trainmem
from trainmem.catalogs import gpus, optimizers, presets
from trainmem.errors import FieldError, format_validation_error, printable
from trainmem.files import MAX_FILE_BYTES, parse_json_text
from trainmem.setup import Setup


def field_errors(exc: ValidationError) -> list[dict[str, str]]:
    """The core's (dotted field path, message) pairs; "" for a check across the whole setup."""
    return [
        {"path": "" if path == "setup" else path, "message": message}
        for path, message in format_validation_error(exc)
    ]


def _failure(path: str, message: str) -> str:
    return json.dumps({"ok": False, "errors": [{"path": path, "message": printable(message)}]})


def _read_json(text: Any, what: str) -> Any:
    """JSON text from the page, with the file reader's limits (size, nesting, strings, numbers)."""
    if not isinstance(text, str):
        raise ValueError(f"{what}: expected JSON text, got {type(text).__name__}")
    if len(text) > MAX_FILE_BYTES:
        raise ValueError(f"{what}: {len(text):,} characters is more than the {MAX_FILE_BYTES // 2**20} MiB limit")
    return parse_json_text(text, what)


def _path_instead_of_contents(model: Any) -> bool:
    """In the browser a config.json is pasted or dropped: its contents, never a path to read."""
    return isinstance(model, dict) and isinstance(model.get("hf_config"), str)


_PATH_MESSAGE = "paste or drop the config.json's contents; the page does not read files by path"


def compute(setup_json: str, suggestions: bool = True) -> str:
    """Validate a setup (JSON text) and estimate it; the answer is JSON text.

    Suggestions re-run the simulation for each candidate change (most of estimate's time), so
    the page first asks without them, shows the numbers, then asks again with them.
    """
    try:
        return _compute(setup_json, bool(suggestions))
    except Exception as exc:  # noqa: BLE001 - the worker must always get an answer
        return _failure("", f"internal error ({type(exc).__name__}: {exc})")


def _compute(setup_json: str, suggestions: bool) -> str:
    try:
        data = _read_json(setup_json, "setup")
    except FieldError as exc:  # a limit of the JSON reader, at that value's path
        return _failure(exc.field, str(exc))
    except ValueError as exc:
        return _failure("", str(exc))
    if isinstance(data, dict) and _path_instead_of_contents(data.get("model")):
        return _failure("model.hf_config", _PATH_MESSAGE)
    try:
        setup = Setup.model_validate(data)
        report = trainmem.estimate(setup, suggestions=suggestions)
    except ValidationError as exc:
        return json.dumps({"ok": False, "errors": field_errors(exc)})
    except ValueError as exc:  # a setup the simulator cannot model: say why, next to the form
        return _failure("", str(exc))
    except (RecursionError, MemoryError) as exc:
        return _failure("", f"the setup is too large or too deeply nested ({type(exc).__name__})")
    return '{"ok":true,"report":' + report.model_dump_json() + "}"


def architecture(model_json: str) -> str:
    """The Architecture the core reads from a model spec (to prefill custom-architecture fields)."""
    try:
        return _architecture(model_json)
    except Exception as exc:  # noqa: BLE001 - the worker must always get an answer
        return _failure("model", f"internal error ({type(exc).__name__}: {exc})")


def _architecture(model_json: str) -> str:
    try:
        model = _read_json(model_json, "model")
    except FieldError as exc:
        return _failure("model." + exc.field if exc.field else "model", str(exc))
    except ValueError as exc:
        return _failure("model", str(exc))
    if _path_instead_of_contents(model):
        return _failure("model.hf_config", _PATH_MESSAGE)
    try:
        setup = Setup.model_validate({"model": model})
        found = setup.architecture()
    except ValidationError as exc:
        return json.dumps({"ok": False, "errors": field_errors(exc)})
    except ValueError as exc:
        return _failure("model", str(exc))
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
