"""trainmem.measure: what PyTorch really allocates in one training step (the ground truth).

Install with ``pip install trainmem[measure]`` (torch, transformers, peft). Run as
``python -m trainmem.measure SETUP.json`` or ``trainmem measure SETUP.json``; from Python,
``trainmem.measure.measure(setup, fake=False)`` returns a
:class:`~trainmem.measure.record.Measurement`.

What is measured
----------------
The model is built from its config with ``transformers`` (random weights, nothing is
downloaded) and trained for real: one warm-up step so that optimizer state exists, then
one measured step of exactly this loop (the loop ``trainmem.estimate`` simulates)::

    ids = torch.randint(0, vocab_size, (micro_batch_size, sequence_length))  # before the step
    for micro_batch in range(gradient_accumulation_steps):                   # G micro-batches
        with torch.autocast(device, dtype):          # amp-bf16 / amp-fp16 only
            loss = model(input_ids=ids, labels=ids).loss   # output object dropped: logits
                                                           # are freed before backward
        (loss / G).backward()                        # outside autocast
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

with ``config.use_cache = False``, the model in ``train()`` mode (dropout as configured:
GPT-2's 0.1), and the setup's precision recipe, optimizer and implementation,
activation checkpointing (non-reentrant), attention implementation and peft LoRA.

How it is counted
-----------------
A ``TorchDispatchMode`` (:mod:`~trainmem.measure.tracker`) sees every aten op and
counts the storages of their outputs until they are freed: live tensor bytes, views
counted once. Afterwards each storage gets one of the Report's five categories by what it
finally was (:mod:`~trainmem.measure.accounting`), and the log is replayed for the peak,
the breakdown at the peak, per-phase peaks and a timeline. On CUDA the allocator's
``max_memory_allocated``/``max_memory_reserved`` are recorded too. Under
``FakeTensorMode`` (``fake=True``, :mod:`~trainmem.measure.fake`) the same step runs on
tensors without data: a 7B-parameter step is counted in seconds, and on small models fake
and real runs agree to the byte.

Distributed runs
----------------
With ``parallelism.num_gpus`` of 2–4, :func:`trainmem.measure.distributed.measure_distributed`
(and ``trainmem measure``) launches that many local ranks on gloo and measures each: DDP,
FSDP2 (``fully_shard``), DTensor tensor parallelism and DeepSpeed ZeRO 1–3
(:mod:`~trainmem.measure.frameworks`). The tracker then runs from before the model is built,
so that buffers a framework allocates while it wraps the model are seen, and storages are
labelled by the framework attribute that owns them. One record per rank. With
``parallelism.pipeline_schedule`` set, the ranks run ``torch.distributed.pipelining``
(:mod:`~trainmem.measure.pipelining`: the model split by layers into ``PipelineStage`` modules,
GPipe, 1F1B or interleaved 1F1B).

Only the modules that run the step import torch; :mod:`~trainmem.measure.record`,
:mod:`~trainmem.measure.corpus`, :mod:`~trainmem.measure.events` and
:mod:`~trainmem.measure.accounting` do not, so the committed corpus can be read anywhere.
"""

from __future__ import annotations

from typing import Any

__all__ = ["measure", "Measurement", "load_corpus"]


def __getattr__(name: str) -> Any:
    if name == "measure":
        from .runner import measure

        return measure
    if name == "Measurement":
        from .record import Measurement

        return Measurement
    if name == "load_corpus":
        from .corpus import load_corpus

        return load_corpus
    raise AttributeError(f"module 'trainmem.measure' has no attribute {name!r}")
