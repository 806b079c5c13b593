"""Every field of a Setup as a dotted path (``parallelism.zero_stage``), read from the pydantic models.

The hostile-input fuzz (benchmarks/fuzz_setups.py) and the property tests
(tests/test_hostile_properties.py) put bad values at these paths; reading them from the models means a
field added to the Setup is fuzzed the day it is added, with no list to keep in step.
"""

from __future__ import annotations

import typing
from typing import Any, Iterator

from pydantic import BaseModel


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    """The pydantic model classes an annotation can hold (through Optional, Union, Annotated)."""
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel):
            yield annotation
        return
    for argument in typing.get_args(annotation):
        yield from _models_in(argument)


def field_paths(model: type[BaseModel], prefix: str = "", depth: int = 4) -> list[str]:
    """Dotted paths of ``model``'s fields and, ``depth`` levels down, of the models they hold."""
    paths: list[str] = []
    for name, info in model.model_fields.items():
        path = prefix + name
        paths.append(path)
        if depth > 1:
            for inner in _models_in(info.annotation):
                for sub in field_paths(inner, path + ".", depth - 1):
                    if sub not in paths:
                        paths.append(sub)
    return paths


def setup_field_paths() -> list[str]:
    """The Setup's field paths. ``model`` is a union of shapes (preset, hf_config, architecture,
    parameter count): each shape's fields are listed under ``model.``."""
    from .setup import Setup

    return field_paths(Setup)
