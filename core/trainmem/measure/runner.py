"""Measure one training step of a Setup: :func:`measure`.

1. Check that the setup can be replayed on one device (no parallelism, no QLoRA, ...).
2. Seed everything (``torch.manual_seed``), build the model (on the meta device for a
   fake run, then materialised as FakeTensors), the optimizer over the trainable
   parameters, and a batch of random token ids of shape (micro_batch_size,
   sequence_length).
3. Run ``warmup_steps`` untracked steps (so optimizer state exists), then one tracked
   step under :class:`~trainmem.measure.tracker.StorageTracker` with Python's garbage
   collector paused (collected just before), so that frees happen at deterministic
   points: when the last reference goes.
4. Turn the tracker's log into a :class:`~trainmem.measure.record.Measurement`.

The recorded setup is the one that actually ran: the precision recipe made explicit
(``bf16-mixed`` on one device is ``amp-bf16``), the optimizer implementation and LoRA's
default target modules made explicit, the attention kernel as observed (``sdpa`` on CPU with attention dropout runs
the math path and is recorded as ``sdpa-math``), and ``runtime.device``.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import platform
import sys
import warnings
from dataclasses import dataclass
from typing import Any, Optional, Union

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ..packing import row_shape
from ..setup import Setup
from .accounting import StepLog, account
from .fake import materialize
from .hf_model import (
    REPLAYABLE_PRECISIONS,
    base_model,
    build_model,
    hf_config_dict,
    lora_adapter_dtype,
    lora_target_modules,
)
from .optimizers import BuiltOptimizer, build_optimizer
from .record import CudaMemory, Environment, Kernels, Measurement
from .step import AUTOCAST_DTYPES, TrainingStep
from .tracker import StorageTracker
from .transformers_compat import unpacked_batches

METHOD = (
    "TorchDispatchMode storage tracker (trainmem.measure.tracker): live bytes = sum of untyped_storage().nbytes() "
    "over distinct live storages, updated after every dispatched aten op and on every storage free"
)
FUSED_ATTENTION_OPS = (
    "aten._scaled_dot_product_flash_attention_for_cpu",
    "aten._scaled_dot_product_flash_attention",
    "aten._scaled_dot_product_efficient_attention",
    "aten._scaled_dot_product_cudnn_attention",
    "aten._scaled_dot_product_fused_attention_overrideable",
)
MATH_ATTENTION_OPS = ("aten._scaled_dot_product_attention_math", "aten._safe_softmax")


MIXED_PRECISION_ON_ONE_DEVICE = {"bf16-mixed": "amp-bf16", "fp16-mixed": "amp-fp16"}
"""What the framework-neutral recipes mean for a single-device (DDP-style) run: PyTorch AMP."""


def resolve_precision(setup: Setup) -> Setup:
    """Replace bf16-mixed / fp16-mixed by the AMP recipe they stand for on one device."""
    recipe = MIXED_PRECISION_ON_ONE_DEVICE.get(setup.precision)
    if recipe is None or setup.parallelism.strategy != "ddp":
        return setup
    return Setup.model_validate({**setup.model_dump(mode="json"), "precision": recipe})


def check_replayable(setup: Setup) -> None:
    """Raise ValueError naming the first field this tool cannot replay on one device."""
    parallel = setup.parallelism
    problems = []
    if parallel.num_gpus != 1:
        problems.append(f"num_gpus={parallel.num_gpus} (measurement runs one device)")
    if setup.precision not in REPLAYABLE_PRECISIONS:
        problems.append(f"precision {setup.precision!r} (measurable: {', '.join(REPLAYABLE_PRECISIONS)})")
    if setup.finetuning.method == "qlora":
        problems.append("QLoRA (bitsandbytes is not part of the measurement stack)")
    if setup.finetuning.frozen:
        problems.append("frozen parameter groups")
    if setup.activation_checkpointing == "selective":
        problems.append("selective activation checkpointing")
    if setup.loss != "standard":
        problems.append(f"loss {setup.loss!r}")
    if setup.attention == "flash_attention_2":
        problems.append("flash_attention_2")
    if not setup.training.is_supervised:
        from .post_training import check_measurable

        problems += check_measurable(setup)
    if problems:
        raise ValueError("cannot measure this setup: " + "; ".join(problems))


def measure(
    setup: Union[Setup, dict[str, Any]],
    *,
    fake: bool = False,
    seed: int = 0,
    warmup_steps: int = 1,
    case_id: str = "",
    description: str = "",
) -> Measurement:
    """Run the setup's training step in PyTorch and count where its memory goes."""
    setup = resolve_precision(setup if isinstance(setup, Setup) else Setup.model_validate(setup))
    check_replayable(setup)
    device = _device(setup, fake)
    torch.manual_seed(seed)
    # A packed row must reach transformers' own packing check (it builds the block-diagonal mask).
    batches = unpacked_batches() if setup.batch != "packed" else contextlib.nullcontext()
    with _quiet_libraries(), batches, _fake_mode(fake):
        run = _prepare(setup, fake, device)
        for _ in range(warmup_steps):
            run.step.run()
        tracker, cuda = _tracked_step(run.step, setup, device, fake)
        if cuda is not None:
            cuda = cuda.model_copy(update={"phase_max_reserved": dict(run.step.phase_max_reserved)})
        accounting = account(
            StepLog(
                storages=tracker.storages,
                events=tracker.events,
                segments=tracker.segments,
                gradient_storages=run.step.gradient_storages,
                optimizer_state_storages=run.step.optimizer_state_storages,
            )
        )
        kernels = _kernels(setup, run, tracker, device)
        num_parameters = sum(parameter.numel() for parameter in run.model.parameters())
        num_trainable = sum(parameter.numel() for parameter in run.trainable)

    replayed = _replayed_setup(setup, kernels, device.type)
    return Measurement(
        id=case_id or default_case_id(replayed, fake),
        description=description,
        setup=replayed,
        kernels=kernels,
        environment=_environment(device, fake, seed, warmup_steps),
        num_parameters=num_parameters,
        num_trainable_parameters=num_trainable,
        **accounting.measurement_fields(),
        cuda=cuda,
        untracked_input_bytes=tracker.untracked_input_bytes,
        notes=run.step.notes,
    )


@dataclass
class _Run:
    """Everything a measured step needs, built once."""

    model: torch.nn.Module
    trainable: list[torch.nn.Parameter]
    optimizer: BuiltOptimizer
    step: TrainingStep


def _device(setup: Setup, fake: bool) -> torch.device:
    device = torch.device(setup.runtime.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        if fake:
            raise ValueError("a fake CUDA run needs a CUDA build of torch (kernel choices query the device)")
        raise ValueError("runtime.device is 'cuda' but CUDA is not available")
    return device


def _prepare(setup: Setup, fake: bool, device: torch.device) -> _Run:
    """Model (fake: built on meta, then materialised as FakeTensors), optimizer, batch, step."""
    if fake:
        with _disable_current_modes():
            model = build_model(setup, on_meta=True)
        materialize(model, device)
    else:
        model = build_model(setup, on_meta=False).to(device)
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = build_optimizer(setup.optimizer.name, setup.optimizer.implementation, trainable)
    vocab_size = getattr(base_model(model).config.get_text_config(), "vocab_size", 1)  # vision encoders have none
    if not setup.training.is_supervised:
        from .post_training import prepare

        step = prepare(setup, fake, device, model, optimizer.optimizer, vocab_size)
        return _Run(model, trainable, optimizer, step)
    if setup.images is not None:  # a vision-language model's text, image placeholders and pixel values
        from .vlm import vlm_inputs

        batch, extra = vlm_inputs(setup, hf_config_dict(setup), vocab_size, device)
        step = TrainingStep(setup, model, optimizer.optimizer, batch)
        step.forward_kwargs.update(extra)
        return _Run(model, trainable, optimizer, step)
    architecture = setup.architecture()
    if architecture is not None and architecture.encoder_layers:  # an encoder-decoder (measure/seq2seq.py)
        from .seq2seq import Seq2SeqBatch

        target = setup.target_length or setup.sequence_length
        seq2seq_batch = Seq2SeqBatch(
            setup.micro_batch_size, setup.sequence_length, target, vocab_size, device, architecture.num_mel_bins
        )
        step = TrainingStep(setup, model, optimizer.optimizer, seq2seq_batch.source)
        step.task_batch = seq2seq_batch
        return _Run(model, trainable, optimizer, step)
    if architecture is not None and architecture.task != "causal_lm":  # an encoder's task (measure/tasks.py)
        from .tasks import TaskBatch

        task_batch = TaskBatch(architecture, setup.micro_batch_size, setup.sequence_length, vocab_size, device)
        step = TrainingStep(setup, model, optimizer.optimizer, task_batch.input_ids)
        step.task_batch = task_batch
        return _Run(model, trainable, optimizer, step)
    rows, row_tokens = row_shape(setup)
    batch = torch.randint(0, vocab_size, (rows, row_tokens), device=device)
    step = TrainingStep(setup, model, optimizer.optimizer, batch)
    if setup.batch == "packed":
        step.forward_kwargs["position_ids"] = packed_position_ids(row_tokens, setup.packed_sequences, device)
    if setup.batch == "padded_masked":
        step.forward_kwargs["attention_mask"] = right_padding_mask(rows, row_tokens, device)
    return _Run(model, trainable, optimizer, step)


def right_padding_mask(rows: int, tokens: int, device: torch.device) -> torch.Tensor:
    """(rows, tokens) int64 ones whose row ``i`` ends in ``i + 1`` zeros (at most half the row): right padding,
    as DataCollatorWithPadding / DataCollatorForLanguageModeling write it."""
    mask = torch.ones(rows, tokens, dtype=torch.long, device=device)
    for row in range(rows):
        mask[row, tokens - min(row + 1, tokens // 2):] = 0
    return mask


def packed_position_ids(tokens: int, sequences: int, device: torch.device) -> torch.Tensor:
    """(1, tokens) positions restarting at each of ``sequences`` equal parts (the last takes the rest), as
    DataCollatorWithFlattening writes them."""
    length = tokens // sequences
    parts = [torch.arange(length, device=device) for _ in range(sequences - 1)]
    parts.append(torch.arange(tokens - length * (sequences - 1), device=device))
    return torch.cat(parts).unsqueeze(0)


def _tracked_step(
    step: TrainingStep, setup: Setup, device: torch.device, fake: bool
) -> tuple[StorageTracker, Optional[CudaMemory]]:
    """One step under the tracker, with the garbage collector paused so frees are deterministic."""
    tracker = StorageTracker(autocast_recipe=setup.precision in AUTOCAST_DTYPES)
    cuda_start = _cuda_reset(device, fake)
    gc.collect()
    gc.disable()
    try:
        step.register_existing(tracker)
        with tracker:
            step.run(tracker)
    finally:
        tracker.stop()
        gc.enable()
    return tracker, _cuda_stats(device, fake, cuda_start)


def _kernels(setup: Setup, run: _Run, tracker: StorageTracker, device: torch.device) -> Kernels:
    autocast_dtype = AUTOCAST_DTYPES.get(setup.precision)
    return Kernels(
        attention=_attention_that_ran(setup, tracker),
        attention_ops=sorted(op for op in tracker.op_counts if op in FUSED_ATTENTION_OPS + MATH_ATTENTION_OPS),
        optimizer_class=run.optimizer.qualified_class,
        optimizer_kwargs=run.optimizer.kwargs,
        optimizer_implementation=run.optimizer.implementation,
        autocast_device=device.type if autocast_dtype is not None else None,
        autocast_dtype=str(autocast_dtype).removeprefix("torch.") if autocast_dtype is not None else None,
        input_embeddings_require_grad=_embeddings_require_grad(setup),
        lora_adapter_dtype=lora_adapter_dtype(run.model),
        lora_target_modules=lora_target_modules(run.model),
    )


# ---------------------------------------------------------------------- helpers


@contextlib.contextmanager
def _quiet_libraries():
    """Silence transformers' info/warning logs and the deprecation chatter of a from-config build."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.filterwarnings("ignore", category=UserWarning, module="peft")
            yield
    finally:
        hf_logging.set_verbosity(verbosity)


@contextlib.contextmanager
def _fake_mode(fake: bool):
    if not fake:
        yield None
        return
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        yield mode


def _attention_that_ran(setup: Setup, tracker: StorageTracker) -> str:
    if setup.attention == "eager":
        return "eager"
    if any(op in tracker.op_counts for op in FUSED_ATTENTION_OPS):
        return "sdpa"
    return "sdpa-math"


def _embeddings_require_grad(setup: Setup) -> bool:
    return setup.finetuning.method == "full" or setup.activation_checkpointing == "full"


def _replayed_setup(setup: Setup, kernels: Kernels, device_type: str) -> Setup:
    data = setup.model_dump(mode="json")
    data["attention"] = kernels.attention
    data["optimizer"] = {"name": setup.optimizer.name, "implementation": kernels.optimizer_implementation}
    data["runtime"] = {**data["runtime"], "device": device_type}
    if setup.finetuning.method == "lora" and setup.finetuning.lora.target_modules is None:
        data["finetuning"]["lora"]["target_modules"] = kernels.lora_target_modules
    return Setup.model_validate(data)


def default_case_id(setup: Setup, fake: bool) -> str:
    """A readable id from the main axes, e.g. 'gpt2-fp32-adamw-sdpa-b2-s256'."""
    model = setup.model
    name = getattr(model, "preset", None) or str((setup.architecture() or "custom") and setup.architecture().model_type)
    parts = [
        name,
        setup.precision,
        setup.optimizer.name,
        setup.attention,
        f"b{setup.micro_batch_size}",
        f"s{setup.sequence_length}",
    ]
    if setup.gradient_accumulation_steps > 1:
        parts.append(f"ga{setup.gradient_accumulation_steps}")
    if setup.activation_checkpointing != "none":
        parts.append(f"ckpt-{setup.activation_checkpointing}")
    if setup.finetuning.method == "lora":
        parts.append(f"lora-r{setup.finetuning.lora.r}")
    if setup.batch == "packed":
        parts.append(f"packed{setup.packed_sequences}")
    if setup.batch == "padded_masked":
        parts.append("padmask")
    if not setup.training.is_supervised:
        parts.insert(0, f"trl-{setup.training.mode}")
    if fake:
        parts.append("fake")
    return "-".join(parts)


def _environment(device: torch.device, fake: bool, seed: int, warmup_steps: int) -> Environment:
    import transformers

    try:
        import peft

        peft_version: Optional[str] = peft.__version__
    except ImportError:  # pragma: no cover - peft is part of the measure extra
        peft_version = None
    if fake:
        device_name = "fake"
    elif device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = _cpu_name()
    return Environment(
        torch=torch.__version__,
        transformers=transformers.__version__,
        peft=peft_version,
        python=platform.python_version(),
        device=device.type,
        device_name=device_name,
        fake=fake,
        date=datetime.date.today().isoformat(),
        method=METHOD,
        seed=seed,
        warmup_steps=warmup_steps,
    )


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or sys.platform


def _cuda_reset(device: torch.device, fake: bool) -> tuple[int, int]:
    if device.type != "cuda" or fake:
        return 0, 0
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device), torch.cuda.memory_reserved(device)


def _cuda_stats(device: torch.device, fake: bool, start: tuple[int, int]) -> Optional[CudaMemory]:
    """The allocator's peaks over the measured step, and what the device has in use right after it.

    ``cudaMemGetInfo`` is read while the step's cache is still held; the reserved bytes that were
    released since the peak (none without ``empty_cache`` or garbage collection) are added back, so
    ``device_used_bytes`` stands for the process's total at the reserved peak.
    """
    if device.type != "cuda" or fake:
        return None
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    peak_reserved = torch.cuda.max_memory_reserved(device)
    used = total - free + (peak_reserved - torch.cuda.memory_reserved(device))
    return CudaMemory(
        max_memory_allocated=torch.cuda.max_memory_allocated(device),
        max_memory_reserved=peak_reserved,
        memory_allocated_at_start=start[0],
        memory_reserved_at_start=start[1],
        device_used_bytes=used,
        device_total_bytes=total,
    )
