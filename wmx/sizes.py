"""Byte counts as people read them (`wmx dataset ls`, `wmx runs ls`)."""
from __future__ import annotations


def human_size(n: float) -> str:
    """``512 B``, ``1.5 KB``, ``3.2 MB``, ... (powers of 1024; bytes as an int)."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if n < 1024 or unit == "TB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return str(n)
