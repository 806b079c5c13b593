"""What a reader records about one file: the setup fields it sets and how it classed every key.

A reader walks a file's keys and calls one :class:`Recorder` method per key:

* :meth:`Recorder.set` — the key is **modelled**: it sets a Setup field (a dotted path such
  as ``parallelism.zero_stage``);
* :meth:`Recorder.neutral` — the key is **memory-neutral** (``learning_rate``, ``output_dir``);
* :meth:`Recorder.unmodelled` — the key changes memory but trainmem does not model it: the
  entry says what trainmem assumed instead;
* :meth:`Recorder.default` — a field the file leaves out takes the framework's default, named
  with the framework version it was read from (used only when no other file sets the field);
* :meth:`Recorder.auto` — a DeepSpeed ``"auto"`` that another file must fill.

Keys a reader does not handle are classed by :meth:`Recorder.finish`: memory-neutral when the
format's list of neutral keys (``data/trainer_keys.json``) has them, otherwise *not modelled*
with the assumption that they do not change memory — never silently dropped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any, Iterable, Literal, Optional, Union

from pydantic import Field

from .._base import FrozenModel

Status = Literal["modelled", "memory-neutral", "not modelled"]
MODELLED: Status = "modelled"
NEUTRAL: Status = "memory-neutral"
NOT_MODELLED: Status = "not modelled"


class InputError(ValueError):
    """A trainer file that cannot be read as a setup: the message names the file and the key."""


class KeyEntry(FrozenModel):
    """One key of one file, and what trainmem made of it."""

    file: str
    key: str = Field(description="Dotted key as it appears in the file (zero_optimization.stage).")
    value: Any = Field(default=None, description="The file's value (None for a default the file leaves out).")
    status: Status
    detail: str = Field(default="", description="The setup field it sets, or what trainmem assumed instead.")
    default: bool = Field(default=False, description="Not in the file: the framework's default applied.")


class InputFile(FrozenModel):
    """A file that was read, and the kind it was read as."""

    name: str
    kind: str
    framework: str = Field(description="The framework and version whose defaults were applied.")
    linked_from: Optional[str] = Field(default=None, description="The file and key that named this file.")


class KeyReport(FrozenModel):
    """Every key of every file read, classed as modelled, memory-neutral or not modelled."""

    files: list[InputFile]
    entries: list[KeyEntry]
    notes: list[str] = Field(default_factory=list, description="Assumptions that no single key carries.")

    def count(self, status: Status) -> int:
        return sum(1 for entry in self.entries if entry.status == status)


@dataclass
class Contribution:
    """A value for one Setup field, from one key of one file."""

    field: str
    value: Any
    file: str
    key: str
    default: bool = False
    label: str = ""
    """For a default: where it comes from, e.g. 'transformers 5.24 TrainingArguments'."""
    wins: str = ""
    """Why this value replaces another file's for the same field instead of contradicting it (empty: it does not)."""


@dataclass
class Auto:
    """A DeepSpeed "auto" value for a Setup field, to be filled by another file or a flag."""

    field: str
    file: str
    key: str
    reason: str = ""
    """Why the file leaves the value open, when it is not a DeepSpeed "auto" (a verl key left null)."""


@dataclass
class Link:
    """Another file this one names (a trainer file's ``deepspeed``), to be read as ``kind``."""

    kind: str
    reference: Any
    """A path (relative to this file) or, for an inline DeepSpeed config, the dict itself."""
    file: str
    key: str


@dataclass
class Recorder:
    """Collects one file's contributions, key entries, links and facts for :mod:`.merge`."""

    file: str
    kind: str
    data: dict[str, Any]
    framework: str
    contributions: list[Contribution] = field(default_factory=list)
    entries: list[KeyEntry] = field(default_factory=list)
    autos: list[Auto] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _seen: set[str] = field(default_factory=set)

    # -- reading keys -------------------------------------------------------------------------

    def has(self, key: str) -> bool:
        return _lookup(self.data, key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        value = _lookup(self.data, key)
        return default if value is None else value

    # -- classing keys ------------------------------------------------------------------------

    def set(self, key: str, setup_field: str, value: Any, detail: str = "") -> None:
        self._seen.add(key)
        self.contributions.append(Contribution(setup_field, value, self.file, key))
        text = f"{setup_field} = {short_value(value)}"
        self.entries.append(
            KeyEntry(
                file=self.file,
                key=key,
                value=_plain(self.get(key)),
                status=MODELLED,
                detail=f"{text}; {detail}" if detail else text,
            )
        )

    def modelled(self, key: str, detail: str) -> None:
        """A key that is modelled without setting a field of its own (it qualifies another key)."""
        self._entry(key, MODELLED, detail)

    def neutral(self, key: str, detail: str = "") -> None:
        self._entry(key, NEUTRAL, detail)

    def unmodelled(self, key: str, assumption: str) -> None:
        self._entry(key, NOT_MODELLED, assumption)

    def default(self, setup_field: str, value: Any, key: str, label: str) -> None:
        self.contributions.append(Contribution(setup_field, value, self.file, key, default=True, label=label))

    def auto(self, key: str, setup_field: str, reason: str = "") -> None:
        self._seen.add(key)
        self.autos.append(Auto(setup_field, self.file, key, reason))

    def link(self, kind: str, key: str, reference: Any) -> None:
        self.links.append(Link(kind, reference, self.file, key))

    def seen(self, key: str) -> bool:
        return key in self._seen

    def mark(self, keys: Union[str, Iterable[str]]) -> None:
        """Keys classed by an entry written directly (or by another key's entry)."""
        self._seen.update([keys] if isinstance(keys, str) else keys)

    def _entry(self, key: str, status: Status, detail: str) -> None:
        self._seen.add(key)
        self.entries.append(
            KeyEntry(file=self.file, key=key, value=_plain(self.get(key)), status=status, detail=detail)
        )

    # -- the rest -------------------------------------------------------------------------------

    def finish(self, section: str = "", neutral_keys: frozenset[str] = frozenset()) -> None:
        """Class every key of ``section`` (the whole file by default) that no handler took."""
        neutral_keys = neutral_keys | neutral_key_names(self.kind)
        container = _lookup(self.data, section) if section else self.data
        if not isinstance(container, dict):
            return
        for name, value in container.items():
            key = f"{section}.{name}" if section else name
            if key in self._seen or any(seen.startswith(key + ".") for seen in self._seen):
                continue
            if value is None:
                self.neutral(key, "empty: the default applies")
            elif name in neutral_keys or key in neutral_keys:
                self.neutral(key)
            else:
                self.unmodelled(key, "unknown to trainmem: assumed not to change memory")


def _lookup(data: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


def _plain(value: Any) -> Any:
    """The value as it goes into the report: JSON-able, long texts shortened."""
    if isinstance(value, str) and len(value) > 80:
        return value[:77] + "..."
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
        return value if len(text) <= 200 else text[:197] + "..."
    return value


def short_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {short_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(short_value(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else str(value)


@cache
def _neutral_table() -> dict[str, frozenset[str]]:
    raw = json.loads(
        resources.files("trainmem").joinpath("data").joinpath("trainer_keys.json").read_text(encoding="utf-8")
    )
    return {kind: frozenset(names) for kind, names in raw["memory_neutral"].items()}


def neutral_key_names(kind: str) -> frozenset[str]:
    """Keys of ``kind`` files that change no memory (plus those every kind shares)."""
    table = _neutral_table()
    shared = table.get("common", frozenset())
    if kind in ("trl", "llamafactory"):
        shared = shared | table.get("trainer", frozenset())
    return shared | table.get(kind, frozenset())
