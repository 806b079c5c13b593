"""Measure Hugging Face ``model.generate`` on a tiny model: :func:`measure_generation`.

The model is built from a config dict (no weights downloaded), in eval mode, in ``dtype``. A batch of
random prompt ids and an all-ones attention mask are made before tracking (they are the caller's,
as the weights are). Then ``generate`` runs once under the
:class:`~trainmem.measure.tracker.StorageTracker` with the garbage collector paused, with
``max_new_tokens == min_new_tokens == completion_tokens`` and no end-of-sequence token, so that
exactly ``completion_tokens`` tokens are generated. Recorded:

* ``peak_bytes``: the peak of live tensor storages created during ``generate`` (the weights and
  the prompt are not counted: they were alive before), and the forward call (0 = prefill) where it
  happened;
* ``kv_cache_bytes``: the storages the ``DynamicCache`` layers hold after the last forward
  (``DynamicLayer.update`` is wrapped to read ``keys``/``values`` after every update);
* the largest storages alive at the peak, by op, to explain it.

Run as ``python -m trainmem.measure.generation`` to print the cases of
``trainmem/data/corpus_generation.jsonl`` measured afresh (``--write`` rewrites the file).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import gc
import platform
import sys
from collections import Counter
from typing import Any, Iterator

import torch

from ..inference.record import GenerationCase, GenerationMeasurement
from .events import ALLOC, FREE, MARK
from .tracker import StorageTracker

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def build_model(case: GenerationCase) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = dict(case.hf_config)
    model_type = fields.pop("model_type")
    config = AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(case.seed)
    model = AutoModelForCausalLM.from_config(
        config, attn_implementation=case.attention, dtype=TORCH_DTYPES[case.dtype]
    )
    return model.eval()


@contextlib.contextmanager
def _cache_probe(cache_bytes: list[int]) -> Iterator[None]:
    """Wrap the cache layers' ``update`` so that the bytes they hold are known after every forward."""
    from transformers import cache_utils

    layers: dict[int, Any] = {}
    classes = [cache_utils.DynamicLayer, cache_utils.DynamicSlidingWindowLayer]
    originals = {cls: cls.__dict__["update"] for cls in classes if "update" in cls.__dict__}

    def wrap(original):
        def update(self, key_states, value_states, *args, **kwargs):
            out = original(self, key_states, value_states, *args, **kwargs)
            layers[id(self)] = self
            held = {}
            for layer in layers.values():
                for tensor in (layer.keys, layer.values):
                    if tensor is not None:
                        storage = tensor.untyped_storage()
                        held[storage.data_ptr(), storage.nbytes()] = storage.nbytes()
                window = getattr(layer, "_sliding_window_tensor", None)
                if window is not None:
                    held[window.untyped_storage().data_ptr(), 8] = window.untyped_storage().nbytes()
            cache_bytes.append(sum(held.values()))
            return out

        return update

    for cls, original in originals.items():
        setattr(cls, "update", wrap(original))
    try:
        yield
    finally:
        for cls, original in originals.items():
            setattr(cls, "update", original)


def measure_generation(case: GenerationCase) -> GenerationMeasurement:
    """Run ``generate`` for the case and count its memory (see the module docstring)."""
    import transformers

    model = build_model(case)
    vocab = model.config.get_text_config(decoder=True).vocab_size
    generator = torch.Generator().manual_seed(case.seed)
    input_ids = torch.randint(0, vocab, (case.batch_size, case.prompt_tokens), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    kwargs = dict(
        max_new_tokens=case.completion_tokens,
        min_new_tokens=case.completion_tokens,
        do_sample=case.do_sample,
        eos_token_id=None,
        pad_token_id=0,
        **case.generation_kwargs,
    )
    if not case.do_sample:
        kwargs.update(top_k=None, top_p=None, temperature=None)
    tracker = StorageTracker()
    forward_calls = [0]

    def mark(module, args, kwargs_):
        tracker.mark("forward", f"forward {forward_calls[0]}", forward_calls[0])
        forward_calls[0] += 1

    hook = model.register_forward_pre_hook(mark, with_kwargs=True)
    cache_bytes: list[int] = []
    torch.manual_seed(case.seed)
    gc.collect()
    gc.disable()
    try:
        with torch.no_grad(), _cache_probe(cache_bytes), tracker:
            sequences = model.generate(input_ids, attention_mask=attention_mask, **kwargs)
        tracker.stop()
    finally:
        gc.enable()
        hook.remove()
    assert sequences.shape == (case.batch_size, case.prompt_tokens + case.completion_tokens), sequences.shape
    peak, peak_segment, alive_at_peak = _peak(tracker)
    forward = tracker.segments[peak_segment].micro_batch if peak_segment else -1
    by_op: Counter[str] = Counter()
    for index in alive_at_peak:
        info = tracker.storages[index]
        by_op[f"{info.op} {info.dtype}{list(info.shape)}"] += info.nbytes
    return GenerationMeasurement(
        case=case,
        peak_bytes=peak,
        peak_forward=forward,
        kv_cache_bytes=cache_bytes[-1] if cache_bytes else 0,
        largest_at_peak=dict(by_op.most_common(12)),
        environment={
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
            "device": "cpu",
            "date": datetime.date.today().isoformat(),
            "method": "TorchDispatchMode storage tracker (trainmem.measure.tracker) around model.generate",
        },
    )


def _peak(tracker: StorageTracker) -> tuple[int, int, list[int]]:
    live, peak, segment, peak_segment = 0, 0, 0, 0
    alive: set[int] = set()
    peak_alive: list[int] = []
    for kind, index, nbytes in tracker.events:
        if kind == MARK:
            segment = index
            continue
        if kind == ALLOC:
            live += nbytes
            alive.add(index)
        elif kind == FREE:
            live -= nbytes
            alive.discard(index)
        if live > peak:
            peak, peak_segment, peak_alive = live, segment, sorted(alive)
    return peak, peak_segment, peak_alive


def main(argv: list[str] | None = None) -> int:
    from ..inference.validate import corpus_path, generation_cases, load_generation_corpus, write_generation_corpus

    parser = argparse.ArgumentParser(prog="python -m trainmem.measure.generation")
    parser.add_argument("--write", action="store_true", help="rewrite corpus_generation.jsonl with fresh measurements")
    parser.add_argument("--only", default="", help="measure only the cases whose id contains this text")
    parser.add_argument("--show", action="store_true", help="print the largest storages alive at each peak")
    args = parser.parse_args(argv)
    measured = []
    for case in generation_cases():
        if args.only and args.only not in case.id:
            continue
        result = measure_generation(case)
        measured.append(result)
        print(f"{case.id}: peak {result.peak_bytes} at forward {result.peak_forward}, kv {result.kv_cache_bytes}")
        if args.show:
            for name, nbytes in result.largest_at_peak.items():
                print(f"    {nbytes:>12}  {name}")
    if args.write:
        write_generation_corpus(measured, corpus_path())
        print(f"wrote {len(measured)} cases to {corpus_path()}", file=sys.stderr)
    else:
        del load_generation_corpus
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
