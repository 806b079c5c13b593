"""Whisper's audio front end on the tape: what ``WhisperEncoder.forward`` does before its first layer.

transformers 5.24 models/whisper/modeling_whisper.py:

* ``input_features`` (b × num_mel_bins × 2·S frames, fp32: the feature extractor's output; S =
  ``max_source_positions``) is an input of the step, counted by the step's input batch;
* ``gelu(conv1(x))``: ``Conv1d(mel, h, kernel 3, padding 1)``, b·h·2S outputs; ``ConvolutionBackward0`` saves
  its input and weight (:meth:`Tape.conv`; here the input needs no gradient, the weight does), gelu saves
  its input;
* ``gelu(conv2(x))``: ``Conv1d(h, h, kernel 3, stride 2, padding 1)``, b·h·S outputs;
* ``.permute(0, 2, 1)`` (a view) ``+ embed_positions(arange(S))``: the (S, h) lookup of a frozen table saves
  nothing (no gradient reaches it); the sum (b, S, h) is promoted to the table's dtype (fp32 under autocast);
* dropout (``config.dropout``).

Assumed, not measured per tensor: the convolutions' own workspaces (cuDNN / oneDNN scratch inside the
kernel) are not counted; the conv calls are given the features per output position so that
:meth:`Tape.conv` sizes their outputs (b·2S rows for conv1, b·S rows for conv2).
"""

from __future__ import annotations

from ..architecture import Architecture
from ..layers import LayerKernels, LayerShape, Trace, Trainability, replay
from ..models import family_for
from ..tape import Sym, Tape

#: Frames of input_features per encoder position (conv1.stride · conv2.stride, WhisperEncoder.forward).
FRAMES_PER_POSITION = 2


def input_features_numel(arch: Architecture, batch: int) -> int:
    """Elements of one micro-batch's ``input_features``: b × num_mel_bins × 2·max_source_positions."""
    return batch * arch.num_mel_bins * FRAMES_PER_POSITION * (arch.max_source_positions or 0)


def trace_audio_front_end(
    arch: Architecture, shape: LayerShape, kernels: LayerKernels, trainability: Trainability, parameter_grads_exist: bool
) -> Trace:
    """conv1, gelu, conv2, gelu, + positions, dropout over one micro-batch (``shape.batch`` clips of S positions)."""
    tape = Tape(device=kernels.device, autocast=kernels.autocast)
    program = family_for(arch).program()(arch, shape, kernels, trainability, tape)
    h, mel, batch, positions = shape.hidden, arch.num_mel_bins, shape.batch, shape.seq
    features = Sym(input_features_numel(arch, batch), "fp32", False, "external")
    conv1 = tape.conv(
        features, program.parameter("model.encoder.conv1", h * mel * 3), h, program.parameter("model.encoder.conv1", h), mel
    )
    gelu1 = program._activation(conv1)
    tape.release(conv1)
    conv2 = tape.conv(
        gelu1, program.parameter("model.encoder.conv2", h * h * 3), h, program.parameter("model.encoder.conv2", h),
        FRAMES_PER_POSITION * h,
    )
    tape.release(gelu1)
    gelu2 = program._activation(conv2)
    tape.release(conv2)
    ids = tape.new(positions, "int64", False)  # torch.arange(embed_positions.num_embeddings)
    table = Sym(positions * h, kernels.weight_dtype, False, "parameter")  # requires_grad_(False)
    looked_up = tape.new(positions * h, kernels.weight_dtype, False)
    tape.record("embedding", [], [table], [looked_up])
    tape.release(ids)
    summed = tape.add(gelu2, looked_up)
    tape.release(gelu2, looked_up)
    dropped = tape.dropout(summed, arch.embedding_dropout)
    if dropped is not summed:
        tape.release(summed)
    return replay(tape, [dropped], tape.peak_live_bytes, dropped.nbytes, False, parameter_grads_exist)
