"""Published learning curves, read from the copies in wmx/evaluate/reference/.

Source: TD-MPC2's released `results/tdmpc2/*.csv` (see reference/SOURCE.md);
x axis in env steps (agent steps x action repeat), evaluation points every
100,000 env steps from 0.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

REFERENCE_DIR = Path(__file__).resolve().parent / "reference"


@functools.lru_cache(maxsize=4)
def load_curves(name: str = "tdmpc2_dmc_curves.json") -> dict:
    """The JSON of one reference file (cached). Raises FileNotFoundError."""
    return json.loads((REFERENCE_DIR / name).read_text())


def reference_source(name: str = "tdmpc2_dmc_curves.json") -> str:
    """One line naming where a reference file's numbers come from."""
    src = load_curves(name)["_source"]
    return f"{src['repository']} {src['path']} @ {src['commit'][:7]}"


def published_return(task: str, env_steps: float, name: str = "tdmpc2_dmc_curves.json"
                     ) -> float | None:
    """Mean published return of ``task`` at ``env_steps``, linearly interpolated.

    Returns None for a task without a published curve or env steps beyond
    the curve's last point. Between evaluation points (every 100k env steps)
    the value is the linear interpolation of the neighbouring means.
    """
    curves = load_curves(name)
    c = curves.get(task)
    if c is None:
        return None
    xs = np.asarray(c["env_steps"], float)
    ys = np.asarray([np.nan if v is None else v for v in c["mean"]], float)
    ok = ~np.isnan(ys)
    xs, ys = xs[ok], ys[ok]
    if env_steps < xs[0] or env_steps > xs[-1]:
        return None
    return float(np.interp(env_steps, xs, ys))
