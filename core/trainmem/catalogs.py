"""The catalogs trainmem ships as data: model presets, GPUs and optimizers.

Each catalog is a JSON file in ``trainmem/data`` (one source of truth, readable without
Python) loaded once into frozen pydantic models. The presets are built one by one as they are
looked up (:class:`LazyCatalog`): a setup names one of 93, and building them all was most of the
catalog's cost in an answer (in Pyodide, about 0.1 s of the page's first answer on a loaded machine).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import cache
from typing import Any, Generic, Literal, Optional, TypeVar

from pydantic import Field, PositiveInt

from ._base import FrozenModel
from .package_data import data_json
from .units import MIB


def _load(filename: str) -> dict[str, Any]:
    return data_json(filename)


class Preset(FrozenModel):
    """A published model: its Hugging Face config.json fields and where they come from."""

    name: str
    display_name: str
    hf_id: str
    config: dict[str, Any]


class GPU(FrozenModel):
    """A GPU model and the memory its driver reports."""

    name: str
    display_name: str
    vendor: Literal["nvidia", "amd", "custom"]
    architecture: str
    memory_mib: PositiveInt = Field(description="Total device memory as nvidia-smi / rocm-smi report it.")
    marketed_memory_gb: float
    supports_bf16: bool
    supports_fp8: bool
    source: str

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB


class TemporariesRule(FrozenModel):
    """How much scratch memory one implementation of an optimizer's step() allocates."""

    foreach: float
    for_loop: float = Field(alias="for-loop")
    fused: float


class OptimizerKind(FrozenModel):
    """What an optimizer keeps per parameter; see trainmem/optimizers.py for how it is used."""

    name: str
    display_name: str
    full_state_tensors: int = Field(description="State tensors the size of each parameter (Adam: 2).")
    factored_second_moment: bool = Field(description="Adafactor: row and column statistics instead of a full tensor.")
    quantized_state_bits: Optional[int] = Field(description="8 for bitsandbytes 8-bit states; None for full precision.")
    temporaries: TemporariesRule
    paged: bool = Field(description="bitsandbytes paged optimizer: states in CUDA unified memory.")
    loop_keeps_previous_denominator: bool = Field(
        default=False, description="For-loop step: the previous parameter's update buffer is still alive."
    )
    upcasts_to_fp32: bool = Field(
        default=False, description="Computes on fp32 copies of 16-bit gradients and weights; fp32 statistics."
    )
    scalar_state: Literal["none", "device", "host_unless_fused"] = Field(
        default="none", description="A 0-dim fp32 state tensor per parameter, and where it lives."
    )


Entry = TypeVar("Entry", bound=FrozenModel)


class LazyCatalog(Mapping[str, Entry], Generic[Entry]):
    """A catalog's entries by name (as a dict of them), each validated into its model on first lookup.

    Names, order, ``in`` and ``len`` come from the file's raw entries (the last of a repeated name
    wins, as in a dict built from them); a bad entry raises its ValidationError when it is looked up.
    """

    def __init__(self, model: type[Entry], entries: list[dict[str, Any]]) -> None:
        self._model = model
        self._raw = {entry["name"]: entry for entry in entries}
        self._built: dict[str, Entry] = {}

    def __getitem__(self, name: str) -> Entry:
        built = self._built.get(name)
        if built is None:
            built = self._built[name] = self._model(**self._raw[name])
        return built

    def __contains__(self, name: object) -> bool:
        return name in self._raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)


@cache
def presets() -> Mapping[str, Preset]:
    return LazyCatalog(Preset, _load("presets.json")["presets"])


@cache
def gpus() -> dict[str, GPU]:
    return {g["name"]: GPU(**g) for g in _load("gpus.json")["gpus"]}


@cache
def optimizers() -> dict[str, OptimizerKind]:
    return {o["name"]: OptimizerKind(**o) for o in _load("optimizers.json")["optimizers"]}
