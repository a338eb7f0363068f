"""Seeds of a run: distinct integers in [0, 2**32).

A seed becomes ``jax.random.PRNGKey(seed)``, which keeps the low 32 bits on
the default (32-bit) key path, so ``PRNGKey(2**32) == PRNGKey(0)`` and a
negative seed aliases a large one: outside [0, 2**32) two seeds would be
the same run. Both run configs refuse them.
"""
from __future__ import annotations

from typing import Sequence

SEED_LIMIT = 2 ** 32


def check_seeds(seeds: Sequence[int]) -> None:
    """Raise ValueError (naming --seeds) for an empty list, a duplicate, a non-integer
    or a seed outside [0, 2**32)."""
    if not seeds:
        raise ValueError("--seeds needs at least one seed")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int)
           or not 0 <= s < SEED_LIMIT]
    if bad:
        raise ValueError(f"--seeds {bad}: seeds must be integers in [0, 2**32) = [0, "
                         f"{SEED_LIMIT - 1}]; PRNGKey keeps 32 bits, so others alias a seed "
                         "in that range")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds has duplicates: {list(seeds)}")
