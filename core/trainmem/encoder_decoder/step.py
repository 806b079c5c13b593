"""The hooks the step simulation calls for an encoder-decoder (``simulate.py``, ``plan.py``).

* :func:`source_ids_bytes`: the int64 source token ids (``input_ids``); the target ids are the batch the
  decoder path already counts (``labels``), and ``_shift_right(labels)`` makes ``decoder_input_ids``,
  another b·t int64 tensor alive through the forward (counted here too);
* :func:`forward`: the encoder stack's forward (before the decoder's embedding, as T5 runs it); its output
  stays alive as ``encoder: output`` through the decoder;
* :func:`start_backward`: the gradient buffer of the encoder output appears with the decoder's backward;
* :func:`backward`: after the decoder's embedding backward, the encoder output and its gradient buffer are
  handed to the encoder stack's backward.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .. import stacks
from ..allocator import rounded
from ..layers import LayerKernels
from ..tape import DTYPE_BYTES
from ..timeline import MemoryAccount
from .audio import input_features_numel
from .ends import trace_seq2seq_embedding  # noqa: F401  (simulate.py's embedding of BART's decoder)
from .stack import ENCODER, encoder_pieces

if TYPE_CHECKING:
    from ..plan import Plan

GRADIENT = "encoder output gradient"
GRADIENT_DETAIL = "the gradient of the encoder output, summed over the decoder layers' cross-attention"
OUTPUT = f"{ENCODER}: output"


def encoder_trains(plan: Plan) -> bool:
    """The encoder's own weights train (full fine-tuning; LoRA freezes them)."""
    return plan.setup.finetuning.method == "full"


def encoder_output_requires_grad(plan: Plan) -> bool:
    """Its weights train, or LoRA adapts some of its modules."""
    return encoder_trains(plan) or (plan.encoder is not None and any(plan.has_adapter(t.module) for t in plan.encoder.layer))


def source_ids_bytes(plan: Plan) -> int:
    """``input_ids`` (b·s_src) and ``decoder_input_ids`` (b·t, from ``_shift_right(labels)``), int64."""
    if plan.encoder is None:
        return 0
    batch = plan.setup.micro_batch_size
    audio = plan.encoder.architecture
    if audio.num_mel_bins:  # Whisper: fp32 input_features (b × mel × 2·S) instead of source ids
        return rounded(input_features_numel(audio, batch) * 4, plan.device) + rounded(
            batch * plan.setup.sequence_length * 8, plan.device
        )
    return rounded(batch * plan.source_length * 8, plan.device) + rounded(
        batch * plan.setup.sequence_length * 8, plan.device
    )


def _stack(plan: Plan, kernels: LayerKernels, grads_exist: bool) -> stacks.Stack:
    return encoder_pieces(
        plan.encoder, plan.setup.micro_batch_size, plan.source_length, kernels, encoder_trains(plan),
        plan.setup.activation_checkpointing == "full", grads_exist, plan.has_adapter,
    )


def forward(plan: Plan, account: MemoryAccount, micro_batch: int, suffix: str, kernels: LayerKernels, grads_exist: bool) -> None:
    if plan.encoder is None:
        return
    account.set("activations", BUCKETS, bucket_index_bytes(plan, plan.source_length), BUCKETS_DETAIL)
    account.set("activations", BIAS, position_bias_tensor_bytes(plan), "the relative position bias, handed down the encoder")
    stacks.forward(account, [_stack(plan, kernels, grads_exist)], micro_batch, suffix)
    if plan.setup.activation_checkpointing == "full":  # the checkpoints keep the shared position bias
        account.set("activations", BIAS, position_bias_bytes(plan), "the relative position bias, kept by the checkpoints")
    else:  # a local of T5Stack.forward: freed when the encoder returns
        account.set("activations", BIAS, 0)
    account.set("activations", DECODER_BUCKETS, bucket_index_bytes(plan, plan.setup.sequence_length), BUCKETS_DETAIL)


def end_forward(plan: Plan, account: MemoryAccount, kernels: LayerKernels) -> None:
    """When the model's output object is dropped after the loss: under autocast no decoder layer saved the
    encoder output itself (each cross-attention K/V projection saved its own low-precision cast), so the
    reference in ``Seq2SeqLMOutput.encoder_last_hidden_state`` was its last one and it is freed here, before
    the loss's backward (measured, torch 2.13 CPU autocast: Whisper's fp32 encoder output, BART's and T5's).

    T5 too: what the real t5v11-small AMP case still held at the loss's backward was not its encoder output but
    the two stacks' relative-position bucket indices (:func:`bucket_index_bytes`, 256 × 256 + 64 × 64 int64:
    532,480 bytes against the output's 524,288), which an earlier rule of keeping the output stood in for."""
    if plan.encoder is None or kernels.autocast is None or kernels.autocast == kernels.stream_dtype:
        return
    account.set("activations", OUTPUT, 0)


def output_gradient_bytes(plan: Plan, kernels: LayerKernels) -> int:
    if plan.encoder is None or not encoder_output_requires_grad(plan):
        return 0
    numel = plan.setup.micro_batch_size * plan.source_length * plan.encoder.architecture.hidden_size
    return rounded(numel * DTYPE_BYTES[kernels.stream_dtype], plan.device)


def start_backward(plan: Plan, account: MemoryAccount, kernels: LayerKernels) -> None:
    if plan.encoder is not None:
        account.set("activations", GRADIENT, output_gradient_bytes(plan, kernels), GRADIENT_DETAIL)


def shared_gradient_bytes(plan: Plan, stored: Callable[[int], int]) -> int:
    """The gradient of ``shared`` while the encoder runs backward: it is used by the encoder's embedding too,
    so the autograd engine holds the sum of the head's and the decoder's gradients in its input buffer
    until the encoder's embedding has added its own, and only then is it ``.grad`` (0 when ``shared`` is
    frozen, or when the stored gradient is not local: ZeRO buckets, offload)."""
    if not encoder_trains(plan) or plan.encoder.architecture.num_mel_bins:  # Whisper's encoder reads no tokens
        return 0
    produced = rounded(plan.architecture.vocab_size * plan.architecture.hidden_size * 4, plan.device)
    return produced if stored(produced) == produced else 0


def position_bias_bytes(plan: Plan) -> int:
    """T5's relative position bias of the encoder, (1, a, s, s) in the weights' dtype: its gradient, summed
    over the layers into one buffer, lives through the encoder's backward (the bias is computed in the first
    layer, whose backward is the last); under full checkpointing the bias itself is kept too (each block's
    checkpoint saves it as an input)."""
    arch = plan.encoder.architecture if plan.encoder is not None else None
    if arch is None or not arch.relative_attention_num_buckets or not encoder_trains(plan):
        return 0
    numel = arch.num_attention_heads * plan.source_length * plan.source_length
    return rounded(numel * DTYPE_BYTES[plan.precision.compute_weight_dtype if plan.precision.autocast is None
                                       else plan.precision.stored_weight_dtype], plan.device)


def bucket_index_bytes(plan: Plan, length: int) -> int:
    """T5's ``_relative_position_bucket`` index of a stack (``length × length`` int64), computed in the stack's first
    layer: the ``relative_attention_bias`` lookup saves it for its weight's gradient (derivatives.yaml ``embedding``:
    ``embedding_backward(grad, indices, ...)``) until the stack's backward is done; nothing is saved when the table
    is frozen (LoRA). Measured: t5v11-small-fp32-eager-b4-src256-tgt32 (256 × 256 and 32 × 32, kept through the
    loss's backward); under full checkpointing the first layer's recomputation makes it again (not modelled:
    a transient). Counted from the stack's embedding (the decoder's: from the end of the encoder's forward) to
    the end of the stack's backward."""
    arch = plan.encoder.architecture if plan.encoder is not None else None
    if arch is None or not arch.relative_attention_num_buckets or not encoder_trains(plan):
        return 0
    if plan.setup.activation_checkpointing == "full":
        return 0  # computed inside the first layer's checkpoint: recomputed with it in backward, not kept
    return rounded(length * length * 8, plan.device)


def position_bias_tensor_bytes(plan: Plan) -> int:
    """The encoder's relative position bias (the lookup's (s, s, a) output in the table's dtype, permuted to
    (1, a, s, s) as a view): alive from the first layer to the end of the encoder's forward (measured, as above),
    whether or not the table trains."""
    arch = plan.encoder.architecture if plan.encoder is not None else None
    if arch is None or not arch.relative_attention_num_buckets:
        return 0
    numel = arch.num_attention_heads * plan.source_length * plan.source_length
    dtype = plan.precision.compute_weight_dtype if plan.precision.autocast is None else plan.precision.stored_weight_dtype
    return rounded(numel * DTYPE_BYTES[dtype], plan.device)


PENDING = "pending tied-embedding gradient"
BUCKETS = "encoder: relative position buckets"
DECODER_BUCKETS = "decoder: relative position buckets"
BUCKETS_DETAIL = "T5's int64 bucket index, saved by the relative_attention_bias lookup"
BIAS = "encoder: position bias"
BIAS_GRADIENT = "encoder: position bias gradient"


def backward(plan: Plan, account: MemoryAccount, micro_batch: int, suffix: str, kernels: LayerKernels,
             grads_exist: bool, stored: Callable[[int], int]) -> None:
    if plan.encoder is None:
        return
    account.set("activations", OUTPUT, 0)  # the last decoder layer's saved K/V inputs are gone
    account.set("activations", DECODER_BUCKETS, 0)  # the decoder's relative_attention_bias has its gradient
    account.set("activations", GRADIENT, 0)  # handed to the final norm's backward (counted in its trace)
    shared = shared_gradient_bytes(plan, stored)
    if shared:
        if not grads_exist:
            account.add("gradients", "gradients", -shared)
        account.set("activations", PENDING, shared, "the gradient of shared, held until the encoder's embedding adds its own")
    account.set("activations", BIAS_GRADIENT, position_bias_bytes(plan), "summed over the encoder's layers")
    stacks.backward(account, [_stack(plan, kernels, grads_exist)], micro_batch, suffix, grads_exist, stored)
    account.set("activations", BIAS_GRADIENT, 0)
    account.set("activations", BIAS, 0)
    account.set("activations", BUCKETS, 0)
    if shared:
        account.set("activations", PENDING, 0)
        if not grads_exist:
            account.add("gradients", "gradients", shared)
