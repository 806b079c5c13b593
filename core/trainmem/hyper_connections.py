"""Qwen4-Exp's additions to a hybrid decoder: hyper-connections, per-layer n-gram embeddings (PLE) and the
QSA token indexer (transformers 5.24 ``models/qwen4_exp/modular_qwen4_exp.py``).

One frozen record on :attr:`Architecture.hyper_connections`, read from ``Qwen4ExpTextConfig`` by
``trainmem.models.qwen4_exp``; ``None`` for every other model.

* **Hyper-connections** (``Qwen4ExpTextGatedResidual``): the residual stream is ``hc_count`` copies of the
  hidden state side by side, (b, s, hc·h) (``hidden_states.repeat(1, 1, hc_count)`` after the embedding);
  before each sub-block a grouped RMSNorm over the streams, a low-rank (``hc_lowrank``) sigmoid mix
  of them and their mean make the sub-block's (b, s, h) input; ``block_inject_weight`` (hc·h → hc) weighs
  the sub-block's output back into each stream. The model ends with one more mixer
  (``hyper_connection_mixer``, no inject weight) instead of a final norm.
* **PLE** (``Qwen4ExpTextPLELayer``) on the layers of ``ple_layer_ids`` (one-indexed, linear-attention
  layers only): hashed 2..``ngram_size``-gram ids, ``heads_per_ngram`` heads per order, each head a
  distinct prime-sized table (the n-th prime above ``ngram_vocab_size_base``) concatenated into one
  ``nn.Embedding`` padded to ``make_ngram_vocab_size_divisible_by`` rows, of width ``ple_embed_dim`` /
  heads; key (ple → hc·h) and value (ple → h) projections, three grouped norms and a dilated depthwise
  conv (kernel ``ple_conv_kernel_size``, dilation ``ngram_size``) over the hc·h stream.
* **QSA indexer** (``Qwen4ExpTextQSAIndexer``) on every attention layer when ``indexer_n_heads`` is set:
  ``index_qk_proj`` (h → (heads + 1)·d_idx) and two per-head norms. Its only output is a boolean token
  mask (top-k of ReLU scores), so no gradient reaches its parameters.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from ._base import FrozenModel


class HyperConnections(FrozenModel):
    """The sizes ``Qwen4ExpTextConfig`` gives its hyper-connections, PLE modules and QSA indexer."""

    streams: PositiveInt = Field(description="hc_count: residual streams of hidden_size each (> 1).")
    rank: PositiveInt = Field(description="hc_lowrank: the input mixer's low rank.")
    ple_embed_dim: PositiveInt = Field(description="Width of the concatenated n-gram embedding of a PLE layer.")
    ple_conv_kernel_size: PositiveInt = 4
    ngram_size: PositiveInt = Field(default=3, description="Largest n-gram order (also the PLE conv's dilation).")
    heads_per_ngram: PositiveInt = 8
    ngram_vocab_size_base: PositiveInt = 20_000_000
    ngram_vocab_divisor: PositiveInt = Field(default=128, description="make_ngram_vocab_size_divisible_by.")
    indexer_heads: NonNegativeInt = Field(default=0, description="indexer_n_heads (0: no QSA indexer).")
    indexer_head_dim: NonNegativeInt = 0
    indexer_budget: NonNegativeInt = 0
    indexer_compress_ratio: NonNegativeInt = 0
    output_gate: Literal["sigmoid", "silu"] = Field(
        default="silu", description="The Gated DeltaNet's gated-norm activation (output_gate_type, else hidden_act)."
    )

    @property
    def ngram_heads(self) -> int:
        """(ngram_size − 1) · heads_per_ngram tables per PLE layer."""
        return (self.ngram_size - 1) * self.heads_per_ngram

    @property
    def ngram_head_dim(self) -> int:
        return self.ple_embed_dim // self.ngram_heads

    def ngram_rows(self, ple_index: int) -> int:
        """Rows of the ``ngram_embedding`` of the ``ple_index``-th PLE layer (``Qwen4ExpTextNGramEmbedding``:
        head j of that layer has the (ple_index·heads + j + 1)-th prime above ``ngram_vocab_size_base − 1``
        rows; their sum is rounded up to the divisor)."""
        primes = _primes_above(self.ngram_vocab_size_base - 1, (ple_index + 1) * self.ngram_heads)
        total = sum(primes[ple_index * self.ngram_heads:])
        return math.ceil(total / self.ngram_vocab_divisor) * self.ngram_vocab_divisor


@lru_cache(maxsize=32)
def _primes_above(start: int, count: int) -> tuple[int, ...]:
    """The first ``count`` primes greater than ``start`` (``_find_nth_prime_after`` for n = 1..count)."""
    primes: list[int] = []
    candidate = start
    while len(primes) < count:
        candidate += 1
        if _is_prime(candidate):
            primes.append(candidate)
    return tuple(primes)


_WITNESSES = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37)
"""Miller–Rabin with these bases decides primality exactly below 3.3·10^24 (Sorenson & Webster 2015): the same
answer as transformers' trial division (``_is_prime``), in microseconds for any size the config may give."""


def _is_prime(value: int) -> bool:
    if value < 2:
        return False
    for small in _WITNESSES:
        if value % small == 0:
            return value == small
    odd, twos = value - 1, 0
    while odd % 2 == 0:
        odd, twos = odd // 2, twos + 1
    for base in _WITNESSES:
        x = pow(base, odd, value)
        if x in (1, value - 1):
            continue
        for _ in range(twos - 1):
            x = x * x % value
            if x == value - 1:
                break
        else:
            return False
    return True
