"""A symbolic autograd tape: what a forward pass saves for backward, and what backward allocates.

trainmem does not sum activation formulas; it replays a layer's forward pass op by op on
*symbolic* tensors (element count, dtype, whether it requires grad) and records what each
op saves for backward, the way PyTorch's autograd does:

* ``mm``/``linear`` save their input when the weight trains and the weight when the input
  needs a gradient (``MmBackward0`` saves ``self`` and ``mat2`` only as needed);
* ``mul`` saves the *other* operand of each operand that requires grad; multiplying by a
  Python scalar saves nothing;
* ``pow``, ``silu``, ``gelu``, ``layer_norm`` save their input; ``rsqrt``, ``tanh``,
  ``softmax``, ``log_softmax`` save their result; dropout saves its mask (a bool tensor
  on CUDA, a tensor of the input's dtype on CPU, where ATen has no fused kernel);
* fused attention (flash / memory-efficient SDPA) saves q, k, v, the output and the fp32
  log-sum-exp, with no s×s tensor;
* under autocast, listed ops cast their floating inputs to the low-precision dtype (a new
  tensor each call, except casts of weights that train, which autocast caches for the
  region) or to fp32, following the CUDA and CPU op lists of the PyTorch AMP docs.

A tensor saved by several ops (the norm output feeding q, k and v) is stored once. The
replay also tracks which intermediates are alive, so the transient peak inside a layer
(forward and backward) comes out of the same bookkeeping. Backward is replayed by walking
the recorded nodes in reverse: each node allocates the gradients of its inputs, frees the
gradient of its output, and releases the tensors it saved once no later node needs them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable, Optional

from .allocator import granularity, rounded

NOT_NEW_MEMORY = ("parameter", "external")
"""Tags of tensors that a tape reads but does not allocate: model weights, tensors shared across layers."""

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1, "int64": 8, "int32": 4, "bool": 1, "uint8": 1}
FLOATING = ("fp32", "bf16", "fp16", "fp8")

# Ops that autocast runs in the low-precision dtype / in fp32 (PyTorch "Automatic Mixed
# Precision package" docs, "CUDA Ops that can autocast to float16/float32" and the CPU lists).
AUTOCAST_LOW = {
    "cuda": {"linear", "mm", "bmm", "matmul", "baddbmm", "sdpa", "conv"},
    "cpu": {"linear", "mm", "bmm", "matmul", "baddbmm", "sdpa", "conv"},
}
AUTOCAST_FP32 = {
    "cuda": {"layer_norm", "softmax", "log_softmax", "pow", "rsqrt", "nll_loss", "cross_entropy", "sum", "exp"},
    # CPU autocast (aten/src/ATen/autocast_mode.cpp, the CPU fp32 list: losses, not softmax or exp), probed with
    # torch 2.13 on bf16 inputs (tests/test_tape.py): nll_loss, cross_entropy and kl_div run in fp32; log_softmax,
    # logsumexp, exp, sum, pow, rsqrt and layer_norm stay in bf16. softmax is kept from an earlier measurement
    # (its callers here pass fp32 inputs or an explicit dtype, so it changes nothing).
    "cpu": {"softmax", "nll_loss", "cross_entropy", "kl_div"},
}

_ids = itertools.count()


class Sym:
    """A symbolic tensor: how many elements, which dtype, whether autograd tracks it."""

    __slots__ = ("numel", "dtype", "requires_grad", "tag", "uid", "storage", "storage_nbytes")

    def __init__(
        self,
        numel: int,
        dtype: str,
        requires_grad: bool,
        tag: str = "activation",
        storage: Optional[int] = None,
        storage_nbytes: Optional[int] = None,
    ):
        self.numel = numel
        self.dtype = dtype
        self.requires_grad = requires_grad
        self.tag = tag
        """activation; weight_copy (an autocast or dequantised copy of a weight); parameter (a model
        weight) and external (a tensor shared by all layers, like RoPE's cos/sin), which take no
        memory on this tape."""
        self.uid = next(_ids)
        self.storage = self.uid if storage is None else storage
        """Views share the storage id of their base, so a view saved twice is counted once."""
        self.storage_nbytes = numel * DTYPE_BYTES[dtype] if storage_nbytes is None else storage_nbytes
        """Bytes of the whole storage: a saved view keeps all of its base alive."""

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_BYTES[self.dtype]

    def view(self, numel: Optional[int] = None) -> Sym:
        """A view (reshape, transpose, slice): same storage, no new memory."""
        return Sym(
            self.numel if numel is None else numel,
            self.dtype,
            self.requires_grad,
            self.tag,
            self.storage,
            self.storage_nbytes,
        )

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Sym({self.numel}×{self.dtype}, grad={self.requires_grad}, {self.tag})"


@dataclass
class Node:
    """One autograd node: the tensors it saved and the inputs it sends gradients to."""

    op: str
    saved: list[Sym]
    grad_inputs: list[Sym]
    outputs: list[Sym]
    extra_backward_bytes: int = 0
    """Scratch memory the node's backward needs beyond the input gradients (e.g. recomputed scores)."""
    grad_is_view: bool = False
    """The input's gradient is a view of the output's (``sum_backward``: ``grad.expand(sizes)``): no new memory."""
    grad_passes_through: bool = False
    """``AddBackward0`` hands the output's gradient itself to each input of the output's shape and dtype
    (``grad`` and ``maybe_multiply(grad, alpha)`` with alpha 1 in tools/autograd/derivatives.yaml): no copy."""


@dataclass
class Tape:
    """Records one forward pass over symbolic tensors.

    ``autocast`` is the low-precision dtype of an active autocast region (or None) and
    ``device`` selects the autocast op lists and the dropout-mask layout.
    """

    device: str = "cuda"
    autocast: Optional[str] = None
    nodes: list[Node] = field(default_factory=list)
    live: dict[int, Sym] = field(default_factory=dict)
    """Non-parameter storages alive right now (saved or still referenced by the forward code)."""
    saved_storages: dict[int, Sym] = field(default_factory=dict)
    peak_live_bytes: int = 0
    peak_weight_copy_bytes: int = 0
    """Weight copies (autocast casts, dequantised weights) among ``peak_live_bytes`` at that moment."""
    _live_bytes: int = 0
    _weight_cache: dict[int, Sym] = field(default_factory=dict)
    events: list[tuple[str, int, int]] = field(default_factory=list)
    """The allocation log: ("alloc" | "free", storage id, bytes) in program order, for replaying the
    forward through a model of the CUDA caching allocator (``trainmem.cuda``)."""

    @property
    def cached_weight_copy_bytes(self) -> int:
        """Bytes of autocast's cached weight casts: alive until the autocast region exits."""
        return sum(copy.storage_nbytes for copy in self._weight_cache.values())

    @property
    def cache_only_weight_copy_bytes(self) -> int:
        """Cached weight casts that no node saved: freed when the autocast region exits."""
        return sum(c.storage_nbytes for c in self._weight_cache.values() if c.storage not in self.saved_storages)

    # ------------------------------------------------------------------ bookkeeping
    def new(self, numel: int, dtype: str, requires_grad: bool, tag: str = "activation") -> Sym:
        tensor = Sym(numel, dtype, requires_grad, tag)
        self.keep(tensor)
        return tensor

    def keep(self, tensor: Sym) -> None:
        """Count ``tensor`` as alive (a tensor no recorded op produced: a mask, a kernel's buffer)."""
        if tensor.storage not in self.live:
            if tensor.storage == tensor.uid:  # a new storage: counted as its allocator counts it
                tensor.storage_nbytes = rounded(tensor.storage_nbytes, self.device)
            self.live[tensor.storage] = tensor
            self._live_bytes += tensor.storage_nbytes
            self.events.append(("alloc", tensor.storage, tensor.storage_nbytes))
            if self._live_bytes > self.peak_live_bytes:
                self.peak_live_bytes = self._live_bytes
                self.peak_weight_copy_bytes = sum(t.storage_nbytes for t in self.live.values() if t.tag == "weight_copy")

    def live_bytes(self) -> int:
        return self._live_bytes

    def release(self, *tensors: Sym) -> None:
        """The forward code drops its reference; memory is freed unless a node saved it."""
        for tensor in tensors:
            if tensor.storage not in self.saved_storages:
                dropped = self.live.pop(tensor.storage, None)
                if dropped is not None:
                    self._live_bytes -= dropped.storage_nbytes
                    self.events.append(("free", dropped.storage, dropped.storage_nbytes))

    def record(
        self,
        op: str,
        saved: Iterable[Optional[Sym]],
        inputs: Iterable[Sym],
        outputs: Iterable[Sym],
        extra_backward_bytes: int = 0,
        grad_is_view: bool = False,
        grad_passes_through: bool = False,
    ) -> None:
        inputs = [t for t in inputs if t.requires_grad]
        outputs = list(outputs)
        if not inputs:
            return  # no graph node: nothing is saved
        kept = [t for t in saved if t is not None]
        for tensor in kept:
            if tensor.tag not in NOT_NEW_MEMORY:
                self.saved_storages.setdefault(tensor.storage, tensor)
                self.keep(tensor)
        self.nodes.append(Node(op, kept, inputs, outputs, extra_backward_bytes, grad_is_view, grad_passes_through))

    def saved_bytes(self, tags: tuple[str, ...] = ("activation",)) -> int:
        return sum(t.storage_nbytes for t in self.saved_storages.values() if t.tag in tags)

    # ------------------------------------------------------------------ dtype rules
    def autocast_input(self, op: str, tensor: Sym) -> Sym:
        """Autocast's cast of one floating input of ``op`` (a new tensor, or the same one)."""
        if self.autocast is None or tensor.dtype not in FLOATING:
            return tensor
        if op in AUTOCAST_LOW[self.device]:
            target = self.autocast
        elif op in AUTOCAST_FP32[self.device]:
            target = "fp32"
        else:
            return tensor
        return self.to(tensor, target, cache=tensor.tag == "parameter" and tensor.requires_grad)

    def to(self, tensor: Sym, dtype: str, cache: bool = False) -> Sym:
        """``tensor.to(dtype)``: the same tensor when the dtype matches, else a new one."""
        if tensor.dtype == dtype:
            return tensor
        if cache and tensor.uid in self._weight_cache:
            return self._weight_cache[tensor.uid]
        tag = "weight_copy" if tensor.tag in ("parameter", "weight_copy", "external") else "activation"
        copy = self.new(tensor.numel, dtype, tensor.requires_grad, tag)
        if cache:
            self._weight_cache[tensor.uid] = copy
        self.record("to_copy", [], [tensor], [copy])
        return copy

    @staticmethod
    def promote(*dtypes: str) -> str:
        """Type promotion between floating dtypes: fp32 wins over 16-bit, bf16+fp16 gives fp32."""
        floating = {d for d in dtypes if d in FLOATING}
        if len(floating) == 1:
            return floating.pop()
        return "fp32"

    # ------------------------------------------------------------------ ops
    def linear(
        self,
        x: Sym,
        weight: Sym,
        out_features: int,
        bias: Optional[Sym] = None,
        saved_input: Optional[Sym] = None,
        in_features: Optional[int] = None,
        op: str = "linear",
        saves_input: bool = False,
    ) -> Sym:
        """``F.linear`` / ``addmm``: saves the (cast) input if the weight trains (or, ``saves_input``, whenever
        x needs grad: DeepSpeed ZeRO-3's linear), the (cast) weight if x needs grad. Under autocast the weight and the bias are cast (and cached, when they train).
        ``saved_input`` replaces the input among the saved tensors (sequence parallelism);
        ``in_features`` is given when ``weight`` stands for several matrices (stacked experts);
        ``op`` names the kernel for autocast (``grouped_mm`` is on no autocast list and runs as is)."""
        x_in = self.autocast_input(op, x)
        w_in = self.autocast_input(op, weight)
        b_in = self.autocast_input(op, bias) if bias is not None else None
        rows = x.numel // (in_features or weight.numel // out_features)
        out = self.new(
            rows * out_features,
            w_in.dtype if self.autocast is None else x_in.dtype,
            x.requires_grad or weight.requires_grad or bool(bias and bias.requires_grad),
        )
        kept_input = x_in if saved_input is None or saved_input is x else saved_input
        self.record(
            "linear",
            [kept_input if weight.requires_grad or saves_input and x.requires_grad else None, w_in if x.requires_grad else None],
            [x_in, w_in] + ([b_in] if b_in is not None else []),
            [out],
        )
        self._release_casts((x_in, x), (w_in, weight), (b_in, bias))
        return out

    def conv(self, x: Sym, weight: Sym, out_channels: int, bias: Optional[Sym], in_features: int) -> Sym:
        """A stride = kernel convolution (a patch embedding): a matmul over ``in_features`` inputs per patch.
        Unlike ``addmm``, ``ConvolutionBackward0`` saves its (cast) input *and* (cast) weight whenever any of
        them requires grad (derivatives.yaml: one ``convolution_backward`` formula for all outputs), so under
        autocast the weight's bf16 copy is kept even though the pixel values need no gradient."""
        x_in = self.autocast_input("conv", x)
        if x_in is not x and x.tag == "external":  # the input batch's cast is an activation, not a weight copy
            self.release(x_in)
            x_in = self.new(x.numel, x_in.dtype, x.requires_grad)
        w_in = self.autocast_input("conv", weight)
        b_in = self.autocast_input("conv", bias) if bias is not None else None
        rows = x.numel // in_features
        out = self.new(
            rows * out_channels,
            w_in.dtype if self.autocast is None else x_in.dtype,
            x.requires_grad or weight.requires_grad or bool(bias and bias.requires_grad),
        )
        self.record("conv", [x_in, w_in], [x_in, w_in] + ([b_in] if b_in is not None else []), [out])
        self._release_casts((x_in, x), (w_in, weight), (b_in, bias))
        return out

    def fp8_linear(
        self, x: Sym, weight: Sym, out_features: int, bias: Optional[Sym] = None, saved_input: Optional[Sym] = None
    ) -> Sym:
        """A Transformer Engine ``Linear`` under fp8: the input and the weight are quantised to fp8 for
        the GEMM (row-wise copies, freed after it); for backward it keeps column-wise (transposed) fp8
        copies of both, since Hopper's fp8 GEMMs need the transposes (TE docs, "Handling transposes")."""
        rows = x.numel // (weight.numel // out_features)
        kept = x if saved_input is None else saved_input
        x_rowwise = self.new(x.numel, "fp8", False)
        w_rowwise = self.new(weight.numel, "fp8", False, "weight_copy")
        x_columnwise = Sym(kept.numel, "fp8", False) if weight.requires_grad else None
        w_columnwise = Sym(weight.numel, "fp8", False, "weight_copy") if x.requires_grad else None
        out = self.new(rows * out_features, x.dtype, x.requires_grad or weight.requires_grad)
        self.record(
            "fp8_linear", [x_columnwise, w_columnwise], [x, weight] + ([bias] if bias is not None else []), [out]
        )
        self.release(x_rowwise, w_rowwise)
        return out

    def _release_casts(self, *pairs: tuple[Optional[Sym], Optional[Sym]]) -> None:
        """Drop autocast's per-call casts once the op is done (cached and saved ones stay)."""
        cached = {copy.uid for copy in self._weight_cache.values()}
        for cast, original in pairs:
            if cast is not None and cast is not original and cast.uid not in cached:
                self.release(cast)

    def matmul(self, a: Sym, b: Sym, out_numel: int) -> Sym:
        a_in, b_in = self.autocast_input("matmul", a), self.autocast_input("matmul", b)
        out = self.new(out_numel, a_in.dtype, a.requires_grad or b.requires_grad)
        self.record(
            "matmul", [a_in if b.requires_grad else None, b_in if a.requires_grad else None], [a_in, b_in], [out]
        )
        self._release_casts((a_in, a), (b_in, b))
        return out

    def mul(self, a: Sym, b: Sym) -> Sym:
        """Element-wise product with broadcasting; saves each operand the other's gradient needs."""
        out = self.new(max(a.numel, b.numel), self.promote(a.dtype, b.dtype), a.requires_grad or b.requires_grad)
        self.record("mul", [b if a.requires_grad else None, a if b.requires_grad else None], [a, b], [out])
        return out

    def scale(self, a: Sym, dtype: Optional[str] = None) -> Sym:
        """Multiply or add by a Python scalar (or a constant without grad): a new tensor, nothing saved."""
        out = self.new(a.numel, dtype or a.dtype, a.requires_grad)
        self.record("scale", [], [a], [out])
        return out

    def add(self, a: Sym, b: Sym) -> Sym:
        out = self.new(max(a.numel, b.numel), self.promote(a.dtype, b.dtype), a.requires_grad or b.requires_grad)
        self.record("add", [], [a, b], [out], grad_passes_through=True)
        return out

    def unary_saving_input(self, op: str, x: Sym, out_dtype: Optional[str] = None) -> Sym:
        """silu, gelu, pow: the output is new and the input is saved."""
        x_in = self.autocast_input(op, x)
        out = self.new(x.numel, out_dtype or x_in.dtype, x.requires_grad)
        self.record(op, [x_in], [x], [out])
        return out

    def unary_saving_result(self, op: str, x: Sym, dtype: Optional[str] = None) -> Sym:
        """tanh, rsqrt, softmax, log_softmax: the output is new and saved. ``dtype`` is an explicit
        output dtype (``softmax(x, dtype=torch.float32)``), which autocast leaves alone."""
        x_in = x if dtype is not None else self.autocast_input(op, x)
        out = self.new(x.numel, dtype or x_in.dtype, x.requires_grad)
        self.record(op, [out], [x], [out])
        return out

    def reduce(self, x: Sym, out_numel: int, dtype: Optional[str] = None) -> Sym:
        """A reduction (``mean``/``sum`` over the last dimension): its backward needs only shapes."""
        out = self.new(out_numel, dtype or x.dtype, x.requires_grad)
        self.record("reduce", [], [x], [out])
        return out

    def sum(self, x: Sym, out_numel: int, dtype: Optional[str] = None) -> Sym:
        """``x.sum(dim)`` in x's dtype: as :meth:`reduce`, but its backward (``sum_backward`` in
        torch/csrc/autograd/FunctionsManual.cpp) expands the output's gradient, a view: no new memory
        (measured, torch 2.13 CPU: sentence-transformers' mean pooling). A ``sum`` that changes the dtype
        casts the gradient back (a new tensor): use :meth:`reduce` for it."""
        out = self.new(out_numel, dtype or x.dtype, x.requires_grad)
        self.record("sum", [], [x], [out], grad_is_view=out.dtype == x.dtype)
        return out

    def gather(self, x: Sym, out_numel: int, index_numel: int) -> Sym:
        """``x[index]`` with an int64 index: a new tensor; backward needs (and autograd saves) the index."""
        out = self.new(out_numel, x.dtype, x.requires_grad)
        self.record("index", [Sym(index_numel, "int64", False)], [x], [out])
        return out

    def copy(self, x: Sym, out_numel: Optional[int] = None, backward_scratch_bytes: int = 0) -> Sym:
        """A new tensor computed from ``x`` without saving anything: ``.contiguous()``, ``torch.cat``
        of slices, a gather or a repeat (``out_numel`` elements). Backward allocates x's gradient,
        plus ``backward_scratch_bytes`` (e.g. the full-size zeros of a slice's backward)."""
        out = self.new(x.numel if out_numel is None else out_numel, x.dtype, x.requires_grad)
        self.record("copy", [], [x], [out], backward_scratch_bytes)
        return out

    def split(self, x: Sym, sizes: list[int]) -> list[Sym]:
        """``split``/``chunk``: views of ``x``; backward concatenates their gradients into one of x's size."""
        parts = [Sym(size, x.dtype, x.requires_grad, x.tag, x.storage, x.storage_nbytes) for size in sizes]
        self.record("split", [], [x], parts)
        return parts

    def dropout(self, x: Sym, p: float) -> Sym:
        """Dropout in training mode: saves the mask (bool on CUDA; the input's dtype on CPU)."""
        if p <= 0:
            return x
        mask = Sym(x.numel, "bool" if self.device == "cuda" else x.dtype, False)
        self.keep(mask)
        out = self.new(x.numel, x.dtype, x.requires_grad)
        self.record("dropout", [mask], [x], [out])
        if not x.requires_grad:
            self.release(mask)
        return out

    def layer_norm(self, x: Sym, rows: int, weight: Sym, bias: Optional[Sym]) -> Sym:
        """``F.layer_norm``: saves the input and the fp32 mean and rstd of each row."""
        x_in = self.autocast_input("layer_norm", x)
        requires_grad = x.requires_grad or weight.requires_grad or bool(bias is not None and bias.requires_grad)
        out = self.new(x.numel, x_in.dtype, requires_grad)  # a frozen norm over a no-grad input builds no graph
        stats_dtype = "fp32" if self.device == "cuda" else x_in.dtype  # the CPU kernel keeps the input's dtype
        mean = Sym(rows, stats_dtype, False)
        rstd = Sym(rows, stats_dtype, False)
        self.record("layer_norm", [x_in, mean, rstd], [x, weight] + ([bias] if bias else []), [out])
        return out

    def fused_attention(
        self, q: Sym, k: Sym, v: Sym, lse_numel: int, dropout: bool, also_keeps: tuple[Sym, ...] = ()
    ) -> Sym:
        """Flash / memory-efficient SDPA: saves q, k, v, output, fp32 logsumexp (and RNG state)."""
        q_in, k_in, v_in = (self.autocast_input("sdpa", t) for t in (q, k, v))
        out = self.new(q.numel, q_in.dtype, q.requires_grad or k.requires_grad or v.requires_grad)
        lse = Sym(lse_numel, "fp32", False)
        self.record("sdpa_fused", [q_in, k_in, v_in, out, lse, *also_keeps], [q_in, k_in, v_in], [out])
        self._release_casts((q_in, q), (k_in, k), (v_in, v))
        return out

    def fused_attention_value_dim(
        self, q: Sym, k: Sym, v: Sym, out_numel: int, lse_numel: int, dropout: bool
    ) -> Sym:
        """Fused SDPA whose values have their own head width (multi-head latent attention): the output
        has ``out_numel`` elements (v's head width); saves what :meth:`fused_attention` saves."""
        q_in, k_in, v_in = (self.autocast_input("sdpa", t) for t in (q, k, v))
        out = self.new(out_numel, q_in.dtype, q.requires_grad or k.requires_grad or v.requires_grad)
        lse = Sym(lse_numel, "fp32", False)
        self.record("sdpa_fused", [q_in, k_in, v_in, out, lse], [q_in, k_in, v_in], [out])
        self._release_casts((q_in, q), (k_in, k), (v_in, v))
        return out

    def expand(self, x: Sym, out_numel: int) -> Sym:
        """``x.expand(...)``: a view with more elements and no new memory; backward sums the gradient
        of the expanded shape back into one of x's."""
        out = x.view(out_numel)
        self.record("expand", [], [x], [out])
        return out

    def cross_entropy(self, logits: Sym, rows: int) -> Sym:
        """``F.cross_entropy`` = log_softmax (saves its result) + nll_loss (saves the int64 targets); under autocast
        the op is cast as ``cross_entropy`` (fp32 on both devices' lists), then log_softmax runs on that."""
        cast = self.autocast_input("cross_entropy", logits)
        log_probs = self.unary_saving_result("log_softmax", cast)
        if cast is not logits:
            self.release(cast)  # autocast's cast dies with the op: log_softmax saves its result only
        target = Sym(rows, "int64", False)
        loss = self.new(1, log_probs.dtype, True)
        self.record("nll_loss", [log_probs, target], [log_probs], [loss])
        self.release(log_probs)
        return loss

    # ------------------------------------------------------------------ backward replay
    def backward(self, output_grads: Iterable[Sym], parameter_grads_exist: bool = False) -> BackwardReplay:
        """Replay backward over the recorded nodes, newest first (see :class:`BackwardReplay`)."""
        return BackwardReplay.run(self, list(output_grads), parameter_grads_exist)


@dataclass
class BackwardReplay:
    """The result of replaying a tape's backward pass.

    Bytes are relative to the moment backward reaches this tape: the tape's saved tensors
    are counted (they are still alive then), what was alive outside it is not. The peak is
    also given by what it is made of, since saved tensors may already be released by then.
    """

    peak_bytes: int
    """Highest live bytes: saved tensors not yet released, activation gradients, parameter gradients."""
    peak_saved_activation_bytes: int
    """Saved activations still alive at the peak."""
    peak_saved_weight_copy_bytes: int
    """Saved weight copies (autocast, fp8) still alive at the peak."""
    peak_activation_grad_bytes: int
    """Activation gradients (and scratch) alive at the peak."""
    peak_parameter_grad_bytes: int
    """The parameter gradients (new or being accumulated) among ``peak_bytes``."""
    parameter_grad_bytes: int
    """Gradients of the tape's parameters that remain as ``.grad`` afterwards (0 when they already existed)."""
    input_grad_bytes: int
    """Gradients left for the tape's inputs (flowing on to the previous layer)."""
    events: tuple = ()
    """The allocation log of the backward, in order: ("alloc" | "free", key, bytes) with key a saved
    storage id (int), ("g", uid) for an activation gradient, ("p", uid) for a parameter gradient that
    stays in ``.grad``, or ("t", n) for a transient (a gradient summed into an existing one, scratch)."""

    @classmethod
    def run(cls, tape: Tape, output_grads: list[Sym], parameter_grads_exist: bool = False) -> BackwardReplay:
        """Walk the nodes newest first, as PyTorch's engine does on one device.

        ``parameter_grads_exist``: with gradient accumulation, later micro-batches add each
        new parameter gradient into the existing ``.grad`` and free it at once.
        """
        pending_saves: dict[int, int] = {}
        for node in tape.nodes:
            for tensor in node.saved:
                if tensor.tag not in NOT_NEW_MEMORY:
                    pending_saves[tensor.storage] = pending_saves.get(tensor.storage, 0) + 1
        saved_live = dict(tape.saved_storages)
        saved = {"activation": 0, "weight_copy": 0}
        for tensor in saved_live.values():
            saved[tensor.tag] += tensor.storage_nbytes
        grads: dict[int, int] = {}  # uid of a tensor -> bytes of its gradient
        holder: dict[int, tuple] = {}  # uid of a tensor -> key of the storage that holds its gradient
        holders: dict[tuple, int] = {}  # key of a gradient storage -> how many tensors' gradients it holds
        storage_bytes: dict[tuple, int] = {}  # key of a gradient storage -> its bytes
        step = granularity(tape.device)
        grad_bytes = 0
        for grad in output_grads:
            if grad.uid not in grads:
                grads[grad.uid] = rounded(grad.nbytes, tape.device)
                holder[grad.uid], holders[("g", grad.uid)] = ("g", grad.uid), 1
                storage_bytes[("g", grad.uid)] = grads[grad.uid]
                grad_bytes += grads[grad.uid]
        param_grad_bytes = 0
        seen_params: set[int] = set()
        peak = saved["activation"] + saved["weight_copy"] + grad_bytes
        at_peak = (saved["activation"], saved["weight_copy"], grad_bytes, 0)
        events: list[tuple] = []
        transients = 0

        def drop_gradient(uid: int) -> int:
            """The engine is done with a tensor's gradient: its storage is freed once nothing else holds it."""
            grads.pop(uid)
            key = holder.pop(uid)
            holders[key] -= 1
            if holders[key]:
                return 0
            del holders[key]
            size = storage_bytes.pop(key)
            events.append(("free", key, size))
            return size

        for node in reversed(tape.nodes):
            if not any(out.uid in grads for out in node.outputs):
                continue  # no gradient reaches this node: the engine never runs it
            new_activation_grads = node.extra_backward_bytes
            new_param_grads = 0
            transient_param_grads = 0
            node_transients = []
            summed: list[Sym] = []  # inputs whose gradient this node adds to one they already have
            if node.extra_backward_bytes:
                node_transients.append(node.extra_backward_bytes)
            for tensor in node.grad_inputs:
                size = -(-tensor.numel * DTYPE_BYTES[tensor.dtype] // step) * step
                if tensor.tag == "parameter":
                    if tensor.uid in seen_params or parameter_grads_exist:
                        transient_param_grads += size  # computed, added into the existing .grad, freed
                        node_transients.append(size)
                    else:
                        new_param_grads += size
                        events.append(("alloc", ("p", tensor.uid), size))
                    seen_params.add(tensor.uid)
                elif tensor.uid in grads:
                    new_activation_grads += size  # a second consumer: summed into the existing gradient
                    summed.append(tensor)
                elif _shares_output_gradient(node, tensor):
                    key = holder[node.outputs[0].uid]  # AddBackward0 hands on the same tensor; sum's is a view
                    grads[tensor.uid], holder[tensor.uid] = size, key
                    holders[key] += 1
                else:
                    grads[tensor.uid] = size
                    holder[tensor.uid], holders[("g", tensor.uid)] = ("g", tensor.uid), 1
                    storage_bytes[("g", tensor.uid)] = size
                    grad_bytes += size
                    events.append(("alloc", ("g", tensor.uid), size))
            keys = [("t", transients + i) for i in range(len(node_transients))]
            transients += len(keys)
            events += [("alloc", key, size) for key, size in zip(keys, node_transients)]
            events += [("free", key, size) for key, size in zip(keys, node_transients)]
            contributions = [(("t", transients + i), grads[t.uid]) for i, t in enumerate(summed)]
            transients += len(contributions)
            events += [("alloc", key, size) for key, size in contributions]
            param_grad_bytes += new_param_grads
            activation_grads = grad_bytes + new_activation_grads
            parameter_grads = param_grad_bytes + transient_param_grads
            total = saved["activation"] + saved["weight_copy"] + activation_grads + parameter_grads
            if total > peak:
                peak = total
                at_peak = (saved["activation"], saved["weight_copy"], activation_grads, parameter_grads)
            for out in node.outputs:
                if out.uid in grads:
                    grad_bytes -= drop_gradient(out.uid)
            for tensor in node.saved:
                if tensor.tag in NOT_NEW_MEMORY:
                    continue
                pending_saves[tensor.storage] -= 1
                if pending_saves[tensor.storage] == 0 and tensor.storage in saved_live:
                    released = saved_live.pop(tensor.storage)
                    saved[released.tag] -= released.storage_nbytes
                    events.append(("free", released.storage, released.storage_nbytes))
            # InputBuffer::accumulate (torch/csrc/autograd/input_buffer.cpp), once the node has returned and its
            # incoming gradient and saved tensors are gone: ``old + new`` into a new tensor (measured: the buffers
            # hold views or shared tensors, which it does not add into in place), then both are dropped
            pending = sum(size for _, size in contributions)
            for tensor, (key, size) in zip(summed, contributions):
                if holder[tensor.uid] != ("g", tensor.uid):  # a shared gradient: the sum becomes this tensor's own
                    grad_bytes -= drop_gradient(tensor.uid)
                    grads[tensor.uid], holder[tensor.uid], holders[("g", tensor.uid)] = size, ("g", tensor.uid), 1
                    storage_bytes[("g", tensor.uid)] = size
                    grad_bytes += size
                    events.append(("alloc", ("g", tensor.uid), size))
                    total = saved["activation"] + saved["weight_copy"] + grad_bytes + pending + param_grad_bytes
                else:  # the sum replaces the old gradient (same key, same bytes)
                    sum_key = ("t", transients)
                    transients += 1
                    events += [("alloc", sum_key, size), ("free", sum_key, size)]
                    total = saved["activation"] + saved["weight_copy"] + grad_bytes + pending + size + param_grad_bytes
                if total > peak:
                    peak = total
                    at_peak = (saved["activation"], saved["weight_copy"], total - saved["activation"]
                               - saved["weight_copy"] - param_grad_bytes, param_grad_bytes)
                pending -= size
                events.append(("free", key, size))
        return cls(
            peak_bytes=peak,
            peak_saved_activation_bytes=at_peak[0],
            peak_saved_weight_copy_bytes=at_peak[1],
            peak_activation_grad_bytes=at_peak[2],
            peak_parameter_grad_bytes=at_peak[3],
            parameter_grad_bytes=param_grad_bytes,
            input_grad_bytes=grad_bytes,
            events=tuple(events),
        )


def _shares_output_gradient(node: Node, tensor: Sym) -> bool:
    """Whether ``node``'s backward gives ``tensor`` its output's gradient storage rather than a new tensor.

    ``AddBackward0`` (tools/autograd/derivatives.yaml ``add.Tensor``: ``self: grad``,
    ``other: maybe_multiply(grad, alpha)`` with alpha = 1) returns the incoming gradient itself for an input of
    the output's shape and dtype; only a broadcast input (``sum_to``) or another dtype (the engine's cast) gets a
    new tensor. Measured on the residual adds of a pre-LN block (tests/test_tape.py). ``sum``'s backward is
    ``grad.expand(sizes)``, a view of the output's gradient (``Node.grad_is_view``)."""
    if tensor.tag in NOT_NEW_MEMORY:
        return False
    if node.grad_is_view:
        return True
    if not node.grad_passes_through:
        return False
    out = node.outputs[0]
    return tensor.numel == out.numel and tensor.dtype == out.dtype
