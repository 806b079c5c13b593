"""amsgrad=True, which trainer files can ask for (optim_args, DeepSpeed optimizer.params), measured with PyTorch:
a third state the size of each parameter, and step() temporaries as without amsgrad (torch/optim/adam.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from small_models import TINY_LLAMA  # noqa: E402

import trainmem  # noqa: E402
from trainmem.measure.runner import measure  # noqa: E402

pytestmark = pytest.mark.torch


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
