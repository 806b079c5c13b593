"""Fine-tuning: frozen groups, LoRA adapters, QLoRA's 4-bit base, against the published figures."""

import pytest

import trainmem
from trainmem.quantization import quantized_weight_bytes

# GPT-3 175B (Brown et al. 2020, Table 2.1): 96 layers, d_model 12288, 96 heads, 2048 context.
GPT3 = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 2048, "n_embd": 12288, "n_layer": 96, "n_head": 96}


def test_qlora_nf4_with_double_quantization_is_4_127_bits_per_parameter():
    """Dettmers et al. 2023: NF4 (4 bits) + block-64 absmax constants, double-quantized to 8 bits with a
    second-level fp32 constant per 256: 8/64 + 32/(64·256) = 0.127 bits; total ≈ 0.516 bytes/parameter."""
    numel = 64 * 256 * 1000
    assert quantized_weight_bytes(numel, 4, double_quant=True) * 8 / numel == pytest.approx(4.127, abs=0.001)
    assert quantized_weight_bytes(numel, 4, double_quant=False) * 8 / numel == pytest.approx(4.5)


def test_lora_on_gpt3_keeps_the_frozen_16_bit_weights():
    """Hu et al. 2021 (LoRA): fine-tuning GPT-3 175B with r=4 on Wq and Wv cuts training VRAM from 1.2 TB to
    350 GB, essentially the 16-bit weights (175B × 2 bytes), and the trainable parameters by 10,000 times
    (abstract). GPT-2's fused c_attn adapter has r × (h + 3h) parameters, as many as two on Wq and Wv."""
    report = trainmem.estimate(
        {
            "model": {"hf_config": GPT3},
            "precision": "bf16-pure",
            "micro_batch_size": 1,
            "sequence_length": 128,
            "finetuning": {"method": "lora", "lora": {"r": 4, "target_modules": ["c_attn"]}},
            "activation_checkpointing": "full",
        },
        suggestions=False,
    )
    assert report.num_parameters == pytest.approx(175e9, rel=0.01)
    weights = next(p.bytes for p in report.parts if p.name == "weights")
    assert weights / 1e9 == pytest.approx(350, rel=0.01)
    assert report.num_parameters / report.num_trainable_parameters == pytest.approx(10_000, rel=0.1)


def test_frozen_embeddings_do_not_train():
    full = trainmem.estimate({"model": "llama-2-7b"}, suggestions=False)
    frozen = trainmem.estimate(
        {"model": "llama-2-7b", "finetuning": {"frozen": ["embeddings", "lm_head"]}}, suggestions=False
    )
    assert full.num_trainable_parameters - frozen.num_trainable_parameters == 2 * 32000 * 4096


def test_frozen_layers_do_not_train():
    frozen = trainmem.estimate({"model": "llama-2-7b", "finetuning": {"frozen": ["layers:0-15"]}}, suggestions=False)
    per_layer = (6_738_415_616 - 2 * 32000 * 4096 - 4096) // 32
    assert frozen.num_trainable_parameters == 6_738_415_616 - 16 * per_layer


def test_lora_adapter_count():
    """PEFT adds r × (in + out) parameters per adapted nn.Linear."""
    report = trainmem.estimate(
        {"model": "llama-2-7b", "finetuning": {"method": "lora", "lora": {"r": 8}}}, suggestions=False
    )
    assert report.num_trainable_parameters == 32 * 2 * 8 * (4096 + 4096)  # q_proj and v_proj in 32 layers


def test_qlora_shrinks_the_base_four_times():
    lora = trainmem.estimate(
        {"model": "llama-2-13b", "finetuning": {"method": "lora"}, "precision": "bf16-pure"}, suggestions=False
    )
    qlora = trainmem.estimate(
        {"model": "llama-2-13b", "finetuning": {"method": "qlora"}, "precision": "bf16-pure"}, suggestions=False
    )
    weights = lambda r: next(p.bytes for p in r.parts if p.name == "weights")  # noqa: E731
    assert weights(qlora) < weights(lora) / 3
