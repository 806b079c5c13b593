"""The vision stacks of a VLM step, replayed on the tape: patch embedding, encoder layers, projector.

The patch embedding follows the towers' ``embeddings`` modules (transformers 5.24): ``pixel_values`` cast
to the weights' dtype, a convolution with stride = patch (a matmul over ``C·p·p`` inputs per patch, that
saves its input when the weight trains), CLIP's and Llama 4's ``torch.cat`` of the class embedding (a new
tensor), ``+ position_embedding(position_ids)`` (a lookup and an add), and the pre-norm of CLIP
(``pre_layrnorm``), Pixtral (``ln_pre``) and Llama 4 (``layernorm_pre``). The encoder layers are the shared
layer program (``layers.trace_layer``) on the layer's :meth:`~trainmem.vision.tower.VisionStack.layer_architecture`,
with the tower's images as the batch and its patches as the sequence (Pixtral concatenates every image of
the batch into one sequence with a block-diagonal 4-D mask, which SDPA keeps; Qwen-VL runs its windows and
images as separate spans). The projector is its norm (if any), its first linear, GELU and second linear
(or its single projection), over the image-feature rows.

Not replayed (small next to the layers, stated): SigLIP's post-layernorm and attention-pooling head, the
average pool of Gemma 3, the pixel-(un)shuffle reshapes of Idefics3/SmolVLM/Llama 4, Llama 4's
``vision_adapter`` MLP, Qwen3-VL's DeepStack mergers' activations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from ..architecture import Architecture
from ..layers import LayerKernels, LayerProgram, LayerShape, Trace, Trainability, replay, trace_layer
from ..stacks import Piece, Stack
from ..tape import DTYPE_BYTES, Sym, Tape
from .tokens import VisualCounts
from .tower import VisionStack

TOWER = "vision tower"
PROJECTOR = "projector"


@dataclass(frozen=True)
class _Sizes:
    sequences: int
    """Tower inputs in the micro-batch (the batch of the encoder layers)."""
    patches: int
    """Patches per tower input (the sequence of the encoder layers)."""
    features: int
    """Projector output rows in the micro-batch."""
    pixel_numel: int


def _sizes(stack: VisionStack, counts: VisualCounts, micro_batch_size: int) -> _Sizes:
    total = counts.times(micro_batch_size)
    if stack.tokens.kind == "longest_edge":  # Pixtral: one sequence of every image's patches
        return _Sizes(1, total.tower_patches, total.features, total.pixel_values_numel)
    sequences = max(1, total.tower_sequences)
    return _Sizes(sequences, total.tower_patches // sequences, total.features, total.pixel_values_numel)


def _has(stack_tensors, *suffixes: str) -> bool:
    return any(t.name.endswith(suffix) for t in stack_tensors for suffix in suffixes)


def _patch_embedding(stack: VisionStack, sizes: _Sizes, kernels: LayerKernels, trains: bool, grads_exist: bool) -> Trace:
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    arch = stack.layer_architecture()
    shape = _layer_shape(stack, sizes)
    program = LayerProgram(arch, shape, kernels, Trainability(lambda m: trains, lambda m: False), tape)
    # pixel_values is an input of the step (counted there): a conv that saves it as it is adds nothing.
    same_dtype = kernels.weight_dtype == "fp32" and kernels.autocast is None
    pixels = Sym(sizes.pixel_numel, "fp32", False, "external") if same_dtype else tape.new(sizes.pixel_numel, "fp32", False)
    x = pixels if same_dtype else tape.to(pixels, kernels.autocast or kernels.weight_dtype)
    h = stack.hidden_size
    conv = next(t for t in stack.prelude if t.name.endswith(("patch_embedding.weight", "patch_conv.weight", "proj.weight", "linear.weight")))
    per_patch = conv.numel // h
    weight = program.parameter("patch_embedding", conv.numel)
    bias = program.parameter("patch_embedding", h) if _has(stack.prelude, "patch_embedding.bias", "proj.bias") else None
    class_token = _has(stack.prelude, "class_embedding")
    if conv.name.endswith("linear.weight"):  # Llama 4: unfold + nn.Linear
        out = tape.linear(x, weight, h, bias, in_features=per_patch)
    else:  # Conv2d / Conv3d: ConvolutionBackward saves the (cast) input and weight (Tape.conv)
        out = tape.conv(x, weight, h, bias, per_patch)
    if x is not pixels:
        tape.release(x)
    if class_token:  # torch.cat([class_embeds, patch_embeds], dim=1)
        joined = tape.copy(out, sizes.sequences * sizes.patches * h)
        tape.release(out)
        out = joined
    if _has(stack.prelude, "position_embedding.weight", "pos_embed.weight", "positional_embedding_vlm"):
        table = program.parameter("position_embedding", sizes.patches * h)
        positions = tape.gather(table, sizes.patches * h, sizes.patches) if trains else table
        summed = tape.add(out, positions)
        tape.release(out, positions)
        out = summed
    if _has(stack.prelude, "pre_layrnorm.weight", "ln_pre.weight", "layernorm_pre.weight"):
        normed = program.norm("pre_norm", out, sizes.sequences * sizes.patches, h)
        tape.release(out)
        out = normed
    forward_peak = tape.peak_live_bytes - (0 if same_dtype else pixels.nbytes)
    tape.release(pixels)
    return replay(tape, [out], forward_peak, out.nbytes, False, grads_exist, pixels)


def _layer_shape(stack: VisionStack, sizes: _Sizes) -> LayerShape:
    return LayerShape(
        batch=sizes.sequences,
        seq=sizes.patches,
        kv_seq=sizes.patches,
        heads=stack.num_heads,
        kv_heads=stack.num_heads,
        head_dim=stack.head_dim,
        hidden=stack.hidden_size,
        intermediate=stack.intermediate_size,
        stream_tokens=sizes.sequences * sizes.patches,
        attention_mask=stack.tokens.kind == "longest_edge" and sizes.sequences * sizes.patches > 0,
    )


def _projector(stack: VisionStack, sizes: _Sizes, kernels: LayerKernels, trains: bool, input_grad: bool, grads_exist: bool) -> Trace:
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    in_w, hidden, out_w = stack.projector_in_features, stack.projector_hidden, stack.projector_out_features
    norms = [t for t in stack.projector if len(t.shape) == 1 and "norm" in t.name or t.name.endswith("ln_q.weight")]
    layernorm = any(t.name.endswith("norm.bias") for t in stack.projector)
    arch = Architecture(
        vocab_size=1, hidden_size=in_w, num_hidden_layers=1, num_attention_heads=1, intermediate_size=max(hidden, 1),
        hidden_act="gelu", norm="layernorm" if layernorm else "rmsnorm",
    )
    shape = LayerShape(sizes.features, 1, 1, 1, 1, in_w, in_w, max(hidden, 1), sizes.features)
    program = LayerProgram(arch, shape, kernels, Trainability(lambda m: trains, lambda m: False), tape)
    rows = sizes.features
    x = tape.new(rows * in_w, kernels.stream_dtype, input_grad)
    out = x
    if norms:
        width = norms[0].shape[0]
        out = program.norm("projector.norm", x, rows * in_w // width, width)
    bias = any(t.name.endswith(".bias") and "norm" not in t.name for t in stack.projector)
    if hidden:
        first = program.linear("projector.linear_1", out, in_w, hidden, bias)
        if out is not x:
            tape.release(out)
        activated = program._activation(first)
        tape.release(first)
        out = program.linear("projector.linear_2", activated, hidden, out_w, bias)
        tape.release(activated)
    else:
        projected = program.linear("projector.proj", out, in_w, out_w, bias)
        if out is not x:
            tape.release(out)
        out = projected
    forward_peak = tape.peak_live_bytes - x.nbytes
    input_saved = x.storage in tape.saved_storages
    tape.release(x)
    return replay(tape, [out], forward_peak, out.nbytes, input_saved, grads_exist, x)


class _SpanAttentionLayer(LayerProgram):
    """Qwen-VL's vision attention without flash-attention varlen: q, k, v are split into the spans of
    ``cu_seqlens`` (windows, or whole images in the full-attention blocks), SDPA runs per span (saving each
    span's output), and ``torch.cat`` joins the outputs into a new tensor that ``proj`` saves
    (``Qwen2_5_VLVisionAttention.forward``; measured: one more hidden-size tensor per layer)."""

    def _attention_core(self, q, k, v):
        out = super()._attention_core(q, k, v)
        joined = self.tape.copy(out)
        self.tape.release(out)
        return joined


def _trace_tower_layer(
    stack: VisionStack, shape: LayerShape, kernels: LayerKernels, trainability: Trainability, input_grad: bool,
    grads_exist: bool,
) -> Trace:
    """``layers.trace_layer`` with the tower's own layer program."""
    arch = stack.layer_architecture()
    if stack.tokens.kind != "smart_resize":
        return trace_layer(arch, shape, kernels, trainability, input_grad, grads_exist)
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    x = tape.new(shape.stream_tokens * shape.hidden, kernels.stream_dtype, input_grad)
    out = _SpanAttentionLayer(arch, shape, kernels, trainability, tape).layer(x)
    forward_peak = tape.peak_live_bytes - x.nbytes
    input_saved = x.storage in tape.saved_storages
    tape.release(x)
    return replay(tape, [out], forward_peak, out.nbytes, input_saved, grads_exist, x)


@lru_cache(maxsize=64)
def vision_stacks(
    stack: VisionStack,
    counts: VisualCounts,
    micro_batch_size: int,
    kernels: LayerKernels,
    tower_trains: bool,
    projector_trains: bool,
    checkpointing: str,
    grads_exist: bool,
) -> tuple[Stack, ...]:
    """The tower and the projector of one micro-batch, as stacks for :mod:`trainmem.stacks`."""
    if not counts.tower_patches or micro_batch_size == 0:
        return ()
    kernels = replace(kernels, lora_rank=0, quantized_compute_dtype=None, selective_recompute=False)
    sizes = _sizes(stack, counts, micro_batch_size)
    stream = sizes.sequences * sizes.patches * stack.hidden_size * DTYPE_BYTES[kernels.stream_dtype]
    recompute = checkpointing == "full" and tower_trains
    trainability = Trainability(lambda m: tower_trains, lambda m: False)
    layer = _trace_tower_layer(stack, _layer_shape(stack, sizes), kernels, trainability, tower_trains, grads_exist)
    tower = Stack(
        TOWER,
        (
            Piece("vision patch embedding", 1, _patch_embedding(stack, sizes, kernels, tower_trains, grads_exist), tower_trains),
            *(
                Piece(label, count, layer, tower_trains, recompute, stream, discarded)
                for label, count, discarded in (
                    ("vision layer {index}", stack.num_layers - stack.unused_layers, False),
                    ("vision unused layer {index}", stack.unused_layers, True),
                )
                if count
            ),
        ),
        output_bytes=layer.output_bytes,
        keeps_hidden_states=stack.keeps_all_hidden_states and not tower_trains,
        outputs_held_until_loss=stack.outputs_in_model_output,
    )
    projector_trace = _projector(stack, sizes, kernels, projector_trains, tower_trains, grads_exist)
    projector = Stack(
        PROJECTOR, (Piece("projector", 1, projector_trace, projector_trains),), projector_trace.output_bytes,
        outputs_held_until_loss=stack.outputs_in_model_output,
    )
    return (tower, projector)
