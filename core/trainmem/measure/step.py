"""The training step that is measured, and the module-boundary markers of its timeline.

One optimizer step with G = ``gradient_accumulation_steps`` micro-batches::

    for micro_batch in 1..G:
        with autocast (amp recipes only):
            loss = model(input_ids=ids, labels=ids).loss   # the output object is dropped:
                                                           # logits die before backward
        (loss / G).backward()                              # outside autocast
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

amp-fp16 runs the same loop without a GradScaler (its scale tensor and in-place unscale
add a few bytes). The whole step runs inside ``sdpa_kernel(SDPBackend.MATH)`` for ``attention="sdpa-math"``
(so that checkpointed recomputation uses the math path too). The same batch tensor is used
for every micro-batch; it is allocated before the step.

Markers split the step into segments for the timeline: ``forward embeddings``, ``forward
layers.i`` (a forward pre-hook on each decoder layer), ``forward head`` (pre-hook on the
output projection), ``loss`` (its forward hook: the upcast, log-softmax and NLL that
follow), ``backward head``, ``backward layers.i`` (a hook on the gradient of layer i's
output: where that layer's backward starts), ``backward embeddings`` (the gradient of
layer 0's input, when it requires grad), ``optimizer``, ``zero_grad``. Hooks fired by
checkpointed recomputation during backward do not move the marker.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

import torch

from ..setup import Setup
from .events import ROLE_GRADIENT, ROLE_OPTIMIZER_STATE
from .hf_model import base_model, decoder_layers
from .tracker import StorageTracker

AUTOCAST_DTYPES = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}


class TrainingStep:
    """Runs optimizer steps of the setup's loop; with a tracker attached, marks and snapshots them."""

    def __init__(
        self,
        setup: Setup,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        batch: torch.Tensor,
        forward_module: Optional[torch.nn.Module] = None,
    ):
        self.setup = setup
        self.model = model
        self.forward_module = forward_module if forward_module is not None else model
        """What ``loss = module(input_ids=..., labels=...).loss`` calls: the model, or its DDP/DeepSpeed wrapper."""
        self.optimizer = optimizer
        self.batch = batch
        self.device_type = batch.device.type
        self.tracker: Optional[StorageTracker] = None
        self.micro_batch = 0
        self.in_backward = False
        self.gradient_storages: set[int] = set()
        self.optimizer_state_storages: set[int] = set()
        self.notes: list[str] = []
        self.forward_kwargs: dict[str, Any] = {}
        """Extra keyword arguments of the forward call (sequence-parallel TP passes the full position_ids)."""
        self.snapshot_hook: Optional[Callable[[], None]] = None
        """Called at every snapshot (after each backward, after the optimizer step) of a tracked step."""
        self.phase_max_reserved: dict[str, int] = {}
        self.task_batch: Any = None
        """An encoder task's batch and loss (measure/tasks.py ``TaskBatch``); None for a causal LM."""
        self._install_markers()

    # ------------------------------------------------------------------ the loop

    def run(self, tracker: Optional[StorageTracker] = None) -> None:
        self.tracker = tracker
        accumulation = self.setup.gradient_accumulation_steps
        with self._attention_context():
            self._before_micro_batches()
            for micro_batch in range(1, accumulation + 1):
                self.micro_batch = micro_batch
                self.in_backward = False
                self._mark("forward", "forward embeddings")
                with self._autocast_context():
                    loss = self._loss()
                self.in_backward = True
                self._mark("backward", "backward head")
                self.backward(loss, self._loss_divisor())
                del loss
                self._snapshot_gradients()
            self.in_backward = False
            self.micro_batch = 0
            self._mark("optimizer", "optimizer")
            self.optimizer_step()
            self._snapshot_optimizer_state()
            self._mark("zero_grad", "zero_grad")
            self.zero_grad()
            self._after_step()
            if self.tracker is not None:
                self._note_reserved(None)
        self.tracker = None

    # The hooks a trainer's step fills in (measure/post_training.py, measure/grpo.py).

    def _loss(self) -> torch.Tensor:
        """The micro-batch's loss, computed inside the autocast context (``self.micro_batch`` is set): the
        supervised ``model(input_ids, labels).loss``, or an encoder task's head and loss."""
        if self.task_batch is not None:  # an encoder's task head and loss (measure/tasks.py)
            mark = lambda: self._forward_mark_if_forward("loss", "loss")  # noqa: E731
            return self.task_batch.loss(self.forward_module, mark, **self.forward_kwargs)
        return self.forward_module(input_ids=self.batch, labels=self.batch, **self.forward_kwargs).loss

    def _loss_divisor(self) -> int:
        """What ``backward`` divides the loss by: the accumulation steps (the Trainer's scaling)."""
        return self.setup.gradient_accumulation_steps

    def _before_micro_batches(self) -> None:
        """Work of the step before its first micro-batch (GRPO's generation round); nothing here."""

    def _after_step(self) -> None:
        """Work after zero_grad, while the tracker still runs (dropping the round's tensors); nothing here."""

    # The three calls a framework may do its own way (DeepSpeed's engine.backward / engine.step).

    def backward(self, loss: torch.Tensor, accumulation: int) -> None:
        (loss / accumulation).backward()

    def optimizer_step(self) -> None:
        self.optimizer.step()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def _autocast_context(self) -> contextlib.AbstractContextManager:
        dtype = AUTOCAST_DTYPES.get(self.setup.precision)
        if dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=dtype)

    def _attention_context(self) -> contextlib.AbstractContextManager:
        if self.setup.attention != "sdpa-math":
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(SDPBackend.MATH)

    # ------------------------------------------------------------------ snapshots

    def register_existing(self, tracker: StorageTracker) -> None:
        """Count what is alive when the step starts: weights and buffers, optimizer state, the batch."""
        from .events import ROLE_INPUT, ROLE_PARAMETER

        for tensor in self.model.parameters():
            tracker.register(tensor, ROLE_PARAMETER, op="(parameter)")
        for tensor in self.model.buffers():
            tracker.register(tensor, ROLE_PARAMETER, op="(buffer)")
        for tensor in self._optimizer_state_tensors():
            tracker.register(tensor, ROLE_OPTIMIZER_STATE, op="(optimizer state)")
        for parameter in self.model.parameters():
            if parameter.grad is not None:
                tracker.register(parameter.grad, ROLE_GRADIENT, op="(gradient)")
        tracker.register(self.batch, ROLE_INPUT, op="(input batch)")
        for value in self.forward_kwargs.values():  # a packed row's position_ids
            if isinstance(value, torch.Tensor):
                tracker.register(value, ROLE_INPUT, op="(input batch)")
        if self.task_batch is not None:
            for tensor in self.task_batch.tensors()[1:]:
                tracker.register(tensor, ROLE_INPUT, op="(input batch)")

    def _snapshot_gradients(self) -> None:
        if self.tracker is None:
            return
        if self.snapshot_hook is not None:
            self.snapshot_hook()
        for parameter in self.model.parameters():
            if parameter.grad is not None:
                self.gradient_storages.add(self._index_or_register(parameter.grad, ROLE_GRADIENT))

    def _snapshot_optimizer_state(self) -> None:
        if self.tracker is None:
            return
        if self.snapshot_hook is not None:
            self.snapshot_hook()
        for tensor in self._optimizer_state_tensors():
            self.optimizer_state_storages.add(self._index_or_register(tensor, ROLE_OPTIMIZER_STATE))

    def _optimizer_state_tensors(self) -> list[torch.Tensor]:
        return [
            value
            for state in self.optimizer.state.values()
            for value in state.values()
            if isinstance(value, torch.Tensor)
        ]

    def _index_or_register(self, tensor: torch.Tensor, role: str) -> int:
        assert self.tracker is not None
        index = self.tracker.index_of(tensor)
        if index is None:
            self.notes.append(f"a {role} storage of {tensor.untyped_storage().nbytes()} bytes appeared outside any op")
            index = self.tracker.register(tensor, role, op="(unseen)")
        return index

    # ------------------------------------------------------------------ markers

    def _mark(self, phase: str, label: str) -> None:
        if self.tracker is not None:
            self.tracker.mark(phase, label, self.micro_batch)
            if self.snapshot_hook is not None and phase in ("forward", "loss"):
                self.snapshot_hook()  # ZeRO-3 swaps gathered tensors into param.data layer by layer
            self._note_reserved(phase)

    def _note_reserved(self, phase: Optional[str]) -> None:
        """On CUDA: ``max_memory_reserved`` when a phase ends (since the measured step began)."""
        if self.device_type != "cuda":
            return
        previous = getattr(self, "_phase", None)
        if previous is not None and previous != phase:
            self.phase_max_reserved[previous] = torch.cuda.max_memory_reserved()
        self._phase = phase

    def _install_markers(self) -> None:
        layers = decoder_layers(self.model)
        for position, layer in enumerate(layers):
            layer.register_forward_pre_hook(self._forward_marker(f"forward layers.{position}"))
            layer.register_forward_hook(self._backward_marker_on_output(f"backward layers.{position}"))
        layers[0].register_forward_pre_hook(self._backward_marker_on_input("backward embeddings"), with_kwargs=True)
        head = base_model(self.model).get_output_embeddings()
        if head is None:  # a classification head or the bare encoder (measure/tasks.py)
            from .tasks import head_module

            head = head_module(base_model(self.model))
            if head is None:
                return
        head.register_forward_pre_hook(self._forward_marker("forward head"))
        head.register_forward_hook(lambda module, args, output: self._forward_mark_if_forward("loss", "loss"))

    def _forward_mark_if_forward(self, phase: str, label: str) -> None:
        if not self.in_backward:
            self._mark(phase, label)

    def _forward_marker(self, label: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any) -> None:
            self._forward_mark_if_forward("forward", label)

        return hook

    def _gradient_hook(self, label: str) -> Callable[[torch.Tensor], None]:
        micro_batch = self.micro_batch

        def hook(gradient: torch.Tensor) -> None:
            if self.tracker is not None:
                self.tracker.mark("backward", label, micro_batch)
                if self.snapshot_hook is not None:
                    self.snapshot_hook()

        return hook

    def _backward_marker_on_output(self, label: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, output: Any) -> None:
            tensor = _first_tensor(output)
            if self.tracker is not None and not self.in_backward and tensor is not None and tensor.requires_grad:
                tensor.register_hook(self._gradient_hook(label))

        return hook

    def _backward_marker_on_input(self, label: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: Any, kwargs: dict) -> None:
            tensor = _first_tensor(args) if args else kwargs.get("hidden_states")
            if self.tracker is not None and not self.in_backward and tensor is not None and tensor.requires_grad:
                tensor.register_hook(self._gradient_hook(label))

        return hook


def _first_tensor(value: Any) -> Optional[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        for item in value:
            if isinstance(item, torch.Tensor):
                return item
    return None
