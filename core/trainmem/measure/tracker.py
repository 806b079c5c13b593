"""Count live tensor storages over a training step, op by op: :class:`StorageTracker`.

The tracker is a ``TorchDispatchMode``: every aten op that reaches the dispatcher's Python
key passes through :meth:`StorageTracker.__torch_dispatch__`, after autocast and autograd
have done their work, so it sees the ops that really run (the casts autocast inserts, the
gradients the autograd engine computes, the optimizer's arithmetic). After each op it
looks at the ``untyped_storage()`` of every output tensor: a storage it has not seen is an
allocation of ``storage.nbytes()`` bytes. A weak reference on the storage object (PyTorch
keeps one Python object per live storage) fires when the storage is freed. Views share
their base's storage, so each storage is counted once, at its real size; a storage that an
op resizes is re-counted at its new size.

The result is an event log (allocations, frees and markers, in order) plus a table of
storages (size, the op that allocated it, the segment it was allocated in, dtype, shape,
role). Categories are decided afterwards by :mod:`trainmem.measure.accounting`, because a
storage's category is what it finally is (a gradient computed in backward becomes
``p.grad``) and that is only known once the step is over.

The same code counts real tensors and FakeTensors (``FakeTensorMode`` gives each fake
tensor a meta storage with the right ``nbytes``), so billion-parameter steps are counted
without memory. Memory that kernels allocate without returning it as a tensor (cuBLAS
workspaces, the scratch of fused kernels) is invisible here, as it is to ``MemTracker``.

Distributed runs add two things the single-device step never does:

* tensor subclasses that wrap other tensors (``DTensor`` under FSDP2 and tensor parallelism):
  the wrapper has no storage of its own, so the tracker counts the storages of the tensors
  it wraps (``__tensor_flatten__``), recursively. The ops a DTensor runs on its local
  tensors happen below the mode; what they leave behind is counted when it comes out.
* storages resized in place (FSDP2 frees an unsharded parameter with
  ``untyped_storage().resize_(0)`` and re-allocates it before the next all-gather,
  ``torch/distributed/fsdp/_fully_shard/_fsdp_param.py`` ``free_storage``/``alloc_storage``):
  ``UntypedStorage.resize_`` does not pass through the dispatcher, so
  :func:`tracking_storage_resizes` wraps it while a measurement runs and reports each
  resize to the tracker (:meth:`StorageTracker.storage_resized`).
* collectives on gloo stage data in buffers that its C++ code allocates below the dispatcher
  (a reduce-scatter all-reduces a full-size copy, then ops on the calling thread read and
  split it). Such a storage is first seen as an op's *input* (``untracked_input_bytes``) and
  is never counted, even when a view of it comes out of a later op: NCCL on a GPU has no such
  copies.
"""

from __future__ import annotations

import contextlib
import weakref
from collections import Counter
from typing import Any, Iterator, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

from .events import (
    ALLOC,
    FREE,
    MARK,
    ROLE_ALLOCATED,
    ROLE_AUTOCAST_WEIGHT_COPY,
    ROLE_PARAMETER,
    Segment,
    StorageInfo,
)

_LIFT_OPS = ("aten.lift_fresh", "aten.lift_fresh_copy", "aten.lift")
"""Ops that adopt a tensor built outside the dispatcher (torch.tensor(...)): their input is not an untracked read."""


class StorageTracker(TorchDispatchMode):
    """Log every storage allocation and free of the ops run while the mode is active.

    ``autocast_recipe``: the step runs under autocast, so a copy of a parameter made in
    forward or backward (an ``aten._to_copy`` whose input is a parameter's storage) is an
    autocast weight copy. (The dispatch mode cannot ask ``torch.is_autocast_enabled()``:
    autocast's own kernel excludes its dispatch key before the op reaches Python.)
    """

    def __init__(self, autocast_recipe: bool = False) -> None:
        super().__init__()
        self.autocast_recipe = autocast_recipe
        self.storages: list[StorageInfo] = []
        self.events: list[tuple[int, int, int]] = []
        self.segments: list[Segment] = [Segment("start", "start", 0)]
        self.op_counts: Counter[str] = Counter()
        self.untracked_input_bytes = 0
        self.recording = True
        self._index: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._untracked: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._refs: dict[int, weakref.ref] = {}

    # ------------------------------------------------------------------ markers and registration

    @property
    def segment(self) -> Segment:
        return self.segments[-1]

    def mark(self, phase: str, label: str, micro_batch: int) -> None:
        """Start a new segment: later events belong to (phase, label, micro_batch)."""
        if not self.recording:
            return
        self.segments.append(Segment(phase, label, micro_batch))
        self.events.append((MARK, len(self.segments) - 1, 0))

    def index_of(self, tensor: torch.Tensor) -> Optional[int]:
        """The storage index of a tensor's storage, or None if the tracker has not seen it.

        A wrapper subclass (DTensor) answers for the first tensor it wraps."""
        for plain in plain_tensors(tensor):
            return self._index.get(plain.untyped_storage())
        return None

    def register(self, tensor: torch.Tensor, role: str, op: str = "(existing)") -> int:
        """Count a tensor's storage as allocated now (once); return its index.

        A wrapper subclass (DTensor) registers the tensors it wraps; the first one's index is returned."""
        if is_traceable_wrapper_subclass(tensor):
            indices = [self.register(plain, role, op) for plain in plain_tensors(tensor)]
            return indices[0] if indices else -1
        storage = tensor.untyped_storage()
        index = self._index.get(storage)
        if index is not None:
            return index
        return self._register_storage(
            storage, role, op, str(tensor.dtype).removeprefix("torch."), tuple(int(size) for size in tensor.shape)
        )

    def storage_resized(self, storage: torch.UntypedStorage) -> None:
        """A storage was resized in place (``UntypedStorage.resize_``): re-count it at its new size."""
        if not self.recording:
            return
        index = self._index.get(storage)
        if index is None:
            if storage.nbytes():
                self._register_storage(storage, ROLE_ALLOCATED, "(storage resize_)", "uint8", (storage.nbytes(),))
            return
        self._maybe_resized(index, storage)

    def _register_storage(
        self, storage: torch.UntypedStorage, role: str, op: str, dtype: str, shape: tuple[int, ...]
    ) -> int:
        index = len(self.storages)
        nbytes = storage.nbytes()
        self.storages.append(
            StorageInfo(nbytes=nbytes, op=op, segment=len(self.segments) - 1, dtype=dtype, shape=shape, role=role)
        )
        self._index[storage] = index
        self._refs[index] = weakref.ref(storage, self._freed_callback(index))
        self.events.append((ALLOC, index, nbytes))
        return index

    def _freed_callback(self, index: int):
        def freed(_reference: weakref.ref) -> None:
            self._refs.pop(index, None)
            if self.recording:
                self.events.append((FREE, index, self.storages[index].nbytes))

        return freed

    def stop(self) -> None:
        """Stop logging: storages freed from now on are not events of the measured step."""
        self.recording = False

    # ------------------------------------------------------------------ dispatch

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: Optional[dict] = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.recording:
            self._record(func, args, kwargs, out)
        return out

    def _record(self, func: Any, args: tuple, kwargs: dict, out: Any) -> None:
        name = str(func.overloadpacket) if hasattr(func, "overloadpacket") else str(func)
        self.op_counts[name] += 1
        if name not in _LIFT_OPS:
            self._note_untracked_inputs(args, kwargs)
        role = ROLE_ALLOCATED
        if name == "aten._to_copy" and self.autocast_recipe and self._is_weight(args) and self._in_model_phase():
            role = ROLE_AUTOCAST_WEIGHT_COPY
        for tensor in _plain_outputs(out):
            if tensor.device.type == "meta":
                continue  # shape-only tensors (DeepSpeed's round-robin metadata) hold no memory
            storage = tensor.untyped_storage()
            if storage in self._untracked:
                continue  # memory allocated outside the dispatcher (gloo's staging copies): never counted
            index = self._index.get(storage)
            if index is None:
                self.register(tensor, role, op=name)
            else:
                self._maybe_resized(index, storage)

    def _in_model_phase(self) -> bool:
        return self.segment.phase not in ("optimizer", "zero_grad")

    def _is_weight(self, args: tuple) -> bool:
        source = args[0] if args else None
        if not isinstance(source, torch.Tensor):
            return False
        index = self.index_of(source)
        return index is not None and self.storages[index].role == ROLE_PARAMETER

    def _maybe_resized(self, index: int, storage: torch.UntypedStorage) -> None:
        info = self.storages[index]
        nbytes = storage.nbytes()
        if nbytes != info.nbytes:
            self.events.append((FREE, index, info.nbytes))
            info.nbytes = nbytes
            self.events.append((ALLOC, index, nbytes))

    def _note_untracked_inputs(self, args: tuple, kwargs: dict) -> None:
        for tensor in _plain_outputs((args, kwargs)):
            storage = tensor.untyped_storage()
            if storage not in self._index and storage not in self._untracked:
                self._untracked[storage] = True
                self.untracked_input_bytes += storage.nbytes()


def plain_tensors(tensor: torch.Tensor) -> Iterator[torch.Tensor]:
    """The tensors that hold ``tensor``'s memory: itself, or what a wrapper subclass wraps (recursively)."""
    if is_traceable_wrapper_subclass(tensor):
        attributes, _ = tensor.__tensor_flatten__()
        for name in attributes:
            inner = getattr(tensor, name)
            if isinstance(inner, torch.Tensor):
                yield from plain_tensors(inner)
    else:
        yield tensor


def _plain_outputs(value: Any) -> Iterator[torch.Tensor]:
    for item in tree_flatten(value)[0]:
        if isinstance(item, torch.Tensor):
            yield from plain_tensors(item)


@contextlib.contextmanager
def tracking_storage_resizes(tracker: StorageTracker) -> Iterator[None]:
    """While active, every ``UntypedStorage.resize_`` is reported to ``tracker`` (see the module docstring)."""
    original = torch.UntypedStorage.resize_

    def resize_(storage: torch.UntypedStorage, size: int) -> Any:
        result = original(storage, size)
        tracker.storage_resized(storage)
        return result

    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original  # type: ignore[method-assign]
