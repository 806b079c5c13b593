"""Measured corpus cases of the encoder families and their task heads (``trainmem.tasks``).

Small BERT, RoBERTa and DistilBERT configs run for real on the CPU (fp32 and AMP bf16; eager,
SDPA's math path, which dropout selects on a CPU, and fused SDPA without dropout; full
checkpointing); the published bert-large-uncased and roberta-large run on fake tensors. Each case
names its head: sequence classification, token classification, masked LM, or contrastive embedding
training with in-batch negatives. Appended to ``CASES`` by scripts/corpus_cases.py.
"""

from __future__ import annotations

from typing import Any

ENCODER_COMMON = {"vocab_size": 8000, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "intermediate_size": 512, "max_position_embeddings": 514}
BERT_SMALL = {"model_type": "bert", **ENCODER_COMMON, "type_vocab_size": 2}
BERT_SMALL_NO_DROPOUT = {**BERT_SMALL, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
ROBERTA_SMALL = {"model_type": "roberta", **ENCODER_COMMON, "type_vocab_size": 1, "pad_token_id": 1}
MODERNBERT_SMALL = {"model_type": "modernbert", "vocab_size": 8000, "hidden_size": 128, "intermediate_size": 192,
                    "num_hidden_layers": 4, "num_attention_heads": 4, "local_attention": 64,
                    "global_attn_every_n_layers": 3, "max_position_embeddings": 1024, "classifier_pooling": "mean",
                    "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2}
MODERNBERT_SMALL_CLS = {**MODERNBERT_SMALL, "classifier_pooling": "cls"}
LORA_QV = {"method": "lora", "lora": {"r": 8}}
LORA_MODERNBERT = {"method": "lora", "lora": {"r": 8, "target_modules": ["Wqkv", "Wo", "Wi"]}}
DEBERTA_SMALL = {"model_type": "deberta-v2", "vocab_size": 8000, "hidden_size": 128, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "intermediate_size": 512, "max_position_embeddings": 512,
                 "type_vocab_size": 0, "relative_attention": True, "position_buckets": 64, "norm_rel_ebd": "layer_norm",
                 "share_att_key": True, "pos_att_type": "p2c|c2p", "max_relative_positions": -1,
                 "position_biased_input": False}
"""A DeBERTa-v3-like config (shared attention keys, c2p and p2c, 64 log buckets, normed relative embeddings)."""
DEBERTA_SMALL_V2 = {**DEBERTA_SMALL, "share_att_key": False, "position_biased_input": True, "type_vocab_size": 2,
                    "norm_rel_ebd": "none", "position_buckets": -1, "max_relative_positions": 128}
"""DeBERTa-v2 style: pos_key_proj/pos_query_proj, absolute positions and token types, 256 relative rows."""
DISTILBERT_SMALL = {"model_type": "distilbert", "vocab_size": 8000, "dim": 128, "n_layers": 2, "n_heads": 4,
                    "hidden_dim": 512, "max_position_embeddings": 512}


def encoder_case(
    case_id: str,
    model: Any,
    task: str,
    *,
    batch: int,
    seq: int,
    precision: str = "fp32",
    attention: str = "sdpa",
    checkpointing: str = "none",
    num_labels: int = 3,
    fake: bool = False,
    description: str = "",
    finetuning: dict[str, Any] | None = None,
) -> dict[str, Any]:
    model_spec = {"preset": model} if isinstance(model, str) else {"hf_config": dict(model)}
    setup = {
        "model": model_spec,
        "task": {"kind": task, "num_labels": num_labels},
        "micro_batch_size": batch,
        "sequence_length": seq,
        "precision": precision,
        "optimizer": {"name": "adamw"},
        "activation_checkpointing": checkpointing,
        "attention": attention,
        "runtime": {"device": "cpu"},
    }
    if finetuning is not None:
        setup["finetuning"] = finetuning
    return {"id": case_id, "description": description, "fake": fake, "setup": setup}


# fmt: off
ENCODER_CASES: list[dict[str, Any]] = [
    encoder_case("bert-small-fp32-seqcls-sdpa-b8-s256", BERT_SMALL, "sequence_classification", batch=8, seq=256,
                 description="BertForSequenceClassification: pooler on [CLS], dropout 0.1 (SDPA's math path on a CPU)."),
    encoder_case("bert-small-fp32-seqcls-eager-ckpt-b8-s256", BERT_SMALL, "sequence_classification", batch=8, seq=256,
                 attention="eager", checkpointing="full"),
    encoder_case("bert-small-nodropout-fp32-seqcls-fused-b8-s256", BERT_SMALL_NO_DROPOUT, "sequence_classification",
                 batch=8, seq=256, description="No dropout: the fused (flash) SDPA kernel, bidirectional."),
    encoder_case("bert-small-ampbf16-seqcls-eager-b8-s256", BERT_SMALL, "sequence_classification", batch=8, seq=256,
                 precision="amp-bf16", attention="eager",
                 description="CPU autocast keeps the eager softmax in bf16."),
    encoder_case("bert-small-fp32-tokcls-eager-b4-s256", BERT_SMALL, "token_classification", batch=4, seq=256,
                 attention="eager", num_labels=9, description="BertForTokenClassification (NER, 9 labels)."),
    encoder_case("bert-small-fp32-mlm-sdpa-b4-s256", BERT_SMALL, "masked_lm", batch=4, seq=256,
                 description="BertForMaskedLM: logits over the vocabulary at every position, tied decoder."),
    encoder_case("bert-small-ampbf16-mlm-sdpa-b8-s256", BERT_SMALL, "masked_lm", batch=8, seq=256,
                 precision="amp-bf16"),
    encoder_case("bert-small-fp32-embedding-sdpa-b8-s256", BERT_SMALL, "embedding", batch=8, seq=256,
                 description="Contrastive (MultipleNegativesRankingLoss): 8 pairs, 16 sequences, mean pooling."),
    encoder_case("bert-small-nodropout-ampbf16-embedding-fused-b8-s128", BERT_SMALL_NO_DROPOUT, "embedding",
                 batch=8, seq=128, precision="amp-bf16"),
    encoder_case("roberta-small-fp32-seqcls-sdpa-b8-s256", ROBERTA_SMALL, "sequence_classification", batch=8, seq=256,
                 description="RobertaClassificationHead; position ids computed from the input ids."),
    encoder_case("roberta-small-fp32-mlm-eager-b4-s256", ROBERTA_SMALL, "masked_lm", batch=4, seq=256,
                 attention="eager"),
    encoder_case("distilbert-small-fp32-seqcls-sdpa-b8-s256", DISTILBERT_SMALL, "sequence_classification", batch=8,
                 seq=256, description="pre_classifier, ReLU, dropout 0.2; no dropout on the attention output."),
    encoder_case("distilbert-small-ampbf16-tokcls-eager-b8-s256", DISTILBERT_SMALL, "token_classification", batch=8,
                 seq=256, precision="amp-bf16", attention="eager"),
    # ---------------------------------------------------------------- ModernBERT: 4 layers (0 and 3 global), a
    # 64-token local window (mask from 32 tokens on) under 256-token sequences
    encoder_case("modernbert-small-fp32-seqcls-mean-sdpa-b4-s256", MODERNBERT_SMALL, "sequence_classification",
                 batch=4, seq=256, description="ModernBertForSequenceClassification, mean pooling; local layers get "
                 "SDPA's boolean sliding-window mask."),
    encoder_case("modernbert-small-fp32-seqcls-cls-sdpa-b4-s128", MODERNBERT_SMALL_CLS, "sequence_classification",
                 batch=4, seq=128),
    encoder_case("modernbert-small-fp32-tokcls-eager-b4-s256", MODERNBERT_SMALL, "token_classification", batch=4,
                 seq=256, attention="eager", num_labels=9,
                 description="Eager: fp32 softmax, value copied out of the fused Wqkv output."),
    encoder_case("modernbert-small-fp32-seqcls-ckpt-b4-s256", MODERNBERT_SMALL, "sequence_classification", batch=4,
                 seq=256, checkpointing="full"),
    encoder_case("modernbert-small-ampbf16-seqcls-mean-sdpa-b4-s256", MODERNBERT_SMALL, "sequence_classification",
                 batch=4, seq=256, precision="amp-bf16",
                 description="The embedding output is freed when ModernBertModel returns, before the head."),
    encoder_case("modernbert-small-ampbf16-tokcls-sdpa-b4-s256", MODERNBERT_SMALL, "token_classification",
                 batch=4, seq=256, precision="amp-bf16", num_labels=9),
    encoder_case("modernbert-small-ampbf16-mlm-sdpa-b4-s256", MODERNBERT_SMALL, "masked_lm", batch=4, seq=256,
                 precision="amp-bf16", description="ModernBertForMaskedLM: prediction head, tied decoder, fp32 logits."),
    encoder_case("modernbert-small-ampbf16-mlm-eager-b4-s256", MODERNBERT_SMALL, "masked_lm", batch=4, seq=256,
                 precision="amp-bf16", attention="eager"),
    encoder_case("modernbert-small-fp32-lora-seqcls-sdpa-b4-s256", MODERNBERT_SMALL, "sequence_classification",
                 batch=4, seq=256, finetuning=LORA_MODERNBERT,
                 description="PEFT SEQ_CLS: LoRA on Wqkv, Wo, Wi; the classifier trained as a modules_to_save copy."),
    encoder_case("modernbert-small-ampbf16-lora-seqcls-sdpa-b4-s256", MODERNBERT_SMALL, "sequence_classification",
                 batch=4, seq=256, precision="amp-bf16", finetuning=LORA_MODERNBERT),
    # ---------------------------------------------------------------- DeBERTa-v2/v3: disentangled attention (eager
    # whatever is asked: transformers has no SDPA path for it)
    encoder_case("deberta-small-fp32-seqcls-b4-s256", DEBERTA_SMALL, "sequence_classification", batch=4, seq=256, attention="eager",
                 description="DebertaV2ForSequenceClassification: c2p and p2c over shared keys, ContextPooler."),
    encoder_case("deberta-small-ampbf16-seqcls-b4-s256", DEBERTA_SMALL, "sequence_classification", batch=4,
                 seq=256, attention="eager", precision="amp-bf16"),
    encoder_case("deberta-small-fp32-tokcls-b4-s256", DEBERTA_SMALL, "token_classification", batch=4, seq=256, attention="eager",
                 num_labels=9),
    encoder_case("deberta-small-fp32-mlm-b4-s256", DEBERTA_SMALL, "masked_lm", batch=4, seq=256, attention="eager",
                 description="The legacy MLM head (cls.predictions), tied decoder."),
    encoder_case("deberta-small-ampbf16-mlm-b4-s256", DEBERTA_SMALL, "masked_lm", batch=4, seq=256, attention="eager",
                 precision="amp-bf16"),
    encoder_case("deberta-small-fp32-lora-seqcls-b4-s256", DEBERTA_SMALL, "sequence_classification", batch=4,
                 seq=256, attention="eager", finetuning=LORA_QV, description="PEFT SEQ_CLS, default targets query_proj and value_proj."),
    encoder_case("deberta-smallv2-fp32-seqcls-b4-s256", DEBERTA_SMALL_V2, "sequence_classification", batch=4,
                 seq=256, attention="eager", description="Separate pos_key_proj and pos_query_proj, absolute positions, token types."),
    # ---------------------------------------------------------------- LoRA on BERT-style encoders (PEFT defaults)
    encoder_case("bert-small-fp32-lora-seqcls-sdpa-b8-s256", BERT_SMALL, "sequence_classification", batch=8,
                 seq=256, finetuning=LORA_QV,
                 description="PEFT SEQ_CLS, default targets query and value; classifier copy trains, pooler frozen."),
    encoder_case("bert-small-fp32-lora-tokcls-sdpa-b8-s256", BERT_SMALL, "token_classification", batch=8,
                 seq=256, num_labels=9, finetuning=LORA_QV),
    encoder_case("roberta-small-fp32-lora-seqcls-sdpa-b8-s256", ROBERTA_SMALL, "sequence_classification", batch=8,
                 seq=256, finetuning=LORA_QV,
                 description="PEFT SEQ_CLS copies RoBERTa's whole classification head (dense and out_proj)."),
    # ---------------------------------------------------------------- published models (fake tensors)
    encoder_case("modernbert-base-ampbf16-seqcls-b8-s1024-fake", "modernbert-base", "sequence_classification",
                 batch=8, seq=1024, precision="amp-bf16", fake=True),
    encoder_case("deberta-v3-base-ampbf16-tokcls-b8-s512-fake", "deberta-v3-base", "token_classification",
                 batch=8, seq=512, precision="amp-bf16", num_labels=9, attention="eager", fake=True,
                 description="Token classification: the sequence head's (labels >= 0).nonzero() cannot run on fake tensors."),
    encoder_case("bert-large-fp32-seqcls-b4-s512-fake", "bert-large-uncased", "sequence_classification", batch=4,
                 seq=512, num_labels=2, fake=True,
                 description="The transformers docs' 'Model training anatomy' run (fp32 AdamW, 4 x 512), on a CPU."),
    encoder_case("roberta-large-ampbf16-mlm-b8-s512-fake", "roberta-large", "masked_lm", batch=8, seq=512,
                 precision="amp-bf16", fake=True),
    encoder_case("xlmr-large-fp32-embedding-ckpt-b8-s256-fake", "xlm-roberta-large", "embedding", batch=8,
                 seq=256, checkpointing="full", fake=True,
                 description="A 250k-vocabulary encoder trained as an embedding model with checkpointing."),
]
# fmt: on
