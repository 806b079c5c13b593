"""Measure a ``torch.distributed.pipelining`` step rank by rank (:func:`measure_pipeline`).

The setup's model is built from its config on every rank (same seed, random weights) and split
by layers by hand, as the pipelining tutorial does (torchtitan's ``pipeline_module_split``): stage
s of ``p·v`` gets layers ``[s·L/(p·v), (s+1)·L/(p·v))``, stage 0 the embedding, the last stage the
final norm and the head; each stage module computes its own rotary cos/sin. Rank r holds stage r
(``ScheduleGPipe``, ``Schedule1F1B``) or stages r, r + p, … (``ScheduleInterleaved1F1B``). The
schedule's ``loss_fn`` is the model's own causal-LM loss (``model.loss_function``: the fp32
upcast, the shifted labels, cross-entropy), so the last stage computes what the single-process
step computes. Each rank runs ``warmup_steps`` steps (the first one also runs PipelineStage's
shape inference and allocates its receive buffers), then one measured step:
``schedule.step(batch, target=batch, return_outputs=False)`` on stage 0 (``target`` on the last),
``optimizer.step()``, ``optimizer.zero_grad(set_to_none=True)``.

Markers: ``forward stageS mbM`` / ``backward stageS mbM`` around every chunk the schedule runs
(the micro-batch numbered from 1), ``loss`` on the last stage, ``optimizer``, ``zero_grad``.
PipelineStage's receive buffers are labelled ``overhead/pipeline receive buffers``.
"""

from __future__ import annotations

import gc
from typing import Any, Optional

from ..setup import Setup
from .record import Measurement


def check_pipeline(setup: Setup) -> None:
    """Raise ValueError naming what a local pipelining measurement cannot replay."""
    parallel = setup.parallelism
    problems = []
    if parallel.num_gpus != parallel.pipeline_parallel_size:
        problems.append("pipeline parallelism combined with data, tensor or context parallelism")
    if parallel.pipeline_schedule is None:
        problems.append("parallelism.pipeline_schedule unset (measured: torch.distributed.pipelining schedules)")
    if setup.finetuning.method != "full" or setup.activation_checkpointing != "none":
        problems.append("LoRA or activation checkpointing with pipelining")
    if setup.precision not in ("fp32", "bf16-pure"):
        problems.append(f"precision {setup.precision!r} (measured: fp32, bf16-pure)")
    if problems:
        raise ValueError("cannot measure this pipeline setup: " + "; ".join(problems))


def measure_pipeline(
    setup: Setup, *, seed: int = 0, warmup_steps: Optional[int] = None, case_id: str = "", description: str = ""
) -> list[Measurement]:
    check_pipeline(setup)
    from .ranks import spawn_ranks

    return spawn_ranks(
        _measure_rank, setup, seed=seed, warmup_steps=1 if warmup_steps is None else warmup_steps, case_id=case_id,
        description=description, folder_prefix="trainmem-pipe-", environment={},
    )


def _stage_module(model: Any, first_layer: int, stop_layer: int, first: bool, last: bool) -> Any:
    """One stage's module: references to the model's own submodules (nothing else keeps the model alive)."""
    base = model.model
    return _stage_class()(
        base.embed_tokens if first else None,
        list(base.layers[first_layer:stop_layer]),
        base.rotary_emb,
        base.norm if last else None,
        model.lm_head if last else None,
    )


def _stage_class() -> Any:
    import torch

    class StageModule(torch.nn.Module):
        def __init__(self, embed_tokens: Any, layers: list, rotary_emb: Any, norm: Any, lm_head: Any) -> None:
            super().__init__()
            self.embed_tokens = embed_tokens
            self.layers = torch.nn.ModuleList(layers)
            self.rotary_emb = rotary_emb
            self.norm = norm
            self.lm_head = lm_head

        def forward(self, hidden: torch.Tensor) -> torch.Tensor:
            if self.embed_tokens is not None:
                hidden = self.embed_tokens(hidden)
            position_ids = torch.arange(hidden.shape[1]).unsqueeze(0)
            position_embeddings = self.rotary_emb(hidden, position_ids)
            for layer in self.layers:
                hidden = layer(hidden, attention_mask=None, position_ids=position_ids, position_embeddings=position_embeddings)
            if self.lm_head is not None:
                hidden = self.lm_head(self.norm(hidden))
            return hidden

    return StageModule


def _measure_rank(setup, rank, world_size, seed, warmup_steps, case_id, description) -> Measurement:
    import torch
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    from .accounting import StepLog, account, rebased_at_first_mark
    from .distributed import _label_one, _set_role
    from .events import ROLE_GRADIENT, ROLE_INPUT, ROLE_OPTIMIZER_STATE, ROLE_PARAMETER
    from .hf_model import build_model
    from .optimizers import build_optimizer
    from .ranks import rank_measurement
    from .runner import _quiet_libraries
    from .tracker import StorageTracker, tracking_storage_resizes

    parallel = setup.parallelism
    virtual = parallel.pipeline_virtual_stages
    num_stages = world_size * virtual
    micro_batches = setup.gradient_accumulation_steps
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    tracker = StorageTracker(autocast_recipe=False)
    marks = {"micro_batch": 0}

    def mark(phase: str, label: str, micro_batch: int) -> None:
        if measuring["on"]:
            tracker.mark(phase, label, micro_batch)

    measuring = {"on": False}
    gradient_storages: set = set()
    owned: dict[int, tuple[str, str]] = {}
    try:
        with _quiet_libraries(), tracker, tracking_storage_resizes(tracker):
            torch.manual_seed(seed)
            model = build_model(setup, on_meta=False)
            num_parameters = sum(parameter.numel() for parameter in model.parameters())
            vocab_size = model.config.vocab_size
            layers_per_stage = model.config.num_hidden_layers // num_stages
            stage_indices = [rank + world_size * chunk for chunk in range(virtual)]
            modules = [
                _stage_module(
                    model, s * layers_per_stage, (s + 1) * layers_per_stage, s == 0, s == num_stages - 1
                )
                for s in stage_indices
            ]
            loss_function = model.loss_function
            del model
            gc.collect()
            stages = [
                PipelineStage(module, s, num_stages, torch.device("cpu")) for module, s in zip(modules, stage_indices)
            ]
            for stage in stages:
                _mark_chunks(stage, mark, marks)

            def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
                mark("loss", "loss", marks["micro_batch"])
                return loss_function(logits=logits, labels=target, vocab_size=vocab_size)

            schedule_class = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}.get(parallel.pipeline_schedule)
            if schedule_class is None:
                schedule = ScheduleInterleaved1F1B(stages, n_microbatches=micro_batches, loss_fn=loss_fn)
            else:
                schedule = schedule_class(stages[0], n_microbatches=micro_batches, loss_fn=loss_fn)
            trainable = [p for module in modules for p in module.parameters() if p.requires_grad]
            built = build_optimizer(setup.optimizer.name, setup.optimizer.implementation, trainable)
            optimizer = built.optimizer
            batch = torch.randint(0, vocab_size, (setup.micro_batch_size * micro_batches, setup.sequence_length))
            holds_first = 0 in stage_indices
            holds_last = num_stages - 1 in stage_indices

            def run_step() -> None:
                mark("forward", "forward", 1)
                arguments = (batch,) if holds_first else ()
                target = batch if holds_last else None
                schedule.step(*arguments, target=target, return_outputs=False)
                if measuring["on"]:
                    label()
                    gradient_storages.update(
                        tracker.index_of(p.grad) for module in modules for p in module.parameters() if p.grad is not None
                    )
                mark("optimizer", "optimizer", 0)
                optimizer.step()
                mark("zero_grad", "zero_grad", 0)
                optimizer.zero_grad(set_to_none=True)

            for _ in range(warmup_steps):
                run_step()
            gc.collect()
            gc.disable()

            def label() -> None:
                for module in modules:
                    for tensor in (*module.parameters(), *module.buffers()):
                        _set_role(tracker, tensor, ROLE_PARAMETER)
                    for parameter in module.parameters():
                        if parameter.grad is not None:
                            _set_role(tracker, parameter.grad, ROLE_GRADIENT)
                for state in optimizer.state.values():
                    for value in state.values():
                        if isinstance(value, torch.Tensor):
                            _set_role(tracker, value, ROLE_OPTIMIZER_STATE)
                _set_role(tracker, batch, ROLE_INPUT)
                for stage in stages:
                    for received in (stage.args_recv_info, getattr(stage, "grad_recv_info", {})):
                        for infos in received.values():
                            for info in infos:
                                if getattr(info, "buffer", None) is not None:
                                    _label_one(tracker, owned, "overhead", "pipeline receive buffers", info.buffer)

            label()
            measuring["on"] = True
            run_step()
            label()
            state_storages = {
                tracker.index_of(v)
                for state in optimizer.state.values()
                for v in state.values()
                if isinstance(v, torch.Tensor)
            }
            measuring["on"] = False
            tracker.stop()
    finally:
        gc.enable()
    log = rebased_at_first_mark(
        StepLog(
            storages=tracker.storages,
            events=list(tracker.events),
            segments=tracker.segments,
            gradient_storages={i for i in gradient_storages if i is not None},
            optimizer_state_storages={i for i in state_storages if i is not None},
            assigned=owned,
        )
    )
    dist.destroy_process_group()
    return rank_measurement(  # check_pipeline: fp32 or bf16-pure, so no autocast
        setup,
        rank,
        world_size,
        tracker=tracker,
        accounting=account(log),
        optimizer=(built.qualified_class, built.kwargs, built.implementation),
        input_embeddings_require_grad=False,
        seed=seed,
        warmup_steps=warmup_steps,
        frameworks={},
        case_id=case_id,
        default_id=lambda replayed: _default_id(replayed, world_size),
        description=description,
        num_parameters=num_parameters,
        notes=[f"torch.distributed.pipelining {parallel.pipeline_schedule}, stages {stage_indices} of {num_stages}"],
        framework="pipelining",
        host_parts={},
    )


def _mark_chunks(stage: Any, mark: Any, marks: dict) -> None:
    """Wrap the stage's forward_one_chunk / backward_one_chunk with timeline markers."""
    forward, backward = stage.forward_one_chunk, stage.backward_one_chunk

    def forward_one_chunk(chunk: int, *args: Any, **kwargs: Any) -> Any:
        marks["micro_batch"] = chunk + 1
        mark("forward", f"forward stage{stage.stage_index} mb{chunk + 1}", chunk + 1)
        return forward(chunk, *args, **kwargs)

    def backward_one_chunk(chunk: int, *args: Any, **kwargs: Any) -> Any:
        mark("backward", f"backward stage{stage.stage_index} mb{chunk + 1}", chunk + 1)
        return backward(chunk, *args, **kwargs)

    stage.forward_one_chunk = forward_one_chunk
    stage.backward_one_chunk = backward_one_chunk


def _default_id(setup: Setup, world_size: int) -> str:
    from .runner import default_case_id

    schedule = (setup.parallelism.pipeline_schedule or "").replace("_", "-")
    return f"pp-{schedule}-{default_case_id(setup, False)}-mb{setup.gradient_accumulation_steps}-w{world_size}"
