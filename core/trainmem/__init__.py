"""trainmem: simulate the GPU memory of one training step before renting the GPU.

>>> import trainmem
>>> report = trainmem.estimate({"model": {"preset": "llama-2-7b"}, "micro_batch_size": 2})
>>> report.peak_total_bytes > 0
True
"""

__version__ = "0.1.0"

from .estimate import estimate  # noqa: E402
from .report import Report  # noqa: E402
from .setup import Setup  # noqa: E402

__all__ = ["Report", "Setup", "__version__", "estimate"]
