"""Inference memory: the KV cache, Hugging Face ``generate``, and a vLLM engine (README "Inference memory").

* :mod:`trainmem.inference.kv_cache`: ``kv_cache_bytes``, ``kv_cache_bytes_by_layer`` — per layer, as
  transformers 5.24's ``DynamicCache`` keeps it (full, sliding/chunked, MLA latent);
* :mod:`trainmem.inference.generation`: ``hf_generation_phase`` — the peak of ``model.generate`` above the
  weights, with its parts, validated against ``corpus_generation.jsonl``;
* :mod:`trainmem.inference.vllm`: ``vllm_memory``, ``vllm_colocated_bytes`` — vLLM's start-up arithmetic and a
  colocated engine's share, from vLLM's source.
"""

from .generation import GenerationPhase, hf_generation_phase
from .kv_cache import kv_cache_bytes, kv_cache_bytes_by_layer
from .vllm import VllmMemory, vllm_colocated_bytes, vllm_memory

__all__ = [
    "GenerationPhase",
    "VllmMemory",
    "hf_generation_phase",
    "kv_cache_bytes",
    "kv_cache_bytes_by_layer",
    "vllm_colocated_bytes",
    "vllm_memory",
]
