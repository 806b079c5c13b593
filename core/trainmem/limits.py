"""Bounds that a real training run never exceeds, each with its reason.

A setup beyond them is refused with one line before anything is simulated: the simulation of
an absurd size would otherwise take seconds and gigabytes (10⁶ layers) or overflow floating
point (a micro-batch of 10³⁰⁰, a GPU of ``inf`` GiB). Each bound is far above the largest
published value it guards, so no real run is refused; the reason names that value. The
schema states every bound (``trainmem schema``: ``maximum`` and the field's description).

The architecture's own fields live in ``architecture.py``; their bounds are checked here, from
:data:`ARCHITECTURE_BOUNDS`, by :func:`check_architecture`, which ``Setup`` runs on whatever
architecture its model resolves to (preset, config.json or explicit fields).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Optional

from .errors import FieldError, describe_value
from .files import check_limits


@dataclass(frozen=True)
class Bound:
    """The largest value a field may take, and why no real run goes beyond it."""

    maximum: float
    reason: str

    def describe(self) -> str:
        shown = f"{int(self.maximum):,}" if float(self.maximum).is_integer() else f"{self.maximum:g}"
        return f"at most {shown}: {self.reason}"


# --------------------------------------------------------------------------- run sizes
MICRO_BATCH = Bound(2**16, "2^16 sequences per GPU per forward; real micro-batches stay in the hundreds")
SEQUENCE = Bound(2**24, "2^24 = 16,777,216 tokens, above the longest published context (Llama 4 Scout: 10M)")
TOKENS_PER_MICRO_BATCH = Bound(
    2**28, "micro_batch_size × sequence_length ≤ 2^28 tokens on one GPU (a GPU's memory holds far fewer)"
)
ACCUMULATION = Bound(2**16, "2^16 micro-batches per optimizer step")
LOSS_CHUNKS = Bound(2**12, "4096 chunks (torchtune's default is 8, Liger's chunk count is in the tens)")
LORA_RANK = Bound(2**16, "2^16, the largest hidden size accepted: a higher rank adds nothing")
NUM_PARAMETERS = Bound(2**50, "~1.1 × 10^15 parameters, 500× the largest published models (~2 × 10^12)")

# --------------------------------------------------------------------------- cluster sizes
NUM_GPUS = Bound(2**18, "262,144 GPUs, above the largest announced training cluster (~200,000)")
PARALLEL_SIZE = Bound(2**12, "4096 ranks per tensor/pipeline/context/expert parallel group")
GPUS_PER_NODE = Bound(2**10, "1024 GPUs in one shard group (the largest NVLink domain is 576)")

# --------------------------------------------------------------------------- memory figures
GPU_MEMORY_GIB = Bound(2**12, "4 TiB per GPU, 14× the largest GPU memory sold (288 GB: B300, MI355X)")
MEMORY_MIB = Bound(2**22, "4 TiB in MiB, the bound of a GPU's memory")
BUCKET_ELEMENTS = Bound(2**50, "2^50 elements, the bound of num_parameters: no bucket outgrows the model")
DATALOADER_WORKERS = Bound(2**10, "1024 worker processes per rank, 4× the cores of the largest host CPU")
HOST_RAM_GIB = Bound(2**16, "64 TiB per node, 2× the largest single-system memory sold (32 TB)")

# --------------------------------------------------------------------------- architecture
ARCHITECTURE_BOUNDS: dict[str, Bound] = {
    "num_hidden_layers": Bound(1024, "8× the deepest published decoder (Llama 3.1 405B: 126 layers)"),
    "hidden_size": Bound(2**16, "65,536, 2.5× the widest published model (Megatron 1T: 25,600)"),
    "intermediate_size": Bound(2**20, "2^20, 10× the widest published MLP (~100,000)"),
    "shared_expert_intermediate_size": Bound(2**20, "as intermediate_size"),
    "vocab_size": Bound(2**22, "4,194,304 tokens, 16× the largest published vocabulary (Gemma: 262,144)"),
    "num_attention_heads": Bound(1024, "8× the most heads in a published model (Llama 3.1 405B: 128)"),
    "num_key_value_heads": Bound(1024, "as num_attention_heads"),
    "head_dim": Bound(2**12, "4096, 16× the widest published head (Gemma 2: 256)"),
    "num_experts": Bound(2**14, "16,384 routed experts, 64× DeepSeek-V3's 256"),
    "num_experts_per_tok": Bound(2**10, "1024 experts per token"),
    "max_position_embeddings": Bound(2**27, "2^27 positions, 8× the bound on sequence_length"),
}
"""Bounds on :class:`~trainmem.architecture.Architecture` fields (the largest published values
are from the models' config.json files)."""

NAME_CHARS = 64
"""Longest name accepted for a custom GPU, a model type or an activation."""
MODULE_NAME_CHARS = 128
"""Longest LoRA target module or frozen group accepted (module paths are a few dozen characters)."""
LIST_ITEMS = 256
"""Most entries in target_modules or frozen (a model has a few dozen distinct module names)."""
JSON_INT_LIMIT = 2**63
"""Integers inside a free-form config must fit an int64, so that every JSON reader keeps them."""


def check_bound(value: float, bound: Bound, field: str) -> None:
    if value > bound.maximum:
        raise FieldError(field, f"{describe_value(value)} is too large; {bound.describe()}")


def check_name(text: str, field: str, limit: int = NAME_CHARS) -> str:
    """A name shown in the report: printable (no control, format or unpaired surrogate
    characters, so text and JSON output can always carry it) and short."""
    if not text.strip():
        raise ValueError("must not be empty")
    if len(text) > limit:
        raise ValueError(f"is {len(text):,} characters long; at most {limit} allowed")
    if not text.isprintable():
        bad = next(char for char in text if not char.isprintable())
        raise ValueError(f"holds the unprintable character U+{ord(bad):04X}; use printable characters")
    return text


def check_architecture(architecture: Any, field: str) -> None:
    """Every bounded size of ``architecture`` within :data:`ARCHITECTURE_BOUNDS`, every float finite,
    every name printable. ``field`` is where the architecture came from (``model.architecture``,
    ``model.hf_config``)."""
    for name, bound in ARCHITECTURE_BOUNDS.items():
        value = getattr(architecture, name, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > bound.maximum:
            raise FieldError(f"{field}.{name}", f"{describe_value(value)} is too large; {bound.describe()}")
    for name, value in architecture:
        if isinstance(value, float) and not math.isfinite(value):
            raise FieldError(f"{field}.{name}", f"{describe_value(value)} is not a finite number")
        if isinstance(value, str):
            try:
                check_name(value, name)
            except ValueError as error:
                raise FieldError(f"{field}.{name}", str(error)) from None


def check_free_form_json(value: Any, where: str) -> Any:
    """A free-form JSON object given through the API (a config.json dict): the nesting, string
    and finiteness limits of :func:`trainmem.files.check_limits`, integers within int64, only
    JSON types, and at most :data:`~trainmem.files.MAX_FILE_BYTES` once serialised."""
    from .files import MAX_FILE_BYTES

    check_limits(value, where)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, bool) or item is None or isinstance(item, (str, float)):
            continue
        elif isinstance(item, int):
            if abs(item) >= JSON_INT_LIMIT:
                raise ValueError(f"{where}: the integer {describe_value(item)} does not fit in 64 bits")
        else:
            raise ValueError(f"{where}: holds a {type(item).__name__}, which is not a JSON value")
    size = len(json.dumps(value, ensure_ascii=False, allow_nan=False))
    if size > MAX_FILE_BYTES:
        raise ValueError(f"{where}: {size:,} characters of JSON is more than the {MAX_FILE_BYTES // 2**20} MiB limit")
    return value


def bound_note(bound: Bound) -> dict[str, Optional[str]]:
    """The ``json_schema_extra`` that states a bound's reason in the schema."""
    return {"x-bound-reason": bound.reason}
