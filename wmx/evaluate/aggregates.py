"""Normalised scores and their aggregates over tasks, with bootstrap confidence intervals.

Normalised score of a DMC task = episode return / 10, on [0, 100]
(tdmpc2_spec 4.20; the TD-MPC2 paper's Sec 4.1). The probes use the same
divisor (their returns are not on the DMC scale). Aggregates over tasks: the
mean, the median and the interquartile mean (IQM: the mean of the middle
50% of the sorted scores, ``scipy.stats.trim_mean(x, 0.25)``, which drops
``floor(n/4)`` scores at each end), each with a 95% percentile-bootstrap
confidence interval that resamples tasks (``scipy.stats.bootstrap``,
fixed seed, so the same scores always give the same interval).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Sequence

import numpy as np
from scipy import stats

from wmx.envs.registry import DMC_SCORE_DIVISOR

__all__ = ["DMC_SCORE_DIVISOR", "STATISTICS", "BOOTSTRAP_SEED", "BOOTSTRAP_RESAMPLES",
           "Aggregate", "is_score", "normalised_score", "iqm", "aggregate", "aggregate_all"]

BOOTSTRAP_SEED = 0
"""Seed of the bootstrap's generator (reports are reproducible)."""
BOOTSTRAP_RESAMPLES = 10_000
CONFIDENCE = 0.95


def is_score(x) -> bool:
    """True for a score a report can aggregate: not None and finite (no NaN, no inf).

    x: a Python or numpy real scalar, or None. A non-number raises TypeError (`math.isfinite`).
    """
    return x is not None and math.isfinite(x)


def normalised_score(ret):
    """Normalised score of a DMC return: ``ret / 10`` (float or array, same shape).

    A return of None gives None. Source: tdmpc2_spec 4.20.
    """
    if ret is None:
        return None
    if isinstance(ret, (int, float)):
        return float(ret) / DMC_SCORE_DIVISOR
    return np.asarray(ret, np.float64) / DMC_SCORE_DIVISOR


def iqm(x, axis: int = -1):
    """Interquartile mean along ``axis``: ``scipy.stats.trim_mean(x, 0.25)``.

    Drops ``floor(0.25 * n)`` values at each end of the sorted values and
    averages the rest (for n < 4 nothing is dropped: the plain mean).
    """
    return stats.trim_mean(np.asarray(x, np.float64), 0.25, axis=axis)


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def _median(x, axis=-1):
    return np.median(x, axis=axis)


STATISTICS: dict[str, Callable] = {"mean": _mean, "median": _median, "iqm": iqm}
"""Aggregate statistics, by name, each ``f(x, axis) -> reduced array``."""


@dataclasses.dataclass(frozen=True)
class Aggregate:
    """One aggregate of per-task scores: statistic name, point estimate, the
    bootstrap interval [ci_low, ci_high] (both equal to the value when there
    are fewer than two tasks or every score is equal), number of tasks."""
    statistic: str
    value: float
    ci_low: float
    ci_high: float
    n_tasks: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def aggregate(scores: Sequence[float], statistic: str, *, seed: int = BOOTSTRAP_SEED,
              n_resamples: int = BOOTSTRAP_RESAMPLES, confidence: float = CONFIDENCE
              ) -> Aggregate:
    """``statistic`` ("mean", "median", "iqm") of per-task scores with its bootstrap CI.

    scores: one normalised score per task (finite). The interval is the
    percentile bootstrap over tasks (``scipy.stats.bootstrap``, method
    "percentile", ``n_resamples`` resamples, ``numpy.random.default_rng(seed)``).
    Raises ValueError for an unknown statistic or empty / non-finite scores.
    """
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; choose one of {list(STATISTICS)}")
    x = np.asarray(scores, np.float64).ravel()
    if x.size == 0:
        raise ValueError("aggregate needs at least one task score")
    if not np.isfinite(x).all():
        raise ValueError(f"task scores must be finite, got {x.tolist()}")
    fn = STATISTICS[statistic]
    value = float(fn(x, axis=-1))
    if x.size < 2 or np.all(x == x[0]):
        return Aggregate(statistic, value, value, value, int(x.size))
    res = stats.bootstrap((x,), fn, n_resamples=n_resamples, vectorized=True,
                          confidence_level=confidence, method="percentile",
                          rng=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):   # defensive: keep reports finite
        lo = hi = value
    return Aggregate(statistic, value, lo, hi, int(x.size))


def aggregate_all(scores: Sequence[float], **kw) -> list[Aggregate]:
    """`aggregate` for every statistic of STATISTICS, in that order."""
    return [aggregate(scores, name, **kw) for name in STATISTICS]
