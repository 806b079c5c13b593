"""Encoders (BERT, RoBERTa, XLM-RoBERTa, DistilBERT) and their task heads (``Setup.task``).

Parameter counts are checked against transformers 5.24 on the meta device for every encoder preset
and every head (``AutoModelFor<Task>``; the embedding task is ``AutoModel`` without the pooler), and
for small configs of each family; PUBLISHED_COUNTS were obtained that way. Bad input (a head the
family does not have, LoRA on an encoder) is one line naming the field, exit 2 from the CLI.
"""

from __future__ import annotations

import json

import pytest

import trainmem
from trainmem.catalogs import presets
from trainmem.cli import main
from pydantic import ValidationError

from trainmem.errors import FieldError, format_validation_error
from trainmem.models import FAMILIES
from trainmem.plan import Plan
from trainmem.setup import Setup

TASKS = ("sequence_classification", "token_classification", "masked_lm", "embedding")
ENCODER_PRESETS = sorted(
    name for name, p in presets().items()
    if "sequence_classification" in getattr(FAMILIES.get(p.config["model_type"]), "tasks", ())
)

#: transformers 5.24, meta device, num_labels 2 (``AutoModelForSequenceClassification`` and ``AutoModel``
#: with its pooler, the figure on the model cards: 110M, 335M, 125M, 355M, 560M, 66M).
PUBLISHED_COUNTS = {
    ("bert-base-uncased", "sequence_classification"): 109_483_778,
    ("bert-large-uncased", "sequence_classification"): 335_143_938,
    ("roberta-base", "sequence_classification"): 124_647_170,
    ("roberta-large", "sequence_classification"): 355_361_794,
    ("xlm-roberta-large", "sequence_classification"): 559_892_482,
    ("distilbert-base-uncased", "sequence_classification"): 66_955_010,
    ("bert-base-uncased", "embedding"): 108_891_648,
    ("distilbert-base-uncased", "embedding"): 66_362_880,
}

SMALL = {
    "bert": {"model_type": "bert", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
             "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 128, "type_vocab_size": 2},
    "roberta": {"model_type": "roberta", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 130, "type_vocab_size": 1},
    "xlm-roberta": {"model_type": "xlm-roberta", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                    "num_attention_heads": 4, "intermediate_size": 128, "max_position_embeddings": 130},
    "distilbert": {"model_type": "distilbert", "vocab_size": 1000, "dim": 64, "n_layers": 2, "n_heads": 4,
                   "hidden_dim": 128, "max_position_embeddings": 128},
    "modernbert": {"model_type": "modernbert", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4,
                   "num_attention_heads": 4, "intermediate_size": 96, "local_attention": 32, "pad_token_id": 0,
                   "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1, "sep_token_id": 2},
    "deberta-v2": {"model_type": "deberta-v2", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                   "num_attention_heads": 4, "intermediate_size": 128, "relative_attention": True,
                   "position_buckets": 32, "norm_rel_ebd": "layer_norm", "share_att_key": True,
                   "pos_att_type": "p2c|c2p", "position_biased_input": False},
    "bert-untied": {"model_type": "bert", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 1,
                    "num_attention_heads": 4, "intermediate_size": 128, "tie_word_embeddings": False},
}


def count(model: dict, task: str, num_labels: int = 2) -> int:
    setup = Setup(model=model, task={"kind": task, "num_labels": num_labels}, sequence_length=128)
    return Plan(setup).num_parameters


def _transformers_count(config: dict, task: str, num_labels: int) -> int:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from trainmem.measure.tasks import build_kwargs, model_class

    fields = dict(config)
    hf_config = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields, num_labels=num_labels)
    task_setup = {"kind": task, "num_labels": num_labels}
    arch = Setup(model={"hf_config": config}, task=task_setup, sequence_length=128).architecture()
    with torch.device("meta"):
        model = model_class(task).from_config(hf_config, **build_kwargs(arch))
    return sum(p.numel() for p in model.parameters())


def test_every_encoder_family_has_a_small_config_here():
    encoders = {name for name, family in FAMILIES.items() if "sequence_classification" in getattr(family, "tasks", ())}
    assert encoders == {config["model_type"] for config in SMALL.values()}


@pytest.mark.parametrize(("name", "task"), sorted(PUBLISHED_COUNTS))
def test_preset_counts(name, task):
    assert count({"preset": name}, task) == PUBLISHED_COUNTS[(name, task)]


@pytest.mark.torch
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", ENCODER_PRESETS)
def test_preset_count_matches_transformers_on_meta_device(name, task):
    assert count({"preset": name}, task) == _transformers_count(presets()[name].config, task, 2)


@pytest.mark.torch
@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("name", sorted(SMALL))
def test_small_config_count_matches_transformers(name, task):
    assert count({"hf_config": SMALL[name]}, task, 5) == _transformers_count(SMALL[name], task, 5)


@pytest.mark.torch
@pytest.mark.parametrize("model_type", ["bert", "roberta", "xlm-roberta", "distilbert"])
def test_missing_fields_take_the_transformers_class_defaults(model_type):
    assert count({"hf_config": {"model_type": model_type}}, "masked_lm") == _transformers_count(
        {"model_type": model_type}, "masked_lm", 2
    )


def test_encoders_default_to_sequence_classification_and_decoders_to_causal_lm():
    assert Setup(model="bert-base-uncased", sequence_length=512).architecture().task == "sequence_classification"
    assert Setup(model="llama-2-7b").architecture().task == "causal_lm"


def test_num_labels_comes_from_the_config_when_the_task_does_not_say():
    config = {**SMALL["bert"], "id2label": {"0": "a", "1": "b", "2": "c"}}
    arch = trainmem.setup.architecture_from_hf_config(config)
    assert arch.num_labels == 3


# ---------------------------------------------------------------------------- the heads on the tape


def _peak(model, task: str, **fields) -> int:
    setup = {"model": model, "task": {"kind": task}, "precision": "fp32", "runtime": {"device": "cpu"}, **fields}
    return trainmem.estimate(Setup.model_validate(setup)).peak_allocated_bytes


def test_masked_lm_logits_grow_with_the_vocabulary_and_classification_does_not():
    small, large = dict(SMALL["bert"]), {**SMALL["bert"], "vocab_size": 30000}
    shape = {"micro_batch_size": 8, "sequence_length": 128}
    mlm_growth = _peak({"hf_config": large}, "masked_lm", **shape) - _peak({"hf_config": small}, "masked_lm", **shape)
    cls_growth = _peak({"hf_config": large}, "sequence_classification", **shape) - _peak(
        {"hf_config": small}, "sequence_classification", **shape
    )
    logits_fp32 = 8 * 128 * (30000 - 1000) * 4
    assert mlm_growth > 2 * logits_fp32  # the logits, their log-softmax and its gradient
    assert cls_growth < logits_fp32 / 4  # only the embedding table and its states


def test_contrastive_batch_encodes_two_sequences_per_pair():
    one = Plan(Setup(model={"hf_config": SMALL["bert"]}, task={"kind": "embedding"}, micro_batch_size=4,
                     sequence_length=128))
    from trainmem.simulate import _shape

    assert _shape(one).batch == 8


# ---------------------------------------------------------------------------- bad input


def errors_for(data: dict) -> dict[str, str]:
    with pytest.raises(ValidationError) as info:
        Setup.model_validate(data)
    return dict(format_validation_error(info.value))


@pytest.mark.parametrize(
    ("data", "field", "mentions"),
    [
        ({"model": "llama-2-7b", "task": {"kind": "masked_lm"}}, "task.kind", "allowed: causal_lm"),
        ({"model": "bert-base-uncased", "task": {"kind": "causal_lm"}}, "task.kind", "sequence_classification"),
        ({"model": "roberta-base", "sequence_length": 512,
          "finetuning": {"method": "lora", "lora": {"target_modules": "all-linear"}}},
         "finetuning.lora.target_modules", "not modelled"),
        ({"model": {"num_parameters": 1_000_000}, "task": {"kind": "masked_lm"}}, "task.kind", "architecture"),
        ({"model": "bert-base-uncased", "task": {"num_labels": 0}}, "task.num_labels", "greater than 0"),
        ({"model": "bert-base-uncased", "task": {"num_labels": "3"}}, "task.num_labels", "integer"),
        ({"model": "bert-base-uncased", "sequence_length": 513}, "sequence_length", "512 positions"),
        ({"model": "roberta-base", "sequence_length": 513}, "sequence_length", "512 positions"),
        (
            {"model": {"architecture": {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2,
                                        "num_attention_heads": 4, "intermediate_size": 128, "bidirectional": True}}},
            "model.architecture.bidirectional",
            "hf_config",
        ),
    ],
)
def test_bad_head_names_the_field(data, field, mentions):
    errors = errors_for(data)
    assert field in errors, errors
    assert mentions in errors[field]


def test_apply_task_names_the_field():
    from trainmem.tasks import Task, apply_task

    with pytest.raises(FieldError) as error:
        apply_task(Setup(model="gpt2").architecture(), Task(kind="embedding"))
    assert error.value.field == "task.kind"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        (["--preset", "llama-2-7b", "--task", "masked_lm"], "task.kind"),
        (["--preset", "bert-base-uncased", "--task", "causal_lm"], "task.kind"),
        (["--preset", "bert-base-uncased", "--task", "ner"], "task.kind"),
        (["--preset", "bert-base-uncased", "--num-labels", "0"], "task.num_labels"),
        (["--preset", "bert-base-uncased", "--seq-len", "512", "--lora", "8", "--lora-targets", "dense"],
         "finetuning.lora.target_modules"),
    ],
)
def test_cli_bad_head_is_one_line_exit_2(arguments, field, capsys):
    code = main(["estimate", *arguments])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"trainmem: error: {field}") and err.count("\n") == 1


def test_cli_task_flags(capsys):
    code = main(["estimate", "--preset", "bert-base-uncased", "--task", "token_classification", "--num-labels", "9",
                 "--seq-len", "512", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["num_parameters"] == 108_891_648 + 768 * 9 + 9
