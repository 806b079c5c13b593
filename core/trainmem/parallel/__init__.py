"""What each distributed framework allocates on a rank, as its source code does it.

One module per framework, each a set of pure functions of the :class:`~trainmem.plan.Plan`
that :mod:`trainmem.simulate` calls where the step needs them (resident buffers at the
start of the step, gathered weights around a layer, the optimizer step's flat temporaries):

* :mod:`.ddp` — PyTorch DistributedDataParallel's gradient buckets;
* :mod:`.deepspeed` — DeepSpeed 0.19 ZeRO 1/2/3: reduce buckets at their configured size,
  the stage-3 gradient-partition buffer, prefetch and persistence;
* :mod:`.fsdp` — FSDP2 (``fully_shard``) and FSDP1: which units stay unsharded, the
  all-gather buffers;
* :mod:`.host` — host RAM per node: offloaded states and gradients, pinned buffers, the
  model load, dataloader workers.

Each rule cites the file and function of the pinned framework version it follows; the
distributed corpus (``trainmem/data/corpus_distributed.jsonl``, measured with
:func:`trainmem.measure.distributed.measure_distributed`) checks them.
"""
