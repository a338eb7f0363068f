"""The report's figures (PNG): per-task scores, learning curves, run comparisons.

Drawn with matplotlib's object API (`matplotlib.figure.Figure` and its Agg
canvas), so no pyplot state or interactive backend is touched. Scores are
normalised scores (return / 10, on [0, 100]).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

__all__ = ["score_bars", "learning_curves", "compare_bars"]

_WMX, _SOURCE, _PUBLISHED = "#1f77b4", "#ff7f0e", "#7f7f7f"


def _save(fig: Figure, path: Path) -> Path:
    FigureCanvasAgg(fig)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    return Path(path)


def _nan(x) -> float:
    return float("nan") if x is None else float(x)


def _ylim(ax, values) -> None:
    """0..100 (the DMC score range), widened to hold every finite value."""
    v = np.asarray([x for x in np.ravel(values) if np.isfinite(x)] or [0.0])
    lo, hi = min(0.0, float(v.min())), max(100.0, float(v.max()))
    ax.set_ylim(lo * 1.05, hi * 1.05)


def score_bars(per_task: Sequence[Mapping[str, Any]], path: Path, title: str = "") -> Path:
    """Grouped bars per task: wmx score (mean, error bar = min..max of the seed means),
    the source agents' final score and the published score (missing bars
    are left out). per_task rows need ``task``, ``score``, ``score_min``,
    ``score_max``, ``source_score``, ``published_score``. Writes ``path``."""
    tasks = [r["task"] for r in per_task]
    x = np.arange(len(tasks))
    w = 0.27
    fig = Figure(figsize=(max(4.5, 1.1 * len(tasks) + 2), 3.8))
    ax = fig.add_subplot()
    wmx = np.array([_nan(r["score"]) for r in per_task])
    lo = wmx - np.array([_nan(r["score_min"]) for r in per_task])
    hi = np.array([_nan(r["score_max"]) for r in per_task]) - wmx
    ax.bar(x - w, wmx, w, yerr=np.vstack([lo, hi]), capsize=3, color=_WMX,
           label="wmx (seed range)")
    src = np.array([_nan(r.get("source_score")) for r in per_task])
    if np.isfinite(src).any():
        ax.bar(x, src, w, color=_SOURCE, label="source agents (final)")
    pub = np.array([_nan(r.get("published_score")) for r in per_task])
    if np.isfinite(pub).any():
        ax.bar(x + w, pub, w, color=_PUBLISHED, label="published (paper)")
    ax.set_xticks(x, tasks, rotation=30 if len(tasks) > 3 else 0, ha="right"
                  if len(tasks) > 3 else "center")
    ax.set_ylabel("normalised score (return / 10)")
    _ylim(ax, np.r_[wmx - lo, wmx + hi, src, pub])
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)
    if title:
        ax.set_title(title, fontsize=10, pad=22)
    return _save(fig, path)


def learning_curves(panels: Sequence[Mapping[str, Any]], path: Path, xlabel: str,
                    title: str = "") -> Path:
    """One panel per task: the run's eval return over training, mean over seeds with
    the seeds' min..max band, and reference lines.

    Each panel: ``task``; ``x`` (sorted x values) and ``returns`` (list per x
    of per-seed returns); optional ``published`` = (xs, ys, seed ranges or None,
    label): the published points as markers with the published seeds' range as
    error bars (never a line through points that do not exist); optional
    ``train`` = (xs, per-x lists of per-seed training-episode returns), drawn
    thin (the stochastic policy's returns, DreamerV3's primary metric);
    optional ``hlines`` = [(label, value), ...] drawn dotted (source final
    return, published at the source env steps, a threshold). Writes ``path``.
    """
    n = max(1, len(panels))
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(3.6 * cols, 2.8 * rows))
    legend = False
    for i, p in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        xs = np.asarray(p["x"], float)
        if len(xs):
            vals = [np.asarray(v, float) for v in p["returns"]]
            mean = np.array([v.mean() for v in vals])
            ax.plot(xs, mean, "o-", color=_WMX, ms=3, label="wmx (seed mean)")
            ax.fill_between(xs, [v.min() for v in vals], [v.max() for v in vals],
                            color=_WMX, alpha=0.2)
        tr = p.get("train")
        if tr is not None and len(tr[0]):
            ax.plot(np.asarray(tr[0], float), [np.mean(v) for v in tr[1]], "-", lw=0.8,
                    color=_WMX, alpha=0.6, label="wmx training episodes (seed mean)")
        pub = p.get("published")
        if pub is not None and len(pub[0]):
            px, py, rng, label = pub
            yerr = None
            if rng is not None:
                yerr = np.array([[y - lo for (lo, _), y in zip(rng, py)],
                                 [hi - y for (_, hi), y in zip(rng, py)]])
            ax.errorbar(px, py, yerr=yerr, fmt="s", ms=4, capsize=2, color=_PUBLISHED,
                        label=label)
        for j, (label, value) in enumerate(p.get("hlines") or []):
            if value is not None:
                ax.axhline(value, ls=":", color=(_SOURCE, _PUBLISHED)[j % 2], label=label)
        ax.set_title(p["task"], fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.set_ylabel("eval return", fontsize=8)
        ax.tick_params(labelsize=7)
        if not legend and ax.get_legend_handles_labels()[0]:   # the first panel with lines
            ax.legend(fontsize=7)
            legend = True
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def compare_bars(tasks: Sequence[str], runs: Sequence[str],
                 scores: Mapping[str, Mapping[str, float | None]], path: Path,
                 title: str = "") -> Path:
    """Grouped bars: per task, one bar per run (scores[run][task], None = absent).
    Writes ``path``."""
    x = np.arange(len(tasks))
    w = 0.8 / max(1, len(runs))
    fig = Figure(figsize=(max(4.5, 0.9 * len(tasks) * max(1, len(runs)) ** 0.5 + 2), 3.8))
    ax = fig.add_subplot()
    allys = []
    for j, run in enumerate(runs):
        ys = [_nan(scores[run].get(t)) for t in tasks]
        allys += ys
        ax.bar(x - 0.4 + w * (j + 0.5), ys, w, label=run)
    ax.set_xticks(x, tasks, rotation=30 if len(tasks) > 3 else 0,
                  ha="right" if len(tasks) > 3 else "center")
    ax.set_ylabel("normalised score (return / 10)")
    _ylim(ax, allys)
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0),
              ncol=min(3, max(1, len(runs))), frameon=False)
    if title:
        ax.set_title(title, fontsize=10, pad=14 * math.ceil(len(runs) / 3) + 8)
    return _save(fig, path)
