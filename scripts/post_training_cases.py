"""Corpus cases of TRL's post-training modes (``training`` in the Setup), appended to corpus_cases.CASES.

Each is a supervised case (``corpus_cases.case``) plus the ``training`` part; the measured step
reproduces the trainer's ``compute_loss`` with TRL 1.16's own fused LM head
(``trainmem.measure.post_training``). Ids start with ``trl-`` so that they sort after the others.
"""

from __future__ import annotations

from typing import Any

DPO = {"mode": "dpo"}


def post_training_cases(case: Any, models: dict[str, Any]) -> list[dict[str, Any]]:
    """The cases, built with corpus_cases' ``case`` helper and model configs (passed in: no import cycle)."""
    LLAMA_14M, LLAMA_58M, LLAMA_ATTENTION = models["LLAMA_14M"], models["LLAMA_58M"], models["LLAMA_ATTENTION"]

    def trl_case(case_id: str, model: Any, training: dict[str, Any], **options: Any) -> dict[str, Any]:
        defined = case(case_id, model, **options)
        defined["setup"]["training"] = training
        return defined

    # fmt: off
    return [
        trl_case("trl-dpo-llama14m-fp32-b1-s128", LLAMA_14M, DPO, batch=1, seq=128,
                 description="DPO, full fine-tuning: a reference copy, one forward of chosen+rejected rows; CPU tiles "
                             "of TRL's fused log-prob head make the peak."),
        trl_case("trl-dpo-llama14m-fp32-b2-s256", LLAMA_14M, DPO, batch=2, seq=256,
                 description="DPO, 2 pairs = 4 rows: the scored hidden states are copied (strided slice)."),
        trl_case("trl-dpo-llama14m-ampbf16-b2-s256", LLAMA_14M, DPO, batch=2, seq=256, precision="amp-bf16",
                 description="DPO under autocast: bf16 tiles, casts of the hidden and head-weight chunks."),
        trl_case("trl-dpo-llama14m-precompute-b2-s256", LLAMA_14M, {**DPO, "precompute_ref_log_probs": True},
                 batch=2, seq=256, description="DPO with precomputed reference log-probs: no reference copy, no pass."),
        trl_case("trl-dpo-llama14m-lora-b2-s256", LLAMA_14M, DPO, batch=2, seq=256,
                 lora={"r": 8, "target_modules": LLAMA_ATTENTION},
                 description="DPO with LoRA: the reference is the base with adapters disabled (no copy)."),
        trl_case("trl-gkd-llama14m-fp32-b1-s128", LLAMA_14M, {"mode": "gkd"}, batch=1, seq=128,
                 description="GKD: a teacher copy, its forward next to the student's logits, the generalized JSD "
                             "over the vocabulary (TRL's generalized_jsd_loss)."),
        trl_case("trl-gkd-llama14m-ampbf16-b2-s256", LLAMA_14M, {"mode": "gkd"}, batch=2, seq=256,
                 precision="amp-bf16",
                 description="GKD under CPU autocast: bf16 logits and log_softmax, the generalized JSD's kl_div in "
                             "fp32 (CPU autocast's fp32 list) from fp32 copies of its inputs."),
        trl_case("trl-grpo-llama14m-fp32-beta0-g2-b2-p64-c32", LLAMA_14M,
                 {"mode": "grpo", "num_generations": 2, "max_prompt_length": 64, "max_completion_length": 32},
                 batch=2, seq=128, description="GRPO, beta 0 (TRL's default): no reference; generate, then train."),
        trl_case("trl-grpo-llama14m-fp32-beta004-g2-b2-p64-c128", LLAMA_14M,
                 {"mode": "grpo", "num_generations": 2, "max_prompt_length": 64, "max_completion_length": 128,
                  "beta": 0.04}, batch=2, seq=128,
                 description="GRPO with beta 0.04: a reference copy and its log-prob pass; longer completions."),
        trl_case("trl-grpo-llama14m-fp32-beta004-it2-lp8-ref4-b1x8-p64-c64", LLAMA_14M,
                 {"mode": "grpo", "num_generations": 2, "max_prompt_length": 64, "max_completion_length": 64,
                  "beta": 0.04, "num_iterations": 2, "log_prob_micro_batch_size": 8, "ref_log_prob_micro_batch_size": 4},
                 batch=1, seq=128, accumulation=8,
                 description="GRPO with the old policy's log-probs (num_iterations 2) in forwards of 8 completions and the "
                             "reference's in forwards of 4, against the update's 1 (verl's log_prob_micro_batch_size_per_gpu): "
                             "the old-policy pass peaks."),
        trl_case("trl-grpo-llama14m-fp32-beta0-g8-b8-p32-c32", LLAMA_14M,
                 {"mode": "grpo", "num_generations": 8, "max_prompt_length": 32, "max_completion_length": 32},
                 batch=8, seq=128, description="GRPO, 8 generations per prompt, 8 completions per micro-batch."),
        trl_case("trl-rloo-llama14m-fp32-g2-b2-p64-c64", LLAMA_14M,
                 {"mode": "rloo", "num_generations": 2, "max_prompt_length": 64, "max_completion_length": 64},
                 batch=2, seq=128,
                 description="RLOO: the old policy's log-probs are always recomputed (RLOOTrainer), and with beta 0.05 "
                             "a reference copy's too, before the update."),
        trl_case("trl-kto-llama14m-fp32-b2-s256", LLAMA_14M, {"mode": "kto"}, batch=2, seq=256,
                 description="KTO: the policy's no-grad forward of the KL batch (mismatched completions), then its "
                             "forward, the reference's KL and batch forwards under no_grad (KTOTrainer)."),
        trl_case("trl-kto-llama14m-lora-b2-s256", LLAMA_14M, {"mode": "kto"}, batch=2, seq=256,
                 lora={"r": 8, "target_modules": LLAMA_ATTENTION},
                 description="KTO with LoRA: the reference passes run the base with adapters disabled (no copy)."),
        trl_case("trl-kto-llama14m-ampbf16-b4-s256-fake", LLAMA_14M, {"mode": "kto"}, batch=4, seq=256,
                 precision="amp-bf16", fake=True,
                 description="KTO under autocast on fake tensors: the KL batch of 4 examples."),
        trl_case("trl-orpo-llama14m-fp32-b2-s256", LLAMA_14M, {"mode": "orpo"}, batch=2, seq=256,
                 description="ORPO: the full fp32 logits kept by selective_log_softmax (gather, row-wise "
                             "logsumexp), the chosen half's NLL; three logits-sized gradients in backward."),
        trl_case("trl-cpo-llama14m-ampbf16-b2-s256", LLAMA_14M, {"mode": "cpo"}, batch=2, seq=256,
                 precision="amp-bf16",
                 description="CPO under autocast: bf16 logits, row-wise log_softmax in bf16 (CPU autocast), the "
                             "NLL's cross-entropy in fp32."),
        trl_case("trl-simpo-llama14m-bf16-b2-s256-fake", LLAMA_14M, {"mode": "simpo"}, batch=2, seq=256,
                 precision="bf16-pure", fake=True,
                 description="SimPO (CPOTrainer) in bf16 on fake tensors: the out-of-place sum of the two logits "
                             "gradients peaks."),
        trl_case("trl-reward-llama14m-fp32-b2-s256", LLAMA_14M, {"mode": "reward"}, batch=2, seq=256,
                 description="Reward model: score head (hidden → 1) instead of lm_head; the optimizer step peaks."),
        trl_case("trl-reward-llama14m-ampbf16-b4-s1024", LLAMA_14M, {"mode": "reward"}, batch=4, seq=1024,
                 precision="amp-bf16", description="Reward model, 4 pairs of 1024 tokens: the activations peak."),
        trl_case("trl-dpo-llama58m-bf16-lora-separate-b2-s512", LLAMA_58M, {**DPO, "reference_model": "separate"},
                 batch=2, seq=512, precision="bf16-pure", lora={"r": 16, "target_modules": "all-linear"},
                 description="DPO with LoRA and a ref_model passed to the trainer: a bf16 copy besides the PEFT policy."),
        trl_case("trl-dpo-tinyllama-bf16-ckpt-b2-s1024-fake", "tinyllama-1.1b", DPO, batch=2, seq=1024,
                 precision="bf16-pure", checkpointing="full", fake=True,
                 description="TinyLlama 1.1B DPO on fake tensors: bf16 reference copy, checkpointed policy."),
    ]
    # fmt: on
