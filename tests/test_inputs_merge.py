"""How the files' values merge with a base setup (the page passes its form as one)."""

import json

import pytest
from small_models import LLAMA_2_LAYERS as CONFIG

from trainmem.inputs import read_texts


@pytest.mark.parametrize("model", ["llama-3-8b", {"preset": "llama-3-8b"}, {"num_parameters": 7_000_000_000}])
def test_a_config_json_replaces_a_base_model_of_another_shape(model):
    setup, _ = read_texts({"form.json": json.dumps({"model": model}), "config.json": json.dumps(CONFIG)})
    assert setup.model.hf_config["hidden_size"] == 256
