"""The measured generation corpus (``trainmem/data/corpus_generation.jsonl``) against the model:
:func:`validate_generation`, and the list of cases it was measured from (:func:`generation_cases`).

Run ``python -m trainmem.inference.validate`` (no torch needed) to print each case's measured and
predicted peak of ``generate`` above the weights; it exits 1 when the corpus is outside the gate
(median error <= 2 %, max <= 5 %, the same gate as ``trainmem validate``).
"""

from __future__ import annotations

import json
import statistics
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterable, Optional

from .record import GenerationCase, GenerationMeasurement

CORPUS_FILENAME = "corpus_generation.jsonl"
MEDIAN_GATE = 0.02
MAX_GATE = 0.05

TINY_LLAMA = {
    "model_type": "llama",
    "vocab_size": 2048,
    "hidden_size": 128,
    "intermediate_size": 352,
    "num_hidden_layers": 6,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
}
TINY_QWEN2 = {
    "model_type": "qwen2",
    "vocab_size": 3072,
    "hidden_size": 128,
    "intermediate_size": 384,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": True,
}


TINY_MISTRAL_SLIDING = {
    "model_type": "mistral",
    "vocab_size": 2048,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 2048,
    "sliding_window": 40,
    "tie_word_embeddings": False,
}


def generation_cases() -> list[GenerationCase]:
    """The measured grid: tiny Llama (multi-head attention) and Qwen2 (grouped-query, tied embeddings), two
    prompt and two completion lengths, batch 1 and 4, greedy and sampling (transformers' default top_k=50
    warper), bf16 SDPA; plus eager attention, fp32, and a Mistral whose sliding window (40) is crossed."""
    cases = []
    for name, config in (("llama", TINY_LLAMA), ("qwen2", TINY_QWEN2)):
        for batch in (1, 4):
            for prompt in (16, 128):
                for completion in (8, 64):
                    for sample in (False, True):
                        mode = "sample" if sample else "greedy"
                        cases.append(
                            GenerationCase(
                                id=f"gen-{name}-b{batch}-p{prompt}-c{completion}-{mode}",
                                hf_config=config,
                                batch_size=batch,
                                prompt_tokens=prompt,
                                completion_tokens=completion,
                                do_sample=sample,
                            )
                        )
    cases.append(
        GenerationCase(
            id="gen-llama-b4-p128-c32-greedy-eager", hf_config=TINY_LLAMA, attention="eager", batch_size=4,
            prompt_tokens=128, completion_tokens=32,
        )
    )
    cases.append(
        GenerationCase(
            id="gen-llama-b2-p64-c48-sample-fp32", hf_config=TINY_LLAMA, dtype="fp32", batch_size=2,
            prompt_tokens=64, completion_tokens=48, do_sample=True,
        )
    )
    for prompt, completion in ((16, 64), (96, 24)):
        cases.append(
            GenerationCase(
                id=f"gen-mistral-sliding40-b2-p{prompt}-c{completion}-greedy", hf_config=TINY_MISTRAL_SLIDING,
                batch_size=2, prompt_tokens=prompt, completion_tokens=completion,
            )
        )
    return cases


def corpus_path() -> Path:
    return Path(str(resources.files("trainmem").joinpath("data").joinpath(CORPUS_FILENAME)))


def load_generation_corpus(path: Optional[Path] = None) -> list[GenerationMeasurement]:
    file = path or corpus_path()
    if not file.exists():
        return []
    return [GenerationMeasurement.model_validate_json(line) for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_generation_corpus(measurements: Iterable[GenerationMeasurement], path: Path) -> None:
    lines = [json.dumps(m.model_dump(mode="json"), separators=(",", ":")) for m in sorted(measurements, key=lambda m: m.case.id)]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@dataclass(frozen=True)
class CaseResult:
    id: str
    measured_bytes: int
    predicted_bytes: int
    measured_kv_bytes: int
    predicted_kv_bytes: int

    @property
    def error(self) -> float:
        return (self.predicted_bytes - self.measured_bytes) / self.measured_bytes


def predict(measurement: GenerationMeasurement) -> CaseResult:
    from ..plan import Plan
    from ..setup import Setup
    from .generation import hf_generation_phase

    case = measurement.case
    plan = Plan(Setup.model_validate(case.setup_dict()))
    phase = hf_generation_phase(
        plan, case.batch_size, case.prompt_tokens, case.completion_tokens,
        do_sample=case.do_sample, top_k=case.generation_kwargs.get("top_k", 50) if case.do_sample else None,
    )
    return CaseResult(case.id, measurement.peak_bytes, phase.peak_bytes, measurement.kv_cache_bytes, phase.kv_cache_bytes)


@dataclass(frozen=True)
class GenerationValidation:
    results: list[CaseResult]

    @property
    def median_abs_error(self) -> float:
        return statistics.median(abs(r.error) for r in self.results) if self.results else 0.0

    @property
    def max_abs_error(self) -> float:
        return max((abs(r.error) for r in self.results), default=0.0)

    @property
    def within_gate(self) -> bool:
        return self.median_abs_error <= MEDIAN_GATE and self.max_abs_error <= MAX_GATE


def validate_generation(path: Optional[Path] = None) -> GenerationValidation:
    return GenerationValidation([predict(m) for m in load_generation_corpus(path)])


def main(argv: Optional[list[str]] = None) -> int:
    result = validate_generation()
    for r in result.results:
        print(f"{r.id:45} measured {r.measured_bytes:>11,}  predicted {r.predicted_bytes:>11,}  {r.error:+7.2%}"
              f"  kv {r.measured_kv_bytes:>10,} / {r.predicted_kv_bytes:>10,}")
    print(f"{len(result.results)} cases: median |error| {result.median_abs_error:.2%}, max {result.max_abs_error:.2%} "
          f"(gate {MEDIAN_GATE:.0%} / {MAX_GATE:.0%}): {'within' if result.within_gate else 'OUTSIDE'}")
    return 0 if result.within_gate else 1


if __name__ == "__main__":
    sys.exit(main())
