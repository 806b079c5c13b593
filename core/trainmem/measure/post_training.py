"""Measured steps of TRL's post-training modes, reproduced op for op with TRL's own pieces.

The trainers themselves need datasets, tokenizers and an Accelerate state; what decides the
memory of their step is a few lines of ``compute_loss`` (TRL 1.16.0), reproduced here with
TRL's own functions, so the same tensors are allocated in the same order:

* ``dpo`` (``DPOTrainer._compute_loss``): ``trl.trainer.utils.add_fused_lm_head`` patches the
  policy (``outputs=("log_probs", "entropy", "mean_logits", "is_top1")``) and a separate reference
  (``("log_probs",)``); the batch is the chosen rows followed by the rejected rows
  (``DataCollatorForPreference``), 2 × ``micro_batch_size`` rows of ``sequence_length`` tokens, every
  token a completion token (labels = input ids; on CPU TRL scores every position anyway);
  ``outputs = model(input_ids, labels, fused_lm_head=True)``; then, unless the reference log-probs
  are precomputed, the reference forward under ``torch.no_grad()`` — ``ref_model(...)``, or for a
  PEFT policy without a ref_model the policy itself inside ``disable_adapter()``; then the sigmoid
  loss ``-logsigmoid(beta · (chosen log-ratio − rejected log-ratio)).mean()`` and the metrics'
  reductions of entropy, mean logits and top-1 (small).
* ``grpo`` (``GRPOTrainer._compute_loss`` after ``_generate_and_score_completions``): see
  :class:`GRPOStep`.

The whole forward runs inside the step's autocast context, as the Trainer's
``compute_loss_context_manager`` does.
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional

import torch
import torch.nn.functional as F

from ..setup import Setup
from .events import ROLE_PARAMETER
from .step import TrainingStep

SUPPORTED_MODES = ("dpo", "kto", "orpo", "cpo", "simpo", "reward", "gkd", "grpo", "rloo", "ppo", "critic")
DPO_POLICY_OUTPUTS = ("log_probs", "entropy", "mean_logits", "is_top1")


def check_measurable(setup: Setup) -> list[str]:
    """Problems that stop a post-training setup from being measured here (empty: fine)."""
    training = setup.training
    problems = []
    if training.mode not in SUPPORTED_MODES:
        problems.append(f"training.mode {training.mode!r} (measurable: sft, {', '.join(SUPPORTED_MODES)})")
    if training.is_rl and training.resolved("log_prob_head") != "fused":
        problems.append("training.log_prob_head 'logits' (verl's whole-logits head: the measured RL steps run TRL's fused head; set 'fused')")
    if training.is_rl and not training.resolved("log_prob_entropy"):
        problems.append("training.log_prob_entropy false (the measured RL steps ask TRL's fused head for the entropy)")
    if training.mode == "dpo" and training.resolved("loss_type") != "sigmoid":
        problems.append("DPO loss types other than sigmoid (the memory differs by a few scalars per pair)")
    return problems


def batch_shape(setup: Setup) -> tuple[int, int]:
    """(rows, tokens per row) of the step's forward."""
    training = setup.training
    if training.is_rl:
        return setup.micro_batch_size, training.resolved("max_prompt_length") + training.resolved("max_completion_length")
    return setup.micro_batch_size * training.rows_per_example, setup.sequence_length


def add_fused_heads(setup: Setup, model: torch.nn.Module, reference: Optional[torch.nn.Module]) -> None:
    """TRL's fused LM head on the policy (under PEFT: on its base model) and on the reference."""
    from trl.trainer.utils import add_fused_lm_head

    from .hf_model import base_model

    from ..training.kto import KTO_POLICY_OUTPUTS

    outputs = {"dpo": DPO_POLICY_OUTPUTS, "kto": KTO_POLICY_OUTPUTS}.get(setup.training.mode, ("log_probs", "entropy"))
    add_fused_lm_head(base_model(model), outputs=outputs)
    if reference is not None:
        add_fused_lm_head(reference)


class PreferenceStep(TrainingStep):
    """DPOTrainer's step: one forward of chosen+rejected rows, the reference forward under no_grad, the loss."""

    def __init__(self, setup: Setup, model, optimizer, batch, reference: Optional[torch.nn.Module]):
        super().__init__(setup, model, optimizer, batch)
        self.reference = reference
        training = setup.training
        self.beta = float(training.resolved("beta"))
        self.reference_pass = training.has_reference(setup.finetuning.method != "full")
        self.precomputed = torch.zeros(batch.shape[0], device=batch.device)
        self.in_reference = False
        final_norm(model).register_forward_pre_hook(self._loss_marker)

    def _loss_marker(self, module, args) -> None:
        """The fused head runs right after the final norm: the 'loss' segment starts there (as the supervised
        step's starts at the head)."""
        if not self.in_backward and not self.in_reference:
            self._mark("loss", "loss")

    def register_existing(self, tracker) -> None:
        super().register_existing(tracker)
        if self.reference is not None:
            for tensor in self.reference.parameters():
                tracker.register(tensor, ROLE_PARAMETER, op="(reference parameter)")
            for tensor in self.reference.buffers():
                tracker.register(tensor, ROLE_PARAMETER, op="(reference buffer)")
        tracker.register(self.precomputed, "input", op="(precomputed reference log-probs)")

    def _loss(self) -> torch.Tensor:
        ids = self.batch
        outputs = self.forward_module(input_ids=ids, labels=ids, use_cache=False, fused_lm_head=True)
        logps = outputs.log_probs.sum(dim=1)
        chosen_logps, rejected_logps = logps.chunk(2, dim=0)
        if self.reference_pass:
            self._mark("forward", "reference forward")
            self.in_reference = True
            with torch.no_grad(), self._reference_context():
                module = self.reference if self.reference is not None else self.forward_module
                ref_outputs = module(input_ids=ids, labels=ids, use_cache=False, fused_lm_head=True)
            self.in_reference = False
            ref_logps = ref_outputs.log_probs.sum(dim=1)
            del ref_outputs
        else:
            ref_logps = self.precomputed
        ref_chosen, ref_rejected = ref_logps.chunk(2, dim=0)
        delta = (chosen_logps - ref_chosen) - (rejected_logps - ref_rejected)
        loss = -F.logsigmoid(self.beta * delta).mean()
        with torch.no_grad():  # the metrics TRL logs (small reductions)
            (outputs.entropy.detach()).sum()
            outputs.mean_logits.sum()
            outputs.is_top1.sum()
        del outputs
        return loss

    def _reference_context(self) -> contextlib.AbstractContextManager:
        if self.reference is None and hasattr(self.model, "disable_adapter"):
            return self.model.disable_adapter()
        return contextlib.nullcontext()


class KTOStep(PreferenceStep):
    """KTOTrainer._compute_loss (TRL 1.16): the policy's no-grad forward of the KL batch, the policy's forward,
    the reference's KL forward and forward under no_grad (unless precomputed), the KTO loss and its metrics.

    The batch is every example's tokens as completion (labels = input ids, as the DPO step); the KL batch is
    the collator's ``KL_input_ids``, each prompt with the neighbouring completion (here the batch's rows
    rolled by one). The first half of the rows are desirable (``label`` True). ``torch.nonzero(label)`` is
    replaced by the same int64 indices built from the known split, so that fake tensors run it too."""

    def __init__(self, setup: Setup, model, optimizer, batch, reference: Optional[torch.nn.Module]):
        super().__init__(setup, model, optimizer, batch, reference)
        from ..training.kto import calculates_kl

        rows = batch.shape[0]
        self.kl_batch = torch.roll(batch, 1, dims=0) if calculates_kl(setup) else None
        self.labels = torch.arange(rows, device=batch.device) < (rows + 1) // 2
        self.chosen = (rows + 1) // 2
        self.precomputed_kl = torch.zeros(rows, device=batch.device)

    def register_existing(self, tracker) -> None:
        super().register_existing(tracker)
        if self.kl_batch is not None:
            tracker.register(self.kl_batch, "input", op="(KL batch)")
        tracker.register(self.labels, "input", op="(labels)")
        tracker.register(self.precomputed_kl, "input", op="(precomputed reference KL log-probs)")

    def _forward_mark_if_forward(self, phase: str, label: str) -> None:
        if not self.in_reference:  # the policy's KL pass fires the layer hooks too
            super()._forward_mark_if_forward(phase, label)

    def _kl_logps(self, module: torch.nn.Module) -> Optional[torch.Tensor]:
        if self.kl_batch is None:
            return None
        ids = self.kl_batch
        with torch.no_grad():
            log_probs = module(input_ids=ids, labels=ids, use_cache=False, fused_lm_head=True).log_probs
        return log_probs[:, -(ids.size(1) - 1) :].sum(-1)

    def _loss(self) -> torch.Tensor:
        ids = self.batch
        device = ids.device
        self._mark("forward", "KL forward")
        self.in_reference = True
        kl_logps = self._kl_logps(self.forward_module)
        self.in_reference = False
        self._mark("forward", "forward embeddings")
        outputs = self.forward_module(input_ids=ids, labels=ids, use_cache=False, fused_lm_head=True)
        seq_len = ids.size(1) - 1
        completion_logps = outputs.log_probs[:, -seq_len:].sum(-1)
        rows = ids.shape[0]
        chosen_idx = torch.arange(0, self.chosen, device=device)  # torch.nonzero(label)
        rejected_idx = torch.arange(self.chosen, rows, device=device)
        chosen_logps = completion_logps.index_select(0, chosen_idx)
        rejected_logps = completion_logps.index_select(0, rejected_idx)
        if self.reference_pass:
            self._mark("forward", "reference forward")
            self.in_reference = True
            with torch.no_grad(), self._reference_context():
                module = self.reference if self.reference is not None else self.forward_module
                ref_kl_logps = self._kl_logps(module)
                ref_outputs = module(input_ids=ids, labels=ids, use_cache=False, fused_lm_head=True)
            self.in_reference = False
            ref_logps = ref_outputs.log_probs[:, -seq_len:].sum(-1)
            del ref_outputs
        else:
            ref_logps = self.precomputed
            ref_kl_logps = self.precomputed_kl if kl_logps is not None else None
        ref_chosen = ref_logps.index_select(0, chosen_idx)
        ref_rejected = ref_logps.index_select(0, rejected_idx)
        if kl_logps is not None:
            kl = (kl_logps - ref_kl_logps).mean().detach().clamp(min=0)
            chosen_losses = 1 - F.sigmoid(self.beta * ((chosen_logps - ref_chosen) - kl))
            rejected_losses = 1 - F.sigmoid(self.beta * (kl - (rejected_logps - ref_rejected)))
        else:  # apo_zero_unpaired
            chosen_losses = 1 - F.sigmoid(self.beta * (chosen_logps - ref_chosen))
            rejected_losses = F.sigmoid(self.beta * (rejected_logps - ref_rejected))
        losses = torch.cat((1.0 * chosen_losses, 1.0 * rejected_losses), 0)
        with torch.no_grad():  # the metrics TRL logs (small reductions)
            outputs.entropy[:, -seq_len:].detach().sum()
            outputs.mean_logits[:, -seq_len:].sum()
        del outputs
        return losses.nanmean()


class OddsRatioStep(TrainingStep):
    """ORPOTrainer / CPOTrainer ``concatenated_forward`` and loss (trl.experimental, TRL 1.16): the full logits of
    chosen+rejected rows (``model(input_ids).logits``, no labels), the NLL of the chosen half
    (``cross_entropy_loss``: ``logits[..., :-1, :].contiguous()``), the per-row log-probs of every row with the
    trainer's own ``get_batch_logps`` (``selective_log_softmax`` over the logits), the odds-ratio (ORPO) or
    sigmoid/SimPO (CPO) loss and the metrics' means of the logits. Every token is a completion token (labels =
    input ids; ORPO's ``torch.where(attention_mask == 1, ...)`` runs on an all-ones mask)."""

    def __init__(self, setup: Setup, model, optimizer, batch):
        super().__init__(setup, model, optimizer, batch)
        self.attention_mask = torch.ones_like(batch)
        training = setup.training
        self.beta = float(training.resolved("beta"))
        self.mode = training.mode

    def register_existing(self, tracker) -> None:
        super().register_existing(tracker)
        tracker.register(self.attention_mask, "input", op="(attention mask)")

    def _loss(self) -> torch.Tensor:
        import os

        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        import torch.nn as nn

        if self.mode == "orpo":
            from trl.experimental.orpo import ORPOTrainer as Trainer
        else:
            from trl.experimental.cpo import CPOTrainer as Trainer
        ids, mask = self.batch, self.attention_mask
        chosen_rows = ids.shape[0] // 2
        # An all-ones mask lets transformers take SDPA's is_causal path (masking_utils _ignore_causal_mask_sdpa
        # reads it); fake tensors cannot be read, so there the mask is left out to take the same path.
        from torch._subclasses.fake_tensor import FakeTensor

        forward_mask = None if isinstance(mask, FakeTensor) else mask
        outputs = self.forward_module(ids, attention_mask=forward_mask, use_cache=False)
        all_logits = outputs.logits

        def cross_entropy_loss(logits, labels):
            logits = logits[..., :-1, :].contiguous()
            labels = labels[..., 1:].contiguous()
            logits = logits.view(-1, logits.shape[-1])
            labels = labels.view(-1)
            return nn.CrossEntropyLoss()(logits, labels.to(logits.device))

        if self.mode == "orpo":
            labels = torch.where(mask == 1, ids.clone(), -100)
        else:
            labels = ids.clone()
        nll_loss = cross_entropy_loss(all_logits[:chosen_rows], labels[:chosen_rows])
        average = self.mode in ("orpo", "simpo")
        all_logps = Trainer.get_batch_logps(all_logits, ids, average_log_prob=average)
        chosen_logps, rejected_logps = all_logps[:chosen_rows], all_logps[chosen_rows:]
        if self.mode == "orpo":
            chosen, rejected = chosen_logps.float(), rejected_logps.float()
            from trl.experimental.orpo.orpo_trainer import log1mexp

            log_odds = (chosen - rejected) - (log1mexp(chosen) - log1mexp(rejected))
            loss = nll_loss - (self.beta * F.logsigmoid(log_odds)).mean()
            chosen_logits, rejected_logits = all_logits[:chosen_rows, :-1, :], all_logits[chosen_rows:, :-1, :]
        else:
            margin = self.beta * (chosen_logps - rejected_logps)
            if self.mode == "simpo":
                margin = margin - 0.5  # simpo_gamma
            loss = (-F.logsigmoid(margin)).mean() + 1.0 * nll_loss  # cpo_alpha 1.0
            chosen_logits, rejected_logits = all_logits[:chosen_rows], all_logits[chosen_rows:]
        with torch.no_grad():  # the metrics TRL logs
            chosen_logits.detach().mean()
            rejected_logits.detach().mean()
        del outputs, all_logits, chosen_logits, rejected_logits
        return loss


class RewardStep(TrainingStep):
    """RewardTrainer's step: ``logits = model(input_ids).logits`` (one score per row, the last token's),
    ``-logsigmoid(chosen − rejected).mean()``, backward (TRL 1.16 ``RewardTrainer.compute_loss``)."""

    def _install_markers(self) -> None:
        from .hf_model import base_model, decoder_layers

        layers = decoder_layers(self.model)
        for position, layer in enumerate(layers):
            layer.register_forward_pre_hook(self._forward_marker(f"forward layers.{position}"))
            layer.register_forward_hook(self._backward_marker_on_output(f"backward layers.{position}"))
        layers[0].register_forward_pre_hook(self._backward_marker_on_input("backward embeddings"), with_kwargs=True)
        final_norm(self.model).register_forward_pre_hook(lambda module, args: self._forward_mark_if_forward("loss", "loss"))

    def _loss(self) -> torch.Tensor:
        outputs = self.forward_module(input_ids=self.batch, use_cache=False)
        chosen, rejected = torch.chunk(outputs.logits.squeeze(-1), chunks=2)
        return -F.logsigmoid(chosen - rejected).mean()


class GKDStep(PreferenceStep):
    """GKDTrainer.compute_loss (trl.experimental.gkd): student logits, the teacher's under no_grad, the
    generalized JSD (TRL's own ``GKDTrainer.generalized_jsd_loss``), backward; off-policy batches. The
    masked selection (``jsd[mask]``) has a data-dependent shape: real tensors only."""

    def _loss(self) -> torch.Tensor:
        import os

        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
        from trl.experimental.gkd import GKDTrainer

        ids = self.batch
        student = self.forward_module(input_ids=ids, use_cache=False)
        self._mark("forward", "teacher forward")
        self.in_reference = True
        with torch.no_grad():
            teacher = self.reference(input_ids=ids, use_cache=False)
        self.in_reference = False
        loss = GKDTrainer.generalized_jsd_loss(
            student_logits=student.logits[:, :-1, :],
            teacher_logits=teacher.logits[:, :-1, :],
            labels=ids[:, 1:],
            beta=float(self.setup.training.resolved("beta")),
        )
        del student, teacher
        return loss


def final_norm(model: torch.nn.Module) -> torch.nn.Module:
    """The decoder's final norm (Llama ``model.norm``, GPT-2 ``transformer.ln_f``)."""
    from .hf_model import base_model

    decoder = base_model(model).get_decoder()
    for name in ("norm", "ln_f", "final_layernorm"):
        module = getattr(decoder, name, None)
        if isinstance(module, torch.nn.Module):
            return module
    raise ValueError("found no final norm on the decoder")


def build_reference(setup: Setup, fake: bool, device: torch.device) -> Optional[torch.nn.Module]:
    """A second copy of the model for the reference (TRL ``create_model_from_path`` with the policy's dtype:
    no adapters, no checkpointing), in eval mode and frozen, or None when TRL keeps no copy."""
    from torch.utils._python_dispatch import _disable_current_modes

    from .fake import materialize
    from .hf_model import build_model

    training = setup.training
    if not training.reference_copy(setup.finetuning.method != "full") and training.mode != "gkd":
        return None
    if training.mode == "gkd" and training.teacher is not None:
        raise ValueError("cannot measure this setup: training.teacher (a teacher other than the student's architecture)")
    data = setup.model_dump(mode="json")
    data["finetuning"] = {"method": "full"}
    data["activation_checkpointing"] = "none"
    data["training"] = {"mode": "sft"}
    plain = Setup.model_validate(data)
    if fake:
        with _disable_current_modes():
            reference = build_model(plain, on_meta=True)
        materialize(reference, device)
    else:
        reference = build_model(plain, on_meta=False).to(device)
    reference.eval()
    for parameter in reference.parameters():
        parameter.requires_grad_(False)
    return reference


def prepare(setup: Setup, fake: bool, device: torch.device, model: torch.nn.Module, optimizer, vocab_size: int):
    """The step of a post-training mode over an already built policy and optimizer."""
    reference = build_reference(setup, fake, device)
    if setup.training.mode == "critic":  # PPO's value model alone (measure/critic.py)
        from .critic import CriticStep

        return CriticStep(setup, model, optimizer, torch.randint(0, vocab_size, batch_shape(setup), device=device))
    if setup.training.mode not in ("reward", "gkd", "orpo", "cpo", "simpo"):
        add_fused_heads(setup, model, reference)
    rows, tokens = batch_shape(setup)
    batch = torch.randint(0, vocab_size, (rows, tokens), device=device)
    if setup.training.has_critic:  # verl's PPO: GRPO's round with the critic's phase (measure/critic.py)
        from .critic import PPOStep, build_critic

        return PPOStep(setup, model, optimizer, batch, reference, *build_critic(setup, fake, device))
    if setup.training.is_rl:
        from .grpo import GRPOStep

        return GRPOStep(setup, model, optimizer, batch, reference)
    if setup.training.mode == "reward":
        return RewardStep(setup, model, optimizer, batch)
    if setup.training.mode == "gkd":
        return GKDStep(setup, model, optimizer, batch, reference)
    if setup.training.mode in ("orpo", "cpo", "simpo"):
        return OddsRatioStep(setup, model, optimizer, batch)
    if setup.training.mode == "kto":
        return KTOStep(setup, model, optimizer, batch, reference)
    return PreferenceStep(setup, model, optimizer, batch, reference)
