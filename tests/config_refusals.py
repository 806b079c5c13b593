"""The check the family tests share: a config.json that a family's reader refuses in one line."""

from __future__ import annotations

import pytest

from trainmem.errors import FieldError
from trainmem.models import architecture_from_hf_config


def refused(config: dict, field: str | tuple[str, ...], message: str) -> None:
    """The reader refuses ``config`` in one FieldError naming ``field`` (or one of several), its
    message matching ``message`` (a regular expression)."""
    with pytest.raises(FieldError, match=message) as error:
        architecture_from_hf_config(config)
    assert error.value.field in ((field,) if isinstance(field, str) else field), error.value
