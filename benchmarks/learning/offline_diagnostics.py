"""Diagnostics of DreamerV3 offline runs side by side: why a run learns or does not.

One row of panels over updates, one line per run: the evaluation return of a task (seed
mean, ± the standard error over all its episodes), the imagined λ-return (``ret/mean``),
the reward loss, the dynamics loss (the KL, in nats, with its 1-nat free-bits floor) and
the actor's entropy, read from each run's metrics.csv (seed 0's training rows; the means
over the seeds' evaluation rows). Runs of other preset widths on the same dataset show
whether the world model and the imagined returns learn at another pace per update
(docs/validation.md, DreamerV3 offline).

    python benchmarks/learning/offline_diagnostics.py --task reacher-easy \\
        --run 1m=H/runs/dv3-offline-check-<cpu> --run 12m=benchmarks/results/<paper>_metrics.csv \\
        --out benchmarks/results/dreamerv3_offline_reacher-easy_1m_12m.png
"""
from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

PANELS = (("eval return", None), ("imagined λ-return (mean)", "ret/mean"),
          ("reward loss", "reward_loss"), ("dynamics loss (KL, nats)", "dyn_loss"),
          ("actor entropy", "ent/action/mean"))
"""(title, metrics.csv column of the training rows; None: the evaluation returns)."""


def read_metrics(path: Path) -> list[dict[str, str]]:
    """The rows of a run's metrics.csv (``path``: the file or its run directory). Raises
    SystemExit naming the path when there is none."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.csv"
    if not path.is_file():
        raise SystemExit(f"--run: no metrics.csv at {path}")
    with path.open() as f:
        return list(csv.DictReader(f))


def _num(v: str | None) -> float | None:
    try:
        x = float(v) if v not in (None, "") else None
    except ValueError:
        return None
    return x if x is not None and math.isfinite(x) else None


def train_series(rows: list[dict[str, str]], column: str, seed: str = "0"
                 ) -> tuple[list[int], list[float]]:
    """(updates, values) of ``column`` in the training rows of ``seed`` (rows without a
    finite value left out), in update order."""
    pts = sorted((int(float(r["updates"])), _num(r.get(column))) for r in rows
                 if r.get("kind") == "train" and r.get("seed") == seed and r.get("updates"))
    pts = [(u, v) for u, v in pts if v is not None]
    return [u for u, _ in pts], [v for _, v in pts]


def eval_series(rows: list[dict[str, str]], task: str
                ) -> tuple[list[int], list[float], list[float]]:
    """(updates, mean return over seeds, standard error) of ``task``'s evaluations; the
    standard error pools the seeds' episodes (each row: mean, std over ``episodes``)."""
    by: dict[int, list[tuple[float, float, int]]] = {}
    for r in rows:
        if r.get("kind") != "eval" or r.get("task") != task:
            continue
        ret, std, n = _num(r.get("return")), _num(r.get("return_std")), _num(r.get("episodes"))
        if ret is None:
            continue
        by.setdefault(int(float(r["updates"])), []).append((ret, std or 0.0, int(n or 1)))
    xs = sorted(by)
    means, ses = [], []
    for x in xs:
        rs = by[x]
        n = sum(k for _, _, k in rs)
        mean = sum(m * k for m, _, k in rs) / n
        var = sum(k * (s * s + (m - mean) ** 2) for m, s, k in rs) / n
        means.append(mean)
        ses.append(math.sqrt(var / n))
    return xs, means, ses


def plot(runs: list[tuple[str, list[dict[str, str]]]], task: str, path: Path) -> Path:
    """Draw `PANELS` for ``runs`` [(label, metrics rows)] into the PNG ``path``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(3.4 * len(PANELS), 3.0))
    for i, (title, column) in enumerate(PANELS):
        ax = fig.add_subplot(1, len(PANELS), i + 1)
        for label, rows in runs:
            if column is None:
                xs, ys, se = eval_series(rows, task)
                if xs:
                    ax.errorbar(xs, ys, yerr=se, fmt="o-", ms=3, capsize=2, label=label)
            else:
                xs, ys = train_series(rows, column)
                if xs:
                    ax.plot(xs, ys, label=label)
        if column == "dyn_loss":
            ax.axhline(1.0, ls=":", color="#7f7f7f", label="free bits")
        if column == "reward_loss":
            ax.set_yscale("log")          # the later, small differences are the telling ones
        ax.set_title(f"{task}: {title}" if column is None else title, fontsize=9)
        ax.set_xlabel("updates", fontsize=8)
        ax.tick_params(labelsize=7)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    fig.tight_layout()
    FigureCanvasAgg(fig)
    from wmx import temporaries
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / temporaries.owned_name(path.name)
    try:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", action="append", required=True, metavar="LABEL=PATH",
                   help="a run to draw: its label and its run directory or metrics.csv "
                        "(repeatable)")
    p.add_argument("--task", required=True, help="the task whose evaluations are drawn")
    p.add_argument("--out", required=True, help="the PNG to write")
    args = p.parse_args(argv)
    runs = []
    for spec in args.run:
        label, sep, path = spec.partition("=")
        if not sep or not label or not path:
            p.error(f"--run {spec}: give LABEL=PATH (e.g. 1m=H/runs/dv3-offline-check-...)")
        runs.append((label, read_metrics(Path(path).expanduser())))
    if not any(eval_series(rows, args.task)[0] for _, rows in runs):
        p.error(f"--task {args.task}: no run has evaluations of it")
    print(f"wrote {plot(runs, args.task, Path(args.out))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
