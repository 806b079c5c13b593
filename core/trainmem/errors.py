"""Turning validation errors into one-line messages that name the field and what is allowed.

Whatever the input held (a key with a newline, a 10 MB string, a lone surrogate), the message
is one printable line of bounded length: user text in it is escaped and shortened by
:func:`printable` and :func:`describe_value`.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import ValidationError


class FieldError(ValueError):
    """A cross-field check that failed on one field: carries that field's dotted path.

    Raised from model validators, where pydantic would otherwise report the error at the
    model's own location.
    """

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


_MODEL_KIND_TAGS = {"preset", "hf_config", "architecture", "num_parameters"}
_UNION_BRANCH_NAMES = {"str", "CustomGPU", "list[str]", "literal['all-linear']", "dict[str,any]"}
MAX_PATH_PART_CHARS = 60
MAX_MESSAGE_CHARS = 600


def printable(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` on one line: control, format and surrogate characters escaped, cut at ``limit``."""
    out = []
    for char in text:
        if char.isprintable():
            out.append(char)
        else:
            out.append(char.encode("unicode_escape", "backslashreplace").decode("ascii"))
    line = "".join(out)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def describe_value(value: Any) -> str:
    """A short, printable description of a user's value: ``the string "768"``, ``a list``, ``1e+308``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "…"
        return "the string " + json.dumps(shown)  # JSON escapes quotes, controls and lone surrogates
    if isinstance(value, int):
        digits = len(str(abs(value))) if abs(value) < 10**100 else None
        if digits is None or digits > 20:
            return f"an integer of {digits or 'more than 100'} digits"
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "infinity" if value > 0 else "-infinity"
        return f"{value:g}"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


_EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "dict_type": "an object",
    "model_type": "an object",
    "model_attributes_type": "an object",
}


def _message(item: dict[str, Any]) -> str:
    kind = item["type"]
    message = item["msg"].removeprefix("Value error, ")
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown field (check the spelling; `trainmem schema` lists the fields)"
    has_input = "input" in item
    if kind in _EXPECTED and has_input:
        return f"expected {_EXPECTED[kind]}, got {describe_value(item['input'])}"
    if kind == "literal_error" and has_input:
        return f"expected {item['ctx']['expected']}, got {describe_value(item['input'])}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal") and has_input:
        return f"{message.removeprefix('Input ')}, got {describe_value(item['input'])}"
    if kind in ("recursion_loop", "json_invalid"):
        return f"not valid input: {message}"
    return message


def field_path(location: tuple) -> str:
    """A dotted path from a pydantic error location, without the tags of unions.

    ``('model', 'preset', 'preset')`` -> ``model.preset``;
    ``('model', 'architecture', 'architecture', 'hidden_size')`` -> ``model.architecture.hidden_size``.
    Keys that came from the input are escaped and shortened.
    """
    parts: list[str] = []
    items = list(location)
    for index, item in enumerate(items):
        text = str(item)
        if index == 1 and items[0] == "model" and text in _MODEL_KIND_TAGS and len(items) > 2:
            continue  # the discriminator's tag repeats the field name that follows
        if text in _UNION_BRANCH_NAMES or text.startswith(("function-", "literal[", "union[")):
            continue
        parts.append(printable(text, MAX_PATH_PART_CHARS))
    return ".".join(parts) or "setup"


def format_validation_error(error: ValidationError) -> list[tuple[str, str]]:
    """(field path, message) pairs, one per distinct problem, each printable and on one line."""
    seen: dict[str, str] = {}
    for item in error.errors(include_url=False):
        path = field_path(item["loc"])
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, FieldError) and cause.field:
            path = f"{path}.{printable(cause.field, 200)}" if path != "setup" else printable(cause.field, 200)
        if path not in seen:
            seen[path] = printable(_message(item))
    # A union reports every branch; where one branch got further (``gpu.memory_gib``), the
    # shallower complaints about the other branches (``gpu``: expected a string) are noise.
    return [
        (path, message)
        for path, message in seen.items()
        if not any(other.startswith(path + ".") for other in seen) or path == "setup"
    ]


def one_line(error: ValidationError) -> str:
    """All problems on one line: ``micro_batch_size: Input should be greater than 0; gpu: ...``."""
    return printable("; ".join(f"{path}: {message}" for path, message in format_validation_error(error)), 2000)
