"""KTOTrainer's KL batch (TRL 1.16 ``trl/trainer/kto_trainer.py``), as hooks into the simulated step.

With ``loss_type="kto"`` (the default) KTOTrainer estimates the KL term of the KTO loss (Ethayarajh et
al. 2024, eq. 7) from mismatched (prompt, completion) pairs: the collator adds ``KL_input_ids``, each
prompt with the neighbouring example's completion (``add_kl_completion_ids``), a second int64 batch of the
same rows. ``_compute_loss`` then runs, per micro-batch:

1. ``_compute_kl_logps(model, batch)``: the policy's forward of the KL batch under ``torch.no_grad``, before
   the policy's own forward: nothing of the step is saved yet, so it is a moment of its own (the no-grad
   working memory of one layer, or the fused head's scratch) and only its per-row sums survive;
2. the policy's forward of the batch with grad (the fused head, ``outputs=("log_probs", "entropy",
   "mean_logits")``: no ``is_top1``);
3. unless the reference log-probs are precomputed, under ``torch.no_grad``: the reference's KL forward, then
   its forward of the batch (the same copy, or the PEFT policy inside ``use_adapter(..., None)``), one after
   the other on top of the policy's saved activations: the larger of two equal passes, which is the DPO
   reference moment (``phases.record_reference_forward``).

``apo_zero_unpaired`` has no KL term (``calculate_KL`` is False): none of this. TRL refuses a KL term with
``per_device_train_batch_size`` 1 (``KTOTrainer.__init__``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..plan import Plan
    from ..setup import Setup
    from ..timeline import MemoryAccount

KTO_POLICY_OUTPUTS = ("log_probs", "entropy", "mean_logits")
"""KTOTrainer.__init__: ``add_fused_lm_head(model, outputs=("log_probs", "entropy", "mean_logits"))``."""
KL_BATCH_DETAIL = "KTO's KL batch: KL_input_ids, each prompt with another example's completion (int64)"
KL_FORWARD_DETAIL = (
    "the policy's forward of the KL batch under no_grad, before its own forward (KTOTrainer._compute_kl_logps)"
)


def calculates_kl(setup: "Setup") -> bool:
    """Whether the step has a KL batch (``calculate_KL = loss_type == "kto"``)."""
    training = setup.training
    return training.mode == "kto" and training.resolved("loss_type") == "kto"


def kl_batch_bytes(plan: "Plan") -> int:
    """The KL batch's token ids, made by the collator before the step (rows × tokens int64)."""
    if not calculates_kl(plan.setup):
        return 0
    from ..allocator import rounded

    return rounded(plan.setup.micro_batch_size * plan.setup.sequence_length * 8, plan.device)


def record_kl_batch(plan: "Plan", account: "MemoryAccount") -> None:
    """The KL batch next to the batch (an input of the step)."""
    nbytes = kl_batch_bytes(plan)
    if nbytes:
        account.set("activations", "KL batch ids", nbytes, KL_BATCH_DETAIL)


def record_kl_forward(plan: "Plan", account: "MemoryAccount", micro_batch: int, suffix: str) -> None:
    """Step 1: the policy's no-grad forward of the KL batch, before the micro-batch's forward."""
    if not calculates_kl(plan.setup):
        return
    from .phases import no_grad_forward_bytes

    account.details[("activations", "KL forward")] = KL_FORWARD_DETAIL
    account.record("KL forward" + suffix, "reference", micro_batch, {("activations", "KL forward"): no_grad_forward_bytes(plan, KTO_POLICY_OUTPUTS)})
