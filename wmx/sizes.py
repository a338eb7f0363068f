"""Byte counts and counted nouns as people read them (`wmx dataset ls`, `wmx runs ls`,
the trainers' summaries)."""
from __future__ import annotations


def noun_for(n: int, noun: str, plural: str | None = None) -> str:
    """``noun`` in the number ``n`` takes, without the number: ``task`` for 1, ``tasks``
    otherwise (also for 0).

    Args:
      n: the count.
      noun: the singular noun (or verb: ``noun_for(n, "is", "are")``).
      plural: the plural when it is not ``noun + "s"``.

    Returns:
      ``noun`` or the plural.
    """
    return noun if n == 1 else plural or noun + "s"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun`` in the number it takes: ``1 task``, ``2 tasks``, ``0 tasks``.

    Args:
      n: the count.
      noun: the singular noun.
      plural: the plural when it is not ``noun + "s"``.

    Returns:
      ``"<n> <noun or plural>"`` (`noun_for`).
    """
    return f"{n} {noun_for(n, noun, plural)}"


def human_size(n: float) -> str:
    """``512 B``, ``1.5 KiB``, ``3.2 MiB``, ... (powers of 1024, so the IEC units; bytes
    as an int)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
