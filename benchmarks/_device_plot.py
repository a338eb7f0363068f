"""device_check's plot: each stage's wall time and status, the speed stages' ms per seed
against the seeds vmapped, and the learning stages' return against env steps.
"""
from __future__ import annotations

import os
from pathlib import Path

STATUS_COLORS = {"ok": "tab:green", "failed": "tab:red", "timeout": "tab:orange",
                 "error": "tab:red", "interrupted": "tab:gray", "skipped": "lightgray"}
"""Bar colour of a stage's status in the plot."""


def speed_series(record: dict) -> dict[str, dict[int, float]]:
    """Per program of the speed stages, ms per seed by seeds vmapped: ``{"DreamerV3
    train step (float32)": {1: 15.6, 2: 12.2, 5: 13.9}, ...}``; programs with one
    measurement appear with one point. Empty without a speed stage's results."""
    names = {"train_12m": "DreamerV3 12m training step", "policy_12m": "DreamerV3 12m policy step",
             "update_size5": "TD-MPC2 size-5 update", "plan_size5": "TD-MPC2 size-5 decision"}
    out: dict[str, dict[int, float]] = {}
    for st in record.get("stages", []):
        res = st.get("results")
        if st.get("status") != "ok" or not isinstance(res, dict):
            continue
        dtype = f" ({res['compute_dtype']})" if res.get("compute_dtype") else ""
        for key, v in res.items():
            if not isinstance(v, dict) or "per_seed_ms" not in v:
                continue
            base = key.split("_seeds")[0]
            label = names.get(base, base) + dtype
            out.setdefault(label, {})[int(v.get("seeds", 1))] = float(v["per_seed_ms"])
    return out


def learning_of(record: dict) -> dict[str, dict]:
    """{agent: results} of the record's learning stages that have results (``tdmpc2``,
    ``dreamerv3`` from ``tdmpc2_learning``, ``dreamerv3_learning``)."""
    return {st["name"].removesuffix("_learning"): st["results"]
            for st in record.get("stages", [])
            if st["name"].endswith("_learning") and isinstance(st.get("results"), dict)}


def plot(record: dict, path: Path, title: str = "device_check") -> bool:
    """The check at a glance: every stage's wall time coloured by its status; the speed
    stages' ms per seed against the seeds vmapped (flat: seeds come free; rising: the
    program is bound by its arithmetic); and, when a learning stage ran, return against
    env steps (seed means; eval solid, training episodes dashed). Written atomically.
    False (nothing written) when no stage has a status."""
    stages = [st for st in record.get("stages", []) if st.get("status")]
    if not stages:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    speed = speed_series(record)
    learning = learning_of(record)
    series = [(agent, kind, r[f"{kind}_curve"]) for agent, r in learning.items() if r
              for kind in ("eval", "train") if r.get(f"{kind}_curve")]
    panels = 1 + bool(speed) + bool(series)
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.2), squeeze=False)
    axes = list(axes[0])
    ax = axes.pop(0)
    ys = list(range(len(stages)))[::-1]
    ax.barh(ys, [float(st.get("wall_s") or 0) for st in stages],
            color=[STATUS_COLORS.get(st["status"], "tab:gray") for st in stages])
    ax.set_yticks(ys, [f"{st['name']}: {st['status']}" for st in stages], fontsize=8)
    ax.set_xlabel("stage wall time, s")
    ax.set_title("stages", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    if speed:
        ax = axes.pop(0)
        for label, pts in sorted(speed.items()):
            xs = sorted(pts)
            ax.plot(xs, [pts[x] for x in xs], marker="o", ms=4, label=label,
                    ls="--" if "bfloat16" in label else "-")
        ax.set_xlabel("seeds vmapped")
        ax.set_ylabel("ms per seed (median)")
        ax.set_yscale("log")
        ax.set_xticks(sorted({x for pts in speed.values() for x in pts}))
        ax.set_title("speed stages", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    if series:
        ax = axes.pop(0)
        colors = {"tdmpc2": "tab:blue", "dreamerv3": "tab:orange"}
        labels = {"tdmpc2": "TD-MPC2", "dreamerv3": "DreamerV3"}
        for agent, kind, curve in series:
            xs = sorted(curve, key=int)
            ax.plot([int(x) for x in xs], [sum(curve[x]) / len(curve[x]) for x in xs],
                    marker="o", ms=3, ls="-" if kind == "eval" else "--",
                    color=colors.get(agent),
                    label=f"{labels.get(agent, agent)} {learning[agent].get('task', '')} "
                          f"{'eval' if kind == 'eval' else 'training episodes'}")
        ax.set_xlabel("env steps")
        ax.set_ylabel("return (mean over seeds)")
        ax.set_title("learning stages", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return True


def plot_title(record: dict) -> str:
    """The plot's title: the device, the jax version and the calls that made the record."""
    calls = record.get("calls") or []
    when = f", {len(calls)} calls" if len(calls) > 1 else ""
    return (f"device_check on {record.get('device_kind', '?')} ({record.get('platform', '?')}, "
            f"jax {record.get('jax', '?')}{when})")
