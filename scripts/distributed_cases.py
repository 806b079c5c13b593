"""The distributed cases of trainmem's measured corpus (``core/trainmem/data/corpus_distributed.jsonl``).

Each case is a Setup with ``parallelism.num_gpus`` local ranks; ``scripts/build_distributed_corpus.py``
measures it with :func:`trainmem.measure.distributed.measure_distributed` (gloo on CPU, real
tensors) and records one line per rank. One small Llama (7.1M parameters: vocabulary 8000,
hidden 256, 4 layers, 4 query and 2 key/value heads, untied head) keeps every run under a
minute or two on two cores; micro-batch 2 × 128 tokens, AdamW (for-loop, torch's CPU default).

Frameworks: DDP; FSDP2 (``fully_shard`` per decoder layer and the root) with and without
resharding after forward, with ``MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)``,
with activation checkpointing; DTensor tensor parallelism with and without
``SequenceParallel``; DeepSpeed 0.19 ZeRO 1, 2 and 3 in fp32 and bf16 (master weights), with
optimizer offload and checkpointing; 4 ranks for FSDP2 and ZeRO-3; FSDP1 (FULL_SHARD, and
HYBRID_SHARD on 4 ranks as 2 × 2); FSDP2 with ``CPUOffloadPolicy`` (on a CPU-only machine its host-device
copies are no-ops, so the device side leaves out a GPU's transient copies of one unit's shard);
DeepSpeed ZeRO-3 under ``zero.Init``, with gradient accumulation, ``offload_param``,
``grad_accum_dtype`` fp32 (also on one rank: DeepSpeed keeps its ZeRO optimizer's buffers there too) and
small reduce buckets. Pipeline parallelism with ``torch.distributed.pipelining`` (``pp-*``): GPipe, 1F1B (2
and 4 micro-batches, fp32 and bf16, 2 and 4 ranks) and interleaved 1F1B with 2 stages per rank (2 ranks, and
4 ranks of an 8-layer Llama with 4 and 8 micro-batches). FSDP1 with ``CPUOffload``; DTensor TP + SequenceParallel
with foreach AdamW; FSDP2 and ZeRO-2 on the single-device corpus's small qwen3_moe and granitemoehybrid. PEFT LoRA
(peft's default q_proj/v_proj, r 16) under DDP, FSDP1, FSDP2 (also with MixedPrecisionPolicy) and ZeRO-2/3 in bf16;
ZeRO-3 with checkpointing; FSDP2 outside DTensor TP + SequenceParallel on 4 ranks as 2 x 2 (torchtitan's 2-D recipe).
"""

from __future__ import annotations

from typing import Any

from corpus_cases import GRANITE4_SMALL, QWEN3_MOE_SMALL  # the single-device corpus's small MoE and hybrid
from small_models import LLAMA_7M  # shared with the tests (scripts/small_models.py)


def case(case_id: str, description: str, parallelism: dict, precision: str = "fp32", **fields: Any) -> dict[str, Any]:
    setup = {
        "model": {"hf_config": LLAMA_7M},
        "micro_batch_size": 2,
        "sequence_length": 128,
        "precision": precision,
        "optimizer": {"name": "adamw", "implementation": "for-loop"},
        "parallelism": {"num_gpus": 2, **parallelism},
        "runtime": {"device": "cpu"},
        **fields,
    }
    return {"id": case_id, "description": description, "setup": setup}


FSDP = {"strategy": "fsdp", "fsdp_version": 2}
FSDP_MIXED = {**FSDP, "fsdp_reduce_dtype": "fp32"}
TP = {"tensor_parallel_size": 2, "tensor_parallel_flavor": "dtensor"}


def pipeline(schedule: str, ranks: int, virtual: int = 1) -> dict[str, Any]:
    """torch.distributed.pipelining over every rank (trainmem.measure.pipelining)."""
    return {"num_gpus": ranks, "pipeline_parallel_size": ranks, "pipeline_schedule": schedule, "pipeline_virtual_stages": virtual}


def zero(stage: int, **more: Any) -> dict[str, Any]:
    return {"strategy": "zero", "zero_stage": stage, **more}


DISTRIBUTED_CASES: list[dict[str, Any]] = [
    case("ddp-llama-7m-fp32-w2", "DDP, fp32", {"strategy": "ddp"}),
    case("ddp-llama-7m-amp-bf16-w2", "DDP, AMP bf16", {"strategy": "ddp"}, "amp-bf16"),
    case("ddp-llama-7m-fp32-ga2-w2", "DDP, fp32, 2 micro-batches", {"strategy": "ddp"}, gradient_accumulation_steps=2),
    case("fsdp2-llama-7m-fp32-w2", "FSDP2, fp32, reshard_after_forward=True", FSDP),
    case(
        "fsdp2-llama-7m-fp32-noreshard-w2",
        "FSDP2, fp32, reshard_after_forward=False",
        {**FSDP, "fsdp_reshard_after_forward": False},
    ),
    case("fsdp2-llama-7m-fp32-ckpt-w2", "FSDP2, fp32, full activation checkpointing", FSDP, activation_checkpointing="full"),
    case("fsdp2-llama-7m-mixed-bf16-w2", "FSDP2, MixedPrecisionPolicy(bf16, reduce fp32)", FSDP_MIXED, "bf16-mixed"),
    case(
        "fsdp2-llama-7m-mixed-bf16-ckpt-w2",
        "FSDP2, MixedPrecisionPolicy(bf16, reduce fp32), full activation checkpointing",
        FSDP_MIXED,
        "bf16-mixed",
        activation_checkpointing="full",
    ),
    case(
        "fsdp2-llama-7m-mixed-bf16-noreshard-w2",
        "FSDP2, MixedPrecisionPolicy(bf16, reduce fp32), reshard_after_forward=False",
        {**FSDP_MIXED, "fsdp_reshard_after_forward": False},
        "bf16-mixed",
    ),
    case("fsdp2-llama-7m-fp32-w4", "FSDP2, fp32, 4 ranks", {**FSDP, "num_gpus": 4}),
    case(
        "fsdp2-llama-7m-fp32-offload-w2",
        "FSDP2, fp32, CPUOffloadPolicy (on the CPU its host-device copies are no-ops: the device side as measured "
        "leaves out the GPU's transient shard copies)",
        {**FSDP, "offload_parameters": True, "offload_optimizer": True},
    ),
    case("tp-dtensor-llama-7m-fp32-w2", "DTensor TP (torchtitan plan), fp32", TP),
    case("tp-dtensor-sp-llama-7m-fp32-w2", "DTensor TP with SequenceParallel norms, fp32", {**TP, "sequence_parallel": True}),
    case(
        "tp-dtensor-sp-llama-7m-fp32-foreach-w2",
        "DTensor TP with SequenceParallel norms, fp32, foreach AdamW (the _foreach_* kernels over DTensors; without "
        "SequenceParallel the norms stay plain tensors and torch 2.13's _foreach_* ops refuse the mixed lists)",
        {**TP, "sequence_parallel": True},
        optimizer={"name": "adamw", "implementation": "foreach"},
    ),
    case("zero1-llama-7m-fp32-w2", "DeepSpeed ZeRO-1, fp32", zero(1)),
    case("zero2-llama-7m-fp32-w2", "DeepSpeed ZeRO-2, fp32", zero(2)),
    case("zero3-llama-7m-fp32-w2", "DeepSpeed ZeRO-3, fp32", zero(3)),
    case("zero1-llama-7m-bf16-w2", "DeepSpeed ZeRO-1, bf16 with fp32 master weights", zero(1), "bf16-master-weights"),
    case("zero2-llama-7m-bf16-w2", "DeepSpeed ZeRO-2, bf16 with fp32 master weights", zero(2), "bf16-master-weights"),
    case("zero3-llama-7m-bf16-w2", "DeepSpeed ZeRO-3, bf16 with fp32 master weights", zero(3), "bf16-master-weights"),
    case(
        "zero2-llama-7m-bf16-ckpt-w2",
        "DeepSpeed ZeRO-2, bf16, full activation checkpointing",
        zero(2),
        "bf16-master-weights",
        activation_checkpointing="full",
    ),
    case(
        "zero2-llama-7m-bf16-offload-w2",
        "DeepSpeed ZeRO-2, bf16, offload_optimizer cpu",
        zero(2, offload_optimizer=True),
        "bf16-master-weights",
    ),
    case(
        "zero3-llama-7m-bf16-offload-w2",
        "DeepSpeed ZeRO-3, bf16, offload_optimizer cpu",
        zero(3, offload_optimizer=True),
        "bf16-master-weights",
    ),
    case("zero3-llama-7m-bf16-w4", "DeepSpeed ZeRO-3, bf16, 4 ranks", zero(3, num_gpus=4), "bf16-master-weights"),
    case(
        "zero3-llama-7m-bf16-init-w2",
        "DeepSpeed ZeRO-3, bf16, model built under deepspeed.zero.Init",
        zero(3, model_load="sharded"),
        "bf16-master-weights",
    ),
    case(
        "zero2-llama-7m-bf16-ga2-w2",
        "DeepSpeed ZeRO-2, bf16, gradient_accumulation_steps 2",
        zero(2),
        "bf16-master-weights",
        gradient_accumulation_steps=2,
    ),
    case(
        "zero3-llama-7m-bf16-ga2-w2",
        "DeepSpeed ZeRO-3, bf16, gradient_accumulation_steps 2",
        zero(3),
        "bf16-master-weights",
        gradient_accumulation_steps=2,
    ),
    case(
        "zero3-llama-7m-bf16-offload-param-w2",
        "DeepSpeed ZeRO-3, bf16, offload_param and offload_optimizer cpu",
        zero(3, offload_optimizer=True, offload_parameters=True),
        "bf16-master-weights",
    ),
    case(
        "zero1-llama-7m-bf16-fp32grads-w2",
        "DeepSpeed ZeRO-1, bf16, data_types.grad_accum_dtype fp32 (the engine runs BF16_Optimizer)",
        zero(1),
        "bf16-master-weights-fp32-grads",
    ),
    case(
        "zero2-llama-7m-bf16-fp32grads-w2",
        "DeepSpeed ZeRO-2, bf16, data_types.grad_accum_dtype fp32",
        zero(2),
        "bf16-master-weights-fp32-grads",
    ),
    *[
        case(
            f"zero{stage}-llama-7m-bf16-fp32grads-w{ranks}",
            f"DeepSpeed ZeRO-{stage}, bf16, data_types.grad_accum_dtype fp32, {ranks} rank{'s' if ranks > 1 else ''}"
            + (" (the engine runs BF16_Optimizer)" if stage == 1 else ""),
            zero(stage, num_gpus=ranks),
            "bf16-master-weights-fp32-grads",
        )
        for stage, ranks in [(1, 1), (2, 1), (3, 1), (3, 2)]
    ],
    case("zero2-llama-7m-bf16-w1", "DeepSpeed ZeRO-2, bf16 with fp32 master weights, 1 rank", zero(2, num_gpus=1), "bf16-master-weights"),
    case(
        "zero2-llama-7m-bf16-smallbucket-w2",
        "DeepSpeed ZeRO-2, bf16, reduce_bucket_size 1e6 elements (the model's gradients in 8 buckets)",
        zero(2, zero_reduce_bucket_size=1_000_000),
        "bf16-master-weights",
    ),
    case(
        "zero3-llama-7m-bf16-smallbucket-w2",
        "DeepSpeed ZeRO-3, bf16, reduce_bucket_size 1e6 elements",
        zero(3, zero_reduce_bucket_size=1_000_000),
        "bf16-master-weights",
    ),
    case("fsdp1-llama-7m-fp32-w2", "FSDP1 FULL_SHARD, fp32, use_orig_params", {"strategy": "fsdp", "fsdp_version": 1}),
    case(
        "fsdp1-llama-7m-fp32-hsdp-w4",
        "FSDP1 HYBRID_SHARD (HSDP) on 4 ranks as 2 x 2, fp32",
        {"strategy": "fsdp", "fsdp_version": 1, "fsdp_sharding_strategy": "HYBRID_SHARD", "gpus_per_node": 2, "num_gpus": 4},
    ),
    *[
        case(
            f"pp-{name}-llama-7m-{'bf16' if precision == 'bf16-pure' else 'fp32'}-mb{micro_batches}-w{ranks}",
            f"torch.distributed.pipelining {schedule}, {micro_batches} micro-batches, {precision}",
            pipeline(schedule, ranks, virtual),
            precision,
            gradient_accumulation_steps=micro_batches,
            attention="sdpa",
        )
        for name, schedule, micro_batches, precision, virtual, ranks in [
            ("1f1b", "1f1b", 2, "fp32", 1, 2),
            ("1f1b", "1f1b", 4, "fp32", 1, 2),
            ("1f1b", "1f1b", 4, "bf16-pure", 1, 2),
            ("1f1b", "1f1b", 4, "fp32", 1, 4),
            ("gpipe", "gpipe", 4, "fp32", 1, 2),
            ("interleaved-v2", "interleaved_1f1b", 4, "fp32", 2, 2),
        ]
    ],
    *[
        case(
            f"pp-interleaved-v2-llama-8l-fp32-mb{micro_batches}-w4",
            f"torch.distributed.pipelining interleaved_1f1b, {micro_batches} micro-batches, fp32",
            pipeline("interleaved_1f1b", 4, 2),
            gradient_accumulation_steps=micro_batches,
            attention="sdpa",
            model={"hf_config": {**LLAMA_7M, "num_hidden_layers": 8}},
        )
        for micro_batches in (4, 8)
    ],
    *[
        case(
            f"{framework}-{name}-small-{'fp32' if precision == 'fp32' else 'bf16'}-w2",
            f"{label} on 2 ranks, {precision}: {what}",
            parallelism,
            precision,
            model={"hf_config": config},
        )
        for framework, label, parallelism, precision in [
            ("fsdp2", "FSDP2", FSDP, "fp32"),
            ("zero2", "DeepSpeed ZeRO-2", zero(2), "bf16-master-weights"),
        ]
        for name, config, what in [
            ("qwen3moe", QWEN3_MOE_SMALL, "a small qwen3_moe (4 routed experts, top-2, per-head q/k norms)"),
            ("granite4", GRANITE4_SMALL, "a small granitemoehybrid (Mamba-2 and NoPE attention layers, MoE with a shared MLP)"),
        ]
    ],
    case(
        "fsdp1-llama-7m-fp32-offload-w2",
        "FSDP1 FULL_SHARD, fp32, CPUOffload(offload_params=True) (on the CPU its host-device copies are no-ops and "
        "each unit's gradient writeback copy is device memory: trainmem.parallel.fsdp.writes_back_gradient_copies)",
        {"strategy": "fsdp", "fsdp_version": 1, "offload_parameters": True, "offload_optimizer": True},
    ),
]


LORA = {"method": "lora", "lora": {"r": 16}}
"""PEFT LoRA with its default targets for Llama (q_proj, v_proj), r 16, as the multi-GPU fine-tunes run it."""

DISTRIBUTED_CASES += [
    case("ddp-llama-7m-fp32-lora-w2", "DDP, fp32, LoRA r16 (peft's default targets)", {"strategy": "ddp"}, finetuning=LORA),
    case(
        "fsdp2-llama-7m-fp32-lora-w2",
        "FSDP2 on a PEFT model (fully_shard per decoder layer and the root, as accelerate's FSDP2 path), fp32, LoRA r16",
        FSDP,
        finetuning=LORA,
    ),
    case(
        "fsdp2-llama-7m-mixed-bf16-lora-w2",
        "FSDP2 on a PEFT model, MixedPrecisionPolicy(bf16, reduce fp32), LoRA r16",
        FSDP_MIXED,
        "bf16-mixed",
        finetuning=LORA,
    ),
    case(
        "fsdp1-llama-7m-fp32-lora-w2",
        "FSDP1 FULL_SHARD, use_orig_params, fp32, LoRA r16 (frozen base and adapters in one FlatParameter per layer)",
        {"strategy": "fsdp", "fsdp_version": 1},
        finetuning=LORA,
    ),
    case("zero2-llama-7m-bf16-lora-w2", "DeepSpeed ZeRO-2, bf16, LoRA r16", zero(2), "bf16-master-weights", finetuning=LORA),
    case("zero3-llama-7m-bf16-lora-w2", "DeepSpeed ZeRO-3, bf16, LoRA r16", zero(3), "bf16-master-weights", finetuning=LORA),
    case(
        "fsdp2-tp-dtensor-sp-llama-7m-fp32-w4",
        "torchtitan's 2-D recipe on 4 ranks as 2 x 2: DTensor TP with SequenceParallel inside, FSDP2 (fully_shard per "
        "decoder layer and the root) over the data-parallel dimension, fp32",
        {**FSDP, "num_gpus": 4, **TP, "sequence_parallel": True},
    ),
    case(
        "zero3-llama-7m-bf16-ckpt-w2",
        "DeepSpeed ZeRO-3, bf16, full activation checkpointing",
        zero(3),
        "bf16-master-weights",
        activation_checkpointing="full",
    ),
]

OUTSIDE_THE_CORPUS: list[dict[str, Any]] = []
"""Cases measured with ``--only ID --output FILE`` and kept out of the corpus (none today: FSDP1's CPU offload,
``fsdp1-llama-7m-fp32-offload-w2``, joined the corpus once its CPU-only device side was modelled)."""
