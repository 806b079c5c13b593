"""SPEC for the typed config.json readers: a wrong-typed field is one line that names it.

A config.json's fields are read the way transformers 5 reads them: its configuration classes are
strict dataclasses (huggingface_hub ``@strict``; checked here with transformers 5.24): an ``int``
field refuses a string (``"768"``), a float (``4096.0``) and a boolean; a ``bool`` field refuses
``"false"`` and ``1``; a float field (``attention_dropout``) takes an integer or a float and refuses
a list. trainmem must refuse the same inputs — never coerce them — with one line of the form

    model.hf_config.n_embd: expected an integer, got the string "768"

and refuse sizes a model cannot have (zero or negative), which transformers accepts but cannot
build. The family readers (core/trainmem/models/) read every field through
``trainmem.models.fields.ConfigFields``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

import trainmem
from trainmem.errors import format_validation_error, one_line

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web" / "py"))
import trainmem_web as web  # noqa: E402  (the page's bridge)

LLAMA = {
    "model_type": "llama",
    "vocab_size": 32000,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": False,
    "attention_dropout": 0.0,
}
GPT2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "vocab_size": 50257, "n_positions": 1024}
MIXTRAL = {**LLAMA, "model_type": "mixtral", "num_local_experts": 8, "num_experts_per_tok": 2}

#: (id, base config, field, wrong value, the message after "model.hf_config.<field>: ")
CASES = [
    ("model-type-list", LLAMA, "model_type", ["llama"], "expected a string, got a list"),
    ("model-type-number", LLAMA, "model_type", 7, "expected a string, got 7"),
    ("dropout-list", LLAMA, "attention_dropout", [0.0], "expected a number, got a list"),
    ("dropout-string", LLAMA, "attention_dropout", "0.1", 'expected a number, got the string "0.1"'),
    ("n-embd-object", GPT2, "n_embd", {"a": 1}, "expected an integer, got an object"),
    ("n-embd-string", GPT2, "n_embd", "768", 'expected an integer, got the string "768"'),
    ("n-layer-float", GPT2, "n_layer", 12.0, "expected an integer, got 12"),
    ("n-head-bool", GPT2, "n_head", True, "expected an integer, got true"),
    ("hidden-string", LLAMA, "hidden_size", "4096", 'expected an integer, got the string "4096"'),
    ("hidden-float", LLAMA, "hidden_size", 4096.0, "expected an integer, got 4096"),
    ("hidden-fraction", LLAMA, "hidden_size", 4096.5, "expected an integer, got 4096.5"),
    ("hidden-bool", LLAMA, "hidden_size", True, "expected an integer, got true"),
    ("layers-list", LLAMA, "num_hidden_layers", [32], "expected an integer, got a list"),
    ("heads-null-string", LLAMA, "num_attention_heads", "null", 'expected an integer, got the string "null"'),
    ("kv-heads-float", LLAMA, "num_key_value_heads", 8.0, "expected an integer, got 8"),
    ("vocab-string", LLAMA, "vocab_size", "32000", 'expected an integer, got the string "32000"'),
    ("intermediate-object", LLAMA, "intermediate_size", {"value": 11008}, "expected an integer, got an object"),
    ("experts-string", MIXTRAL, "num_local_experts", "8", 'expected an integer, got the string "8"'),
    ("top-k-float", MIXTRAL, "num_experts_per_tok", 2.0, "expected an integer, got 2"),
    ("tie-string-false", LLAMA, "tie_word_embeddings", "false", 'expected true or false, got the string "false"'),
    ("tie-string-true", GPT2, "tie_word_embeddings", "true", 'expected true or false, got the string "true"'),
    ("tie-integer", LLAMA, "tie_word_embeddings", 1, "expected true or false, got 1"),
    ("bias-string", LLAMA, "attention_bias", "no", 'expected true or false, got the string "no"'),
    ("negative-hidden", LLAMA, "hidden_size", -4096, "greater than 0"),
    ("zero-layers", LLAMA, "num_hidden_layers", 0, "greater than 0"),
    ("negative-vocab", GPT2, "vocab_size", -1, "greater than 0"),
    ("negative-positions", GPT2, "n_positions", -1024, "greater than 0"),
]
PARAMS = [
    pytest.param(base, field, value, message, id=name)
    for name, base, field, value, message in CASES
]


@pytest.mark.parametrize(("base", "field", "value", "message"), PARAMS)
def test_a_wrong_typed_field_is_one_line_naming_it(base, field, value, message):
    config = {**base, field: value}
    with pytest.raises(ValidationError) as info:
        trainmem.estimate({"model": {"hf_config": config}}, suggestions=False)
    errors = dict(format_validation_error(info.value))
    path = f"model.hf_config.{field}"
    assert path in errors, one_line(info.value)
    assert message in errors[path], errors[path]
    assert "\n" not in one_line(info.value)


@pytest.mark.parametrize(("base", "field", "value", "message"), PARAMS)
def test_the_page_shows_the_same_line_next_to_the_field(base, field, value, message):
    answer = json.loads(web.compute(json.dumps({"model": {"hf_config": {**base, field: value}}}), False))
    assert answer["ok"] is False
    by_path = {error["path"]: error["message"] for error in answer["errors"]}
    assert f"model.hf_config.{field}" in by_path, answer["errors"]
    assert message in by_path[f"model.hf_config.{field}"]


def test_what_transformers_accepts_is_accepted():
    """Integers where floats go, null for a defaulted field, and a nested text_config."""
    accepted = [
        {**LLAMA, "attention_dropout": 0},
        {**LLAMA, "num_key_value_heads": None},
        {"text_config": {**LLAMA}},
        {**GPT2, "n_inner": None},
    ]
    for config in accepted:
        report = trainmem.estimate({"model": {"hf_config": config}, "sequence_length": 128}, suggestions=False)
        assert report.num_parameters > 0


def test_a_string_boolean_is_never_read_as_true():
    """Today ``bool("false")`` is true: a silent wrong number (the head counted untied)."""
    untied = trainmem.estimate({"model": {"hf_config": {**GPT2, "tie_word_embeddings": False}}}, suggestions=False)
    try:
        quoted = trainmem.estimate(
            {"model": {"hf_config": {**GPT2, "tie_word_embeddings": "false"}}}, suggestions=False
        )
    except ValidationError:
        return  # refused: the right answer
    assert quoted.num_parameters == untied.num_parameters
