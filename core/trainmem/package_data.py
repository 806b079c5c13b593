"""The files trainmem ships in ``trainmem/data`` (catalogs as data), read through the package's loader.

``loader.get_data`` is what ``importlib.resources`` and ``pkgutil.get_data`` use underneath; the
importers of a source tree, an unpacked wheel and a zip archive (``zipimport``) all provide it.
Calling it directly spares every start of trainmem the import of ``importlib.resources`` and the
modules it pulls in (``tempfile``, ``random``, ...): 35–50 ms of the web page's start in Pyodide,
measured under Node (benchmarks/bench_import.py).
"""

from __future__ import annotations

import json
import os
from typing import Any

_DATA_DIR = os.path.join(os.path.dirname(__file__), "data")


def data_text(filename: str) -> str:
    """The text of ``trainmem/data/<filename>`` (UTF-8)."""
    return __spec__.loader.get_data(os.path.join(_DATA_DIR, filename)).decode("utf-8")


def data_json(filename: str) -> Any:
    """``trainmem/data/<filename>`` parsed as JSON."""
    return json.loads(data_text(filename))
