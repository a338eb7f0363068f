"""The plot of `model_bias.py`: predicted and real H-step reward over the episode per run,
the decoded distance against the real one, and the reward head by action input.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

def plot(results: dict[str, dict], path: Path) -> None:
    """Predicted (dashed) and real (solid) H-step reward by episode step, one colour a run;
    when the runs' task has a finger-to-target distance, a second panel: the decoded
    distance against the real one (median per bin) on the policy's states (solid), the
    dataset's (dashed) and the scripted held-short episodes' (dotted), with the reward's
    radius as the rows show it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    curves = {label: (i, r) for i, (label, r) in enumerate(results.items())
              if "distance_curve" in r.get("decoder_on_policy", {})}    # colours as panel 1
    refilt = {label: (i, r["refiltered"]) for i, (label, r) in enumerate(results.items())
              if "refiltered" in r}
    n = 1 + bool(curves) + bool(refilt)
    fig, axes = plt.subplots(1, n, figsize=(7.5 + 5.5 * (n - 1), 4.0), squeeze=False)
    ax = axes[0, 0]
    if curves:
        _plot_distances(axes[0, 1], curves)
    if refilt:
        _plot_refiltered(axes[0, n - 1], refilt)
    for i, (label, r) in enumerate(results.items()):
        col = f"C{i}"
        ax.plot(r["per_step"]["real"], color=col, lw=1.5,
                label=f"{label}: real (return {r['episode_return_mean']:.0f})")
        ax.plot(r["per_step"]["pred"], color=col, lw=1.5, ls="--",
                label=f"{label}: model (bias {r['bias_mean']:+.2f})")
    ax.set_xlabel("agent step of the episode (start of the H-step window)")
    ax.set_ylabel(f"reward over the next {next(iter(results.values()))['horizon']} steps")
    ax.legend(fontsize=7)
    ax.set_title("DreamerV3: the model's H-step reward for its own policy vs the env's",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_distances(ax, curves: dict[str, tuple[int, dict]]) -> None:
    """The decoder's finger-to-target distance against the real one, per run (label ->
    (colour index, the run's entries))."""
    top = 0.0
    for label, (i, r) in curves.items():
        held = r.get("held_short", {}).get("all", {})
        for d, ls, who in ((r.get("decoder_on_policy", {}), "-", "policy's states"),
                           (r.get("reward_head_on_data", {}).get("decoder", {}), "--",
                            "dataset's states"),
                           (held.get("decoder", {}), ":", "scripted, held short")):
            c = d.get("distance_curve")
            if not c:
                continue
            e = np.asarray(c["edges"])
            mid = (e[:-1] + e[1:]) / 2
            keep = [j for j, (m, n) in enumerate(zip(c["decoded_median"], c["rows"]))
                    if m is not None and n >= 20]
            ax.plot(mid[keep], [c["decoded_median"][j] for j in keep], color=f"C{i}", ls=ls,
                    marker=".", label=f"{label}: {who}")
            top = max(top, float(e[-1]))
        rad = r["decoder_on_policy"].get("paid_distance_max")
        if rad:
            ax.axvline(rad, color="grey", lw=0.8, ls=":")
            ax.axhline(rad, color="grey", lw=0.8, ls=":")
    ax.plot([0, top], [0, top], color="black", lw=0.8, label="decoded = real")
    ax.set_xlabel("real finger-to-target distance (bin centre; dotted: the reward's radius)")
    ax.set_ylabel("decoded distance (median, bins of 20+ rows)")
    ax.set_title("where the latent state puts the finger", fontsize=9)
    ax.legend(fontsize=7)


def _plot_refiltered(ax, refilt: dict[str, tuple[int, dict]]) -> None:
    """Bars: the reward head where the env paid 0 on the policy's episodes filtered with
    each action input (`refiltered`), one colour a run."""
    names = ("policy_actions", "zero_actions", "scripted_actions")
    width = 0.8 / len(refilt)
    for k, (label, (i, r)) in enumerate(refilt.items()):
        vals = [r[nm]["pred_mean_where_env_paid_0"] or 0.0 for nm in names]
        ax.bar(np.arange(len(names)) + k * width, vals, width, color=f"C{i}", label=label)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2,
                  [nm.replace("_", " ") for nm in names])
    ax.set_ylabel("reward head where the env paid 0 (per step)")
    ax.set_title("the policy's episodes filtered again: which action input", fontsize=9)
    ax.legend(fontsize=7)


