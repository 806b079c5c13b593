"""``trainmem estimate FILE [FILE ...]``: the setup from the files, the key table, ``--apply N`` and ``--emit``.

Called by :mod:`trainmem.cli`; a single setup JSON keeps its old meaning (the setup itself,
flags on top). Anything else is read with :func:`trainmem.inputs.read`, the flags as overrides.
``--emit`` writes the setup (after ``--apply``) as a trainer's file: to stdout alone, or to
``--emit-to PATH`` beside the usual report. A bad input stops before anything is written.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import Any, Callable, Optional

from ..patch import merge_patch
from ..render import render_report
from .record import InputError, KeyReport


def run_estimate(args: argparse.Namespace, setup_from_arguments: Callable, flag_patch: Callable) -> int:
    from ..estimate import estimate

    setup, keys = setup_and_keys(args, setup_from_arguments, flag_patch)
    if args.emit_to and not args.emit:
        raise InputError("emit-to: give --emit FORMAT too")
    if args.emit and not args.emit_to and args.json:
        raise InputError("emit: --json and --emit both print to stdout; give --emit-to PATH")
    report = estimate(setup)
    report, applied = apply_suggestion(args.apply, report)
    emitted = _emitted(args.emit, report.setup) if args.emit else None  # before any output: errors write nothing
    if emitted is not None and not args.emit_to:
        text, notes = emitted
        sys.stdout.write(text)
        _notes(notes)
    else:
        if args.json and keys is None:
            _print(report.model_dump_json(indent=2))  # as before trainer files: the report alone
        elif args.json:
            data = json.loads(report.model_dump_json())
            data["inputs"] = keys.model_dump(mode="json")
            _print(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            _print(render_report(report))
            if applied:
                _print(f"\nApplied suggestion {args.apply}: {applied}")
            if keys is not None:
                from .render import render_key_report

                _print()
                _print(render_key_report(keys))
        if emitted is not None:
            text, notes = emitted
            write_atomically(args.emit_to, text)
            sys.stderr.write(f"trainmem: wrote {args.emit_to} ({args.emit})\n")
            _notes(notes)
    return 1 if args.fail_if_not_fit and not report.fit.fits else 0


def setup_and_keys(
    args: argparse.Namespace, setup_from_arguments: Callable, flag_patch: Callable
) -> tuple[Any, Optional[KeyReport]]:
    """The setup (a dict or a Setup) and, when trainer files were read, their key report."""
    files = list(args.files or [])
    if not files or args.from_kind == "setup" or (len(files) == 1 and args.from_kind is None and _is_setup(files[0])):
        return setup_from_arguments(args), None
    from . import read

    return read(*files, kind=args.from_kind, overrides=flag_patch(args))


def apply_suggestion(number: Optional[int], report: Any) -> tuple[Any, Optional[str]]:
    """The report of suggestion ``number`` (1-based) applied to the report's setup."""
    if number is None:
        return report, None
    from ..estimate import estimate

    count = len(report.suggestions)
    if not 1 <= number <= count:
        raise InputError(
            f"apply: the report has {count} suggestion(s); give --apply 1 to {count}"
            if count
            else "apply: the report has no suggestions"
        )
    suggestion = report.suggestions[number - 1]
    return estimate(merge_patch(report.setup.model_dump(mode="json"), suggestion.setup_patch)), suggestion.title


def _emitted(file_format: str, setup: Any) -> tuple[str, list[str]]:
    from .writers import write

    return write(setup, file_format)


def write_atomically(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, so a failure leaves nothing half-written."""
    folder = os.path.dirname(os.path.abspath(path))
    try:
        descriptor, temporary = tempfile.mkstemp(dir=folder, prefix=".trainmem-", suffix=".tmp")
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, path)
    except OSError as error:
        raise InputError(f"emit-to: cannot write {path!r}: {error.strerror or error}") from None


def _notes(notes: list[str]) -> None:
    for note in notes:
        sys.stderr.write(f"trainmem: note: {note}\n")


def _is_setup(name: str) -> bool:
    """A trainmem setup file: JSON whose content is recognised as a setup (or unreadable: its error says so)."""
    from ..files import read_json_file
    from .detect import detect_kind

    if not name.lower().endswith(".json"):
        return False
    try:
        data = read_json_file(name, "setup file")
    except ValueError:
        return True  # the setup reader reports the problem as before
    # trainer files name their model model_name_or_path / base_model; a "model" key is trainmem's own
    return detect_kind(data) in ("setup", None) or isinstance(data, dict) and "model" in data


def _print(text: str = "") -> None:
    """``print`` that survives a terminal which cannot encode the report (replacement characters)."""
    from ..cli import _write

    _write(text)
