"""trainmem.model_inputs: which optional setup fields a model reads (the page shows only those)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from trainmem.model_inputs import model_inputs
from trainmem.setup import Setup

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "web" / "py"))
import trainmem_web  # noqa: E402


def _inputs(model):
    return model_inputs(Setup.model_validate({"model": model, "sequence_length": 128}).model)


def test_a_text_decoder_takes_no_images_and_trains_its_lm_head():
    found = _inputs("llama-3.1-8b")
    assert found.fields == ()
    assert found.tasks == ("causal_lm",) and found.default_task == "causal_lm"
    assert not found.encoder_decoder


@pytest.mark.parametrize(
    "preset, rule, size_matters, videos",
    [
        ("llava-1.5-7b", "fixed", False, False),  # CLIP at 336 px: every image is the same tokens
        ("qwen2.5-vl-7b", "smart_resize", True, True),
        ("smolvlm-instruct", "tiles", True, False),
    ],
)
def test_a_vlm_takes_the_image_fields_its_processor_reads(preset, rule, size_matters, videos):
    found = _inputs(preset)
    assert found.image_token_rule == rule
    assert "images" in found.fields and "images.images_per_sample" in found.fields
    assert ("images.image_height" in found.fields) is size_matters
    assert ("images.videos_per_sample" in found.fields) is videos
    assert ("images.min_pixels" in found.fields) is (rule == "smart_resize")


def test_an_encoder_lists_its_heads_with_the_default_first():
    found = _inputs("bert-large-uncased")
    assert found.default_task == "sequence_classification"
    assert set(found.tasks) >= {"sequence_classification", "token_classification", "masked_lm", "embedding"}
    assert "target_length" not in found.fields


def test_a_parameter_count_takes_nothing():
    found = _inputs({"num_parameters": 1_000_000_000})
    assert found.fields == () and found.tasks == ()


def test_the_bridge_answers_the_inputs_and_names_the_field_of_a_bad_model():
    answer = json.loads(trainmem_web.model_inputs(json.dumps("qwen2.5-vl-7b")))
    assert answer["ok"] and "images.max_pixels" in answer["inputs"]["fields"]
    # Only the model is checked: bert's 512 positions against the default sequence length is compute's error.
    assert json.loads(trainmem_web.model_inputs(json.dumps({"preset": "bert-large-uncased"})))["ok"]
    bad = json.loads(trainmem_web.model_inputs(json.dumps({"preset": "no-such-model"})))
    assert not bad["ok"] and bad["errors"][0]["path"] == "model.preset"
    assert json.loads(trainmem_web.model_inputs("[1"))["errors"][0]["path"] == "model"
    path = json.loads(trainmem_web.model_inputs(json.dumps({"hf_config": "/etc/passwd"})))
    assert path["errors"][0]["path"] == "model.hf_config"
