"""How the files' values merge with a base setup (the page passes its form as one)."""

import json

import pytest

from trainmem.inputs import read_texts

CONFIG = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "vocab_size": 1000,
}


@pytest.mark.parametrize("model", ["llama-3-8b", {"preset": "llama-3-8b"}, {"num_parameters": 7_000_000_000}])
def test_a_config_json_replaces_a_base_model_of_another_shape(model):
    setup, _ = read_texts({"form.json": json.dumps({"model": model}), "config.json": json.dumps(CONFIG)})
    assert setup.model.hf_config["hidden_size"] == 256
