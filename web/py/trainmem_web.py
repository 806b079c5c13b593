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

import gc
import json
import os
import re
import sys
import types
from typing import Any

PYDANTIC_PLUGINS_OFF = ("__all__", "1", "true")
"""The values of ``PYDANTIC_DISABLE_PLUGINS`` for which pydantic loads no plugin (pydantic/plugin/_loader.py)."""


def _stand_in_for_pydantic_plugin_loader() -> None:
    """Spare the start-up pydantic's plugin loader when plugins are off (the page's worker turns them off).

    pydantic imports ``pydantic.plugin._loader`` when it builds its first model
    (``pydantic/plugin/_schema_validator.py``, ``create_schema_validator``). With
    ``PYDANTIC_DISABLE_PLUGINS=__all__`` its ``get_plugins()`` returns no plugins before it reads
    anything, but the module's own import imports ``importlib.metadata`` and through it ``email``,
    ``csv``, ``lzma`` and more that nothing else here uses (29 modules in Pyodide, which imports the
    rest itself, 56-100 ms under Node on a loaded machine; 49 in CPython). The stand-in answers
    ``get_plugins()`` the same.
    """
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in PYDANTIC_PLUGINS_OFF:
        return
    if "pydantic.plugin._loader" in sys.modules:  # pydantic built a model already: nothing to spare
        return
    stand_in = types.ModuleType("pydantic.plugin._loader", "trainmem_web's stand-in: plugins are disabled")
    stand_in.get_plugins = lambda: ()
    sys.modules["pydantic.plugin._loader"] = stand_in


_stand_in_for_pydantic_plugin_loader()
_GC_WAS_ENABLED = gc.isenabled()
gc.disable()  # see gc.freeze() below

from pydantic import ValidationError  # noqa: E402

import trainmem  # noqa: E402
from trainmem.catalogs import gpus, optimizers, presets  # noqa: E402
from trainmem.errors import FieldError, format_validation_error, printable  # noqa: E402
from trainmem.estimate import report_of, simulated  # noqa: E402
from trainmem.files import MAX_FILE_BYTES, parse_json_text  # noqa: E402
from trainmem.setup import Setup  # noqa: E402

# The import makes ~33,000 objects that live as long as the process. The cycle collector's passes
# during it (75 in CPython 3.11) found 708 objects in cycles to free; the collector is off for the
# import instead, and gc.freeze() takes everything the import made out of every later pass's way
# (its use case: objects that live as long as the process; those few cycles are kept with them).
gc.freeze()
if _GC_WAS_ENABLED:
    gc.enable()


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


def compute(setup_json: str, suggestions: bool = True, reserve_fraction: Any = None) -> str:
    """Validate a setup (JSON text) and estimate it; the answer is JSON text.

    Suggestions re-run the simulation for each candidate change (most of estimate's time), so
    the page first asks without them, shows the numbers, then asks again with them.

    ``reserve_fraction`` (a number, or None): the fast answer. The replay of the step's
    allocations through the model of PyTorch's caching allocator (trainmem.cuda) is most of an
    estimate without suggestions; with a fraction the reserve is instead that fraction of the
    allocated peak — the core's own ``trainmem.cuda.memory.scaled_reserve``, which its suggestions
    use for their trial estimates — and each rank's ``cuda.replayed`` is false. The page passes the
    fraction of its last replayed report, shows that answer at once and asks again without it.
    """
    try:
        fraction = _reserve_fraction(reserve_fraction)
        if fraction is None:
            if not suggestions:
                return _remembered(setup_json)
            return _compute(setup_json, True)
        from trainmem.cuda.memory import scaled_reserve

        with scaled_reserve(fraction):
            return _compute(setup_json, False)
    except Exception as exc:  # noqa: BLE001 - the worker must always get an answer
        return _failure("", f"internal error ({type(exc).__name__}: {exc})")


ANSWERS_KEPT = 32
"""How many answers of ``compute(setup_json, False)`` the bridge keeps (its own and :func:`prefetch`'s)."""

MAX_KEPT_SETUP_CHARS = 65_536
"""Longer setup texts (a pasted config.json of a large model) are answered but not kept."""

_ANSWERS: dict[str, str] = {}
"""Setup JSON text -> the answer of ``compute(text, False)``, least recently used first (an LRU)."""


def _remembered(setup_json: Any) -> str:
    """The answer of ``compute(setup_json, False)``: kept from an earlier call, or computed and kept.

    Exact: an answer depends on the setup's text alone (the estimate reads nothing else), so a
    kept answer is the text a new compute would give, byte for byte."""
    if not isinstance(setup_json, str) or len(setup_json) > MAX_KEPT_SETUP_CHARS:
        return _compute(setup_json, False)
    answer = _ANSWERS.pop(setup_json, None)
    if answer is None:
        answer = _compute(setup_json, False)
        if not answer.startswith('{"ok":true'):
            return answer  # errors are quick to find again, and a MemoryError need not recur
        while len(_ANSWERS) >= ANSWERS_KEPT:
            del _ANSWERS[next(iter(_ANSWERS))]
    _ANSWERS[setup_json] = answer
    return answer


def prefetch(setup_json: str) -> bool:
    """Compute ``compute(setup_json, False)`` ahead of time, while the page is idle: the setups one
    control step away from the one on screen (web/js/prefetch.js), so that the change the reader
    makes next is answered from :data:`_ANSWERS` without a replay. True when its answer is kept
    (computed now, or before: then it becomes the most recently used), False when it is not (an
    invalid setup, or too long a text). Never raises (like :func:`compute`)."""
    try:
        _remembered(setup_json)
        return isinstance(setup_json, str) and setup_json in _ANSWERS
    except Exception:  # noqa: BLE001 - the worker must always get an answer; a prefetch is optional
        return False


MAX_RESERVE_FRACTION = 4.0
"""A reserve of more than 4 × the allocated peak is no replay's outcome: such a fraction is refused."""


def _reserve_fraction(value: Any) -> float | None:
    if value is None or type(value).__name__ == "JsNull":  # Pyodide passes JavaScript's null as jsnull
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_RESERVE_FRACTION:
        raise ValueError(f"reserve_fraction: expected a number from 0 to {MAX_RESERVE_FRACTION}, got {value!r}")
    return float(value)


_LAST_SIMULATED: dict[str, Any] = {}
"""Setup JSON text -> its ``trainmem.estimate.Simulated`` (one entry: the last setup computed).

The page asks for each change twice, the fast answer (reserve scaled) and then the replayed one;
the second reuses the first's validated setup, plan and step simulation, which read neither the
replay nor the scaled reserve (exact: the same objects ``estimate`` would build again from the
same text). The Setup is the bridge's own, never handed out, so nothing changes it in between."""


def _compute(setup_json: str, suggestions: bool) -> str:
    done = _LAST_SIMULATED.get(setup_json) if isinstance(setup_json, str) else None
    if done is not None:
        try:
            report = report_of(done, suggestions=suggestions)
        except ValueError as exc:
            return _failure("", str(exc))
        except (RecursionError, MemoryError) as exc:
            return _failure("", f"the setup is too large or too deeply nested ({type(exc).__name__})")
        return '{"ok":true,"report":' + report.model_dump_json() + "}"
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
        done = simulated(setup)
        _LAST_SIMULATED.clear()
        if len(setup_json) <= MAX_KEPT_SETUP_CHARS:
            _LAST_SIMULATED[setup_json] = done
        report = report_of(done, suggestions=suggestions)
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


def model_inputs(model_json: str) -> str:
    """The optional inputs the model takes (``trainmem.model_inputs``): which fields the form shows.

    ``{"ok": true, "inputs": {"fields": ["images", "images.image_height", ...], "tasks": [...], ...}}``.
    Only the model is validated (a sequence too long for it is the compute's error, not this one's)."""
    try:
        return _model_inputs(model_json)
    except Exception as exc:  # noqa: BLE001 - the worker must always get an answer
        return _failure("model", f"internal error ({type(exc).__name__}: {exc})")


_MODEL_ADAPTER: list = []


def _model_inputs(model_json: str) -> str:
    from pydantic import create_model

    from trainmem.model_inputs import model_inputs as inputs_of
    from trainmem.setup import ModelSpec

    try:
        model = _read_json(model_json, "model")
    except FieldError as exc:
        return _failure("model." + exc.field if exc.field else "model", str(exc))
    except ValueError as exc:
        return _failure("model", str(exc))
    if _path_instead_of_contents(model):
        return _failure("model.hf_config", _PATH_MESSAGE)
    if isinstance(model, str):
        model = {"preset": model}  # Setup's shorthand
    if not _MODEL_ADAPTER:
        _MODEL_ADAPTER.append(create_model("ModelOnly", model=(ModelSpec, ...)))  # Setup.model, alone
    try:
        found = inputs_of(_MODEL_ADAPTER[0].model_validate({"model": model}).model)
    except ValidationError as exc:
        return json.dumps({"ok": False, "errors": field_errors(exc)})
    except ValueError as exc:
        return _failure("model", str(exc))
    return json.dumps({"ok": True, "inputs": found.as_dict()})


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


# ---------------------------------------------------------------------------- trainer files

TRAINER_KINDS = ("trl", "axolotl", "llamafactory", "torchtune", "verl")
"""Kinds of file that describe a whole run (with their framework's defaults); the others are pieces of one."""

FORM_FIELDS_KEPT = ("gpu", "headroom_fraction")
"""Fields no trainer file carries: a run read from files keeps the form's values of them."""

_MAX_NAME_CHARS = 255


def _files_failure(message: str) -> str:
    return _failure("files", message)


def _read_files_arguments(files_json: Any, form_json: Any) -> tuple[dict[str, str], dict[str, Any]]:
    """The {filename: text} mapping and the form's setup, checked (one ValueError naming what is wrong)."""
    from trainmem.inputs import MAX_FILES

    if not isinstance(files_json, str) or not isinstance(form_json, str):
        raise ValueError("expected JSON text")
    if len(files_json) > MAX_FILES * MAX_FILE_BYTES:
        raise ValueError(f"more than {MAX_FILES} files of {MAX_FILE_BYTES // 2**20} MiB")
    # The texts are long strings: the wrapper is read with json.loads, each text with the file reader's limits.
    files = json.loads(files_json)
    if not isinstance(files, dict) or not files:
        raise ValueError("give at least one file")
    if len(files) > MAX_FILES:
        raise ValueError(f"{len(files)} files: at most {MAX_FILES} are read at once")
    for name, text in files.items():
        if not isinstance(text, str):
            raise ValueError(f"{printable(name)}: expected the file's text")
        if not name or len(name) > _MAX_NAME_CHARS or printable(name) != name:
            raise ValueError(f"{printable(name[:_MAX_NAME_CHARS])}: a file name must be printable and at most {_MAX_NAME_CHARS} characters")
    form = _read_json(form_json, "setup")
    if not isinstance(form, dict):
        raise ValueError("setup: expected an object")
    return files, form


def _kinds(files: dict[str, str]) -> list[str]:
    """The kind each file is recognised as from its content (None when it cannot be parsed or told)."""
    from trainmem.inputs.detect import detect_kind
    from trainmem.inputs.sources import parse_text

    kinds = []
    for name, text in files.items():
        try:
            kinds.append(detect_kind(parse_text(name, text)))
        except ValueError:
            kinds.append(None)  # read_texts says what is wrong with it
    return kinds


def read_files(files_json: str, form_json: str) -> str:
    """Read trainer files (JSON text of {filename: text}) against the form's setup (JSON text).

    The answer is JSON text, one of::

        {"ok": true, "mode": "run" | "pieces", "setup": {...fields the files set...}, "keys": {...KeyReport...}}
        {"ok": false, "errors": [{"path": "files", "message": "..."}]}

    With a trainer file among them (TRL/TrainingArguments, Axolotl, LLaMA-Factory: ``mode`` "run")
    the files describe the whole run, as ``trainmem estimate FILE ...`` reads them: the core's and
    the frameworks' defaults fill what they leave out, and only what no trainer file carries is
    kept from the form (the GPU model, the headroom, and the number of GPUs when no file gives it,
    as ``--gpu``, ``--headroom`` and ``--gpus`` would). Pieces only (a config.json, an adapter_config.json,
    a DeepSpeed or Accelerate config: ``mode`` "pieces") change the fields they set and leave the
    rest of the form as it is; the form's model stands in when none of them names one.
    """
    try:
        return _read_files(files_json, form_json)
    except Exception as exc:  # noqa: BLE001 - the worker must always get an answer
        return _files_failure(f"internal error ({type(exc).__name__}: {exc})")


def _read_files(files_json: str, form_json: str) -> str:
    try:
        files, form = _read_files_arguments(files_json, form_json)
    except (ValueError, RecursionError) as exc:
        return _files_failure(str(exc) if isinstance(exc, ValueError) else "nested too deeply")
    kinds = _kinds(files)
    run = any(kind in TRAINER_KINDS for kind in kinds)
    form_gpus = form.get("parallelism", {}).get("num_gpus") if isinstance(form.get("parallelism"), dict) else None
    overrides: dict[str, Any] = {}
    base: dict[str, Any] = {}
    if run:
        overrides = {field: form[field] for field in FORM_FIELDS_KEPT if field in form}
    elif "model" in form and "model" not in kinds:
        # Pieces: the form stands in for the trainer (its values fill DeepSpeed's "auto") and for the model.
        base = {field: form[field] for field in FORM_FIELDS_FOR_PIECES if field in form}
        if form_gpus is not None:
            base["parallelism"] = {"num_gpus": form_gpus}
    try:
        try:
            setup, keys = _read_with(files, base, overrides)
        except ValueError as exc:
            if not (run and str(exc).startswith(_NO_MODEL) and "model" in form):
                raise
            base = {"model": form["model"]}  # a trainer file that names no model: the form's
            setup, keys = _read_with(files, base, overrides)
        if run and "num_gpus" not in setup.parallelism.model_fields_set and form_gpus is not None:
            overrides["parallelism"] = {"num_gpus": form_gpus}  # as --gpus N: no file gives the number
            setup, keys = _read_with(files, base, overrides)
    except ValidationError as exc:
        return json.dumps({"ok": False, "errors": [{"path": "files", "message": m} for _, m in format_validation_error(exc)]})
    except ValueError as exc:
        return _files_failure(_page_wording(str(exc)))
    except (RecursionError, MemoryError) as exc:
        return _files_failure(f"the files are too large or too deeply nested ({type(exc).__name__})")
    report = keys.model_dump(mode="json")
    report["files"] = [f for f in report["files"] if f["name"] != _FORM_NAME]
    for entry in report["entries"]:
        entry["detail"] = entry["detail"].replace("filled from the setup file", "filled from the form")
    answer = {
        "ok": True,
        "mode": "run" if run else "pieces",
        "setup": setup.model_dump(mode="json", exclude_unset=True),
        "kept_from_form": sorted({*overrides, *base}),
        "keys": report,
    }
    return json.dumps(answer)


FORM_FIELDS_FOR_PIECES = ("model", "micro_batch_size", "gradient_accumulation_steps", "precision")
"""With pieces only, the form's values of these stand in for a trainer's (DeepSpeed's "auto" reads them)."""

_FORM_NAME = "(the form)"
_NO_MODEL = "model: no file names the model"


def _read_with(files: dict[str, str], base: dict[str, Any], overrides: dict[str, Any]):
    from trainmem import inputs

    texts = {**files, _FORM_NAME: json.dumps(base)} if base else files
    return inputs.read_texts(texts, overrides=overrides)


def _page_wording(message: str) -> str:
    """The core's messages name the CLI's flags; on the page the same choice is a field of the form."""
    message = re.sub(r"give --from KIND \(allowed: ([^)]*)\)", r"the page reads these kinds of file: \1", message)
    return printable(message)


def write_file(setup_json: str, file_format: str) -> str:
    """A setup (JSON text) as a trainer's file: {"ok": true, "filename", "text", "notes"} or the errors."""
    try:
        return _write_file(setup_json, file_format)
    except Exception as exc:  # noqa: BLE001 - the worker must always get an answer
        return _failure("", f"internal error ({type(exc).__name__}: {exc})")


def _write_file(setup_json: str, file_format: str) -> str:
    from trainmem.inputs.writers import FILENAMES, FORMATS, write

    if file_format not in FORMATS:
        return _failure("", f"file format {printable(str(file_format))!r}: allowed: {', '.join(FORMATS)}")
    try:
        data = _read_json(setup_json, "setup")
        setup = Setup.model_validate(data)
        text, notes = write(setup, file_format)
    except FieldError as exc:
        return _failure(exc.field, str(exc))
    except ValidationError as exc:
        return json.dumps({"ok": False, "errors": field_errors(exc)})
    except ValueError as exc:
        return _failure("", str(exc))
    return json.dumps({"ok": True, "filename": FILENAMES[file_format], "text": text, "notes": notes})


def file_formats() -> list[dict[str, str]]:
    """The formats the page offers as downloads, with their file names."""
    from trainmem.inputs.writers import FILENAMES, FORMATS

    return [{"format": name, "filename": FILENAMES[name]} for name in FORMATS]


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
        "default_model_inputs": json.loads(model_inputs(json.dumps(default_setup.get("model"))))["inputs"],
    }
