"""Measured corpus cases of the encoder-decoders (T5 v1.0, T5 v1.1 / flan-T5, mT5, BART): ``trainmem.encoder_decoder``.

Small T5 configs run for real on the CPU with different source (``sequence_length``) and target
(``target_length``) lengths, fp32 and AMP bf16, eager attention and SDPA; t5-small and flan-t5-base run on
fake tensors. Appended to ``CASES`` by scripts/corpus_cases.py.
"""

from __future__ import annotations

from typing import Any

T5_COMMON = {"vocab_size": 4096, "d_model": 128, "d_kv": 32, "d_ff": 256, "num_layers": 2, "num_heads": 4,
             "relative_attention_num_buckets": 32, "dropout_rate": 0.1, "decoder_start_token_id": 0}
T5_V11_SMALL = {"model_type": "t5", **T5_COMMON, "num_decoder_layers": 3, "feed_forward_proj": "gated-gelu",
                "tie_word_embeddings": False}
T5_V10_SMALL = {"model_type": "t5", **T5_COMMON, "feed_forward_proj": "relu"}
MT5_SMALL = {"model_type": "mt5", **T5_COMMON, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False}
BART_SMALL = {"model_type": "bart", "vocab_size": 4096, "d_model": 128, "encoder_layers": 2, "decoder_layers": 3,
              "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 256, "decoder_ffn_dim": 256,
              "max_position_embeddings": 512, "dropout": 0.1, "attention_dropout": 0.1, "activation_dropout": 0.1,
              "pad_token_id": 1, "bos_token_id": 0, "eos_token_id": 2, "decoder_start_token_id": 2}

#: Whisper's layout at a size a CPU runs: 128 encoder positions (input_features of 256 frames), 16 mel bins.
WHISPER_SMALL = {"model_type": "whisper", "vocab_size": 1024, "num_mel_bins": 16, "d_model": 64, "encoder_layers": 2,
                 "decoder_layers": 3, "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
                 "decoder_ffn_dim": 128, "max_source_positions": 128, "max_target_positions": 64, "dropout": 0.1,
                 "attention_dropout": 0.0, "activation_dropout": 0.0, "pad_token_id": 1000, "bos_token_id": 1000,
                 "eos_token_id": 1000, "decoder_start_token_id": 1001}


def seq2seq_case(
    case_id: str,
    model: Any,
    *,
    batch: int,
    source: int,
    target: int,
    precision: str = "fp32",
    attention: str = "eager",
    checkpointing: str = "none",
    accumulation: int = 1,
    lora: Any = None,
    fake: bool = False,
    description: str = "",
) -> dict[str, Any]:
    model_spec = {"preset": model} if isinstance(model, str) else {"hf_config": dict(model)}
    setup = {
        "model": model_spec,
        "micro_batch_size": batch,
        "sequence_length": source,
        "target_length": target,
        "gradient_accumulation_steps": accumulation,
        "precision": precision,
        "optimizer": {"name": "adamw"},
        "activation_checkpointing": checkpointing,
        "attention": attention,
        "runtime": {"device": "cpu"},
    }
    if lora is not None:
        setup["finetuning"] = {"method": "lora", "lora": lora}
    return {"id": case_id, "description": description, "fake": fake, "setup": setup}


# fmt: off
ENCODER_DECODER_CASES: list[dict[str, Any]] = [
    seq2seq_case("t5v11-small-fp32-eager-b4-src256-tgt32", T5_V11_SMALL, batch=4, source=256, target=32,
                 description="T5 v1.1 layout (gated-gelu, untied config), 2 encoder / 3 decoder layers: a long source, "
                 "a short target."),
    seq2seq_case("t5v11-small-fp32-eager-b4-src128-tgt256", T5_V11_SMALL, batch=4, source=128, target=256,
                 description="The same model with a short source and a long target."),
    seq2seq_case("t5v11-small-ampbf16-eager-b4-src256-tgt64", T5_V11_SMALL, batch=4, source=256, target=64,
                 precision="amp-bf16"),
    seq2seq_case("t5v11-small-fp32-sdpa-b4-src256-tgt64", T5_V11_SMALL, batch=4, source=256, target=64,
                 attention="sdpa"),
    seq2seq_case("t5v11-small-fp32-eager-ckpt-b4-src256-tgt64", T5_V11_SMALL, batch=4, source=256, target=64,
                 checkpointing="full", description="Full activation checkpointing of both stacks' blocks."),
    seq2seq_case("t5v11-small-fp32-eager-ga2-b2-src256-tgt64", T5_V11_SMALL, batch=2, source=256, target=64,
                 accumulation=2),
    seq2seq_case("t5v11-small-lora-fp32-eager-b4-src256-tgt64", T5_V11_SMALL, batch=4, source=256, target=64,
                 lora={"r": 8}, description="LoRA with PEFT's default targets for t5 (q, v of both stacks' attention)."),
    seq2seq_case("t5v11-small-lora-ampbf16-eager-b4-src256-tgt64", T5_V11_SMALL, batch=4, source=256, target=64,
                 precision="amp-bf16", lora={"r": 8, "target_modules": "all-linear"}),
    seq2seq_case("t5v10-small-fp32-eager-b4-src128-tgt64", T5_V10_SMALL, batch=4, source=128, target=64,
                 description="T5 v1.0 layout (ReLU, lm_head tied to shared, decoder output scaled by d_model**-0.5)."),
    seq2seq_case("mt5-small-fp32-eager-b2-src128-tgt64", MT5_SMALL, batch=2, source=128, target=64),
    seq2seq_case("bart-small-fp32-eager-b4-src256-tgt64", BART_SMALL, batch=4, source=256, target=64,
                 description="BART layout (post-LN, learned positions with the offset of 2, layernorm_embedding, "
                 "final_logits_bias), 2 encoder / 3 decoder layers."),
    seq2seq_case("bart-small-ampbf16-eager-b4-src128-tgt128", BART_SMALL, batch=4, source=128, target=128,
                 precision="amp-bf16"),
    seq2seq_case("bart-small-lora-fp32-eager-b4-src256-tgt64", BART_SMALL, batch=4, source=256, target=64,
                 lora={"r": 8}, description="LoRA with PEFT's default targets for bart (q_proj, v_proj)."),
    seq2seq_case("bart-small-fp32-sdpa-b4-src256-tgt64", BART_SMALL, batch=4, source=256, target=64, attention="sdpa"),
    seq2seq_case("whisper-small-layout-fp32-eager-b4-src128-tgt48", WHISPER_SMALL, batch=4, source=128, target=48,
                 description="Whisper layout (conv front end over 16 × 256 input_features, frozen sinusoidal encoder "
                 "positions, pre-LN, tied proj_out), 2 encoder / 3 decoder layers."),
    seq2seq_case("whisper-small-layout-ampbf16-eager-b4-src128-tgt48", WHISPER_SMALL, batch=4, source=128, target=48,
                 precision="amp-bf16"),
    seq2seq_case("whisper-small-layout-fp32-sdpa-b4-src128-tgt32", WHISPER_SMALL, batch=4, source=128, target=32,
                 attention="sdpa"),
    # ---------------------------------------------------------------- published models (fake tensors)
    seq2seq_case("t5-small-fp32-eager-b8-src512-tgt128-fake", "t5-small", batch=8, source=512, target=128, fake=True),
    seq2seq_case("flan-t5-base-ampbf16-eager-b8-src512-tgt128-fake", "flan-t5-base", batch=8, source=512, target=128,
                 precision="amp-bf16", fake=True),
    seq2seq_case("bart-base-fp32-eager-b8-src512-tgt128-fake", "bart-base", batch=8, source=512, target=128, fake=True),
    seq2seq_case("whisper-small-fp32-eager-b2-src1500-tgt128-fake", "whisper-small", batch=2, source=1500, target=128,
                 fake=True),
]
# fmt: on
