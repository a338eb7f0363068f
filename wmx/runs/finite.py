"""The trainers' non-finite guard: a NaN or inf in a chunk's metrics or in the agents' state stops the run.

After every chunk, before anything of it is exported, logged or
checkpointed, the host checks the chunk's metrics (one value per seed and
METRIC_KEY) and, on the device, every floating-point leaf of the agents'
training states (parameters, optimiser moments, normalisers: one jitted
``isfinite`` reduction per leaf and seed, a few booleans come back). A
non-finite value raises `NonFiniteError` naming the chunk's update range,
the seeds, the metrics and the state leaves (by their pytree path), and the
run's last good checkpoint, which is kept as it is: the failing chunk saves
nothing. Agent-neutral: only `Agent.METRIC_KEYS` and the state pytree are
read.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmx.failures import ExpectedFailure


class NonFiniteError(ExpectedFailure):
    """A run produced a NaN or inf; the message names where and the last good checkpoint."""


@jax.jit
def _finite_per_seed(tree):
    def leaf(x):
        x = jnp.asarray(x)
        if not jnp.issubdtype(x.dtype, jnp.inexact):
            return None
        if x.ndim == 0:
            return jnp.isfinite(x)[None]
        return jnp.isfinite(x).reshape(x.shape[0], math.prod(x.shape[1:])).all(axis=1)
    return jax.tree.map(leaf, tree)


def nonfinite_leaves(state: Any, seeds: Sequence[int]) -> list[tuple[str, list[int]]]:
    """``[(pytree path, [seeds])]`` of the floating-point leaves of ``state`` (leading
    seed axis) holding a NaN or inf, in tree order."""
    flags = jax.device_get(_finite_per_seed(state))
    out = []
    for path, ok in jax.tree_util.tree_flatten_with_path(flags)[0]:
        ok = np.asarray(ok).reshape(-1)
        bad = [int(seeds[i]) for i in np.flatnonzero(~ok)] if ok.size == len(seeds) else \
            ([] if ok.all() else list(seeds))
        if bad:
            out.append((jax.tree_util.keystr(path), bad))
    return out


def check_finite(span: str, seeds: Sequence[int], metrics: Mapping[str, Any], state: Any,
                 last_checkpoint: Path | None, extra: Mapping[str, Any] | None = None) -> None:
    """Raise NonFiniteError when a metric, a leaf of ``state`` or an ``extra`` array is not finite.

    span: where, e.g. "updates 2000..3000"; metrics: {key: f[S]} (one value per
    seed); state: the agents' states (leading seed axis); extra: other per-seed
    arrays {name: f[S, ...]} (e.g. the rows a chunk collected);
    last_checkpoint: the run's newest checkpoint (None: none yet).
    """
    terms = []
    for k, v in metrics.items():
        v = np.asarray(v, np.float64).reshape(len(seeds), -1)
        bad = [int(seeds[i]) for i in range(len(seeds)) if not np.isfinite(v[i]).all()]
        if bad:
            terms.append(f"metric {k} (seeds {bad})")
    for k, v in (extra or {}).items():
        v = np.asarray(v)
        v = v.reshape(len(seeds), -1) if v.size else v.reshape(len(seeds), 0)
        bad = [int(seeds[i]) for i in range(len(seeds)) if not np.isfinite(v[i]).all()]
        if bad:
            terms.append(f"{k} (seeds {bad})")
    leaves = nonfinite_leaves(state, seeds)
    if leaves:
        shown = ", ".join(f"{p} (seeds {s})" for p, s in leaves[:6])
        more = f" and {len(leaves) - 6} more" if len(leaves) > 6 else ""
        terms.append(f"state {shown}{more}")
    if not terms:
        return
    kept = (f"the last good checkpoint, {last_checkpoint}, is kept" if last_checkpoint
            else "no checkpoint was saved before it")
    raise NonFiniteError(
        f"non-finite values in {span}: {'; '.join(terms)}. The run stops here without "
        f"saving this chunk; {kept}. Find the cause (NaN/inf in the data: `wmx dataset "
        "validate`; a diverging update: lower the learning rate or change the config with "
        "--set), then continue with --resume or start a new run")
