"""Turning validation errors into one-line messages that name the field and what is allowed."""

from __future__ import annotations

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


def field_path(location: tuple) -> str:
    """A dotted path from a pydantic error location, without the tags of unions.

    ``('model', 'preset', 'preset')`` -> ``model.preset``;
    ``('model', 'architecture', 'architecture', 'hidden_size')`` -> ``model.architecture.hidden_size``.
    """
    parts: list[str] = []
    items = list(location)
    for index, item in enumerate(items):
        text = str(item)
        if index == 1 and items[0] == "model" and text in _MODEL_KIND_TAGS and len(items) > 2:
            continue  # the discriminator's tag repeats the field name that follows
        if text in _UNION_BRANCH_NAMES or text.startswith(("function-", "literal[", "union[")):
            continue
        parts.append(text)
    return ".".join(parts) or "setup"


def format_validation_error(error: ValidationError) -> list[tuple[str, str]]:
    """(field path, message) pairs, one per distinct problem."""
    seen: dict[str, str] = {}
    for item in error.errors(include_url=False):
        path = field_path(item["loc"])
        cause = (item.get("ctx") or {}).get("error")
        if isinstance(cause, FieldError):
            path = f"{path}.{cause.field}" if path != "setup" else cause.field
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] in ("missing",):
            message = "required"
        elif item["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; `trainmem schema` lists the fields)"
        if path not in seen:
            seen[path] = message
    return list(seen.items())


def one_line(error: ValidationError) -> str:
    """All problems on one line: ``micro_batch_size: Input should be greater than 0; gpu: ...``."""
    return "; ".join(f"{path}: {message}" for path, message in format_validation_error(error))
