"""Where the files come from: the file system (CLI, Python) or a ``{filename: text}`` mapping (the web page).

A :class:`Document` is one parsed file. Files name other files — a trainer file its
``deepspeed`` config, an Accelerate config its ``deepspeed_config_file``, Axolotl a local
``base_model`` folder — and a :class:`Source` finds them:

* :class:`FileSource` looks next to the naming file, then in each folder above it (LLaMA-Factory
  and Axolotl examples name ``examples/deepspeed/ds_z3_config.json`` relative to the repository
  root, where their trainers are started), then in the working directory;
* :class:`TextSource` (no file system) matches the name, then its last path component, against
  the names it was given.

Every read goes through :mod:`trainmem.files` (regular files only, size, encoding and nesting limits).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Optional

from ..files import MAX_FILE_BYTES, parse_json_text, parse_yaml_text, read_text_file
from .record import InputError


@dataclass
class Document:
    """One file, parsed."""

    name: str
    data: Any
    location: Optional[Path] = None
    """The file's path on disk (None for texts)."""
    linked_from: Optional[str] = None


def parse_text(name: str, text: str) -> Any:
    """JSON for ``.json`` files (and text that starts with ``{``), YAML otherwise (YAML also reads JSON);
    a launch script's ``key=value`` overrides (``.sh``, or text YAML cannot read as a mapping) as their mapping
    (:mod:`.hydra_overrides`)."""
    from .hydra_overrides import looks_like_overrides, parse_overrides

    if name.lower().endswith((".sh", ".bash")):
        return parse_overrides(text, name)
    if name.lower().endswith(".json") or text.lstrip().startswith("{"):
        return parse_json_text(text, name)
    try:
        data = parse_yaml_text(text, name)
    except ValueError:
        if looks_like_overrides(text):
            return parse_overrides(text, name)
        raise
    if not isinstance(data, dict) and looks_like_overrides(text):
        return parse_overrides(text, name)
    return data


class Source:
    """Opens the files a user names and the files those files name."""

    def open(self, name: str) -> Document:
        raise NotImplementedError

    def find(self, reference: str, named_by: Document, key: str) -> Document:
        raise NotImplementedError


class FileSource(Source):
    def open(self, name: str) -> Document:
        try:
            text = read_text_file(name, "file")
            return Document(name=name, data=parse_text(name, text), location=Path(name).expanduser().resolve())
        except ValueError as error:
            raise InputError(str(error)) from None

    def find(self, reference: str, named_by: Document, key: str) -> Document:
        candidates = []
        relative = Path(reference).expanduser()
        if relative.is_absolute():
            candidates.append(relative)
        else:
            if named_by.location is not None:
                folder = named_by.location.parent
                candidates += [folder / relative, *(parent / relative for parent in folder.parents)]
            candidates.append(Path.cwd() / relative)
        for candidate in candidates:
            if candidate.is_file():
                document = self.open(_display_name(candidate))
                document.linked_from = f"{named_by.name}: {key}"
                return document
        raise InputError(
            f"{named_by.name}: {key}: cannot find {reference!r} (looked next to the file, in the folders above it and "
            "in the working directory); give it as another file"
        )


def _display_name(path: Path) -> str:
    """The path relative to the working directory when it lies below it, else absolute."""
    resolved = path.resolve()
    try:
        return os.fspath(resolved.relative_to(Path.cwd()))
    except ValueError:
        return os.fspath(resolved)


class TextSource(Source):
    """Files given as ``{filename: text}``: what the web page passes (no file system)."""

    def __init__(self, texts: dict[str, str]):
        self.texts = dict(texts)

    def open(self, name: str) -> Document:
        text = self.texts[name]
        if len(text.encode("utf-8", "surrogatepass")) > MAX_FILE_BYTES:
            raise InputError(f"{name}: larger than the {MAX_FILE_BYTES // 2**20} MiB limit")
        try:
            return Document(name=name, data=parse_text(name, text))
        except ValueError as error:
            raise InputError(str(error)) from None

    def find(self, reference: str, named_by: Document, key: str) -> Document:
        wanted = PurePosixPath(reference.replace("\\", "/"))
        for name in self.texts:
            given = PurePosixPath(name.replace("\\", "/"))
            if given == wanted or given.name == wanted.name:
                document = self.open(name)
                document.linked_from = f"{named_by.name}: {key}"
                return document
        raise InputError(f"{named_by.name}: {key}: names {reference!r}; add that file too")
