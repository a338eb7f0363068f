"""Offline check results side by side: arms of one check on the same dataset.

Reads the result JSONs that `dreamerv3_offline.py` / `tdmpc2_offline.py` wrote for runs
on one dataset (e.g. the faithful agent and an offline term, W-D10 / W-D11) and draws,
per task, each arm's evaluation curve (seed mean and seed range) with its final
evaluation (a star, ± its standard error), the source's final return and half of it.
Prints a markdown table: per arm and task the evaluations, the final return ± standard
error, the ratio to the source, the verdict, the run's wall time and its
``agent_overrides`` (docs/validation.md, DreamerV3 offline).

    python benchmarks/learning/offline_arms.py \\
        --result faithful=benchmarks/results/<faithful>.json \\
        --result ensemble=benchmarks/results/<ensemble>.json \\
        --out benchmarks/results/<name>.png
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from offline_check import RATIO


def split_spec(spec: str) -> tuple[str, str, str]:
    """A ``--result`` spec split into its label and path.

    Args:
        spec: ``LABEL=PATH``; a label may hold ``=`` (e.g. ``bc=0.3``), and so may a path.

    Returns:
        (label, "=", path), split at the first ``=`` whose right side is a file, else at
        the first ``=``; (spec, "", "") without one.
    """
    at = [i for i, c in enumerate(spec) if c == "="]
    i = next((i for i in at if i and Path(spec[i + 1:]).is_file()), at[0] if at else None)
    return (spec, "", "") if i is None else (spec[:i], "=", spec[i + 1:])


def load_arms(specs: list[str]) -> dict[str, dict]:
    """{label: result dict} of ``LABEL=PATH`` specs (`split_spec`), in the order given.

    Raises SystemExit (one line) on a spec without a label, a missing or unreadable
    file, a repeated label, or results on different datasets or task lists.
    """
    arms: dict[str, dict] = {}
    for spec in specs:
        label, sep, path = split_spec(spec)
        if not sep or not label or not path:
            raise SystemExit(f"--result {spec!r}: give LABEL=RESULT_JSON")
        if label in arms:
            raise SystemExit(f"--result {spec!r}: label {label!r} given twice")
        p = Path(path)
        try:
            res = json.loads(p.read_text())
        except (OSError, ValueError) as e:
            raise SystemExit(f"--result {spec!r}: cannot read a result JSON at {p} ({e})")
        if not isinstance(res, dict) or "tasks" not in res or "dataset" not in res:
            raise SystemExit(f"--result {spec!r}: {p} is not an offline check result "
                             "(no 'tasks' or 'dataset')")
        arms[label] = res
    first = next(iter(arms.values()))
    for label, res in arms.items():
        if res["dataset"] != first["dataset"] or list(res["tasks"]) != list(first["tasks"]):
            raise SystemExit(f"--result {label}: dataset {res['dataset']} tasks "
                             f"{list(res['tasks'])} differ from the first result's "
                             f"{first['dataset']} {list(first['tasks'])}: compare arms on "
                             "one dataset")
    return arms


def curve(task: dict) -> tuple[list[int], list[float], list[float], list[float]]:
    """(updates, seed mean, seed min, seed max) of a task's periodic evaluations."""
    per_seed = {int(u): v for u, v in task["offline_eval_return_per_seed"].items()}
    xs = sorted(per_seed)
    return (xs, [float(np.mean(per_seed[x])) for x in xs],
            [float(min(per_seed[x])) for x in xs], [float(max(per_seed[x])) for x in xs])


def number(x: float | None) -> str:
    """``x`` with one decimal, or "—" when it is not recorded (None)."""
    return "—" if x is None else f"{x:.1f}"


def table(arms: dict[str, dict]) -> str:
    """Markdown: one row per arm and task (evaluations, final ± s.e., ratio, verdict,
    run wall time in s, overrides; "—" for what the result does not record: a
    one-episode final evaluation's s.e., the final return of a run not yet evaluated)."""
    lines = ["| arm | task | evaluations (updates: seed mean) | final ± s.e. | ratio | "
             "verdict | run wall (s) | overrides |", "| --- " * 8 + "|"]
    for label, res in arms.items():
        for name, t in res["tasks"].items():
            xs, mean, _, _ = curve(t)
            evals = ", ".join(f"{x:,d}: {m:.1f}" for x, m in zip(xs, mean))
            fin = t.get("offline_final_evaluation")
            final = (f"{fin['return']:.1f} ± {number(fin.get('stderr'))}" if fin
                     else number(t.get("offline_final_return")))
            ratio = t.get("ratio")
            verdict = {True: "pass", False: "fail"}.get(t.get("pass"), "—")
            wall = res.get("run_wall_s")
            over = ", ".join(f"{k}={v}" for k, v in (res.get("agent_overrides") or {}).items())
            lines.append(f"| {label} | {name} | {evals} | {final} | "
                         f"{'—' if ratio is None else f'{ratio:.2f}'} | {verdict} | "
                         f"{'—' if wall is None else f'{wall:.0f}'} | {over or '—'} |")
    return "\n".join(lines)


def plot(arms: dict[str, dict], path: Path, title: str) -> None:
    """One panel per task, one colour per arm (see the module docstring); the y axis
    spans the finite values (a diverged arm's inf or NaN returns are left out of it)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tasks = list(next(iter(arms.values()))["tasks"])
    fig, axes = plt.subplots(1, len(tasks), figsize=(max(4.6 * len(tasks), 6.4), 3.8),
                             squeeze=False)
    for ax, name in zip(axes[0], tasks):
        top = [1.0]
        for i, (label, res) in enumerate(arms.items()):
            t, colour = res["tasks"][name], f"C{i}"
            xs, mean, lo, hi = curve(t)
            ax.plot(xs, mean, "o-", color=colour, label=label)
            ax.fill_between(xs, lo, hi, color=colour, alpha=0.15)
            top += hi
            fin = t.get("offline_final_evaluation")
            if fin:
                x = (res.get("updates_reached") or (xs[-1] if xs else 0))
                ax.errorbar([x], [fin["return"]], yerr=[fin["stderr"] or 0.0], fmt="*",
                            ms=11, capsize=3, color=colour)
                top.append(fin["return"] + (fin["stderr"] or 0.0))
        t0 = next(iter(arms.values()))["tasks"][name]
        src = t0["source_final_return"]
        ax.axhline(src, color="k", lw=1, label=f"source {src:.0f}")
        ax.axhline(RATIO * src, color="gray", ls="--", lw=1, label=f"{RATIO:g} x source")
        top.append(src)
        ax.set_title(f"{name} (stars: final evaluation ± s.e.)", fontsize=9)
        ax.set_xlabel("updates")
        ax.set_ylabel("eval return (seed mean, seed range)")
        ax.set_ylim(0, 1.35 * max(v for v in top if np.isfinite(v)))   # 1.0 at least
        ax.legend(fontsize=7, loc="upper left", ncol=2)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--result", action="append", required=True, metavar="LABEL=JSON",
                   help="an offline check's result JSON with its arm's label (repeat)")
    p.add_argument("--out", required=True, type=Path, help="the plot to write (.png)")
    p.add_argument("--title", default=None, help="figure title (default: the dataset)")
    args = p.parse_args(argv)
    if args.out.suffix.lower() != ".png":
        p.error(f"--out {args.out}: give a .png path")
    if not args.out.parent.is_dir():
        p.error(f"--out {args.out}: folder {args.out.parent} does not exist")
    arms = load_arms(args.result)
    title = args.title or f"offline arms on {next(iter(arms.values()))['dataset'][:40]}"
    plot(arms, args.out, title)
    print(table(arms))
    print(f"plot in {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
