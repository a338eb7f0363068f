"""Published learning curves, read from the copies in wmx/evaluate/reference/.

Sources (reference/SOURCE.md): TD-MPC2's released `results/tdmpc2/*.csv`
(evaluation points every 100,000 env steps from 0, 3 seeds) and DreamerV3's
bundled `scores/dmc_proprio-dreamerv3.json.gz` (training-episode returns every
10,000 env steps from 10,000, 5 seeds). x axes in env steps (agent steps x
action repeat).

A published value is shown only where the curve has a point: `published_point`
returns the point within a tolerance of the asked env steps, or says how far
the nearest points are. Nothing is interpolated between points.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

REFERENCE_DIR = Path(__file__).resolve().parent / "reference"

CURVE_FILES = {"tdmpc2": "tdmpc2_dmc_curves.json",
               "dreamerv3": "dreamerv3_dmc_proprio_curves.json"}
"""The published curves of each agent (its own paper's), by ``--agent`` name."""

AGENT_LABELS = {"tdmpc2": "TD-MPC2", "dreamerv3": "DreamerV3"}

_DREAMER_NAMES = {"cup-catch": "dmc_ball_in_cup_catch"}


class PublishedPoint(NamedTuple):
    """A published point near the asked env steps, or why there is none.

    value: the mean over the published seeds at ``env_steps`` (None when no
    point lies within the tolerance); env_steps: the point's env steps (or
    None); seed_min / seed_max: the range of the published seeds there (None
    without per-seed data); below / above: the env steps of the nearest
    published points at or below and above the asked value (None at the ends).
    """

    value: float | None
    env_steps: int | None
    seed_min: float | None
    seed_max: float | None
    below: int | None
    above: int | None


@functools.lru_cache(maxsize=8)
def load_curves(name: str = "tdmpc2_dmc_curves.json") -> dict:
    """The JSON of one reference file (cached). Raises FileNotFoundError."""
    return json.loads((REFERENCE_DIR / name).read_text())


def curve_file(agent: str) -> str:
    """The reference file of ``agent``'s published curves. Raises ValueError for an agent
    without one."""
    if agent not in CURVE_FILES:
        raise ValueError(f"no published curves for agent {agent!r}; known: {sorted(CURVE_FILES)}")
    return CURVE_FILES[agent]


def reference_source(agent: str = "tdmpc2") -> str:
    """One line naming where an agent's published numbers come from."""
    src = load_curves(curve_file(agent))["_source"]
    repo = src.get("repository") or src.get("repo")
    return f"{repo} {src['path']} @ {src['commit'][:7]}"


def _key(task: str, agent: str) -> str:
    if agent == "dreamerv3":
        return _DREAMER_NAMES.get(task, "dmc_" + task.replace("-", "_"))
    return task


def curve(task: str, agent: str = "tdmpc2"
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None] | None:
    """(env_steps i64[P], mean f64[P], per-seed f64[S, P] or None) of the points that
    have a value, or None when ``agent`` published no curve for ``task``."""
    c = load_curves(curve_file(agent)).get(_key(task, agent))
    if c is None:
        return None
    xs = np.asarray(c["env_steps"], np.int64)
    ys = np.asarray([np.nan if v is None else v for v in c["mean"]], np.float64)
    seeds = None
    if c.get("per_seed"):
        seeds = np.asarray([[np.nan if v is None else v for v in s]
                            for s in c["per_seed"].values()], np.float64)
    ok = ~np.isnan(ys)
    return xs[ok], ys[ok], None if seeds is None else seeds[:, ok]


def published_point(task: str, env_steps: float, agent: str = "tdmpc2",
                    tolerance: float | None = None) -> PublishedPoint | None:
    """The published point of ``task`` within ``tolerance`` env steps of ``env_steps``.

    tolerance: default max(1,000, 2% of env_steps). Returns None when the agent
    published no curve for the task; otherwise a `PublishedPoint` whose value is
    None when no point is close enough (then ``below`` / ``above`` say where the
    nearest points are).
    """
    c = curve(task, agent)
    if c is None:
        return None
    xs, ys, seeds = c
    tol = max(1000.0, 0.02 * float(env_steps)) if tolerance is None else float(tolerance)
    below = xs[xs <= env_steps]
    above = xs[xs > env_steps]
    b = int(below[-1]) if below.size else None
    a = int(above[0]) if above.size else None
    i = int(np.argmin(np.abs(xs - env_steps)))
    if abs(float(xs[i]) - float(env_steps)) > tol:
        return PublishedPoint(None, None, None, None, b, a)
    lo = hi = None
    if seeds is not None:
        col = seeds[:, i][~np.isnan(seeds[:, i])]
        if col.size:
            lo, hi = float(col.min()), float(col.max())
    return PublishedPoint(float(ys[i]), int(xs[i]), lo, hi, b, a)


def published_return(task: str, env_steps: float, agent: str = "tdmpc2") -> float | None:
    """The published mean return at a point within the default tolerance of
    ``env_steps`` (`published_point`), else None. Never interpolated."""
    p = published_point(task, env_steps, agent)
    return None if p is None else p.value


def points_up_to(task: str, env_steps: float, agent: str = "tdmpc2"
                 ) -> tuple[list[int], list[float], list[tuple[float, float]] | None]:
    """The published points at or below ``env_steps`` (plots: markers, never a line
    through points that do not exist): (xs, means, per-point seed (min, max) or None)."""
    c = curve(task, agent)
    if c is None:
        return [], [], None
    xs, ys, seeds = c
    keep = xs <= env_steps
    rng = None
    if seeds is not None:
        rng = [(float(np.nanmin(seeds[:, j])), float(np.nanmax(seeds[:, j])))
               for j in np.flatnonzero(keep)]
    return xs[keep].tolist(), ys[keep].tolist(), rng
