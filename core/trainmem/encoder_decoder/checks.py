"""What an encoder-decoder setup may ask for: one-line errors naming the field (``Setup`` validation).

* ``target_length`` (the decoder's tokens per sample) belongs to encoder-decoders only: on a decoder-only
  model or an encoder it is refused, as is a target above the model's ``max_target_positions`` where the
  model has one (T5's relative positions have none);
* what the encoder-decoder path does not model yet is refused rather than estimated wrongly: LoRA/QLoRA,
  ``finetuning.frozen`` groups, packed or masked batches, tensor/pipeline/sequence/context parallelism,
  ZeRO-3 and FSDP (the encoder would be gathered layer by layer), and trainers other than SFT.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..errors import FieldError

if TYPE_CHECKING:
    from ..architecture import Architecture
    from ..setup import Setup


def check_encoder_decoder_setup(setup: Setup, arch: Optional[Architecture]) -> None:
    encoder_decoder = arch is not None and arch.encoder_layers > 0
    if setup.target_length is not None and not encoder_decoder:
        what = "no architecture" if arch is None else (
            f"{arch.model_type} is an encoder" if arch.bidirectional else f"{arch.model_type} is decoder-only"
        )
        raise FieldError(
            "target_length",
            f"only encoder-decoders (t5, mt5, bart, whisper) have a decoder length; {what}: give its tokens as sequence_length",
        )
    if not encoder_decoder:
        return
    check_audio_lengths(setup, arch)
    target = setup.target_length or setup.sequence_length
    if arch.max_target_positions is not None and target > arch.max_target_positions:
        raise FieldError(
            "target_length",
            f"target_length ({target}) exceeds the decoder's max_target_positions ({arch.max_target_positions})",
        )
    name = arch.model_type
    if setup.finetuning.method not in ("full", "lora"):
        raise FieldError(
            "finetuning.method", f"{setup.finetuning.method} on an encoder-decoder ({name}) is not modelled yet; use full or lora"
        )
    lora = setup.finetuning.lora
    if setup.finetuning.method == "lora" and (lora.modules_to_save or lora.use_dora):
        raise FieldError(
            "finetuning.lora", f"modules_to_save and DoRA on an encoder-decoder ({name}) are not modelled yet"
        )
    if setup.finetuning.frozen:
        raise FieldError("finetuning.frozen", f"frozen groups on an encoder-decoder ({name}) are not modelled yet")
    if setup.batch != "padded":
        raise FieldError("batch", f"batch {setup.batch!r} on an encoder-decoder ({name}) is not modelled yet; use padded")
    parallel = setup.parallelism
    for field in ("tensor_parallel_size", "pipeline_parallel_size", "context_parallel_size"):
        if getattr(parallel, field) > 1:
            raise FieldError(f"parallelism.{field}", f"{field} > 1 on an encoder-decoder ({name}) is not modelled yet")
    if parallel.sequence_parallel:
        raise FieldError("parallelism.sequence_parallel", f"sequence parallelism on an encoder-decoder ({name}) is not modelled yet")
    if parallel.strategy in ("fsdp", "megatron") or (parallel.strategy == "zero" and parallel.zero_stage == 3):
        raise FieldError(
            "parallelism.strategy",
            f"ZeRO-3, FSDP and Megatron on an encoder-decoder ({name}) are not modelled yet (the encoder would be gathered "
            "layer by layer); use ddp or ZeRO-1/2",
        )
    if setup.training.mode != "sft":
        raise FieldError("training.mode", f"training mode {setup.training.mode!r} on an encoder-decoder ({name}) is not modelled yet; use sft")


def check_audio_lengths(setup: Setup, arch: Architecture) -> None:
    """Whisper: the encoder always runs over ``max_source_positions`` positions (``WhisperEncoder.forward``
    refuses input_features of any other length than 2·max_source_positions frames, and the feature extractor
    pads every clip to 30 s), so ``sequence_length`` must be that number; the decoder's tokens are
    ``target_length``. Left out, ``sequence_length`` is filled in with ``max_source_positions`` and
    ``target_length`` with ``max_target_positions`` (the longest label sequence the decoder takes: the
    worst case, stated in the report's setup)."""
    if not arch.max_source_positions:
        return
    if "sequence_length" not in setup.model_fields_set:
        object.__setattr__(setup, "sequence_length", arch.max_source_positions)
    if setup.target_length is None and arch.max_target_positions:
        object.__setattr__(setup, "target_length", arch.max_target_positions)
    if setup.sequence_length != arch.max_source_positions:
        raise FieldError(
            "sequence_length",
            f"{arch.model_type}'s encoder always runs over max_source_positions = {arch.max_source_positions} positions "
            f"(input_features padded to {2 * arch.max_source_positions} frames); give {arch.max_source_positions}, "
            "and the decoder's tokens as target_length",
        )
    if setup.target_length is None:
        raise FieldError(
            "target_length",
            f"{arch.model_type} needs the decoder's tokens per sample (at most max_target_positions = {arch.max_target_positions})",
        )
