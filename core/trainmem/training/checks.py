"""What a training mode needs of the rest of the Setup; each problem is one FieldError naming the field."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..errors import FieldError

if TYPE_CHECKING:
    from ..architecture import Architecture
    from ..setup import Setup

SUPPORTED_STRATEGIES = ("ddp", "zero", "fsdp")
"""TRL trainers run under Accelerate: DDP, DeepSpeed ZeRO or FSDP (no Megatron tensor/pipeline parallelism)."""


def check_training(setup: "Setup", architecture: Optional["Architecture"]) -> None:
    training = setup.training
    if training.is_supervised:
        return
    field = f"training.mode"
    if architecture is None:
        raise FieldError(field, f"mode {training.mode!r} needs an architecture: give a preset, hf_config or architecture")
    parallel = setup.parallelism
    if parallel.strategy not in SUPPORTED_STRATEGIES or parallel.tensor_parallel_size > 1 or parallel.pipeline_parallel_size > 1:
        raise FieldError(
            field,
            f"mode {training.mode!r} is modelled for TRL under Accelerate (strategy ddp, zero or fsdp, no tensor or "
            "pipeline parallelism)",
        )
    if training.is_rl:
        tokens = training.resolved("max_prompt_length") + training.resolved("max_completion_length")
        if tokens > architecture.max_position_embeddings:
            raise FieldError(
                "training.max_completion_length",
                f"max_prompt_length + max_completion_length = {tokens:,} tokens is longer than the model's "
                f"max_position_embeddings ({architecture.max_position_embeddings:,})",
            )
        generations = training.resolved("num_generations")
        if (setup.micro_batch_size * setup.gradient_accumulation_steps * parallel.data_parallel_size) % generations:
            raise FieldError(
                "training.num_generations",
                f"the generation batch (micro_batch_size × gradient_accumulation_steps × data-parallel ranks = "
                f"{setup.micro_batch_size * setup.gradient_accumulation_steps * parallel.data_parallel_size}) must be "
                f"divisible by num_generations ({generations}) (TRL {training.mode.upper()}Config)",
            )
    elif setup.sequence_length > architecture.max_position_embeddings and architecture.position_embedding == "rope":
        raise FieldError(
            "sequence_length",
            f"sequence_length {setup.sequence_length:,} (TRL's max_length) is longer than the model's "
            f"max_position_embeddings ({architecture.max_position_embeddings:,})",
        )
    if training.mode == "gkd" and training.teacher is not None:
        from ..catalogs import presets
        from ..hf_config import architecture_from_hf_config

        teacher = architecture_from_hf_config(presets()[training.teacher.strip().lower()].config)
        if teacher.vocab_size != architecture.vocab_size:
            raise FieldError(
                "training.teacher",
                f"the teacher's vocab_size ({teacher.vocab_size:,}) differs from the student's "
                f"({architecture.vocab_size:,}): the JSD compares their logits token by token",
            )
    if training.mode == "kto" and training.resolved("loss_type") == "kto" and setup.micro_batch_size < 2:
        raise FieldError(
            "micro_batch_size",
            "KTO's KL term (loss_type 'kto') needs at least 2 examples per micro-batch (KTOTrainer refuses "
            "per_device_train_batch_size 1); use loss_type 'apo_zero_unpaired' for 1",
        )
    if training.mode == "critic" and architecture.tie_word_embeddings:
        raise FieldError(
            field, "a critic of a tied-embedding model is simulated through mode 'ppo' (its critic has score, not the tied lm_head)"
        )
    if training.mode in ("critic", "ppo") and setup.loss != "standard":
        raise FieldError("loss", f"mode {training.mode!r}: the critic's value head has one output and the actor's log-probs their own head; no vocabulary loss to chunk")
    if training.mode == "reward" and architecture.tie_word_embeddings:
        raise FieldError(
            field, "a reward model of a tied-embedding model is not modelled yet (its score head replaces the tied lm_head)"
        )
    if training.mode == "reward" and setup.loss != "standard":
        raise FieldError("loss", "a reward model has a one-output score head: no vocabulary loss to chunk")
