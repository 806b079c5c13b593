"""The CUDA validation cases: about 30 setups chosen to exercise every CUDA-specific part of trainmem.

Each case is measured on one NVIDIA GPU by ``scripts/validate_cuda.py`` (``make validate-cuda``).
Together they cover: attention kernels (eager, SDPA's flash kernel with 16-bit inputs, its
memory-efficient kernel with fp32, its math fallback), precisions (fp32, AMP bf16/fp16, pure
bf16), fused / foreach / for-loop AdamW and SGD, activation checkpointing, gradient
accumulation, LoRA on attention and on every linear layer, bitsandbytes' 8-bit and paged
optimizers, QLoRA with bitsandbytes' CUDA kernels, one-rank FSDP2, long sequences (4k–8k),
and the caching allocator's settings (``expandable_segments``, ``max_split_size_mb``,
``roundup_power2_divisions``). Models are small (125M–1.2B parameters) so that all of it runs
in under 8 minutes on an H100-class GPU. ``requires`` names what a case needs beyond the
``measure`` extra; cases that ``trainmem.measure`` cannot replay yet are kept (and reported
as skipped, with the reason) so that the list is the plan, not what happens to run today.
"""

from __future__ import annotations

from typing import Any

LLAMA_125M = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 768,
    "intermediate_size": 2048,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}
LLAMA_350M = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 1024,
    "intermediate_size": 2816,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "tie_word_embeddings": False,
}


def case(
    case_id: str,
    model: Any,
    batch: int,
    seq: int,
    precision: str = "amp-bf16",
    optimizer: str = "adamw",
    implementation: str | None = None,
    attention: str = "sdpa",
    checkpointing: str = "none",
    lora: dict[str, Any] | None = None,
    qlora: bool = False,
    accumulation: int = 1,
    alloc_conf: str = "",
    parallelism: dict[str, Any] | None = None,
    requires: tuple[str, ...] = (),
    description: str = "",
) -> dict[str, Any]:
    """One CUDA case: its id (``cuda-`` + what it is), the setup, what it needs."""
    model_spec: dict[str, Any] = {"preset": model} if isinstance(model, str) else {"hf_config": dict(model)}
    setup: dict[str, Any] = {
        "model": model_spec,
        "micro_batch_size": batch,
        "sequence_length": seq,
        "gradient_accumulation_steps": accumulation,
        "precision": precision,
        "optimizer": {"name": optimizer, "implementation": implementation},
        "activation_checkpointing": checkpointing,
        "attention": attention,
        "runtime": {"device": "cuda", "cuda_alloc_conf": alloc_conf},
    }
    if lora is not None:
        setup["finetuning"] = {"method": "qlora" if qlora else "lora", "lora": lora}
    if parallelism is not None:
        setup["parallelism"] = parallelism
    return {"id": f"cuda-{case_id}", "description": description, "setup": setup, "requires": list(requires)}


# fmt: off
CASES: list[dict[str, Any]] = [
    # ---------------------------------------------------------------- attention kernels and precisions
    case("llama125m-fp32-adamw-foreach-sdpa-b4-s1024", LLAMA_125M, 4, 1024, precision="fp32", implementation="foreach",
         description="fp32 SDPA: the memory-efficient kernel (flash needs 16-bit inputs)."),
    case("llama125m-fp32-adamw-fused-b4-s1024", LLAMA_125M, 4, 1024, precision="fp32", implementation="fused"),
    case("llama125m-fp32-adamw-forloop-b4-s1024", LLAMA_125M, 4, 1024, precision="fp32", implementation="for-loop"),
    case("llama125m-fp32-sgd-eager-b4-s512", LLAMA_125M, 4, 512, precision="fp32", optimizer="sgd", attention="eager"),
    case("llama125m-ampbf16-adamw-fused-sdpa-b4-s1024", LLAMA_125M, 4, 1024, implementation="fused",
         description="AMP bf16 SDPA: the flash kernel."),
    case("llama125m-ampbf16-adamw-foreach-eager-b4-s1024", LLAMA_125M, 4, 1024, implementation="foreach",
         attention="eager"),
    case("llama125m-ampbf16-adamw-math-b2-s1024", LLAMA_125M, 2, 1024, attention="sdpa-math"),
    case("llama125m-ampfp16-adamw-b4-s1024", LLAMA_125M, 4, 1024, precision="amp-fp16"),
    case("llama125m-bf16-adamw-fused-b8-s1024", LLAMA_125M, 8, 1024, precision="bf16-pure", implementation="fused"),
    case("gpt2-ampbf16-adamw-b8-s1024", "gpt2", 8, 1024, description="GPT-2's dropout: 1-byte masks on CUDA."),
    case("gpt2-fp32-adamw-foreach-b4-s1024", "gpt2", 4, 1024, precision="fp32", implementation="foreach"),
    # ---------------------------------------------------------------- checkpointing, accumulation, LoRA
    case("llama125m-ampbf16-ckpt-b4-s2048", LLAMA_125M, 4, 2048, checkpointing="full"),
    case("llama125m-bf16-ckpt-b8-s2048", LLAMA_125M, 8, 2048, precision="bf16-pure", checkpointing="full"),
    case("llama125m-ampbf16-ga4-b2-s1024", LLAMA_125M, 2, 1024, accumulation=4),
    case("llama125m-ampbf16-lora-attn-b4-s1024", LLAMA_125M, 4, 1024, lora={"r": 16}),
    case("llama125m-ampbf16-lora-all-ckpt-b4-s2048", LLAMA_125M, 4, 2048, checkpointing="full",
         lora={"r": 64, "target_modules": "all-linear"}),
    case("llama3.2-1b-ampbf16-lora-all-ckpt-b2-s2048", "llama-3.2-1b", 2, 2048, checkpointing="full",
         lora={"r": 16, "target_modules": "all-linear"}),
    # ---------------------------------------------------------------- larger models, long sequences
    case("qwen2.5-0.5b-ampbf16-adamw-b2-s2048", "qwen2.5-0.5b", 2, 2048),
    case("tinyllama-1.1b-bf16-adamw-fused-b2-s2048", "tinyllama-1.1b", 2, 2048, precision="bf16-pure",
         implementation="fused"),
    case("llama350m-ampbf16-adamw-fused-b2-s4096", LLAMA_350M, 2, 4096, implementation="fused"),
    case("llama350m-bf16-ckpt-b1-s8192", LLAMA_350M, 1, 8192, precision="bf16-pure", checkpointing="full"),
    case("llama350m-ampbf16-eager-b1-s4096", LLAMA_350M, 1, 4096, attention="eager",
         description="Eager attention at 4k: the s×s scores and probabilities dominate."),
    # ---------------------------------------------------------------- the caching allocator's settings
    case("llama125m-ampbf16-expandable-b4-s1024", LLAMA_125M, 4, 1024, alloc_conf="expandable_segments:True"),
    case("llama350m-ampbf16-expandable-b2-s4096", LLAMA_350M, 2, 4096, alloc_conf="expandable_segments:True"),
    case("llama125m-ampbf16-maxsplit128-b4-s1024", LLAMA_125M, 4, 1024, alloc_conf="max_split_size_mb:128"),
    case("llama125m-ampbf16-roundup4-b4-s1024", LLAMA_125M, 4, 1024, alloc_conf="roundup_power2_divisions:4"),
    # ---------------------------------------------------------------- bitsandbytes, FSDP2
    case("llama125m-ampbf16-adamw8bit-b4-s1024", LLAMA_125M, 4, 1024, optimizer="adamw-8bit",
         requires=("bitsandbytes",)),
    case("llama125m-ampbf16-pagedadamw8bit-b4-s1024", LLAMA_125M, 4, 1024, optimizer="paged-adamw-8bit",
         requires=("bitsandbytes",)),
    case("llama3.2-1b-qlora-nf4-r16-ckpt-b2-s2048", "llama-3.2-1b", 2, 2048, checkpointing="full", qlora=True,
         lora={"r": 16, "target_modules": "all-linear"}, requires=("bitsandbytes",),
         description="QLoRA: bitsandbytes' 4-bit base and its dequantising CUDA kernels."),
    case("llama125m-bf16-fsdp2-1rank-b4-s1024", LLAMA_125M, 4, 1024, precision="bf16-mixed",
         parallelism={"num_gpus": 1, "strategy": "fsdp"},
         description="FSDP2 (fully_shard) on a one-rank process group: all-gather stream, NCCL communicator."),
]
# fmt: on
