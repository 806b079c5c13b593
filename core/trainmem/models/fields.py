"""Typed reading of a Hugging Face ``config.json``: what transformers accepts, nothing coerced.

Each family's reader asks for its fields through :class:`ConfigFields`, with the default of the
transformers configuration class for a field the file leaves out (or sets to ``null``). A field of
the wrong type is one :class:`~trainmem.errors.FieldError` naming it, e.g.
``model.hf_config.n_embd: expected an integer, got the string "768"``: a string is never read as a
number (``"768"``) or a boolean (``"false"`` would be true in Python), a float never as an integer
(transformers 5's strict configuration dataclasses refuse ``4096.0`` too), a boolean never as a number.
Sizes are bounded by :data:`MAX_SIZE` so a typo cannot start a computation of 10⁹ layers.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence

from ..errors import FieldError

MAX_SIZE = 2**24
"""16,777,216: above any real size in a config (the largest vocabularies are ~262k, hidden sizes
~25k, MoE expert counts 384, layers ~130); a bound, not a model fact."""
MAX_LAYERS = 1024
"""Layers a config may declare; released models have at most ~130."""

_MISSING = object()

ACTIVATIONS = (
    "gelu", "gelu_10", "gelu_fast", "gelu_new", "gelu_python", "gelu_pytorch_tanh", "gelu_python_tanh",
    "gelu_accurate", "hardswish", "laplace", "leaky_relu", "linear", "mish", "quick_gelu", "relu", "relu2", "relu6",
    "sigmoid", "silu", "sqrtsoftplus", "swish", "tanh", "prelu", "xielu",
)
"""The activation names transformers builds (``ACT2CLS`` in transformers/activations.py, 5.24): any other name
is a ``KeyError`` when the model is built (``ACT2FN[config.hidden_act]``)."""


def describe(value: Any) -> str:
    """How an error message names a wrong value: ``the string "768"``, ``a list``, ``true``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return f"the string {_quote(shown)}"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    if value is None:
        return "null"
    return type(value).__name__


def _quote(text: str) -> str:
    escaped = text.encode("unicode_escape", "backslashreplace").decode("ascii").replace('"', '\\"')
    return f'"{escaped}"'


ROPE_TYPES = ("default", "dynamic", "linear", "llama3", "longrope", "proportional", "yarn")
"""``rope_type`` values transformers 5.24 builds (``"default"`` and ``modeling_rope_utils.ROPE_INIT_FUNCTIONS``)."""


class ConfigFields:
    """Typed access to a config.json mapping; errors name ``<prefix>.<field>``."""

    def __init__(self, config: Mapping[str, Any], prefix: str = ""):
        self.config = config
        self.prefix = prefix

    def path(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def fail(self, name: str, message: str) -> FieldError:
        return FieldError(self.path(name), message)

    def has(self, name: str) -> bool:
        return self.config.get(name) is not None

    def raw(self, name: str, default: Any = None) -> Any:
        value = self.config.get(name)
        return default if value is None else value

    # ------------------------------------------------------------------ scalars
    def integer(
        self,
        name: str,
        default: Any = _MISSING,
        minimum: int = 1,
        maximum: int = MAX_SIZE,
        aliases: Sequence[str] = (),
    ) -> int:
        """An integer field (or the first alias present)."""
        for key in (name, *aliases):
            value = self.config.get(key)
            if value is not None:
                return self._as_integer(key, value, minimum, maximum)
        if default is _MISSING:
            raise self.fail(name, "required")
        return default

    def optional_integer(self, name: str, minimum: int = 1, maximum: int = MAX_SIZE) -> Optional[int]:
        value = self.config.get(name)
        return None if value is None else self._as_integer(name, value, minimum, maximum)

    def _as_integer(self, name: str, value: Any, minimum: int, maximum: int) -> int:
        # transformers 5's configuration classes are strict dataclasses: an int field refuses 4096.0 too.
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(name, f"expected an integer, got {describe(value)}")
        if value < minimum:
            bound = "greater than 0" if minimum == 1 else f"at least {minimum}"
            raise self.fail(name, f"must be {bound}, got {value}")
        if value > maximum:
            raise self.fail(name, f"must be at most {maximum:,}, got {value:,}")
        return value

    def number(
        self, name: str, default: Any = _MISSING, minimum: float = -math.inf, maximum: float = math.inf
    ) -> float:
        """A finite number (an integer is accepted)."""
        value = self.config.get(name)
        if value is None:
            if default is _MISSING:
                raise self.fail(name, "required")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(name, f"expected a number, got {describe(value)}")
        if not math.isfinite(value):
            raise self.fail(name, f"expected a finite number, got {value}")
        if not minimum <= value <= maximum:
            raise self.fail(name, f"must be between {minimum} and {maximum}, got {value}")
        return float(value)

    def optional_number(self, name: str, minimum: float = -math.inf, maximum: float = math.inf) -> Optional[float]:
        return None if self.config.get(name) is None else self.number(name, minimum=minimum, maximum=maximum)

    def probability(self, name: str, default: float = 0.0) -> float:
        """A dropout probability in [0, 1)."""
        value = self.number(name, default, minimum=0.0, maximum=1.0)
        if value >= 1.0:
            raise self.fail(name, f"must be below 1, got {value}")
        return value

    def boolean(self, name: str, default: Any = _MISSING) -> bool:
        value = self.config.get(name)
        if value is None:
            if default is _MISSING:
                raise self.fail(name, "required")
            return default
        if not isinstance(value, bool):
            raise self.fail(name, f"expected true or false, got {describe(value)}")
        return value

    def string(self, name: str, default: Any = _MISSING, aliases: Sequence[str] = ()) -> str:
        for key in (name, *aliases):
            value = self.config.get(key)
            if value is not None:
                if not isinstance(value, str):
                    raise self.fail(key, f"expected a string, got {describe(value)}")
                return value
        if default is _MISSING:
            raise self.fail(name, "required")
        return default

    def activation(self, name: str, default: Any = _MISSING, aliases: Sequence[str] = ()) -> str:
        """An activation's name, one of :data:`ACTIVATIONS` (what ``ACT2FN`` knows)."""
        value = self.string(name, default, aliases)
        if value not in ACTIVATIONS:
            key = next((key for key in (name, *aliases) if self.config.get(key) is not None), name)
            shown = describe(value)
            raise self.fail(key, f"unknown activation {shown.removeprefix('the string ')}; transformers knows "
                                 f"{', '.join(ACTIVATIONS)}")
        return value

    # ------------------------------------------------------------------ lists
    def integer_list(self, name: str, default: Sequence[int] = (), minimum: int = 0, maximum: int = MAX_SIZE) -> list[int]:
        value = self.config.get(name)
        if value is None:
            return list(default)
        if not isinstance(value, (list, tuple)):
            raise self.fail(name, f"expected a list of integers, got {describe(value)}")
        return [self._as_integer(f"{name}[{index}]", item, minimum, maximum) for index, item in enumerate(value)]

    def string_list(self, name: str, default: Sequence[str] = ()) -> list[str]:
        value = self.config.get(name)
        if value is None:
            return list(default)
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
            raise self.fail(name, f"expected a list of strings, got {describe(value)}")
        return list(value)

    def mapping(self, name: str) -> Optional[Mapping[str, Any]]:
        value = self.config.get(name)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.fail(name, f"expected an object, got {describe(value)}")
        return value

    def rope_parameters(self) -> Mapping[str, Any]:
        """``rope_parameters`` (empty when absent), its ``rope_type`` one transformers 5.24 builds: the rotary
        embedding looks it up in ``modeling_rope_utils.ROPE_INIT_FUNCTIONS`` and raises KeyError otherwise."""
        rope = self.mapping("rope_parameters") or {}
        kind = rope.get("rope_type", rope.get("type", "default"))
        if kind not in ROPE_TYPES:
            raise self.fail("rope_parameters.rope_type", f"unknown RoPE type {kind!r}; allowed: {', '.join(ROPE_TYPES)}")
        return rope

    def layers(self, default: int = _MISSING, aliases: Sequence[str] = ()) -> int:  # type: ignore[assignment]
        """``num_hidden_layers`` (or an alias), bounded by :data:`MAX_LAYERS`."""
        return self.integer("num_hidden_layers", default, maximum=MAX_LAYERS, aliases=aliases)
