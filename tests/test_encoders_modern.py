"""ModernBERT (``models/modernbert.py``) and LoRA/QLoRA on encoders (PEFT's SEQ_CLS/TOKEN_CLS heads).

Parameter counts are checked against transformers 5.24 on the meta device (the presets and small
configs with every head are in tests/test_encoders.py, whose ``SMALL`` has a ModernBERT entry);
trainable counts under LoRA against PEFT 0.21's ``get_peft_model`` with the head's task type.
PUBLISHED_COUNTS were obtained that way (num_labels 2).
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

import trainmem
from trainmem.architecture import Architecture
from trainmem.cli import main
from trainmem.errors import format_validation_error
from trainmem.plan import Plan
from trainmem.setup import Setup

PUBLISHED_COUNTS = {
    ("modernbert-base", "sequence_classification"): 149_606_402,
    ("modernbert-base", "masked_lm"): 149_655_232,
    ("modernbert-base", "embedding"): 149_014_272,
    ("modernbert-large", "sequence_classification"): 395_833_346,
    ("modernbert-large", "masked_lm"): 395_881_664,
}

MODERNBERT_SMALL = {"model_type": "modernbert", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4,
                    "num_attention_heads": 4, "intermediate_size": 96, "local_attention": 32, "pad_token_id": 0,
                    "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2}
BERT_SMALL = {"model_type": "bert", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 128, "type_vocab_size": 2}
ROBERTA_SMALL = {"model_type": "roberta", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                 "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 130,
                 "type_vocab_size": 1, "pad_token_id": 1}
DISTILBERT_SMALL = {"model_type": "distilbert", "vocab_size": 1000, "dim": 64, "n_layers": 2, "n_heads": 4,
                    "hidden_dim": 128, "max_position_embeddings": 128}


def _setup(model, task="sequence_classification", **fields) -> Setup:
    data = {"model": model, "task": {"kind": task}, "sequence_length": 128, "precision": "fp32",
            "runtime": {"device": "cpu"}, **fields}
    return Setup.model_validate(data)


@pytest.mark.parametrize(("name", "task"), sorted(PUBLISHED_COUNTS))
def test_preset_counts(name, task):
    assert Plan(_setup({"preset": name}, task)).num_parameters == PUBLISHED_COUNTS[(name, task)]


# ---------------------------------------------------------------------------- the config reader


def _arch(**fields) -> Architecture:
    return trainmem.setup.architecture_from_hf_config({**MODERNBERT_SMALL, **fields})


def test_every_third_layer_is_global_and_layer_zero_has_no_attention_norm():
    arch = _arch(num_hidden_layers=7)
    assert arch.window_layers() == (1, 2, 4, 5)
    assert arch.sliding_window == 16  # local_attention // 2: transformers' config.sliding_window
    assert arch.rope_sets == 2
    kinds = {kind.indices: kind.architecture for kind in arch.layer_kinds()}
    assert not kinds[(0,)].layer_attention_norm and not kinds[(0,)].layer_sliding
    assert kinds[(3, 6)].layer_attention_norm and not kinds[(3, 6)].layer_sliding
    assert kinds[(1, 2, 4, 5)].layer_sliding


def test_layer_types_override_the_interval():
    arch = _arch(layer_types=["full_attention", "full_attention", "sliding_attention", "full_attention"])
    assert arch.window_layers() == (2,)


@pytest.mark.parametrize(
    ("fields", "field", "mentions"),
    [
        ({"classifier_pooling": "max"}, "classifier_pooling", "cls or mean"),
        ({"layer_types": ["full_attention"]}, "layer_types", "4 layers"),
        ({"layer_types": ["full_attention", "chunked", "full_attention", "full_attention"]}, "layer_types", "chunked"),
        ({"sparse_prediction": True}, "sparse_prediction", "not modelled"),
        ({"norm_bias": "false"}, "norm_bias", "true or false"),
    ],
)
def test_bad_config_fields_are_named(fields, field, mentions):
    with pytest.raises(ValidationError) as info:
        _setup({"hf_config": {**MODERNBERT_SMALL, **fields}})
    errors = dict(format_validation_error(info.value))
    key = next(key for key in errors if key.endswith(field))
    assert mentions in errors[key]


def test_norm_bias_adds_one_bias_per_layernorm():
    without = Plan(_setup({"hf_config": MODERNBERT_SMALL})).num_parameters
    with_bias = Plan(_setup({"hf_config": {**MODERNBERT_SMALL, "norm_bias": True}})).num_parameters
    # embeddings.norm, 3 attn_norm (layer 0 has none), 4 mlp_norm, final_norm, head.norm: 10 LayerNorms of 64
    assert with_bias - without == 10 * 64


# ---------------------------------------------------------------------------- the tape


def _peak(model, task="sequence_classification", **fields) -> int:
    return trainmem.estimate(_setup(model, task, **fields)).peak_allocated_bytes


def test_local_layers_pay_for_the_mask_only_once_the_sequence_reaches_the_half_window():
    """SDPA gets a boolean (b, 1, s, s) mask on local layers when ``kv_length >= sliding_window``
    (masking_utils ``_ignore_bidirectional_mask_sdpa``); below it the local layers run mask-free."""
    long_window = {**MODERNBERT_SMALL, "local_attention": 512}
    shape = {"micro_batch_size": 4, "sequence_length": 128}
    masked = _peak({"hf_config": MODERNBERT_SMALL}, **shape)
    unmasked = _peak({"hf_config": long_window}, **shape)
    assert masked > unmasked  # the per-call additive mask SDPA keeps for backward


def test_mean_pooling_costs_more_than_the_cls_token():
    shape = {"micro_batch_size": 8, "sequence_length": 128}
    mean = _peak({"hf_config": {**MODERNBERT_SMALL, "classifier_pooling": "mean"}}, **shape)
    cls = _peak({"hf_config": MODERNBERT_SMALL}, **shape)
    assert mean > cls


def test_masked_lm_logits_are_upcast_to_fp32():
    shape = {"micro_batch_size": 4, "sequence_length": 128, "precision": "amp-bf16"}
    small = _peak({"hf_config": MODERNBERT_SMALL}, "masked_lm", **shape)
    large = _peak({"hf_config": {**MODERNBERT_SMALL, "vocab_size": 21000}}, "masked_lm", **shape)
    assert large - small > 2 * 4 * 128 * 20000 * 4  # fp32 logits, their log-softmax (and its gradient)


def test_rope_buffers_not_bert_position_ids():
    report = trainmem.estimate(_setup({"hf_config": MODERNBERT_SMALL}))
    assert "RoPE" in report.model_dump_json()


def test_modernbert_presets_estimate_long_sequences():
    report = trainmem.estimate(
        Setup.model_validate({"model": "modernbert-base", "sequence_length": 8192, "micro_batch_size": 1})
    )
    assert report.peak_allocated_bytes > 0
    with pytest.raises(ValidationError):
        Setup.model_validate({"model": "modernbert-base", "sequence_length": 8193})


# ---------------------------------------------------------------------------- LoRA on encoders


def _trainable(model, task, lora) -> int:
    return Plan(_setup(model, task, finetuning={"method": "lora", "lora": lora})).num_trainable_parameters


def _adapters(layers: int, r: int, linears: list[tuple[int, int]]) -> int:
    return layers * sum(r * (i + o) for i, o in linears)


@pytest.mark.parametrize(
    ("model", "task", "lora", "expected"),
    [
        # query and value (PEFT defaults) + the classifier copy (h*L + L); BERT's pooler stays frozen
        ({"hf_config": BERT_SMALL}, "sequence_classification", {"r": 8}, _adapters(2, 8, [(64, 64)] * 2) + 64 * 2 + 2),
        ({"hf_config": BERT_SMALL}, "token_classification", {"r": 8}, _adapters(2, 8, [(64, 64)] * 2) + 64 * 2 + 2),
        # RoBERTa's whole classification head (dense and out_proj) is the "classifier" module
        ({"hf_config": ROBERTA_SMALL}, "sequence_classification", {"r": 8},
         _adapters(2, 8, [(64, 64)] * 2) + 64 * 64 + 64 + 64 * 2 + 2),
        # "classifier" is a string suffix of DistilBERT's "pre_classifier": both are copied
        ({"hf_config": DISTILBERT_SMALL}, "sequence_classification", {"r": 8, "target_modules": ["q_lin", "v_lin"]},
         _adapters(2, 8, [(64, 64)] * 2) + 64 * 64 + 64 + 64 * 2 + 2),
        # masked LM (no PEFT task type): adapters only, the tied decoder and its head frozen
        ({"hf_config": BERT_SMALL}, "masked_lm", {"r": 8}, _adapters(2, 8, [(64, 64)] * 2)),
        ({"hf_config": MODERNBERT_SMALL}, "sequence_classification", {"r": 4, "target_modules": ["Wqkv", "Wo", "Wi"]},
         _adapters(4, 4, [(64, 192), (64, 64), (64, 192), (96, 64)]) + 64 * 2 + 2),
        ({"hf_config": MODERNBERT_SMALL}, "embedding", {"r": 4, "target_modules": "all-linear"},
         _adapters(4, 4, [(64, 192), (64, 64), (64, 192), (96, 64)])),
    ],
)
def test_lora_trainable_counts_follow_peft(model, task, lora, expected):
    assert _trainable(model, task, lora) == expected


@pytest.mark.torch
@pytest.mark.parametrize(
    ("config", "task", "targets"),
    [
        (BERT_SMALL, "sequence_classification", None),
        (ROBERTA_SMALL, "sequence_classification", None),
        (DISTILBERT_SMALL, "sequence_classification", ["q_lin", "v_lin"]),
        (MODERNBERT_SMALL, "token_classification", ["Wqkv", "Wo"]),
        (BERT_SMALL, "embedding", "all-linear"),
    ],
)
def test_lora_counts_match_peft_on_the_meta_device(config, task, targets):
    pytest.importorskip("peft")
    from trainmem.measure.hf_model import build_model

    lora = {"r": 8} if targets is None else {"r": 8, "target_modules": targets}
    setup = _setup({"hf_config": config}, task, finetuning={"method": "lora", "lora": lora})
    model = build_model(setup, on_meta=True)
    plan = Plan(setup)
    assert sum(p.numel() for p in model.parameters()) == plan.num_parameters
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == plan.num_trainable_parameters


def test_classifier_copy_keeps_its_input_for_token_classification():
    """Under LoRA the classifier copy trains, so its input (b·s·h) is saved; frozen, it would not be."""
    lora = {"method": "lora", "lora": {"r": 8}}
    shape = {"micro_batch_size": 4, "sequence_length": 128}
    report = trainmem.estimate(_setup({"hf_config": BERT_SMALL}, "token_classification", finetuning=lora, **shape))
    assert report.peak_allocated_bytes > 0
    assert Plan(_setup({"hf_config": BERT_SMALL}, "token_classification", finetuning=lora)).module_trains("classifier")


def test_qlora_on_an_encoder_estimates():
    setup = Setup.model_validate({"model": "modernbert-large", "sequence_length": 1024, "micro_batch_size": 4,
                                  "finetuning": {"method": "qlora", "lora": {"r": 16, "target_modules": ["Wqkv", "Wo"]}}})
    assert trainmem.estimate(setup).peak_allocated_bytes > 0


@pytest.mark.parametrize(
    ("model", "task", "targets"),
    [
        ("bert-base-uncased", "sequence_classification", "all-linear"),
        ("modernbert-base", "token_classification", "all-linear"),
        ("bert-base-uncased", "sequence_classification", ["query", "dense"]),  # also pooler.dense
        ("roberta-base", "masked_lm", ["dense"]),  # also lm_head.dense
    ],
)
def test_lora_on_a_head_linear_is_one_line(model, task, targets):
    data = {"model": model, "task": {"kind": task}, "sequence_length": 512,
            "finetuning": {"method": "lora", "lora": {"target_modules": targets}}}
    with pytest.raises(ValidationError) as info:
        Setup.model_validate(data)
    errors = dict(format_validation_error(info.value))
    assert "finetuning.lora.target_modules" in errors


def test_cli_lora_on_an_encoder(capsys):
    code = main(["estimate", "--preset", "bert-base-uncased", "--lora", "8", "--seq-len", "512", "--json"])
    assert code == 0
    code = main(["estimate", "--preset", "modernbert-base", "--lora", "8", "--seq-len", "512"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("trainmem: error: finetuning.lora.target_modules") and err.count("\n") == 1
