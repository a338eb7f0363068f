"""The offline check's results: each task's entries (`task_result`), the verdict's ratio
(`reaches_ratio`, at least `RATIO` x the source's final return), the per-task plot and the
writing and printing of the results (`write_results`).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from check_run import portable

from wmx.evaluate.report import source_ratio

RATIO = 0.5
"""Offline final return / source final return needed for a task to pass."""
def task_result(t: dict, per_seed: dict[int, list[float]], final: dict | None = None) -> dict:
    """One task's entries: the source runs and final return (``t``, a `pooled_sources`
    value), the offline eval curve (mean over seeds; ``per_seed``: {updates: returns}),
    the last periodic and the best offline return, the final offline return (the task's
    `final_evaluation` entry ``final`` when given, else the last periodic evaluation) and
    the ratio final / source (None when either is missing or the source return is <= 0),
    and the uniform-random policy's mean return (``t["random"]``, None when not
    measured). The check adds its verdict ("pass")."""
    curve = {u: float(np.mean(v)) for u, v in per_seed.items()}
    last = curve[max(curve)] if curve else None
    ret = last if final is None else final["return"]
    src = t["final_return"]
    rnd = t.get("random")
    return {"source_runs": t["runs"], "source_env_steps": t.get("env_steps"),
            "source_final_return": src,
            "random_policy_return": None if rnd is None else rnd["mean"],
            "source_final_return_per_seed": t["per_seed"],
            "offline_eval_return": {str(u): v for u, v in curve.items()},
            "offline_eval_return_per_seed": {str(u): v for u, v in per_seed.items()},
            "offline_last_eval_return": last,
            "offline_final_evaluation": final,
            "offline_final_return": ret,
            "offline_best_return": max(curve.values()) if curve else None,
            "ratio": source_ratio(ret, src)}


def reaches_ratio(task: dict) -> bool:
    """Whether a `task_result`'s final offline return is at least RATIO x the source's."""
    final = task["offline_final_return"]
    return bool(final is not None and final >= RATIO * task["source_final_return"])


def plot(res: dict, path: Path, label: str, no_verdict: str, title: str) -> None:
    """One panel per task: the offline eval curve (``label``; seed mean with its standard
    error where ``offline_eval_stderr`` holds it, and the seed range), the final
    evaluation (a star with its standard error) when there is one, the
    source's final return and RATIO x it, TD-MPC2's curve when ``res["tdmpc2"]`` holds
    one, the task's verdict (``no_verdict`` for a pass of None) as its title."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tasks, beside = res["tasks"], (res.get("tdmpc2") or {}).get("eval_return", {})
    fig, axes = plt.subplots(1, len(tasks), figsize=(max(4.2 * len(tasks), 6.4), 3.6),
                             squeeze=False)      # one task: wide enough for the title
    for ax, (name, t) in zip(axes[0], tasks.items()):
        per_seed = {int(u): v for u, v in t["offline_eval_return_per_seed"].items()}
        top = [t["source_final_return"], 1.0]
        if per_seed:
            xs = np.array(sorted(per_seed))
            se = {int(u): v for u, v in (t.get("offline_eval_stderr") or {}).items()}
            ax.errorbar(xs, [np.mean(per_seed[x]) for x in xs],
                        yerr=[se.get(int(x), 0.0) for x in xs], fmt="o-", capsize=2,
                        label=label + (" (± s.e.)" if se else ""))
            if any(len(v) > 1 for v in per_seed.values()):
                ax.fill_between(xs, [min(per_seed[x]) for x in xs],
                                [max(per_seed[x]) for x in xs], alpha=0.2, label="seed range")
            top += [max(v) for v in per_seed.values()]
        final = t.get("offline_final_evaluation")
        if final:
            x = res.get("updates_reached") or (max(per_seed) if per_seed else 0)
            ax.errorbar([x], [final["return"]], yerr=[final["stderr"] or 0.0], fmt="*", ms=11,
                        capsize=3, color="tab:green",
                        label=f"final evaluation ({final['episodes']} ep. x "
                              f"{final['seeds']} seed{'s' if final['seeds'] > 1 else ''})")
            top.append(final["return"] + (final["stderr"] or 0.0))
        if beside.get(name):
            c = {int(u): v for u, v in beside[name].items()}
            ax.plot(sorted(c), [c[u] for u in sorted(c)], "s--", label="offline TD-MPC2")
            top += list(c.values())
        src = t["source_final_return"]
        ax.axhline(src, color="k", lw=1, label=f"source agent {src:.0f}")
        ax.axhline(RATIO * src, color="gray", ls="--", lw=1,
                   label=f"{RATIO:g} x source {RATIO * src:.0f}")
        if t.get("random_policy_return") is not None:
            rnd = t["random_policy_return"]
            ax.axhline(rnd, color="tab:red", ls=":", lw=1, label=f"random policy {rnd:.0f}")
            top.append(rnd)
        verdict = {True: "pass", False: "fail", None: no_verdict}[t["pass"]]
        ax.set_title(f"{name}: {verdict}", fontsize=10)
        ax.set_xlabel("updates")
        ax.set_ylabel("eval return")
        ax.set_ylim(0, 1.45 * max(top))       # room for the legend above the curves
        ax.legend(fontsize=7, loc="upper center", ncol=2)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_results(res: dict, out: Path, name: str, *, label: str, no_verdict: str, title: str,
                  columns: dict[str, str], tally: str) -> Path:
    """Write a check's results and print its verdict.

    Args:
        res: the entry point's ``judge`` result updated with `run_fields` (its
            ``"passed"``, ``"updates_reached"``, ``"updates_planned"`` and per-task
            entries under ``"tasks"`` are read).
        out: the results folder (exists). Paths in the file are relative to the run's
            data root or the working directory (`check_run.portable`).
        name: the result file stem.
        label, no_verdict, title: `plot`'s curve label, verdict text for a pass of None,
            and figure title.
        columns: the per-task entries printed, {printed key: key in the task's entry}.
        tally: the count shown beside the overall verdict (e.g. "2/3 tasks").

    Returns:
        ``out/<name>.json``; ``out/<name>.png`` is written beside it.
    """
    path = out / f"{name}.json"
    path.write_text(json.dumps(portable(res, res["run_dir"]) if "run_dir" in res else res,
                               indent=1))
    plot(res, out / f"{name}.png", label, no_verdict, title)
    print(json.dumps({k: {c: v[f] for c, f in columns.items()}
                      for k, v in res["tasks"].items()}, indent=1))
    print(f"passed: {res['passed']} ({tally}); updates {res['updates_reached']:,d}/"
          f"{res['updates_planned']:,d}; results in {path}")
    return path
