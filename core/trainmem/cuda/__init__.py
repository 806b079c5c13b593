"""CUDA memory beyond tensors: the caching allocator's reserve, what lives outside it, and the upper bound.

* :mod:`.caching_allocator` — a model of PyTorch's ``DeviceCachingAllocator``;
* :mod:`.events` / :mod:`.replay` — a simulated step's tensor-level allocations, replayed through it;
* :mod:`.outside` — the CUDA context, NCCL, torch.compile and CUDA graphs (``data/cuda_overheads.json``);
* :mod:`.memory` — allocated, reserved, total and the upper bound of one rank, for ``estimate``;
* :mod:`.settings` — the CUDA ``runtime`` fields of a Setup;
* :mod:`.gate` — the CUDA corpus gate of ``trainmem validate``.
"""
