"""A measured ``model.generate`` run: :class:`GenerationCase` (what ran) and :class:`GenerationMeasurement`
(what it allocated), one line of ``trainmem/data/corpus_generation.jsonl``. Plain data: no torch."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, PositiveInt

from .._base import FrozenModel


class GenerationCase(FrozenModel):
    """One ``generate`` call on a tiny model built from ``hf_config`` (random weights, eval mode)."""

    id: str
    hf_config: dict[str, Any] = Field(description="config.json fields, model_type included.")
    dtype: Literal["fp32", "bf16"] = "bf16"
    attention: Literal["sdpa", "eager"] = "sdpa"
    batch_size: PositiveInt
    prompt_tokens: PositiveInt
    completion_tokens: PositiveInt
    do_sample: bool = False
    generation_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="More generate() arguments (top_k, top_p, temperature, ...)."
    )
    seed: int = 0

    def setup_dict(self) -> dict[str, Any]:
        """The trainmem Setup whose Plan predicts this case (the model and its dtype; no training)."""
        return {
            "model": {"hf_config": self.hf_config},
            "micro_batch_size": self.batch_size,
            "sequence_length": self.prompt_tokens + self.completion_tokens,
            "precision": "fp32" if self.dtype == "fp32" else "bf16-pure",
            "attention": self.attention,
            "runtime": {"device": "cpu"},
        }


class GenerationMeasurement(FrozenModel):
    """What ``generate`` allocated above the weights and the prompt (trainmem.measure.generation)."""

    case: GenerationCase
    peak_bytes: int = Field(description="Peak of live storages created during generate.")
    peak_forward: int = Field(description="The forward call of the peak: 0 is the prefill, n the n-th decode step.")
    kv_cache_bytes: int = Field(description="Storages the DynamicCache layers hold after the last forward.")
    largest_at_peak: dict[str, int] = Field(default_factory=dict, description="'op dtype[shape]' -> bytes alive at the peak.")
    environment: dict[str, str] = Field(default_factory=dict)
