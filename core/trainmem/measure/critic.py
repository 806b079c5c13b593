"""PPO's critic as verl 0.9.1 runs it, measured: :class:`CriticStep` (mode ``critic``) and :class:`PPOStep` (mode ``ppo``).

The critic is ``AutoModelForTokenClassification`` with ``num_labels = 1`` and no dropout
(``verl/utils/model.py`` ``load_valuehead_model``; ``verl/workers/engine/fsdp/transformer_impl.py`` sets
``num_labels``, ``classifier_dropout`` 0). Its update, per micro-batch: ``values = model(input_ids).logits
.squeeze(-1)`` and the response's values (``values[:, -response - 1 : -1]``), then ``compute_value_loss``
(``verl/trainer/ppo/core_algos.py``): ``clip_by_value(vpreds, old − c, old + c)`` (``torch.max(torch.min(x,
hi), lo)``, verl/utils/torch_functional.py), the two squared errors against the returns, their maximum, ``0.5 ×``
the masked mean; backward; after the micro-batches the optimizer step and ``zero_grad`` (verl's
``EngineTrainModeCtx`` zeroes the gradients when the update ends). Returns and old values are random here (the
advantages come from rewards computed on text: no GPU memory beyond these (rows × response) tensors).

:class:`PPOStep` is GRPO's measured round (:mod:`.grpo`: generation, the old/reference log-prob passes) with the
critic's phase between the log-prob passes and the actor's update, verl's order (``ray_trainer.py`` ``fit``):
``_compute_values`` (the critic under no_grad over the generation batch, in chunks of its micro-batch), then
``_update_critic``, then ``_update_actor``. Both models and both optimizers are resident for the whole step.
"""

from __future__ import annotations

import torch

from .events import ROLE_GRADIENT, ROLE_INPUT, ROLE_OPTIMIZER_STATE, ROLE_PARAMETER
from .grpo import GRPOStep
from .post_training import RewardStep

CLIP_RANGE_VALUE = 0.5
"""verl 0.9.1 ``critic.cliprange_value`` default."""


def value_loss(values: torch.Tensor, old: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """verl ``compute_value_loss`` with ``loss_agg_mode`` token-mean and a full response mask."""
    clipped = torch.max(torch.min(values, old + CLIP_RANGE_VALUE), old - CLIP_RANGE_VALUE)
    losses = (values - returns) ** 2
    clipped_losses = (clipped - returns) ** 2
    worst = torch.max(losses, clipped_losses)
    mask = torch.ones_like(worst)
    return 0.5 * (worst * mask).sum() / mask.sum()


class CriticStep(RewardStep):
    """The critic's update alone (mode ``critic``): every position but the last is a response token."""

    def __init__(self, setup, model, optimizer, batch):
        super().__init__(setup, model, optimizer, batch)
        shape = (batch.shape[0], batch.shape[1] - 1)
        self.old_values = torch.randn(shape, device=batch.device)
        self.returns = torch.randn(shape, device=batch.device)

    def register_existing(self, tracker) -> None:
        super().register_existing(tracker)
        tracker.register(self.old_values, ROLE_INPUT, op="(old values)")
        tracker.register(self.returns, ROLE_INPUT, op="(returns)")

    def _loss(self) -> torch.Tensor:
        values = self.forward_module(input_ids=self.batch, use_cache=False).logits.squeeze(-1)[:, :-1]
        return value_loss(values, self.old_values, self.returns)


def build_critic(setup, fake: bool, device: torch.device):
    """The critic of a ``ppo`` setup: the same config as a ``critic`` setup (full fine-tuning), and its optimizer."""
    from torch.utils._python_dispatch import _disable_current_modes

    from ..setup import Setup
    from .fake import materialize
    from .hf_model import build_model
    from .optimizers import build_optimizer

    if setup.training.critic_model is not None:
        raise ValueError("cannot measure this setup: training.critic_model (a critic other than the actor's architecture)")
    data = setup.model_dump(mode="json")
    data["finetuning"] = {"method": "full"}
    data["training"] = {"mode": "critic"}
    data["sequence_length"] = setup.training.resolved("max_prompt_length") + setup.training.resolved("max_completion_length")
    critic_setup = Setup.model_validate(data)
    if fake:
        with _disable_current_modes():
            critic = build_model(critic_setup, on_meta=True)
        materialize(critic, device)
    else:
        critic = build_model(critic_setup, on_meta=False).to(device)
    trainable = [parameter for parameter in critic.parameters() if parameter.requires_grad]
    return critic, build_optimizer(setup.optimizer.name, setup.optimizer.implementation, trainable).optimizer


class PPOStep(GRPOStep):
    """GRPO's round with verl's critic phase after the log-prob passes (module docstring)."""

    def __init__(self, setup, model, optimizer, batch, reference, critic, critic_optimizer):
        self.critic = critic
        self.critic_optimizer = critic_optimizer
        super().__init__(setup, model, optimizer, batch, reference)
        training = setup.training
        self.critic_micro = training.critic_micro_batch_size or setup.micro_batch_size
        self.critic_steps = training.critic_gradient_accumulation_steps or setup.gradient_accumulation_steps
        rows = setup.micro_batch_size * setup.gradient_accumulation_steps
        self.returns = torch.randn(rows, self.completion_tokens, device=batch.device)

    def register_existing(self, tracker) -> None:
        super().register_existing(tracker)
        for tensor in [*self.critic.parameters(), *self.critic.buffers()]:
            tracker.register(tensor, ROLE_PARAMETER, op="(critic parameter)")
        for tensor in self._critic_state_tensors():
            tracker.register(tensor, ROLE_OPTIMIZER_STATE, op="(critic optimizer state)")
        tracker.register(self.returns, ROLE_INPUT, op="(returns)")

    def _critic_state_tensors(self) -> list[torch.Tensor]:
        return [v for state in self.critic_optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]

    def _before_micro_batches(self) -> None:
        super()._before_micro_batches()
        self._critic_phase()

    def _critic_values(self, ids: torch.Tensor) -> torch.Tensor:
        return self.critic(input_ids=ids, use_cache=False).logits.squeeze(-1)[:, -self.completion_tokens - 1 : -1]

    def _critic_phase(self) -> None:
        self.quiet = True
        try:
            self._mark("forward", "critic values")
            with torch.no_grad(), self._autocast_context():
                old = torch.cat(
                    [self._critic_values(self.ids[s : s + self.critic_micro]) for s in range(0, self.ids.shape[0], self.critic_micro)]
                )
            for step in range(self.critic_steps):
                rows = slice(step * self.critic_micro, (step + 1) * self.critic_micro)
                self._mark("forward", "critic forward")
                with self._autocast_context():
                    loss = value_loss(self._critic_values(self.ids[rows]), old[rows], self.returns[rows])
                self._mark("backward", "critic backward")
                (loss / self.critic_steps).backward()
                del loss
                if self.tracker is not None:
                    for parameter in self.critic.parameters():
                        if parameter.grad is not None:
                            self.gradient_storages.add(self._index_or_register(parameter.grad, ROLE_GRADIENT))
            self._mark("optimizer", "critic optimizer")
            self.critic_optimizer.step()
            if self.tracker is not None:
                for tensor in self._critic_state_tensors():
                    self.optimizer_state_storages.add(self._index_or_register(tensor, ROLE_OPTIMIZER_STATE))
            self.critic_optimizer.zero_grad(set_to_none=True)
            del old
        finally:
            self.quiet = False
        self._mark("forward", "actor update")
