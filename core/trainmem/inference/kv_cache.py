"""The key/value cache of autoregressive decoding, layer by layer, as transformers 5.24 keeps it.

``generate`` builds a ``DynamicCache(config=model.config.get_text_config(decoder=True))``
(``GenerationMixin._prepare_cache_for_generation``), whose layers come from the config's
``layer_types`` (``get_layer_types_and_kwargs`` and ``DYNAMIC_LAYER_TYPE_MAPPING`` in
transformers/cache_utils.py):

* ``full_attention`` -> ``DynamicLayer``: keys and values of every token, each
  ``(batch, num_key_value_heads, tokens, head_dim)`` in the dtype of the projections; grown by
  ``torch.cat`` on every ``update``. Grouped-query and multi-query attention only change
  ``num_key_value_heads``: the cache holds the K/V heads, not the query heads (``repeat_kv`` runs
  after the cache, per call).
* ``sliding_attention`` and ``chunked_attention`` (Llama 4's ``attention_chunk_size``) ->
  ``DynamicSlidingWindowLayer``: after each update it keeps the last ``sliding_window - 1`` tokens
  (``full_key_states[:, :, -self.sliding_window + 1:, :]``, a view of the concatenation: the
  storage that stays alive is that of the concatenation, ``min(old, window - 1) + new`` tokens).
  It also holds its window as a one-element int64 tensor (``_sliding_window_tensor``: 8 bytes).
* multi-head latent attention (DeepSeek-V2/V3, ``modeling_deepseek_v3.py``
  ``DeepseekV3Attention.forward``: "Cache read / write is performed while latent KV is still
  compressed"): the cache's "keys" are the normed latent ``(batch, 1, tokens, kv_lora_rank)`` and its
  "values" the shared rotary key ``(batch, 1, tokens, qk_rope_head_dim)``. The per-head keys and
  values (``kv_b_proj`` of the latent) are rebuilt on every forward by ``expand_kv`` and are
  transients, not cache. vLLM's MLA cache holds the same ``kv_lora_rank + qk_rope_head_dim`` per
  token (``MLAAttentionSpec``), so the two agree.
* NoPE layers (Llama 4's ``no_rope_layers``) cache exactly as rotary layers do: RoPE changes the
  values in K, not its shape. gpt-oss's attention sinks are one learned logit per head (a
  parameter), not cached tokens: they add nothing to the cache.
* Linear-attention and convolution layer types (``LinearAttentionLayer``: a fixed-size recurrent
  state) exist in transformers 5.24 but in none of trainmem's families; an architecture cannot
  describe them yet.

The byte counts are those of the storages (``numel * dtype_bytes``), before the CUDA caching
allocator rounds each tensor to 512 bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping

from ..architecture import Architecture
from ..errors import FieldError

SLIDING_WINDOW_TENSOR_BYTES = 8
"""``DynamicSlidingWindowLayer._sliding_window_tensor``: ``torch.tensor(sliding_window, dtype=torch.long)``."""

CacheKind = Literal["full", "sliding", "latent"]


@dataclass(frozen=True)
class LayerCacheShape:
    """What one decoder layer's cache holds per token of one sequence."""

    layer: int
    kind: CacheKind
    key_elements_per_token: int
    """Elements of the cached "keys" per token: num_key_value_heads * head_dim (MLA: kv_lora_rank)."""
    value_elements_per_token: int
    """Elements of the cached "values" per token: num_key_value_heads * head_dim (MLA: qk_rope_head_dim)."""
    window: int | None = None
    """Sliding or chunked layers: the window (the cache keeps ``window - 1`` tokens between updates)."""

    @property
    def elements_per_token(self) -> int:
        return self.key_elements_per_token + self.value_elements_per_token

    def stored_tokens(self, cached_before: int, new_tokens: int) -> int:
        """Tokens of the storage an ``update`` of ``new_tokens`` leaves alive (the concatenation; a sliding
        layer keeps a view of it, so the whole concatenation stays allocated)."""
        if self.window is None:
            return cached_before + new_tokens
        return min(cached_before, self.window - 1) + new_tokens


def layer_cache_shapes(arch: Architecture) -> list[LayerCacheShape]:
    """The cache layout of every decoder layer of ``arch`` (see the module docstring)."""
    if arch.cross_attention:  # an encoder-decoder also caches the cross-attention K/V of the source
        raise FieldError("model", f"the KV cache of an encoder-decoder ({arch.model_type}) is not modelled yet")
    if arch.linear_attention_layers or arch.mlp_only_layers:  # Gated DeltaNet / Mamba-2 caches hold conv and SSM states
        raise FieldError(
            "model", f"the cache of {arch.model_type}'s linear-attention / Mamba-2 layers (conv and recurrent states) is not modelled yet"
        )
    sliding = frozenset(arch.window_layers())
    shapes = []
    for index in range(arch.num_hidden_layers):
        if arch.is_mla:
            shapes.append(LayerCacheShape(index, "latent", arch.kv_lora_rank or 0, arch.qk_rope_head_dim))
            continue
        width = arch.kv_heads * arch.resolved_head_dim
        if index in sliding:
            shapes.append(LayerCacheShape(index, "sliding", width, width, arch.sliding_window))
        else:
            shapes.append(LayerCacheShape(index, "full", width, width))
    return shapes


def _check(batch_size: Any, tokens: Any, dtype_bytes: Any) -> None:
    for field, value in (("batch_size", batch_size), ("tokens", tokens), ("dtype_bytes", dtype_bytes)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise FieldError(field, f"must be an integer, got {type(value).__name__}")
    if batch_size < 1:
        raise FieldError("batch_size", f"must be at least 1, got {batch_size}")
    if tokens < 0:
        raise FieldError("tokens", f"must be 0 or more, got {tokens}")
    if dtype_bytes not in (1, 2, 4):
        raise FieldError("dtype_bytes", f"must be 1 (fp8), 2 (bf16/fp16) or 4 (fp32), got {dtype_bytes}")


def kv_cache_bytes_by_layer(
    arch: Architecture, batch_size: int, tokens: int, dtype_bytes: int, *, last_forward_tokens: int = 1
) -> list[int]:
    """Bytes each layer's ``DynamicCache`` layer holds once ``tokens`` tokens of ``batch_size`` sequences
    have been cached, between forwards, in layer order.

    ``last_forward_tokens``: how many of them the last forward added (1 while decoding; the prompt length
    right after the prefill). It matters for sliding-window layers only: they keep a view of the last
    ``window - 1`` tokens of the concatenation, so the storage alive is ``min(tokens - last, window - 1) +
    last`` tokens (``window`` while decoding, the whole prompt after a long prefill).
    """
    _check(batch_size, tokens, dtype_bytes)
    if isinstance(last_forward_tokens, bool) or not isinstance(last_forward_tokens, int) or not (
        1 <= last_forward_tokens <= max(tokens, 1)
    ):
        raise FieldError("last_forward_tokens", f"must be an integer from 1 to tokens ({tokens}), got {last_forward_tokens!r}")
    out = []
    for shape in layer_cache_shapes(arch):
        stored = shape.stored_tokens(tokens - last_forward_tokens, last_forward_tokens) if tokens else 0
        extra = SLIDING_WINDOW_TENSOR_BYTES if shape.kind == "sliding" else 0
        out.append(batch_size * stored * shape.elements_per_token * dtype_bytes + extra)
    return out


def kv_cache_bytes(
    arch: Architecture, batch_size: int, tokens: int, dtype_bytes: int, *, last_forward_tokens: int = 1
) -> int:
    """Bytes of the whole cache after ``tokens`` tokens: ``sum(kv_cache_bytes_by_layer(...))``.

    A full-attention layer holds ``2 * batch * num_key_value_heads * tokens * head_dim * dtype_bytes``; an
    MLA layer ``batch * tokens * (kv_lora_rank + qk_rope_head_dim) * dtype_bytes``; a sliding-window layer
    at most ``window`` tokens while decoding (see :func:`kv_cache_bytes_by_layer`).
    """
    return sum(kv_cache_bytes_by_layer(arch, batch_size, tokens, dtype_bytes, last_forward_tokens=last_forward_tokens))


def cache_architecture(arch: Architecture, hf_config: Mapping[str, Any] | None = None) -> Architecture:
    """``arch`` with the sliding-window layers the cache sees, from the config as transformers reads it.

    Most family readers record the window in the Architecture. gpt-oss's does not (its window is a
    mask to the training step), so where ``hf_config`` has ``layer_types`` marking sliding or chunked
    layers and the Architecture has none, they are taken from the config as
    ``get_layer_types_and_kwargs`` does: ``layer_types`` with ``sliding_window`` (or
    ``attention_chunk_size`` for chunked layers). Without a ``layer_types`` list the class default
    applies (gpt-oss: alternating, sliding first, window 128).
    """
    if arch.window_layers() or hf_config is None:
        return arch
    config = hf_config.get("text_config") if isinstance(hf_config.get("text_config"), Mapping) else hf_config
    layer_types = config.get("layer_types")
    window = config.get("sliding_window", _CLASS_DEFAULT_WINDOW.get(arch.model_type))
    if layer_types is None and arch.model_type in _CLASS_DEFAULT_WINDOW:
        layer_types = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(arch.num_hidden_layers)]
    if not isinstance(layer_types, list) or len(layer_types) != arch.num_hidden_layers:
        return arch
    chunk = config.get("attention_chunk_size")
    sliding = tuple(i for i, kind in enumerate(layer_types) if kind == "sliding_attention")
    chunked = tuple(i for i, kind in enumerate(layer_types) if kind == "chunked_attention")
    if sliding and isinstance(window, int) and window > 0:
        return arch.model_copy(update={"sliding_window": window, "sliding_layers": sliding})
    if chunked and isinstance(chunk, int) and chunk > 0:
        return arch.model_copy(update={"sliding_window": chunk, "sliding_layers": chunked})
    return arch


_CLASS_DEFAULT_WINDOW = {"gpt_oss": 128}
"""Configuration classes whose ``layer_types`` default alternates sliding and full attention though the
family's Architecture leaves the window out (``GptOssConfig``: sliding_window 128, even layers slide)."""
