"""The base class of every trainmem data model: frozen, strict about unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenModel(BaseModel):
    """An immutable pydantic model that rejects fields it does not know.

    Rejecting unknown fields turns a typo in a setup file (``micro_bacth_size``) into
    an error that names the field instead of a silently ignored value.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
