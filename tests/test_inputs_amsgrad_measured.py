"""amsgrad=True, which trainer files can ask for (optim_args, DeepSpeed optimizer.params), measured with PyTorch:
a third state the size of each parameter, and step() temporaries as without amsgrad (torch/optim/adam.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

import trainmem  # noqa: E402
from trainmem.measure.runner import measure  # noqa: E402

pytestmark = pytest.mark.torch

TINY_LLAMA = {
    "model_type": "llama",
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}


@pytest.mark.parametrize("implementation", ["for-loop", "foreach"])
@pytest.mark.parametrize("name", ["adam-amsgrad", "adamw-amsgrad"])
def test_amsgrad_prediction_equals_the_measurement(name, implementation):
    setup = {
        "model": {"hf_config": TINY_LLAMA},
        "micro_batch_size": 2,
        "sequence_length": 32,
        "precision": "fp32",
        "optimizer": {"name": name, "implementation": implementation},
        "runtime": {"device": "cpu"},
    }
    measured = measure(setup)
    predicted = trainmem.estimate(measured.setup, suggestions=False)
    assert predicted.breakdown.optimizer_states == measured.breakdown.optimizer_states
    # the peak to within the loss's few Python-scalar bytes, as every corpus case
    assert abs(predicted.peak_allocated_bytes - measured.peak_allocated_bytes) <= 64
