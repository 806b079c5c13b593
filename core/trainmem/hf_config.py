"""Read a Hugging Face ``config.json`` into an :class:`~trainmem.architecture.Architecture`.

The readers live with their families in ``trainmem.models`` (one module per family); this module
keeps the original import path.
"""

from __future__ import annotations

from .models import FAMILIES, architecture_from_hf_config, supported_model_types

__all__ = ["FAMILIES", "architecture_from_hf_config", "supported_model_types"]
