"""A vLLM engine's GPU memory: :func:`vllm_memory` and, for a trainer sharing the GPU, :func:`vllm_colocated_bytes`.

vLLM cannot run here (no GPU, not installable), so this is vLLM's memory model as its source states it
(vLLM V1, ``vllm/v1/worker/gpu_worker.py``, ``vllm/utils/mem_utils.py``, ``vllm/v1/kv_cache_interface.py``,
``vllm/v1/core/kv_cache_utils.py``), checked against figures that vLLM printed for named models and GPUs
(tests/test_inference_vllm.py). What is vLLM's and what is trainmem's assumption:

vLLM's rules (from the source):

* ``gpu_memory_utilization`` is a fraction of the GPU's **total** memory that this instance may use:
  ``requested_memory = total_memory * gpu_memory_utilization`` (``Worker.init_device``; it refuses to
  start when the free memory is smaller). It is not a fraction of the free memory, and each vLLM
  instance on a GPU has its own.
* The KV cache gets what the profiling run leaves of that share:
  ``available_kv_cache_memory = requested_memory - non_kv_cache_memory`` with ``non_kv_cache_memory =
  weights + torch peak increase during profile_run + non-torch increase since the instance started``
  (``memory_profiling``). The CUDA context and the NCCL communicators exist before the baseline snapshot,
  so they are *outside* the share, and so are the CUDA graphs, captured after the KV cache is allocated
  (``compile_or_warm_up_model``: "memory_profiling does not consider CUDAGraph memory size").
* ``profile_run`` is one forward of ``max_num_batched_tokens`` dummy tokens (no KV cache written yet) and a
  dummy sampler run over ``min(max_num_seqs, max_num_batched_tokens)`` requests; its torch peak above the
  weights is the "peak activation" that is reserved.
* The KV cache is paged: a block holds ``block_size`` tokens (16 by default) of one layer. A full-attention
  layer's page is ``2 * block_size * num_kv_heads * head_size * dtype_bytes`` (``AttentionSpec``); an MLA
  layer's is ``block_size * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes`` (``MLAAttentionSpec``: one
  "head" holding the compressed latent and the rotary key). With one layer type,
  ``num_blocks = available // page_size // num_layers`` (``get_num_blocks``); "GPU KV cache size" is
  ``num_blocks * block_size`` tokens; "Maximum concurrency" is ``num_blocks / cdiv(max_model_len, block_size)``.
  With sliding-window and full layers (the hybrid KV cache manager), layers are grouped by type into groups
  of ``min(layers per type)`` layers, the groups share ``group_size`` pools, and a sliding layer needs only
  ``cdiv(min(window - 1 + max_num_batched_tokens, max_model_len), block_size) + 1`` blocks per request.
* Sleep mode (``enable_sleep_mode``, ``LLM.sleep(level)``, ``CuMemAllocator``): level 1 offloads the weights
  to CPU memory and discards the KV cache; level 2 discards both (the model's buffers are kept on the CPU).
  Either way, what the CuMem pools held is returned to the GPU; the CUDA context, CUDA graphs and blocks the
  torch caching allocator keeps outside the pools stay.

trainmem's assumptions (not measured here; override them with the figures of your own vLLM log):

* the peak activation of ``profile_run`` is estimated as one decoder layer's no-grad forward over
  ``max_num_batched_tokens`` tokens without attention (the profile forward has no attention metadata),
  plus the residual stream and the sampler's fp32 logits and sort buffers (``SAMPLER_BYTES_PER_LOGIT``);
  vLLM logs the real figure as "torch peak memory increase";
* CUDA graph memory is 0 unless given (vLLM logs it: "Graph capturing finished ... took X GiB");
* the non-torch increase (NCCL buffers, attention backends' workspaces) is 0 unless given;
* the weights are the architecture's parameters in the model dtype (vLLM logs "Model loading took X GiB").
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from ..architecture import Architecture
from ..errors import FieldError
from .kv_cache import layer_cache_shapes

DEFAULT_BLOCK_SIZE = 16
"""``CacheConfig.block_size`` default on CUDA."""
SAMPLER_BYTES_PER_LOGIT = 4 + 4 + 8 + 4
"""Assumption: the dummy sampler run's fp32 logits, the sorted values (fp32) and indices (int64) of top-k/top-p,
and fp32 probabilities, per (request, vocabulary entry)."""
SLEEP_LEVELS = (0, 1, 2)


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value <= 1):
        raise FieldError("gpu_memory_utilization", f"must be a number in (0, 1], got {value!r}")
    return float(value)


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise FieldError(name, f"must be a positive integer, got {value!r}")
    return value


def requested_bytes(gpu_memory_bytes: int, gpu_memory_utilization: float) -> int:
    """``total_memory * gpu_memory_utilization``: the share of the GPU this vLLM instance may use."""
    return int(_positive("gpu_memory_bytes", gpu_memory_bytes) * _fraction(gpu_memory_utilization))


def vllm_colocated_bytes(
    gpu_memory_bytes: int, gpu_memory_utilization: float, sleep_level: int = 0, *, kept_while_asleep_bytes: int = 0
) -> int:
    """GPU memory a colocated vLLM engine holds while the trainer trains (TRL's ``vllm_mode="colocate"``).

    ``sleep_level`` 0 (no sleep mode): its whole share, ``gpu_memory_bytes * gpu_memory_utilization``, stays
    allocated (weights and the preallocated KV cache pool). 1 or 2 (``enable_sleep_mode`` and ``llm.sleep``):
    the pools are released; ``kept_while_asleep_bytes`` is what stays (CUDA graphs, blocks outside the
    CuMem pools: not modelled, 0 by default). The CUDA context is the process's, not counted here.
    """
    if sleep_level not in SLEEP_LEVELS:
        raise FieldError("sleep_level", f"must be 0 (no sleep), 1 or 2, got {sleep_level!r}")
    share = requested_bytes(gpu_memory_bytes, gpu_memory_utilization)
    if sleep_level == 0:
        return share
    return max(0, int(kept_while_asleep_bytes))


def vllm_sleep_host_bytes(weights_bytes: int, sleep_level: int) -> int:
    """CPU memory sleep mode uses: level 1 keeps the weights in (pinned) host memory; level 2 discards them
    (only the model's buffers are copied to the CPU: not counted)."""
    if sleep_level not in SLEEP_LEVELS:
        raise FieldError("sleep_level", f"must be 0 (no sleep), 1 or 2, got {sleep_level!r}")
    return weights_bytes if sleep_level == 1 else 0


@dataclass(frozen=True)
class KVCacheLayout:
    """How vLLM pages the KV cache of a model (``KVCacheSpec`` per layer, grouped)."""

    page_bytes_per_layer: int
    """One block of one layer: ``page_size_bytes``."""
    group_size: int
    """Layers per KV cache group (all layers with one layer type)."""
    groups: dict[str, int]
    """Layer type -> number of groups of that type."""
    sliding_window: Optional[int]


def kv_cache_layout(arch: Architecture, kv_dtype_bytes: int, block_size: int = DEFAULT_BLOCK_SIZE, tensor_parallel_size: int = 1) -> KVCacheLayout:
    """The page size and the groups (see the module docstring). Heads are split over tensor-parallel ranks
    (at least one KV head per rank, as vLLM replicates them); MLA's latent is not split."""
    shapes = layer_cache_shapes(arch)
    types = Counter(shape.kind if shape.kind != "latent" else "full" for shape in shapes)
    first = shapes[0]
    if first.kind == "latent":
        page = block_size * first.elements_per_token * kv_dtype_bytes
    else:
        kv_heads = max(1, arch.kv_heads // tensor_parallel_size)
        page = 2 * block_size * kv_heads * arch.resolved_head_dim * kv_dtype_bytes
    group_size = min(types.values())
    groups = {kind: math.ceil(count / group_size) for kind, count in types.items()}
    window = next((shape.window for shape in shapes if shape.window is not None), None)
    return KVCacheLayout(page, group_size, groups, window)


@dataclass(frozen=True)
class VllmMemory:
    """One vLLM instance on one GPU, after start-up."""

    requested_bytes: int
    """``gpu_memory_bytes * gpu_memory_utilization``."""
    parts: dict[str, int]
    """Within the requested share: "weights", "activation profile peak", "non-torch", "KV cache"
    (the remainder); outside it: "CUDA graphs"."""
    num_gpu_blocks: int
    kv_cache_tokens: int
    """"GPU KV cache size: N tokens"."""
    max_concurrency: float
    """"Maximum concurrency for max_model_len tokens per request"."""
    block_size: int
    assumptions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def total_bytes(self) -> int:
        return sum(self.parts.values())


def vllm_memory(
    arch: Architecture,
    dtype: str,
    gpu_memory_bytes: int,
    gpu_memory_utilization: float = 0.9,
    max_model_len: Optional[int] = None,
    max_num_seqs: int = 256,
    block_size: int = DEFAULT_BLOCK_SIZE,
    *,
    max_num_batched_tokens: int = 8192,
    kv_cache_dtype: Optional[str] = None,
    tensor_parallel_size: int = 1,
    weights_bytes: Optional[int] = None,
    activation_peak_bytes: Optional[int] = None,
    non_torch_bytes: int = 0,
    cuda_graph_bytes: int = 0,
    available_kv_cache_bytes: Optional[int] = None,
) -> VllmMemory:
    """vLLM's start-up arithmetic for one GPU (see the module docstring for what is vLLM's and what is assumed).

    ``dtype``: the model dtype (``bf16``, ``fp16``, ``fp32``); ``kv_cache_dtype``: ``fp8`` or the model dtype
    (vLLM's ``auto``). ``weights_bytes``, ``activation_peak_bytes``, ``non_torch_bytes``,
    ``cuda_graph_bytes``: figures from a vLLM log replace trainmem's estimates; ``available_kv_cache_bytes``
    ("Available KV cache memory") replaces the whole budget computation.
    """
    from ..tape import DTYPE_BYTES

    if dtype not in ("bf16", "fp16", "fp32"):
        raise FieldError("dtype", f"must be bf16, fp16 or fp32, got {dtype!r}")
    if kv_cache_dtype not in (None, "auto", "fp8", "bf16", "fp16", "fp32"):
        raise FieldError("kv_cache_dtype", f"must be auto, fp8, bf16, fp16 or fp32, got {kv_cache_dtype!r}")
    _positive("max_num_seqs", max_num_seqs)
    _positive("block_size", block_size)
    _positive("max_num_batched_tokens", max_num_batched_tokens)
    _positive("tensor_parallel_size", tensor_parallel_size)
    max_model_len = arch.max_position_embeddings if max_model_len is None else _positive("max_model_len", max_model_len)
    if max_model_len > arch.max_position_embeddings:
        raise FieldError(
            "max_model_len", f"{max_model_len} exceeds the model's max_position_embeddings ({arch.max_position_embeddings})"
        )
    requested = requested_bytes(gpu_memory_bytes, gpu_memory_utilization)
    dtype_bytes = DTYPE_BYTES[dtype]
    kv_bytes = DTYPE_BYTES[dtype if kv_cache_dtype in (None, "auto") else kv_cache_dtype]
    assumptions = []
    if weights_bytes is None:
        from ..inventory import build_inventory

        weights_bytes = build_inventory(arch).num_parameters * dtype_bytes // tensor_parallel_size
        assumptions.append("weights: the architecture's parameters in the model dtype (split evenly over TP ranks)")
    if activation_peak_bytes is None:
        activation_peak_bytes = profile_activation_bytes(arch, dtype, max_num_batched_tokens, max_num_seqs, tensor_parallel_size)
        assumptions.append("activation profile peak: trainmem's estimate of profile_run (one layer without attention, "
                           "the residual stream, the sampler's fp32 logits and sort buffers)")
    if available_kv_cache_bytes is None:
        available_kv_cache_bytes = requested - weights_bytes - activation_peak_bytes - non_torch_bytes
    if available_kv_cache_bytes <= 0:
        raise FieldError(
            "gpu_memory_utilization",
            f"leaves no memory for the KV cache: {requested:,} bytes requested, "
            f"{weights_bytes + activation_peak_bytes + non_torch_bytes:,} taken by weights, activations and non-torch memory",
        )
    layout = kv_cache_layout(arch, kv_bytes, block_size, tensor_parallel_size)
    num_blocks = int(available_kv_cache_bytes // layout.page_bytes_per_layer // layout.group_size)
    total_groups = sum(layout.groups.values())
    tokens = num_blocks // total_groups * block_size
    blocks_per_request = 0
    for kind, count in layout.groups.items():
        if kind == "sliding" and layout.sliding_window is not None:
            needed = min(layout.sliding_window - 1 + max_num_batched_tokens, max_model_len)
            per_group = math.ceil(needed / block_size) + 1
        else:
            per_group = math.ceil(max_model_len / block_size)
        blocks_per_request += per_group * count
    concurrency = num_blocks / blocks_per_request
    if total_groups == 1:
        tokens = num_blocks * block_size
    parts = {
        "weights": weights_bytes,
        "activation profile peak": activation_peak_bytes,
        "non-torch": non_torch_bytes,
        "KV cache": num_blocks * layout.page_bytes_per_layer * layout.group_size,
        "CUDA graphs": cuda_graph_bytes,
    }
    return VllmMemory(
        requested_bytes=requested,
        parts={name: value for name, value in parts.items() if value},
        num_gpu_blocks=num_blocks,
        kv_cache_tokens=tokens,
        max_concurrency=concurrency,
        block_size=block_size,
        assumptions=tuple(assumptions),
    )


def profile_activation_bytes(
    arch: Architecture, dtype: str, max_num_batched_tokens: int, max_num_seqs: int, tensor_parallel_size: int = 1
) -> int:
    """trainmem's estimate of the torch peak of ``profile_run`` above the weights (an assumption: see the module
    docstring). The MLP of ``max_num_batched_tokens`` tokens dominates: vLLM's fused ``gate_up_proj`` output
    (2 × intermediate) and the activated half, next to the residual stream and its normed copy."""
    from ..tape import DTYPE_BYTES

    dtype_bytes = DTYPE_BYTES[dtype]
    tokens = max_num_batched_tokens
    width = max(arch.intermediate_size, arch.dense_intermediate_size or 0) // tensor_parallel_size
    if arch.is_moe:
        width = max(width, arch.num_experts_per_tok * arch.intermediate_size // tensor_parallel_size)
    mlp = tokens * 3 * width * dtype_bytes
    stream = 3 * tokens * arch.hidden_size * dtype_bytes  # hidden states, residual, normed input
    requests = min(max_num_seqs, max_num_batched_tokens)
    sampler = requests * arch.vocab_size * (dtype_bytes + SAMPLER_BYTES_PER_LOGIT)
    return max(mlp + stream, stream + sampler)
