"""GRPOTrainer's step (TRL 1.16.0), reproduced with TRL's fused LM head: :class:`GRPOStep`.

One generation round and its optimisation, as ``_generate_and_score_completions`` and ``_compute_loss`` run
them on one device with transformers' ``generate`` (``use_vllm=False``):

1. generation under ``torch.no_grad``: the policy's ``generate`` of the generation batch
   (``micro_batch_size × gradient_accumulation_steps`` completions, each prompt repeated
   ``num_generations`` times) with ``do_sample=True``, ``top_k=0``, ``max_new_tokens`` =
   ``min_new_tokens`` = ``max_completion_length`` (every completion at full length: the worst case);
2. the reference's per-token log-probs (``beta > 0``) under ``torch.no_grad``, in chunks of
   ``micro_batch_size`` rows (``_get_per_token_logps_and_entropies``): a separate copy, or the PEFT
   policy with adapters disabled; the old policy's (``training.phases.old_log_probs_recomputed``) the same way;
   ``training.log_prob_micro_batch_size`` / ``ref_log_prob_micro_batch_size`` rows at a time when set (verl's);
3. per micro-batch: the policy's forward with the fused head (``outputs=("log_probs", "entropy")``, labels
   -100 on the prompt), the clipped-ratio loss with advantages (random here; rewards are computed from
   text and cost no GPU memory) plus ``beta`` × the k3 KL estimate, normalised over the completion tokens
   (``loss_type="dapo"``), backward; then the optimizer step.

Generation has data-dependent control flow, so GRPO steps are measured on real tensors only.
"""

from __future__ import annotations

import contextlib
from typing import Optional

import torch

from .events import ROLE_PARAMETER
from .post_training import final_norm
from .step import TrainingStep


class GRPOStep(TrainingStep):
    def __init__(self, setup, model, optimizer, batch, reference: Optional[torch.nn.Module]):
        super().__init__(setup, model, optimizer, batch)
        training = setup.training
        self.reference = reference
        self.prompt_tokens = training.resolved("max_prompt_length")
        self.completion_tokens = training.resolved("max_completion_length")
        self.beta = float(training.resolved("beta"))
        from ..training.phases import old_log_probs_recomputed

        self.old_policy = old_log_probs_recomputed(training)
        self.old_rows = training.resolved("log_prob_micro_batch_size") or setup.micro_batch_size
        self.ref_rows = training.resolved("ref_log_prob_micro_batch_size") or setup.micro_batch_size
        self.quiet = False
        rows = setup.micro_batch_size * setup.gradient_accumulation_steps
        vocab = self._vocab_size()
        self.prompts = torch.randint(1, vocab, (rows, self.prompt_tokens), device=batch.device)
        self.advantages = torch.randn(rows, device=batch.device)
        final_norm(model).register_forward_pre_hook(self._loss_marker)

    def _vocab_size(self) -> int:
        from .hf_model import base_model

        return base_model(self.model).config.vocab_size

    def _loss_marker(self, module, args) -> None:
        if not self.in_backward and not self.quiet:
            self._mark("loss", "loss")

    def _forward_mark_if_forward(self, phase: str, label: str) -> None:
        if not self.quiet:
            super()._forward_mark_if_forward(phase, label)

    def register_existing(self, tracker) -> None:
        super().register_existing(tracker)
        if self.reference is not None:
            for tensor in [*self.reference.parameters(), *self.reference.buffers()]:
                tracker.register(tensor, ROLE_PARAMETER, op="(reference parameter)")
        tracker.register(self.prompts, "input", op="(prompt ids)")
        tracker.register(self.advantages, "input", op="(advantages)")

    # ------------------------------------------------------------------ the round

    def _before_micro_batches(self) -> None:
        """Generation, then the old-policy and reference log-prob passes over the whole generation batch."""
        self.micro_batch = 1
        self._mark("forward", "generation")
        self.ids = self._generate()
        self._mark("forward", "log-prob passes")
        self.old = self._log_probs(self.model, self.ids, self.old_rows) if self.old_policy else None
        self.ref = None
        if self.beta:
            with self._reference_context():
                self.ref = self._log_probs(self.reference if self.reference is not None else self.model, self.ids, self.ref_rows)

    def _loss_divisor(self) -> int:
        return 1  # the loss is normalised over the completion tokens of the whole generation batch

    def _after_step(self) -> None:
        del self.ids, self.old, self.ref

    def _loss(self) -> torch.Tensor:
        micro = self.setup.micro_batch_size
        rows = slice((self.micro_batch - 1) * micro, self.micro_batch * micro)
        old = None if self.old is None else self.old[rows]
        ref = None if self.ref is None else self.ref[rows]
        return self._policy_loss(self.ids[rows], old, ref, rows)

    def _generate(self) -> torch.Tensor:
        from .hf_model import base_model

        self.quiet = True
        try:
            with torch.no_grad(), self._autocast_context():
                return base_model(self.model).generate(
                    input_ids=self.prompts,
                    attention_mask=torch.ones_like(self.prompts),
                    max_new_tokens=self.completion_tokens,
                    min_new_tokens=self.completion_tokens,
                    do_sample=True,
                    top_k=0,
                    use_cache=True,
                    pad_token_id=0,
                    eos_token_id=None,
                )
        finally:
            self.quiet = False

    def _labels(self, ids: torch.Tensor) -> torch.Tensor:
        labels = ids.clone()
        labels[:, : -self.completion_tokens] = -100
        return labels

    def _log_probs(self, module: torch.nn.Module, ids: torch.Tensor, rows: int) -> torch.Tensor:
        """``_get_per_token_logps_and_entropies`` under no_grad, in chunks of ``rows`` rows (TRL: micro_batch_size;
        verl: the pass's ``log_prob_micro_batch_size_per_gpu``)."""
        self.quiet = True
        chunks = []
        try:
            with torch.no_grad():
                for start in range(0, ids.shape[0], rows):
                    part = ids[start : start + rows]
                    with self._autocast_context():
                        outputs = module(input_ids=part, labels=self._labels(part), use_cache=False, fused_lm_head=True)
                    chunks.append(outputs.log_probs[:, -self.completion_tokens :])
                    del outputs
            return torch.cat(chunks, dim=0)
        finally:
            self.quiet = False

    def _policy_loss(self, ids, old, ref, rows) -> torch.Tensor:
        outputs = self.forward_module(input_ids=ids, labels=self._labels(ids), use_cache=False, fused_lm_head=True)
        logps = outputs.log_probs[:, -self.completion_tokens :]
        old = logps.detach() if old is None else old
        ratio = torch.exp(logps - old)
        advantages = self.advantages[rows].unsqueeze(1)
        per_token = -torch.min(ratio * advantages, torch.clamp(ratio, 0.8, 1.28) * advantages)
        if ref is not None:
            delta = ref - logps
            per_token = per_token + self.beta * (torch.exp(delta) - delta - 1)
        loss = per_token.sum() / per_token.numel()
        with torch.no_grad():
            outputs.entropy[:, -self.completion_tokens :].mean()
        del outputs
        return loss

    def _reference_context(self) -> contextlib.AbstractContextManager:
        if self.reference is None and hasattr(self.model, "disable_adapter"):
            return self.model.disable_adapter()
        return contextlib.nullcontext()
