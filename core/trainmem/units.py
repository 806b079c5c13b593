"""Byte units and their human-readable formatting.

Memory vendors and papers disagree on "GB": the ZeRO paper and GPU datasheets use
10**9 bytes, PyTorch and nvidia-smi use 2**30 (GiB) and 2**20 (MiB). trainmem
computes in bytes and names the unit wherever it shows one.
"""

from __future__ import annotations

KIB = 1024
MIB = 1024**2
GIB = 1024**3
GB = 10**9


def format_bytes(num_bytes: float) -> str:
    """Format a byte count with a binary unit, e.g. ``format_bytes(3 * GIB) == '3.00 GiB'``."""
    sign = "-" if num_bytes < 0 else ""
    value = abs(float(num_bytes))
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if value >= size:
            return f"{sign}{value / size:.2f} {unit}"
    return f"{sign}{value:.0f} B"


def format_count(count: int) -> str:
    """Format a parameter count the way model cards do: 6.74B, 124.4M, 12.3K."""
    for suffix, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if abs(count) >= size:
            return f"{count / size:.2f}{suffix}" if size >= 10**9 else f"{count / size:.1f}{suffix}"
    return str(count)
