"""The command line's numbers, read strictly: what a flag takes is what a JSON setup file takes.

argparse's ``type=int`` and ``type=float`` are Python's ``int()`` and ``float()``, which also read
Unicode digits (``--mbs ٣`` is 3), digit-group underscores (``1_000``), surrounding whitespace, and
for floats ``nan``, ``inf`` and ``1e400`` (infinity). A flag here takes ASCII decimal digits only,
as JSON writes numbers; anything else is one line naming the flag and what it allows (argparse
prefixes ``argument --flag:``). Non-finite floats and the bounds of each field (``trainmem.limits``)
are checked by the Setup as for a file, with the field's name.
"""

from __future__ import annotations

import argparse
import re

MAX_DIGITS = 4_000
"""Below Python's own limit for int() (4,300 digits, refused with a message about Python): a longer number is refused
here; shorter ones reach the Setup, whose bounds (at most 2^50, 16 digits) name the field."""

_WHOLE = re.compile(r"[+-]?[0-9]+")
_NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _shown(text: str) -> str:
    shown = text if len(text) <= 24 else text[:21] + "..."
    return ascii(shown)


def whole_number(text: str) -> int:
    """An argparse ``type``: a whole number in ASCII decimal digits (an optional sign), at most 4,000 digits."""
    if not _WHOLE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"expected a whole number in decimal digits 0-9, got {_shown(text)}")
    digits = len(text.lstrip("+-"))
    if digits > MAX_DIGITS:
        raise argparse.ArgumentTypeError(f"a number of {digits:,} digits is too large (at most {MAX_DIGITS:,} digits)")
    return int(text)


def decimal_number(text: str) -> float:
    """An argparse ``type``: a decimal number (``48``, ``0.1``, ``1e-3``) in ASCII characters. ``nan``, ``inf`` and an
    overflowing ``1e400`` are passed on as floats, so that the Setup refuses them naming its field (floats must be
    finite everywhere), as it does for a file."""
    if _NON_FINITE.fullmatch(text):
        return float(text)
    if not _DECIMAL.fullmatch(text) or len(text) > MAX_DIGITS:
        raise argparse.ArgumentTypeError(f"expected a decimal number such as 0.1 or 48, got {_shown(text)}")
    return float(text)
