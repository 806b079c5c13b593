"""Reading the files a user names: only regular files, bounded in size, text, and parsed with limits.

Every file trainmem reads on a user's behalf (a ``config.json``, a setup file, a trainer YAML, a
``ds_config.json``) goes through :func:`read_text_file`, then :func:`parse_json_text` or
:func:`parse_yaml_text`. Each failure is a :class:`ValueError` whose message names the file and what
is wrong in one line, so the CLI and the page can show it as is:

* not a regular file (a directory, a FIFO, a device such as ``/dev/zero``): refused before opening,
  so a FIFO can never block the reader;
* larger than :data:`MAX_FILE_BYTES` (the largest real trainer or model config is a few hundred KiB);
* binary content (NUL bytes) or text that is not UTF-8; a UTF-8 byte-order mark is accepted and
  dropped (editors on Windows write one), UTF-16 is named as such;
* JSON or YAML nested deeper than :data:`MAX_NESTING_DEPTH` (real configs nest 3–4 levels) or with
  strings longer than :data:`MAX_STRING_CHARS`, and lone surrogates, which no JSON output can carry.

The core does no other I/O; in Pyodide the page passes file contents, not paths.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from .errors import FieldError

MAX_FILE_BYTES = 4 * 2**20
"""4 MiB: ten times the largest config.json of a released model (Llama-4's is ~12 KiB, tokenizer
files are not read)."""
MAX_NESTING_DEPTH = 32
"""Containers within containers; Hugging Face, DeepSpeed and trainer files nest at most ~5 deep."""
MAX_STRING_CHARS = 4096
"""Longest string value or key accepted (a path or a module list is far shorter)."""
MAX_DOCUMENT_VALUES = 2**18
"""Values (scalars, lists and mappings) a document may hold once YAML aliases are expanded: real trainer files hold
hundreds to a few thousand; a YAML alias bomb ("billion laughs": nine aliases of nine aliases...) parses in
microseconds into shared references that expand to 9⁹ values, and walking them hung the reader (found by
benchmarks/fuzz_trainer_files.py). A bound, not a fact about real files."""


def read_text_file(path: str | os.PathLike[str], what: str = "file") -> str:
    """The text of a regular file of at most :data:`MAX_FILE_BYTES`, decoded as UTF-8."""
    name = os.fspath(path)
    file = Path(name).expanduser()
    try:
        info = file.stat()
    except OSError as error:
        raise ValueError(f"cannot read {what} {name!r}: {error.strerror or error}") from None
    if stat.S_ISDIR(info.st_mode):
        raise ValueError(f"cannot read {what} {name!r}: it is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"cannot read {what} {name!r}: not a regular file (a device, FIFO or socket)")
    if info.st_size > MAX_FILE_BYTES:
        raise ValueError(
            f"cannot read {what} {name!r}: {info.st_size:,} bytes is larger than the {MAX_FILE_BYTES // 2**20} MiB limit"
        )
    try:
        # O_NONBLOCK: if the path was swapped for a FIFO after the check, opening must not wait for a writer.
        descriptor = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(descriptor, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise ValueError(f"cannot read {what} {name!r}: {error.strerror or error}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"cannot read {what} {name!r}: larger than the {MAX_FILE_BYTES // 2**20} MiB limit")
    return decode_text(data, f"{what} {name!r}")


def decode_text(data: bytes, where: str) -> str:
    """UTF-8 text (an optional byte-order mark dropped); binary and UTF-16 data are named as such."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise ValueError(f"{where} is UTF-16 encoded; save it as UTF-8")
    if b"\x00" in data:
        raise ValueError(f"{where} is a binary file, not text")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{where} is not UTF-8 text (byte {error.start})") from None


def check_limits(value: Any, where: str) -> Any:
    """Reject nesting deeper than :data:`MAX_NESTING_DEPTH`, over-long or unencodable strings, and
    non-finite numbers, without recursion (a hostile document cannot exhaust the stack).

    The error is a :class:`~trainmem.errors.FieldError` (a ValueError) whose ``field`` is the
    dotted path of the offending value inside the document ("" for the top), so that a form can
    show it next to that field."""
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    values = 0
    while stack:
        item, depth, path = stack.pop()
        values += 1
        if values > MAX_DOCUMENT_VALUES:
            raise FieldError("", f"{where}: holds more than {MAX_DOCUMENT_VALUES:,} values (YAML aliases that expand "
                                 "to too much?)")
        if isinstance(item, (dict, list)):
            if depth >= MAX_NESTING_DEPTH:
                raise FieldError(path, f"{where}: nested deeper than {MAX_NESTING_DEPTH} levels at {path or 'the top'}")
            if isinstance(item, dict):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise FieldError(path, f"{where}: key {key!r} at {path or 'the top'} is not a string")
                    _check_string(key, where, path)
                    stack.append((child, depth + 1, f"{path}.{key}" if path else key))
            else:
                stack.extend((child, depth + 1, f"{path}[{index}]") for index, child in enumerate(item))
        elif isinstance(item, str):
            _check_string(item, where, path)
        elif isinstance(item, float) and (item != item or item in (float("inf"), float("-inf"))):
            raise FieldError(path, f"{where}: {path or 'the value'} is not a finite number")
    return value


def _check_string(text: str, where: str, path: str) -> None:
    if len(text) > MAX_STRING_CHARS:
        raise FieldError(path, f"{where}: a string at {path or 'the top'} is longer than {MAX_STRING_CHARS} characters")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise FieldError(
            path, f"{where}: a string at {path or 'the top'} holds a lone surrogate (not valid Unicode)"
        ) from None


def parse_json_text(text: str, where: str) -> Any:
    """Parse JSON with the limits above; NaN and Infinity literals are refused."""
    depth = 0
    for char in text:  # bound the nesting before the recursive parser sees it
        if char in "[{":
            depth += 1
            if depth > MAX_NESTING_DEPTH + 1:
                raise ValueError(f"{where}: nested deeper than {MAX_NESTING_DEPTH} levels")
        elif char in "]}":
            depth -= 1

    def refuse_constant(name: str) -> Any:
        raise ValueError(f"{where}: {name} is not a finite number")

    try:
        value = json.loads(text, parse_constant=refuse_constant)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where} is not valid JSON: {error.msg} at line {error.lineno}") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply") from None
    return check_limits(value, where)


def parse_yaml_text(text: str, where: str) -> Any:
    """Parse YAML (safe loader: no Python objects) with the limits above. Needs PyYAML."""
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML is a dependency; Pyodide ships it
        raise ValueError(f"{where}: reading YAML needs PyYAML (pip install pyyaml)") from None
    depth = 0
    for char in text:  # flow-style nesting; block nesting is bounded by check_limits below
        if char in "[{":
            depth += 1
            if depth > MAX_NESTING_DEPTH + 1:
                raise ValueError(f"{where}: nested deeper than {MAX_NESTING_DEPTH} levels")
        elif char in "]}":
            depth = max(0, depth - 1)
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise ValueError(f"{where} is not valid YAML: {problem}{line}") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply") from None
    return check_limits(value, where)


def read_json_file(path: str | os.PathLike[str], what: str = "file") -> Any:
    """:func:`read_text_file` then :func:`parse_json_text`."""
    name = os.fspath(path)
    return parse_json_text(read_text_file(name, what), f"{what} {name!r}")


def read_yaml_file(path: str | os.PathLike[str], what: str = "file") -> Any:
    """:func:`read_text_file` then :func:`parse_yaml_text`."""
    name = os.fspath(path)
    return parse_yaml_text(read_text_file(name, what), f"{what} {name!r}")
