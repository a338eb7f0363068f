"""The plain-text tables of the `wmx` listings (`wmx runs ls`, `wmx dataset ls|sources`)."""
from __future__ import annotations

from typing import Sequence


def print_table(head: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print ``head`` and ``rows`` as left-aligned columns two spaces apart, each as wide as
    its widest cell (``str`` of each value); trailing spaces stripped."""
    w = [max(len(str(r[i])) for r in [*rows, head]) for i in range(len(head))]
    for r in [head, *rows]:
        print("  ".join(str(x).ljust(w[i]) for i, x in enumerate(r)).rstrip())
