"""The ``training`` part of a Setup: which trainer runs the step, in TRL's vocabulary.

``mode`` names the trainer (TRL 1.16.0): ``sft`` (the default: today's supervised step,
``model(input_ids, labels=input_ids).loss``), ``dpo`` (DPOTrainer), ``kto`` (KTOTrainer),
``orpo``/``cpo``/``simpo`` (trl.experimental ORPOTrainer / CPOTrainer), ``reward``
(RewardTrainer), ``gkd`` (trl.experimental GKDTrainer), ``grpo`` (GRPOTrainer) and ``rloo``
(RLOOTrainer, GRPO's program with RLOO's defaults; TRL 1.16 has no PPOTrainer), ``ppo`` (verl's PPO with
GAE: the actor's RL program plus a critic updated in its own phase, :mod:`.critic`) and ``critic`` (the
critic's update alone).

Every other field is None by default, meaning "TRL's default for this mode" (the table in
``trainmem/data/training_modes.json``, copied from TRL's config dataclasses); a field that
the mode's trainer does not have is refused with one line naming it. ``micro_batch_size`` is
TRL's ``per_device_train_batch_size``: preference pairs for DPO/ORPO/CPO/SimPO/reward
(each pair is two rows of one forward), completions for GRPO, examples otherwise.
"""

from __future__ import annotations

import json
from functools import cache
from ..package_data import data_text
from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from .. import limits
from .._base import FrozenModel
from ..errors import FieldError

TrainingMode = Literal["sft", "dpo", "kto", "orpo", "cpo", "simpo", "reward", "gkd", "grpo", "rloo", "ppo", "critic"]

MODE_FIELDS = (
    "loss_type",
    "beta",
    "reference_model",
    "precompute_ref_log_probs",
    "completion_only_loss",
    "assistant_only_loss",
    "lmbda",
    "teacher",
    "num_generations",
    "max_prompt_length",
    "max_completion_length",
    "num_iterations",
    "use_vllm",
    "vllm_mode",
    "vllm_gpu_memory_utilization",
    "vllm_enable_sleep_mode",
    "critic_model",
    "critic_micro_batch_size",
    "critic_gradient_accumulation_steps",
    "critic_activation_checkpointing",
    "critic_param_offload",
    "critic_optimizer_offload",
    "actor_param_offload",
    "actor_optimizer_offload",
    "log_prob_head",
    "log_prob_entropy",
    "old_log_probs",
    "log_prob_micro_batch_size",
    "ref_log_prob_micro_batch_size",
)


@cache
def modes() -> dict[str, dict[str, Any]]:
    """The modes table (``trainmem/data/training_modes.json``)."""
    text = data_text("training_modes.json")
    return {name: value for name, value in json.loads(text).items() if not name.startswith("_")}


class Training(FrozenModel):
    """The trainer of the step and its memory-relevant options (None: TRL 1.16's default for the mode)."""

    model_config = FrozenModel.model_config | {"strict": True}

    mode: TrainingMode = Field(
        default="sft",
        description="sft: the supervised step; dpo/kto/orpo/cpo/simpo: preference optimisation; reward: a reward "
        "model (sequence-classification head); gkd: distillation from a frozen teacher; grpo/rloo: RL with generation; "
        "ppo: verl's PPO (the actor's RL step and a critic's update, each its own phase); critic: the critic's update alone.",
    )
    loss_type: Optional[str] = Field(
        default=None, description="DPOConfig/KTOConfig/CPOConfig/GRPOConfig.loss_type (dpo: sigmoid, ipo, ...; grpo: dapo, ...)."
    )
    beta: Optional[float] = Field(
        default=None,
        ge=0,
        le=1000,
        allow_inf_nan=False,
        description="The mode's beta (dpo/kto/orpo/cpo 0.1, simpo 2.0, gkd 0.5 (JSD interpolation), grpo 0.0: "
        "with 0 GRPO loads no reference model).",
    )
    reference_model: Optional[Literal["auto", "separate", "none"]] = Field(
        default=None,
        description="dpo/kto/grpo: auto = TRL's choice (a PEFT policy's base with adapters disabled, no copy; "
        "otherwise a second copy of the model); separate = a ref_model passed to the trainer (a copy even with "
        "PEFT); none = no reference forward (grpo with beta 0).",
    )
    precompute_ref_log_probs: Optional[bool] = Field(
        default=None,
        description="dpo/kto: reference log-probs computed once before training; the step has no reference "
        "forward and (without PEFT) no reference copy.",
    )
    completion_only_loss: Optional[bool] = Field(
        default=None, description="sft: loss on the completion only (TRL SFTConfig); no change in memory here."
    )
    assistant_only_loss: Optional[bool] = Field(
        default=None, description="sft: loss on assistant turns only (TRL SFTConfig); no change in memory here."
    )
    lmbda: Optional[float] = Field(
        default=None, ge=0, le=1, allow_inf_nan=False, description="gkd: fraction of on-policy (student-generated) batches."
    )
    teacher: Optional[str] = Field(
        default=None,
        description="gkd: the teacher, a trainmem preset (None: the student's own architecture).",
    )
    num_generations: Optional[int] = Field(
        default=None, ge=1, le=4096, description="grpo: completions sampled per prompt (TRL default 8)."
    )
    max_prompt_length: Optional[int] = Field(
        default=None, ge=1, le=int(limits.SEQUENCE.maximum), description="grpo: tokens of the longest prompt."
    )
    max_completion_length: Optional[int] = Field(
        default=None, ge=1, le=int(limits.SEQUENCE.maximum), description="grpo: tokens generated per completion (TRL default 512)."
    )
    num_iterations: Optional[int] = Field(
        default=None, ge=1, le=1024, description="grpo: optimisation passes per generation batch (μ; >1 needs the "
        "old policy's log-probs)."
    )
    use_vllm: Optional[bool] = Field(default=None, description="grpo: generate with vLLM instead of transformers' generate.")
    vllm_mode: Optional[Literal["colocate", "server"]] = Field(
        default=None, description="grpo: colocate (vLLM on the training GPUs) or server (on other GPUs)."
    )
    vllm_gpu_memory_utilization: Optional[float] = Field(
        default=None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="grpo, colocated vLLM: the fraction of GPU memory vLLM takes (TRL default 0.3).",
    )
    vllm_enable_sleep_mode: Optional[bool] = Field(
        default=None, description="grpo, colocated vLLM: release vLLM's weights and KV cache during the training phase."
    )
    critic_model: Optional[str] = Field(
        default=None, description="ppo: the critic, a trainmem preset (None: the actor's own architecture; verl critic.model.path)."
    )
    critic_micro_batch_size: Optional[int] = Field(
        default=None, ge=1, le=int(limits.MICRO_BATCH.maximum),
        description="ppo: completions per critic forward/backward (verl critic.ppo_micro_batch_size_per_gpu; None: the actor's).",
    )
    critic_gradient_accumulation_steps: Optional[int] = Field(
        default=None, ge=1, le=int(limits.ACCUMULATION.maximum),
        description="ppo: critic micro-batches per optimizer step (verl: ppo_mini_batch_size × n ÷ ranks ÷ micro; None: the actor's).",
    )
    critic_activation_checkpointing: Optional[Literal["none", "selective", "full"]] = Field(
        default=None, description="ppo: the critic's activation checkpointing (verl critic.model.enable_gradient_checkpointing; None: the actor's)."
    )
    critic_param_offload: Optional[bool] = Field(
        default=None, description="ppo: the critic's weights wait on the host outside its own phase (verl critic.fsdp.param_offload)."
    )
    critic_optimizer_offload: Optional[bool] = Field(
        default=None, description="ppo: the critic's optimizer states wait on the host outside its update (verl critic.fsdp.optimizer_offload)."
    )
    actor_param_offload: Optional[bool] = Field(
        default=None, description="ppo: the actor's weights wait on the host during the critic's phase (verl actor.fsdp_config.param_offload)."
    )
    actor_optimizer_offload: Optional[bool] = Field(
        default=None, description="ppo: the actor's optimizer states wait on the host during the critic's phase (verl actor.fsdp_config.optimizer_offload)."
    )

    log_prob_head: Optional[Literal["fused", "logits"]] = Field(
        default=None,
        description="grpo/rloo/ppo: how the policy's log-probs are computed: fused (TRL's chunked head, verl "
        "use_fused_kernels) or logits (verl's default: the whole (tokens × vocabulary) logits, training.verl_logits).",
    )
    log_prob_entropy: Optional[bool] = Field(
        default=None, description="grpo/rloo/ppo: the update computes the per-token entropy too (TRL: always; verl: entropy_coeff != 0)."
    )

    old_log_probs: Optional[bool] = Field(
        default=None,
        description="grpo/rloo/ppo: the old policy's log-probs are recomputed in a no-grad pass before the update "
        "(None: the trainer's rule — TRL GRPO when num_iterations > 1 or with vLLM's importance-sampling correction, "
        "TRL RLOO and verl always).",
    )
    log_prob_micro_batch_size: Optional[int] = Field(
        default=None, ge=1, le=int(limits.MICRO_BATCH.maximum),
        description="grpo/rloo/ppo: completions per forward of the old policy's log-prob pass (verl "
        "rollout.log_prob_micro_batch_size_per_gpu; None: micro_batch_size, as TRL).",
    )
    ref_log_prob_micro_batch_size: Optional[int] = Field(
        default=None, ge=1, le=int(limits.MICRO_BATCH.maximum),
        description="grpo/rloo/ppo: completions per forward of the reference's log-prob pass (verl "
        "ref.log_prob_micro_batch_size_per_gpu; None: micro_batch_size, as TRL).",
    )

    @model_validator(mode="after")
    def _fields_of_the_mode(self) -> Training:
        table = modes()[self.mode]
        allowed = table["fields"]
        for name in MODE_FIELDS:
            if getattr(self, name) is not None and name not in allowed:
                owners = [mode for mode, entry in modes().items() if name in entry["fields"]]
                raise FieldError(
                    name, f"is not a field of mode {self.mode!r} (it belongs to: {', '.join(owners)})"
                )
        loss_types = table.get("loss_types")
        if self.loss_type is not None and loss_types and self.loss_type not in loss_types:
            raise FieldError("loss_type", f"unknown {self.mode} loss_type {self.loss_type!r}; allowed: {', '.join(loss_types)}")
        if self.is_rl:
            if self.reference_model not in (None, "none") and self.resolved("beta") == 0:
                raise FieldError(
                    "reference_model",
                    f"{self.mode.upper()} with beta 0 loads no reference model (TRL {self.mode.upper()}Config.beta); set "
                    "beta > 0 or drop reference_model",
                )
            if self.reference_model == "none" and self.resolved("beta") > 0:
                raise FieldError("reference_model", f"{self.mode.upper()} with beta > 0 needs the reference model's log-probs")
        elif self.reference_model == "none":
            raise FieldError("reference_model", "'none' is for grpo/rloo; use precompute_ref_log_probs for dpo/kto")
        if self.critic_model is not None:
            from ..catalogs import presets

            if self.critic_model.strip().lower() not in presets():
                raise FieldError("critic_model", f"unknown preset {self.critic_model!r}; allowed: {', '.join(presets())}")
        if self.teacher is not None:
            from ..catalogs import presets

            if self.teacher.strip().lower() not in presets():
                raise FieldError("teacher", f"unknown preset {self.teacher!r}; allowed: {', '.join(presets())}")
        return self

    # ------------------------------------------------------------------ resolved values

    def resolved(self, name: str) -> Any:
        """A field's value, or TRL's default for the mode."""
        value = getattr(self, name)
        return modes()[self.mode]["fields"].get(name) if value is None else value

    @property
    def is_rl(self) -> bool:
        """GRPO and RLOO: a generation round, then training on the completions."""
        return modes()[self.mode].get("program") == "rl"

    @property
    def has_critic(self) -> bool:
        """PPO with GAE: a value model updated in its own phase (training.critic)."""
        return bool(modes()[self.mode].get("critic"))

    @property
    def is_supervised(self) -> bool:
        return self.mode == "sft"

    @property
    def rows_per_example(self) -> int:
        """Rows of the forward per example of ``micro_batch_size``: 2 for a preference pair (TRL's
        ``DataCollatorForPreference`` concatenates chosen and rejected into one batch)."""
        return modes()[self.mode]["rows_per_example"]

    def has_reference(self, peft: bool) -> bool:
        """Whether the step runs a reference forward."""
        kind = modes()[self.mode]["reference"]
        if kind == "never":
            return False
        if kind == "beta":
            return self.resolved("beta") > 0
        return not self.resolved("precompute_ref_log_probs")

    def reference_copy(self, peft: bool) -> bool:
        """Whether a second copy of the weights sits on the GPU for the reference (TRL: none for a PEFT policy,
        whose base with adapters disabled is the reference, unless a ref_model is passed; none when the
        log-probs are precomputed, outside FSDP)."""
        if not self.has_reference(peft):
            return False
        return self.resolved("reference_model") == "separate" or not peft
