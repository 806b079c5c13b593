"""Sequential stacks: a model as an ordered list of stacks whose forward runs in order and backward in reverse.

A vision-language model is a vision tower, then a projector, then the language model; an
encoder-decoder is an encoder, then a decoder. The language model (or decoder) is trainmem's decoder
path (``simulate.py``); the stacks before it are described here as :class:`Stack` objects, each an
ordered list of :class:`Piece` objects (a patch embedding, ``num_layers`` identical encoder layers, a
projector), each replayed once on a tape (``layers.Trace``) and repeated on the timeline.

Each stack has its own trainability: a frozen vision tower whose input needs no gradient builds no
autograd graph at all (nothing is saved, nothing flows back into it), a trained projector saves its
input and leaves gradients, a trained tower saves what every layer saves (or, under full activation
checkpointing, only each layer's input, as transformers' ``gradient_checkpointing_enable`` checkpoints
every encoder that supports it). What the later stack keeps of the earlier one's output is the
earlier stack's ``output_bytes`` (image features) until it is merged into the language model's
input embeddings.

The simulation calls :func:`forward` after the language model's embedding (transformers computes
``inputs_embeds`` first, then the image features, then ``masked_scatter``s them in) and
:func:`backward` after the language model's first layer's backward (the gradient of the merged
embeddings flows to the image features).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from .layers import Trace
from .timeline import MemoryAccount


DISCARDED = "graph of unused stack outputs"
DISCARDED_DETAIL = (
    "what pieces whose output feeds nothing saved (LLaVA's last tower layer), and the tower outputs the wrapper "
    "returns (image_outputs): freed when the model's output object is dropped after the loss"
)


@dataclass(frozen=True)
class Piece:
    """One replayed piece of a stack, repeated ``count`` times in a row (identical layers)."""

    label: str
    """Timeline label; ``{index}`` is replaced by the repetition's index."""
    count: int
    trace: Trace
    trains: bool
    """Its parameters train: their gradients appear in its backward."""
    recompute: bool = False
    """Full activation checkpointing: only the input is kept, the forward runs again in backward."""
    input_bytes: int = 0
    """The input's bytes (what a checkpoint keeps)."""
    discarded: bool = False
    """Its output feeds nothing after the stack (LLaVA's last tower layer): no gradient reaches it, and its
    graph (what it saved) lives only as long as the model's output object, until the loss is taken."""
    recompute_forward: Optional[Trace] = None
    """With ``recompute``: the piece replayed with nothing requiring grad. A checkpointed forward saves nothing
    (non-reentrant ``torch.utils.checkpoint`` discards what autograd packs), so its working memory is this one's
    (as ``simulate.py`` does for the decoder's layers)."""

    def kept_bytes(self) -> tuple[int, int]:
        """(activation, autocast weight-copy) bytes kept until the piece's backward."""
        if self.recompute:
            return self.input_bytes, 0
        return self.trace.saved_activation_bytes, self.trace.saved_weight_copy_bytes

    def labels(self, phase: str, suffix: str) -> list[str]:
        if self.count == 1 and "{index}" not in self.label:
            return [f"{self.label} {phase}{suffix}"]
        return [f"{self.label.format(index=index)} {phase}{suffix}" for index in range(self.count)]


@dataclass(frozen=True)
class Stack:
    """A part of the model that runs before the decoder path (a vision tower, a projector, an encoder)."""

    name: str
    pieces: tuple[Piece, ...]
    output_bytes: int
    """What the next stack receives from this one."""
    keeps_hidden_states: bool = False
    """Called with ``output_hidden_states=True``: every piece's output stays alive until the stack returns."""
    outputs_held_until_loss: bool = False
    """The wrapper returns the stack's outputs in the model's output object (transformers 5.24
    ``LlavaCausalLMOutputWithPast.image_outputs``: the tower's ``hidden_states`` tuple and the projector's
    per-image features): its last piece's output lives until the loss is taken (measured, torch 2.13 CPU: LLaVA
    with a trained tower; with a frozen one a second hidden state was held too, not modelled)."""

    @property
    def saved_name(self) -> str:
        return f"{self.name}: saved for backward"

    @property
    def needs_backward(self) -> bool:
        return any(piece.trains or piece.kept_bytes()[0] for piece in self.pieces)


def forward(account: MemoryAccount, stacks: Sequence[Stack], micro_batch: int, suffix: str) -> None:
    """Record the stacks' forward, in order; leaves the last stack's output alive ("<name>: output")."""
    previous: Optional[Stack] = None
    for stack in stacks:
        hidden_name = f"{stack.name}: hidden state"
        for piece in stack.pieces:
            trace = piece.trace
            saved, copies = piece.kept_bytes()
            delta = {
                ("activations", stack.saved_name): saved,
                ("parameters", "autocast weight copies"): copies,
                ("parameters", "autocast cache"): trace.cached_weight_copy_bytes
                if piece.recompute
                else trace.cache_only_weight_copy_bytes,
            }
            if stack.keeps_hidden_states:
                delta[("activations", f"{stack.name}: hidden states")] = trace.output_bytes
            account.record_series(
                piece.labels("forward", suffix),
                "forward",
                micro_batch,
                {("activations", f"{stack.name}: working memory"): (piece.recompute_forward or trace).forward_peak_bytes},
                delta,
            )
            account.set("activations", hidden_name, 0 if stack.keeps_hidden_states else trace.output_bytes,
                        f"the current {stack.name} piece's input")
        for piece in stack.pieces:
            if piece.discarded:  # held by the model's output object until the loss is taken
                saved, copies = piece.kept_bytes()
                account.add("activations", stack.saved_name, -saved * piece.count)
                account.add("activations", DISCARDED, saved * piece.count, DISCARDED_DETAIL)
                account.add("parameters", "autocast weight copies", -copies * piece.count)
                account.add("parameters", "autocast cache", copies * piece.count)  # cached until autocast exits
        if stack.outputs_held_until_loss and stack.pieces and stack is not stacks[-1]:  # the last: see merged()
            # the last piece's output (a frozen tower measured one more hidden state held: not modelled)
            account.add("activations", DISCARDED, stack.pieces[-1].trace.output_bytes, DISCARDED_DETAIL)
        if previous is not None:
            account.set("activations", f"{previous.name}: output", 0)
        account.set("activations", f"{stack.name}: hidden states", 0)
        account.set("activations", hidden_name, 0)
        account.set("activations", f"{stack.name}: output", stack.output_bytes, f"what the {stack.name} hands on")
        account.details[("activations", stack.saved_name)] = f"tensors the {stack.name} saved for backward"
        previous = stack


def merged(account: MemoryAccount, stacks: Sequence[Stack], micro_batch: int, suffix: str, merged_bytes: int) -> None:
    """The last stack's output is merged into the decoder's input (``inputs_embeds.masked_scatter``: a new
    tensor of ``merged_bytes`` replaces the old one) and released."""
    if not stacks:
        return
    last = stacks[-1]
    account.record(
        f"merge {last.name} output{suffix}", "forward", micro_batch, {("activations", "embedding output"): merged_bytes}
    )
    if last.outputs_held_until_loss:  # the per-image features stay in the model's output object
        account.add("activations", DISCARDED, account.get("activations", f"{last.name}: output"), DISCARDED_DETAIL)
    account.set("activations", f"{last.name}: output", 0)


def backward(
    account: MemoryAccount,
    stacks: Sequence[Stack],
    micro_batch: int,
    suffix: str,
    grads_exist: bool,
    stored_gradient_bytes: Callable[[int], int],
) -> None:
    """Record the stacks' backward, last stack first, each piece last first.

    ``stored_gradient_bytes``: what a piece's parameter gradients occupy once stored (sharded under
    ZeRO-2/3, 0 when a resident gradient buffer holds them)."""
    for stack in reversed(stacks):
        if not stack.needs_backward:
            continue
        for piece in reversed(stack.pieces):
            if piece.discarded:
                continue
            trace = piece.trace
            saved, copies = piece.kept_bytes()
            grads = trace.backward_peak_grad_bytes if piece.trains else 0
            working = trace.backward_peak_activation_grad_bytes + (grads if grads_exist else 0)
            transient = {
                ("activations", "backward working memory"): working,
                ("gradients", "gradients"): 0 if grads_exist else grads,
            }
            if piece.recompute:
                transient[("activations", "backward working memory")] += trace.backward_peak_saved_activation_bytes
            else:
                transient[("activations", stack.saved_name)] = trace.backward_peak_saved_activation_bytes - saved
                transient[("parameters", "autocast weight copies")] = trace.backward_peak_saved_weight_copy_bytes - copies
            stored = 0
            if piece.trains and not grads_exist:
                stored = stored_gradient_bytes(trace.parameter_grad_bytes)
            account.record_series(
                list(reversed(piece.labels("backward", suffix))),
                "backward",
                micro_batch,
                transient,
                {
                    ("activations", stack.saved_name): -saved,
                    ("parameters", "autocast weight copies"): -copies,
                    ("gradients", "gradients"): stored,
                },
            )
        account.set("activations", stack.saved_name, 0)
