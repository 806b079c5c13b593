"""Read the files a training run already has — trainer configs, DeepSpeed and Accelerate configs, PEFT
adapters, model configs — into one :class:`~trainmem.setup.Setup`, with a report of every key.

>>> from trainmem import inputs
>>> setup, keys = inputs.read("train.yaml", "ds_z3_config.json")          # doctest: +SKIP
>>> setup, keys = inputs.read_texts({"train.yaml": "...", "ds.json": "..."})  # doctest: +SKIP

Each file's kind is recognised from its content (:mod:`.detect`) unless ``kind`` names it;
files a file names (a trainer file's ``deepspeed``) are read too (:mod:`.sources`). Every key is
classed modelled / memory-neutral / not modelled in the :class:`KeyReport`; problems raise
:class:`InputError` (a ``ValueError``) with one line that names the file and the key.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Optional, Union

from .accelerate import read_accelerate
from .axolotl import AXOLOTL_VERSION, read_axolotl
from .deepspeed import read_deepspeed
from .detect import KINDS, detect_kind, normalise_kind
from .llamafactory import LLAMAFACTORY_VERSION, read_llamafactory
from .merge import merge
from .model_config import read_model_config
from .peft import read_peft
from .record import InputError, InputFile, KeyEntry, KeyReport, Recorder
from .sources import Document, FileSource, Source, TextSource
from .torchtune import TORCHTUNE_VERSION, read_torchtune
from .trl import framework_label, read_trl
from .verl import VERL_VERSION, read_verl

__all__ = ["KINDS", "InputError", "KeyEntry", "KeyReport", "read", "read_texts"]

READERS: dict[str, Callable[[Recorder], None]] = {
    "trl": read_trl,
    "deepspeed": read_deepspeed,
    "accelerate": read_accelerate,
    "axolotl": read_axolotl,
    "llamafactory": read_llamafactory,
    "peft": read_peft,
    "model": read_model_config,
    "torchtune": read_torchtune,
    "verl": read_verl,
}
MAX_FILES = 16
"""Files read in one go, named ones and linked ones together (a run has a handful)."""


def read(
    *paths: Union[str, os.PathLike, dict[str, str]],
    kind: Optional[str] = None,
    overrides: Optional[dict[str, Any]] = None,
) -> tuple[Any, KeyReport]:
    """The Setup and the key report of the files at ``paths``; ``overrides`` (a setup patch) wins over them.

    A single ``{filename: text}`` mapping instead of paths reads those texts (as :func:`read_texts`).
    """
    if not paths:
        raise InputError("give at least one file")
    if len(paths) == 1 and isinstance(paths[0], dict):
        return read_texts(paths[0], kind=kind, overrides=overrides)
    return _read(FileSource(), [os.fspath(p) for p in paths], kind, overrides or {})


def read_texts(
    texts: dict[str, str], kind: Optional[str] = None, overrides: Optional[dict[str, Any]] = None
) -> tuple[Any, KeyReport]:
    """As :func:`read`, for files given as ``{filename: text}`` (the web page has no file system)."""
    if not texts:
        raise InputError("give at least one file")
    return _read(TextSource(texts), list(texts), kind, overrides or {})


def _read(source: Source, names: list[str], kind: Optional[str], overrides: dict[str, Any]):
    chosen_kind = normalise_kind(kind) if kind else None
    queue: list[tuple[Document, Optional[str]]] = [(source.open(name), chosen_kind) for name in names]
    seen = {_identity(document) for document, _ in queue}
    recorders: list[Recorder] = []
    files: list[InputFile] = []
    base: dict[str, Any] = {}
    named_by: dict[str, str] = {}
    while queue:
        document, wanted = queue.pop(0)
        if document.linked_from is None and _identity(document) in named_by:
            document.linked_from = named_by[_identity(document)]
        file_kind = wanted or detect_kind(document.data)
        if file_kind is None:
            raise InputError(
                f"{document.name}: cannot tell what kind of file this is; give --from KIND (allowed: {', '.join(KINDS)})"
            )
        if not isinstance(document.data, dict):
            raise InputError(
                f"{document.name}: must hold a mapping of keys to values, not {type(document.data).__name__}"
            )
        if file_kind == "setup":
            from ..patch import merge_patch

            base = merge_patch(base, document.data)
            files.append(
                InputFile(
                    name=document.name, kind="setup", framework="trainmem setup", linked_from=document.linked_from
                )
            )
            continue
        recorder = Recorder(
            file=document.name, kind=file_kind, data=document.data, framework=_framework(file_kind, document.data)
        )
        READERS[file_kind](recorder)
        if file_kind == "trl":
            recorder.finish()
        recorders.append(recorder)
        files.append(
            InputFile(
                name=document.name, kind=file_kind, framework=recorder.framework, linked_from=document.linked_from
            )
        )
        for link in recorder.links:
            if isinstance(link.reference, dict):
                linked = Document(
                    name=f"{document.name} ({link.key})",
                    data=link.reference,
                    linked_from=f"{document.name}: {link.key}",
                )
            elif isinstance(link.reference, str):
                linked = source.find(link.reference, document, link.key)
            else:
                raise InputError(f"{document.name}: {link.key}: must be a file name or an object")
            if _identity(linked) in seen:
                named_by.setdefault(_identity(linked), linked.linked_from)  # also given by the user
                for index, file in enumerate(files):
                    if file.name == linked.name and file.linked_from is None:
                        files[index] = file.model_copy(update={"linked_from": linked.linked_from})
                continue
            seen.add(_identity(linked))
            queue.append((linked, link.kind))
        if len(seen) > MAX_FILES:
            raise InputError(f"{document.name}: more than {MAX_FILES} files to read; files name each other in a loop?")
    return merge(recorders, base, overrides, files)


def _identity(document: Document) -> str:
    return str(document.location) if document.location is not None else document.name


def _framework(kind: str, data: dict) -> str:
    if kind == "trl":
        return framework_label(data)
    return {
        "deepspeed": "DeepSpeed, auto values as transformers 5.24 fills them",
        "accelerate": "accelerate 1.15",
        "axolotl": AXOLOTL_VERSION,
        "llamafactory": LLAMAFACTORY_VERSION,
        "peft": "PEFT 0.21 LoraConfig",
        "model": "transformers 5.24 config.json",
        "torchtune": f"{TORCHTUNE_VERSION} recipes",
        "verl": f"{VERL_VERSION} main_ppo",
    }[kind]
