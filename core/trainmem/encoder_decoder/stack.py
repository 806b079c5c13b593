"""The encoder of an encoder-decoder as a :class:`~trainmem.stacks.Stack` that runs before the decoder path.

T5's forward (``T5ForConditionalGeneration.forward``, transformers 5.24) runs the encoder over the source
tokens (``shared(input_ids)``, dropout, ``encoder.block.N``, ``final_layer_norm``, dropout), then the
decoder over ``_shift_right(labels)`` with every layer's cross-attention reading the encoder output. So:

* the encoder's pieces are its embedding lookup (the shared table), its ``encoder_layers`` blocks (the
  T5 program with ``cross_attention`` off, over ``sequence_length`` source positions) and its final norm;
* the encoder output (b·s_src·h in the residual stream's dtype) stays alive from the encoder's forward
  until the decoder's backward is done (each decoder layer's K/V projections save it);
* its gradient is one b·s_src·h buffer from the decoder's backward on (the autograd engine's input buffer
  for the encoder's last op, which every decoder layer adds into) until the encoder's backward takes it;
* the encoder's embedding backward makes a V×h gradient of ``shared`` that is added into the one already
  pending (``shared`` is also the decoder's embedding and, tied, the lm_head): a transient, not a new
  stored gradient.

Assumed, not measured per tensor: the relative position bias tensor (1, a, s, s) each stack's first layer
computes and hands down is counted as one transient of the stack (its gradient, summed over the layers,
is not counted); the encoder pieces under ZeRO-3/FSDP are not gathered layer by layer (refused).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from ..architecture import Architecture
from ..layers import LayerKernels, LayerShape, Trace, Trainability, replay, trace_layer
from ..inventory import LayerGroup, ModelInventory
from ..models import family_for
from ..models.blocks import ParameterTensor
from ..stacks import Piece, Stack
from .audio import trace_audio_front_end
from .ends import trace_seq2seq_embedding
from ..tape import DTYPE_BYTES, Sym, Tape

ENCODER = "encoder"


@dataclass(frozen=True)
class EncoderStack:
    """The encoder's parameter tensors: its prelude (relative bias), one layer's tensors × layers, its final norm."""

    architecture: Architecture
    prelude: tuple[ParameterTensor, ...]
    layer: tuple[ParameterTensor, ...]
    postlude: tuple[ParameterTensor, ...]

    @property
    def num_layers(self) -> int:
        return self.architecture.num_hidden_layers

    @property
    def numel(self) -> int:
        return sum(t.numel for t in (*self.prelude, *self.postlude)) + self.num_layers * sum(t.numel for t in self.layer)

    @property
    def trainable_numel(self) -> int:
        """Elements that require grad under full fine-tuning: all but the ``frozen`` group (Whisper's
        ``embed_positions``, ``requires_grad_(False)`` in ``WhisperEncoder.__init__``)."""
        return self.numel - sum(t.numel * copies for t, copies in self.tensors() if t.group == "frozen")

    def tensors(self) -> list[tuple[ParameterTensor, int]]:
        """(tensor, copies) of every encoder tensor."""
        return [(t, 1) for t in self.prelude] + [(t, self.num_layers) for t in self.layer] + [(t, 1) for t in self.postlude]


def with_encoder_layers(inventory: ModelInventory, stack: EncoderStack) -> ModelInventory:
    """The inventory with the encoder's layers as one more layer group: what PEFT's ``target_modules`` are
    matched against (they match module paths of both stacks: ``q`` adapts ``encoder.block.N...SelfAttention.q``
    and ``decoder.block.N...SelfAttention.q`` / ``EncDecAttention.q``)."""
    group = LayerGroup(stack.architecture, stack.layer, tuple(range(stack.num_layers)))
    return replace(inventory, layer_groups=(*inventory.layer_groups, group))


def encoder_stack(decoder: Optional[Architecture]) -> Optional[EncoderStack]:
    """The encoder of an encoder-decoder's (decoder) architecture; None for any other model."""
    if decoder is None or not decoder.encoder_layers:
        return None
    from ..models.t5 import encoder_architecture  # the family's module, imported once a model has an encoder

    family = family_for(decoder)
    arch = encoder_architecture(decoder)
    return EncoderStack(
        arch, tuple(family.encoder_prelude(arch)), tuple(family.encoder_layer(arch)), tuple(family.encoder_postlude(arch))
    )


def _shape(arch: Architecture, batch: int, source_length: int) -> LayerShape:
    tokens = batch * source_length
    return LayerShape(
        batch=batch, seq=source_length, kv_seq=source_length, heads=arch.num_attention_heads,
        kv_heads=arch.kv_heads, head_dim=arch.resolved_head_dim, hidden=arch.hidden_size,
        intermediate=arch.intermediate_size, stream_tokens=tokens,
    )


def _embedding(arch: Architecture, shape: LayerShape, kernels: LayerKernels, trains: bool) -> Trace:
    """The encoder's embedding (:func:`~trainmem.encoder_decoder.ends.trace_seq2seq_embedding`); the lookup's
    V×h gradient of ``shared`` is added into the one already pending (``parameter_grads_exist``)."""
    trainability = Trainability(lambda module: trains, lambda module: False)
    if arch.num_mel_bins:  # Whisper: the conv front end over input_features (trainmem.encoder_decoder.audio)
        return trace_audio_front_end(arch, shape, kernels, trainability, False)
    return trace_seq2seq_embedding(arch, shape, kernels, trainability, True, False, True)


def _final_norm(arch: Architecture, shape: LayerShape, kernels: LayerKernels, trainability: Trainability) -> Trace:
    """``encoder.final_layer_norm`` then ``dropout``: the encoder output."""
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    program = family_for(arch).program()(arch, shape, kernels, trainability, tape)
    x = tape.new(shape.stream_tokens * shape.hidden, kernels.stream_dtype, True)
    normed = program.norm("encoder.final_layer_norm", x, shape.stream_tokens, shape.hidden)
    tape.release(x)
    # Whisper's encoder ends with layer_norm alone (no dropout after it)
    dropped = tape.dropout(normed, arch.embedding_dropout if getattr(family_for(arch), "final_norm_dropout", True) else 0.0)
    if dropped is not normed:
        tape.release(normed)
    return replay(tape, [dropped], tape.peak_live_bytes - x.nbytes, dropped.nbytes, False, False, x)


def encoder_pieces(
    stack: EncoderStack, batch: int, source_length: int, kernels: LayerKernels, trains: bool, recompute: bool,
    grads_exist: bool, has_adapter=lambda module: False,
) -> Stack:
    """The encoder as a stack: embedding, layers, final norm (each replayed once on a tape). ``trains``: the
    encoder's own weights train (full fine-tuning); ``has_adapter``: LoRA adapts the module (by path)."""
    arch = stack.architecture
    shape = _shape(arch, batch, source_length)
    trainability = Trainability(lambda module: trains, has_adapter)
    adapted = any(has_adapter(t.module) for t in stack.layer)
    stream_bytes = shape.stream_tokens * shape.hidden * DTYPE_BYTES[kernels.stream_dtype]
    embedding = _embedding(arch, shape, kernels, trains)
    layer = trace_layer(arch, shape, kernels, trainability, trains, grads_exist)
    pieces = [
        Piece("encoder embedding", 1, embedding, trains),
        Piece("encoder layer {index}", stack.num_layers, layer, trains or adapted, recompute, stream_bytes),
    ]
    last = layer
    if stack.postlude:  # T5's final_layer_norm and dropout (BART's encoder ends with its last layer)
        last = _final_norm(arch, shape, kernels, trainability)
        pieces.append(Piece("encoder final norm", 1, last, trains))
    return Stack(ENCODER, tuple(pieces), last.output_bytes)
