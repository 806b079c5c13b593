"""Post-training modes (TRL 1.16): the ``training`` part of a Setup and the phases each trainer runs.

* :mod:`.config` — :class:`Training`, the Setup field (mode and TRL's options, with TRL's defaults);
* :mod:`.checks` — what the mode needs of the model and the setup (lengths, LoRA, parallelism);
* :mod:`.fused_head` — TRL's chunked log-prob LM head (``add_fused_lm_head``), replayed on a tape;
* :mod:`.phases` — the per-step program of each mode: model copies (reference, teacher), extra
  forwards under ``no_grad``, and the phases reported as separate peaks.
"""

from .config import Training, TrainingMode, modes

__all__ = ["Training", "TrainingMode", "modes"]
