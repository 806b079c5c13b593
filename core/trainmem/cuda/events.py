"""The allocation events of one simulated training step, tensor by tensor, for the allocator replay.

The step simulation (``simulate.py``) keeps a running account of bytes per part; the caching
allocator needs more: each tensor's size, and the order in which tensors are allocated and
freed. This module rebuilds that order from the same pieces the simulation composes:

* resident tensors (allocated before the step, never freed): every weight tensor, the LoRA
  adapters, one master-weight and ``full_state_tensors`` optimizer-state tensors per
  trainable tensor (DeepSpeed ZeRO flattens them into one partition each), the cuBLAS
  workspace, and one block for every other resident part of the account (DDP buckets, the
  ZeRO reduce bucket, the input batch, ...);
* each decoder layer's forward and backward, from the allocation logs that the tape records
  while it replays the layer (``Tape.events``, ``BackwardReplay.events``): a layer's output is
  the next layer's input, the gradient a layer's backward leaves for its input is the previous
  layer's incoming gradient, saved tensors are freed when backward releases them, autocast's
  cached weight casts when the forward's autocast region ends;
* activation checkpointing: the forward runs each layer without saving anything and keeps
  its input; backward first recomputes the layer (its forward log again), then runs its
  backward;
* ZeRO-3/FSDP: each layer's gathered weights, allocated on the all-gather stream (a
  separate pool of the caching allocator, as FSDP's and DeepSpeed's side streams are) one
  layer ahead (prefetch) and freed after use; sharded gradients are reduce-scattered into a
  shard once a layer's backward is done (FSDP: on its reduce-scatter stream);
* the optimizer step's temporaries (foreach: one per trainable tensor, together; for-loop and
  fused: one at a time) and ``zero_grad(set_to_none=True)``.

An event is ``(op, slot, bytes, stream)`` with op ``"alloc"`` or ``"free"`` and ``slot`` the number of
the allocation (0, 1, 2, ... in allocation order; a free names the slot it frees; a step repeated
after one that freed all its own allocations uses that step's slots again). Not modelled here:
pipeline schedules with several micro-batches in flight (one is replayed), record_stream
delays on side streams.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable, Optional

from ..layers import Trace
from ..parallel import deepspeed
from ..plan import Plan, Stage
from ..tape import DTYPE_BYTES

Event = tuple[str, Hashable, int, int]

MAIN_STREAM = 0
ALL_GATHER_STREAM = 1
REDUCE_SCATTER_STREAM = 2

PER_TENSOR_RESIDENT_PARTS = {
    ("parameters", "weights"),
    ("parameters", "LoRA adapters"),
    ("optimizer_states", "master weights"),
    ("optimizer_states", "optimizer states"),
}
"""Resident parts the stream lays out tensor by tensor; every other resident part is one block."""

MAX_REPLAYED_MICRO_BATCHES = 2
"""Later micro-batches repeat the second one (as in ``simulate.py``)."""

_OF_PLAN: dict = {}
"""What the streams of one (plan, stage) read again and again, computed once: the replay builds two
streams (memory.py: 8 and 4 layers) of the same plan, each asking for the same model states,
traces and resident tensors. Holds the plan and stage themselves, so an ``is`` test is exact."""


def _of_plan(plan: Plan, stage: Stage, name: Hashable, compute):
    if _OF_PLAN.get("plan") is not plan or _OF_PLAN.get("stage") is not stage:
        _OF_PLAN.clear()
        _OF_PLAN["plan"], _OF_PLAN["stage"] = plan, stage
    found = _OF_PLAN.get(name)
    if found is None:
        found = _OF_PLAN[name] = compute()
    return found


@dataclass
class _Stream:
    """Builds the event list and keeps what is alive, so frees always match an allocation.

    Each allocation gets the next slot number, and its events name that number instead of the
    tensor's key: the replay then hashes small integers, not nested tuples."""

    events: list = field(default_factory=list)
    live: dict = field(default_factory=dict)
    """Live key -> (bytes, stream, slot, the namespace's dict of live keys or None)."""
    by_namespace: dict = field(default_factory=dict)
    """Live keys ``(namespace, storage)`` grouped by namespace (one traced piece)."""
    slots: int = 0

    def alloc(self, key: Hashable, nbytes: int, stream: int = MAIN_STREAM) -> None:
        live = self.live
        if nbytes <= 0 or key in live:
            return
        slot = self.slots
        self.slots = slot + 1
        namespace = None
        if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], tuple):
            namespace = self.by_namespace.get(key[0])
            if namespace is None:
                namespace = self.by_namespace[key[0]] = {}
            namespace[key] = None
        live[key] = (nbytes, stream, slot, namespace)
        self.events.append(("alloc", slot, nbytes, stream))

    def free(self, key: Hashable) -> None:
        found = self.live.pop(key, None)
        if found is not None:
            self.events.append(("free", found[2], found[0], found[1]))
            if found[3] is not None:
                found[3].pop(key, None)

    def free_all(self, keys) -> None:
        for key in list(keys):
            self.free(key)


def resident_tensors(plan: Plan, stage: Stage, resident_parts: dict, workspace_bytes: int) -> list[tuple[str, int]]:
    """(name, bytes) of every tensor alive before the step starts, in allocation order."""
    from ..simulate import model_states  # late: simulate imports the traces this module reads

    states = _of_plan(plan, stage, "states", lambda: model_states(plan, stage))
    sharding = plan.sharding
    tensors: list[tuple[str, int]] = []
    slices = plan.slices(stage)
    for index, slice_ in enumerate(slices):
        per_tensor = plan.weight_bytes(slice_) // max(1, slice_.count) // sharding.weights
        tensors += [(f"weight {index}.{copy}", per_tensor) for copy in range(slice_.count)]
    adapters = plan.adapter_slices(stage)
    for index, (_, per_layer, layers, *_) in enumerate(adapters):
        per_tensor = per_layer * DTYPE_BYTES[plan.adapter_dtype] // 2 // sharding.weights
        tensors += [(f"adapter {index}.{layer}.{ab}", per_tensor) for layer in range(layers) for ab in "AB"]
    trainable = [(s.numel, s.count) for s in slices if s.trainable]
    trainable += [(per_layer // 2, layers * 2) for _, per_layer, layers, *_ in adapters]
    numel = sum(n * c for n, c in trainable) or 1
    flat = plan.parallel.strategy == "zero" and plan.parallel.zero_stage >= 1
    states_per_tensor = max(1, plan.optimizer.full_state_tensors)
    for name, total in (("master weights", states.master_weights), ("optimizer state", states.optimizer_states)):
        if total <= 0:
            continue
        copies = 1 if name == "master weights" else states_per_tensor
        if flat:  # DeepSpeed's fp32 partitions are flat buffers
            tensors += [(f"{name} flat {k}", total // copies) for k in range(copies)]
            continue
        for index, (n, count) in enumerate(trainable):
            per_tensor = total * n // numel // copies
            tensors += [(f"{name} {index}.{c}.{k}", per_tensor) for c in range(count) for k in range(copies)]
    for (category, name), nbytes in resident_parts.items():
        if (category, name) not in PER_TENSOR_RESIDENT_PARTS and nbytes > 0:
            tensors.append((f"{category}: {name}", nbytes))
    if workspace_bytes:
        tensors.append(("cuBLAS workspace", workspace_bytes))
    return tensors


class _StepBuilder:
    """Lays out one optimizer step's events on a :class:`_Stream`."""

    def __init__(self, plan: Plan, stage: Stage, stream: _Stream, step: int, max_layers: Optional[int] = None):
        from ..simulate import _gathered_weights, _resident_gradient_buffer, _traces, model_states

        self.plan, self.stage, self.out, self.step = plan, stage, stream, step
        self.states = _of_plan(plan, stage, "states", lambda: model_states(plan, stage))
        self.gathered_bytes: dict[int, int] = {
            kind: (layer if _gathered_weights(plan, layer)[0] else 0)
            for kind, layer in self.states.gathered_layer_weights.items()
        }
        """By layer kind: one layer's gathered weights; with sharded weights the next layer's are prefetched."""
        self.prefetch = plan.sharding.weights > 1
        self.gather_stream = ALL_GATHER_STREAM if plan.sharding.weights > 1 else MAIN_STREAM
        self.resident_gradients = bool(_resident_gradient_buffer(plan))
        self.shard_gradients = plan.sharding.gradients > 1 or self.resident_gradients
        self.first = _of_plan(plan, stage, ("traces", False), lambda: _traces(plan, stage, grads_exist=False))
        accumulation = plan.setup.gradient_accumulation_steps
        self.later = (
            _of_plan(plan, stage, ("traces", True), lambda: _traces(plan, stage, grads_exist=True))
            if accumulation > 1
            else self.first
        )
        self.param_grads: list[Hashable] = []
        self.grad_shards: list[Hashable] = []
        self._released: dict[int, tuple] = {}
        self.layers = stage.num_layers if max_layers is None else min(stage.num_layers, max_layers)
        self.kind_of = [kind for _, count, kind in plan.stage_layer_runs(stage) for _ in range(count)][: self.layers]
        """The layer kind (position in inventory.layer_groups) of each replayed layer, in stage order."""

    # ------------------------------------------------------------ one traced piece
    def forward(
        self, trace: Trace, ns: tuple, input_ref: Optional[Hashable], keep_input: bool = False, no_grad: bool = False
    ) -> tuple[Hashable, list[Hashable]]:
        """Replay a piece's forward log; returns (output key, leftover keys freed at autocast exit).

        ``no_grad``: the forward runs under ``torch.no_grad`` (checkpointing's first pass): whatever
        the tape would have saved is freed as soon as the piece returns."""
        in_storage = trace.input_key[0] if trace.input_key else None
        out = self.out
        free_input = not keep_input and input_ref is not None
        # _Stream.alloc and free, inlined: every key here is (ns, storage), so its namespace is ns.
        live, append = out.live, out.events.append
        namespace = out.by_namespace.get(ns)
        slot = out.slots
        for op, storage, nbytes in trace.forward_events:
            if storage == in_storage:
                if op == "free" and free_input:
                    out.free(input_ref)
                continue
            key = (ns, storage)
            if op == "alloc":
                if nbytes <= 0 or key in live:
                    continue
                if namespace is None:
                    namespace = out.by_namespace[ns] = {}
                namespace[key] = None
                live[key] = (nbytes, MAIN_STREAM, slot, namespace)
                append(("alloc", slot, nbytes, MAIN_STREAM))
                slot += 1
            else:
                found = live.pop(key, None)
                if found is not None:
                    append(("free", found[2], found[0], found[1]))
                    found[3].pop(key, None)
        out.slots = slot
        output = (ns, trace.output_key[0]) if trace.output_key else None
        if no_grad:
            self.out.free_all([key for key in self._keys_of(ns) if key != output])
            return output, []
        released_in_backward = self._released_in_backward(trace)
        leftovers = [key for key in self._keys_of(ns) if key != output and key[1] not in released_in_backward]
        return output, leftovers

    def _released_in_backward(self, trace: Trace) -> set:
        """The storages of ``trace``'s own forward that its backward frees (computed once per trace)."""
        found = self._released.get(id(trace))
        if found is None or found[0] is not trace:
            found = self._released[id(trace)] = (
                trace,
                {k for op, k, _ in trace.backward_events if op == "free" and isinstance(k, int)},
            )
        return found[1]

    def _keys_of(self, ns: tuple) -> list[tuple]:
        return list(self.out.by_namespace.get(ns, ()))

    def backward(
        self, trace: Trace, ns: tuple, input_ref: Optional[Hashable], grad_ref: Optional[Hashable]
    ) -> Optional[Hashable]:
        """Replay a piece's backward log; returns the key of the gradient it leaves for its input."""
        in_storage, in_uid = trace.input_key if trace.input_key else (None, None)
        out_uid = trace.output_key[1] if trace.output_key else None
        out = self.out
        alloc, free = out.alloc, out.free
        live, append = out.live, out.events.append
        param_grads = self.param_grads
        by_namespace = out.by_namespace
        for op, key, nbytes in trace.backward_events:
            if isinstance(key, int):
                if key == in_storage:
                    if input_ref is not None:
                        alloc(input_ref, nbytes) if op == "alloc" else free(input_ref)
                    continue
            elif key[0] == "g" and key[1] == out_uid:
                if grad_ref is not None:
                    alloc(grad_ref, nbytes) if op == "alloc" else free(grad_ref)
                continue
            # a key of this piece, (ns, key): _Stream.alloc and free, inlined
            mapped = (ns, key)
            if op == "alloc":
                if nbytes > 0 and mapped not in live:
                    namespace = by_namespace.get(ns)
                    if namespace is None:
                        namespace = by_namespace[ns] = {}
                    namespace[mapped] = None
                    slot = out.slots
                    out.slots = slot + 1
                    live[mapped] = (nbytes, MAIN_STREAM, slot, namespace)
                    append(("alloc", slot, nbytes, MAIN_STREAM))
                if isinstance(key, tuple) and key[0] == "p":
                    param_grads.append(mapped)
            else:
                found = live.pop(mapped, None)
                if found is not None:
                    append(("free", found[2], found[0], found[1]))
                    found[3].pop(mapped, None)
        if grad_ref is not None:
            self.out.free(grad_ref)  # consumed: the engine drops the incoming gradient
        leftover = (ns, ("g", in_uid))
        return leftover if leftover in self.out.live else None

    def reduce_gradients(self, ns: tuple, shard_bytes: int) -> None:
        """ZeRO-2/3, FSDP: the layer's full gradients become a shard (or go into a resident buffer).

        FSDP2 copies them into a reduce-scatter input and writes the shard on its reduce-scatter
        stream (``foreach_reduce`` in torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py), so
        both come from that stream's pool; DeepSpeed reduces into its resident bucket."""
        if not self.shard_gradients:
            return
        mine = [key for key in self.param_grads if key[0] == ns]
        fsdp = self.plan.parallel.strategy == "fsdp" and self.plan.sharding.gradients > 1
        stream = REDUCE_SCATTER_STREAM if fsdp else MAIN_STREAM
        if fsdp and mine:
            self.out.alloc((ns, "reduce-scatter input"), sum(self.out.live[key][0] for key in mine), stream)
        self.out.free_all(mine)
        self.param_grads = [key for key in self.param_grads if key[0] != ns]
        if not self.resident_gradients and shard_bytes:
            key = (ns, "gradient shard")
            self.out.alloc(key, shard_bytes, stream)
            self.grad_shards.append(key)
        self.out.free((ns, "reduce-scatter input"))

    # ------------------------------------------------------------ the step
    def micro_batch(self, micro_batch: int) -> None:
        plan, stage = self.plan, self.stage
        traces = self.first if micro_batch == 1 else self.later
        checkpointing = plan.setup.activation_checkpointing == "full"
        layers = self.layers
        tag = (self.step, micro_batch)
        hidden: Optional[Hashable] = None
        autocast_exit: list[Hashable] = []
        inputs: list[Optional[Hashable]] = []
        if traces.embedding is not None:
            hidden, rest = self.forward(traces.embedding, (tag, "embedding"), None)
            autocast_exit += rest
        else:
            hidden = (tag, "received activation")
            self.out.alloc(hidden, self._stream_bytes())
        embedding_output = hidden
        gather = self._gather_key(tag, "forward", 0)
        for index in range(layers):
            kind = traces.kinds[self.kind_of[index]]
            trace = kind.first_layer if index == 0 else kind.layer
            self._gather(gather)
            if self.prefetch and index + 1 < layers:
                self._gather(self._gather_key(tag, "forward", index + 1))
            inputs.append(hidden)
            if checkpointing:
                hidden, rest = self.forward(
                    kind.no_grad_layer, (tag, "forward", index), hidden, keep_input=True, no_grad=True
                )
            else:
                hidden, rest = self.forward(trace, (tag, "layer", index), hidden, keep_input=index == 0)
            autocast_exit += rest
            self.out.free(gather)
            gather = self._gather_key(tag, "forward", index + 1)
        self.out.free(gather)
        grad: Optional[Hashable] = None
        if traces.head is not None:
            head_ns = (tag, "head")
            output, rest = self.forward(traces.head, head_ns, hidden)
            self.out.free_all(autocast_exit + rest)  # the autocast region ends with the loss
            if embedding_output is not None and not checkpointing:
                first_run = traces.first_run_trace()
                saved_by_first = first_run is not None and first_run.first_layer.input_saved
                if not saved_by_first and traces.embedding is not None:
                    self.out.free(embedding_output)
            loss_grad = (tag, "loss gradient")
            self.out.alloc(loss_grad, 512)
            grad = self.backward(traces.head, head_ns, hidden, loss_grad)
            self.out.free(output)
            self.reduce_gradients(head_ns, self.states.gradients_head)
        else:
            self.out.free_all(autocast_exit)
            grad = (tag, "received gradient")
            self.out.alloc(grad, self._stream_bytes())
        gather = self._gather_key(tag, "backward", layers - 1)
        for index in reversed(range(layers)):
            kind = traces.kinds[self.kind_of[index]]
            trace = kind.first_layer if index == 0 else kind.layer
            self._gather(gather)
            if self.prefetch and index > 0:
                self._gather(self._gather_key(tag, "backward", index - 1))
            layer_input = inputs[index]
            if checkpointing:
                ns = (tag, "recompute", index)
                output, rest = self.forward(trace, ns, layer_input, keep_input=True)
                grad = self.backward(trace, ns, layer_input, grad)
                self.out.free_all(rest + ([output] if output is not None else []))
                if index > 0 or traces.embedding is None:
                    self.out.free(layer_input)
            else:
                ns = (tag, "layer", index)
                grad = self.backward(trace, ns, layer_input, grad)
            self.reduce_gradients(ns, self.states.gradients_per_layer[self.kind_of[index]])
            self.out.free(gather)
            gather = self._gather_key(tag, "backward", index - 1)
        if traces.embedding is not None:
            ns = (tag, "embedding")
            self.backward(traces.embedding, ns, None, grad)
            self.out.free(embedding_output)
            self.reduce_gradients(ns, self.states.gradients_embedding)
        elif grad is not None:
            self.out.free(grad)
        if hidden is not None:
            self.out.free(hidden)
        # Anything of this micro-batch still alive that is not a gradient is released with the graph.
        grads = set(self.param_grads) | set(self.grad_shards)
        # (a key whose head is no tuple, a resident tensor's, belongs to no micro-batch: _micro_batch_of)
        self.out.free_all(
            [
                key
                for key in self.out.live
                if isinstance(key, tuple) and isinstance(key[0], tuple) and _micro_batch_of(key) == tag
                and key not in grads
            ]
        )  # fmt: skip

    def optimizer_step(self) -> None:
        plan, states = self.plan, self.states
        precision = plan.precision
        tag = (self.step, "optimizer")
        if deepspeed.frees_gradients_before_update(plan):
            self._zero_flatten_and_free_gradients(tag)
        elif precision.master_weights and precision.gradient_dtype != "fp32" and not plan.parallel.offload_optimizer:
            self.out.alloc((tag, "fp32 gradient partition"), states.trainable_numel * 4 // plan.sharding.optimizer)
        temporaries = states.step_temporaries
        if temporaries:
            if plan.optimizer_implementation == "foreach":
                # One temporary per trainable tensor (or shard), all alive together, in proportion to its size.
                sizes = _trainable_numels(plan, self.stage)
                total = sum(sizes) or 1
                keys = [(tag, "foreach temporary", k) for k in range(len(sizes))]
                for key, numel in zip(keys, sizes):
                    self.out.alloc(key, temporaries * numel // total)
                self.out.free_all(keys)
            else:
                self.out.alloc((tag, "step temporaries"), temporaries)
                self.out.free((tag, "step temporaries"))
        self.out.free((tag, "fp32 gradient partition"))
        # zero_grad(set_to_none=True)
        self.out.free_all(self.param_grads + self.grad_shards)
        self.param_grads, self.grad_shards = [], []

    def _zero_flatten_and_free_gradients(self, tag: tuple) -> None:
        """ZeRO-1/2's ``step`` before the update, as ``simulate._optimizer_step`` counts it
        (trainmem.parallel.deepspeed ``flatten_moment_parts``, ``update_gradient_partition_bytes``): the rank's
        gradient partition flattened (``flatten_dense_tensors_aligned``), cast to fp32 (``.to``: the flattened
        copy itself for fp32 gradients), then every ``.grad`` and the 16-bit partition freed
        (``free_grad_in_param_list``, ``averaged_gradients[i] = None``); the fp32 partition lives through the
        update. ZeRO-1 frees the ``.grad`` of the parameters outside its partition first; the stream keeps
        them to this moment (its parameters are not split by partition)."""
        plan = self.plan
        partition = self.states.trainable_numel // max(1, plan.sharding.optimizer)
        gradient_bytes = DTYPE_BYTES[plan.precision.gradient_dtype]
        if gradient_bytes == 4:
            self.out.alloc((tag, "fp32 gradient partition"), partition * 4)
        else:
            self.out.alloc((tag, "flattened gradient partition"), partition * gradient_bytes)
            self.out.alloc((tag, "fp32 gradient partition"), partition * 4)
            self.out.free((tag, "flattened gradient partition"))
        self.out.free_all(self.param_grads + self.grad_shards)
        self.param_grads, self.grad_shards = [], []

    # ------------------------------------------------------------ helpers
    def _stream_bytes(self) -> int:
        from ..simulate import _shape

        return _shape(self.plan).stream_tokens * self.plan.architecture.hidden_size * DTYPE_BYTES[
            self.plan.precision.stream_dtype
        ]

    def _gather_key(self, tag: tuple, phase: str, index: int) -> tuple:
        return ((tag, phase, index), "gathered weights")

    def _gather(self, key: tuple) -> None:
        index = key[0][2]
        if 0 <= index < len(self.kind_of) and self.gathered_bytes.get(self.kind_of[index]):
            self.out.alloc(key, self.gathered_bytes[self.kind_of[index]], self.gather_stream)


def _trainable_numels(plan: Plan, stage: Stage) -> list[int]:
    """Element counts of every trainable tensor of the rank, in ``model.parameters()`` order."""
    numels = [s.numel for s in plan.slices(stage) if s.trainable for _ in range(s.count)]
    for _, per_layer, layers, _ in plan.adapter_slices(stage):
        numels += [per_layer // 2] * (2 * layers)
    return numels


def _micro_batch_of(key: tuple):
    head = key[0]
    while isinstance(head, tuple) and head and isinstance(head[0], tuple):
        head = head[0]
    return head if isinstance(head, tuple) and len(head) == 2 and isinstance(head[0], int) else None


def step_events(
    plan: Plan,
    stage: Stage,
    resident_parts: dict,
    workspace_bytes: int,
    steps: int = 2,
    max_layers: Optional[int] = None,
    repeat_steps: bool = True,
) -> list[Event]:
    """The allocation events of ``steps`` optimizer steps on a rank of ``stage`` (resident tensors first).

    ``max_layers`` replays the forward and backward of only that many decoder layers (the resident
    tensors stay those of the whole model): :mod:`trainmem.cuda.memory` extrapolates from two such
    truncated replays for deep models. ``repeat_steps``: a step that ends with only the resident
    tensors alive is laid out once and repeated (:func:`_repeat_step`); False builds every step
    (the same events, with new slot numbers)."""
    stream = _Stream()
    events, live, slots, resident_slots = _of_plan(
        plan, stage, ("resident", tuple(resident_parts.items()), workspace_bytes),
        lambda: _resident_stream(plan, stage, resident_parts, workspace_bytes),
    )  # fmt: skip
    stream.events, stream.live, stream.slots = list(events), dict(live), slots
    if plan.architecture is None:
        return stream.events
    accumulation = plan.setup.gradient_accumulation_steps
    first: Optional[tuple[int, int]] = None
    for step in range(steps):
        if first is not None and {slot for _, _, slot, _ in stream.live.values()} == resident_slots:
            _repeat_step(stream, *first, step)
            continue
        start = len(stream.events)
        builder = _StepBuilder(plan, stage, stream, step, max_layers)
        for micro_batch in range(1, min(accumulation, MAX_REPLAYED_MICRO_BATCHES) + 1):
            builder.micro_batch(micro_batch)
        builder.optimizer_step()
        stream.events.append(("step_end", step, 0, 0))
        if repeat_steps and first is None:
            first = (start, len(stream.events) - 1)
    return stream.events


def _resident_stream(plan: Plan, stage: Stage, resident_parts: dict, workspace_bytes: int) -> tuple:
    """The events, live keys and slot count of a stream once the resident tensors are allocated, and
    their slots (the same for every stream of the plan: each stream copies them)."""
    stream = _Stream()
    for name, nbytes in resident_tensors(plan, stage, resident_parts, workspace_bytes):
        stream.alloc(("resident", name), nbytes)
    return stream.events, stream.live, stream.slots, {slot for _, _, slot, _ in stream.live.values()}


def _repeat_step(stream: _Stream, start: int, end: int, step: int) -> None:
    """Append another step: the events of the step laid out in ``stream.events[start:end]`` (its
    ``step_end`` marker at ``end``) again, with the same slots.

    Exact when exactly the resident tensors' slots are alive at the end of that step (``step_events``
    checks it): then the step freed every slot it allocated and named no slot from before it, and
    the builder's keys carry their step, so a new step starts from the state the first one started
    from and lays out the same allocations and frees, in the same order, with the same sizes. Its
    slots are free again by then, so they can name its allocations once more (a replay maps a slot
    to the block allocated last under it)."""
    events = stream.events
    events += events[start:end]
    events.append(("step_end", step, 0, 0))
