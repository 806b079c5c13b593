"""The ZeRO paper's model-state memory, reproduced by the step simulation.

Rajbhandari et al. 2020, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models" (arXiv:1910.02054): mixed-precision Adam keeps fp16 weights (2Ψ), fp16 gradients
(2Ψ) and K = 12 bytes of optimizer state per parameter (fp32 master weights, momentum,
variance). Figure 1 (Ψ = 7.5B, Nd = 64) and Table 1 (per-device GB, 1 GB = 10^9 bytes;
the paper truncates some cells, e.g. 513 for 513.5).
"""

import pytest

import trainmem

MODEL_STATE_PARTS = {"weights", "gradients", "master weights", "optimizer states"}

# Table 1: (parameters, data-parallel degree) -> (P_os, P_os+g, P_os+g+p) in GB.
TABLE_1 = {
    (7_500_000_000, 1): (120, 120, 120),
    (7_500_000_000, 4): (52.5, 41.3, 30),
    (7_500_000_000, 16): (35.6, 21.6, 7.5),
    (7_500_000_000, 64): (31.4, 16.6, 1.88),
    (7_500_000_000, 256): (30.4, 15.4, 0.47),
    (7_500_000_000, 1024): (30.1, 15.1, 0.12),
    (128_000_000_000, 1): (2048, 2048, 2048),
    (128_000_000_000, 4): (896, 704, 512),
    (128_000_000_000, 16): (608, 368, 128),
    (128_000_000_000, 64): (536, 284, 32),
    (128_000_000_000, 256): (518, 263, 8),
    (128_000_000_000, 1024): (513, 257, 2),
    (1_000_000_000_000, 1): (16000, 16000, 16000),
    (1_000_000_000_000, 4): (7000, 5500, 4000),
    (1_000_000_000_000, 16): (4750, 2875, 1000),
    (1_000_000_000_000, 64): (4187, 2218, 250),
    (1_000_000_000_000, 256): (4046, 2054, 62.5),
    (1_000_000_000_000, 1024): (4011, 2013, 15.6),
}


def model_state_gb(num_parameters: int, num_gpus: int, stage: int) -> float:
    report = trainmem.estimate(
        {
            "model": {"num_parameters": num_parameters},
            "precision": "fp16-master-weights",
            "optimizer": "adam",
            "parallelism": {"num_gpus": num_gpus, "strategy": "zero", "zero_stage": stage},
        },
        suggestions=False,
    )
    resident = sum(part.bytes for part in report.parts if part.name in MODEL_STATE_PARTS - {"gradients"})
    # The gradients at their largest: ZeRO-2 frees its 16-bit partition before the update (stage_1_and_2.py step).
    return (resident + max(report.timeline.gradients)) / 1e9


def test_figure_1():
    baseline, os, os_g, os_g_p = (model_state_gb(7_500_000_000, 64, stage) for stage in (0, 1, 2, 3))
    assert baseline == pytest.approx(120, abs=0.05)
    assert os == pytest.approx(31.4, abs=0.05)
    assert os_g == pytest.approx(16.6, abs=0.05)
    assert os_g_p == pytest.approx(1.9, abs=0.05)


@pytest.mark.parametrize(("num_parameters", "num_gpus"), sorted(TABLE_1))
def test_table_1(num_parameters, num_gpus):
    expected = TABLE_1[(num_parameters, num_gpus)]
    for stage, paper_gb in zip((1, 2, 3), expected):
        simulated = model_state_gb(num_parameters, num_gpus, stage)
        # The paper rounds or truncates to three significant figures.
        assert simulated == pytest.approx(paper_gb, rel=0.01, abs=0.01), (stage, simulated, paper_gb)
