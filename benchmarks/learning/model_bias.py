"""Does a DreamerV3 world model over-predict what its own policy earns? Measured on the real env.

For a single-task DreamerV3 run (online, or offline on a one-task dataset) at its newest
checkpoint: the policy plays ``--episodes`` real episodes (sampled actions, fresh resets,
as ``evaluate`` does; seed ``--seed-index`` of the run). At every agent step t the
policy's posterior state s_t (after observing obs_t) is the start of one imagined
rollout of ``--horizon`` H steps with the same policy (the actor-critic's imagination,
dreamerv3_spec 3.1-3.3, one draw of its noise), and the model's predicted rewards
r̂_1..r̂_H (the reward head's two-hot mean at each imagined state, 3.5) are set beside
the rewards the env paid over the next H steps of the real episode, r_{t+1}..r_{t+H}
(steps past the episode's end are left out of both). Both follow the same policy, so
over many starts the mean of (Σ r̂ − Σ r) is the model's bias about its policy's
H-step reward: positive when it is optimistic. The reward head on the real posterior
states (r̂(s_t) against r_t) separates the reward head's error on-policy from the
dynamics' (open-loop imagination) error. The decoder on the same posteriors (its
symexp'd reconstruction against the obs seen) says whether the latent state still knows
where the system is on the rows where the reward head is wrong ("false successes": the
env paid 0, the head predicted at least half the largest per-step reward paid); on the
reacher tasks also as the finger-to-target distance, real and decoded. A run trained with
a reward ensemble (``offline_ensemble``, deviation W-D11) also gets the heads' disagreement
on the policy's and the imagined states and the bias of the penalised reward
(``ensemble``); every run records its offline terms (``offline_terms``).

    python benchmarks/learning/model_bias.py --run H/runs/<run> [--run H/runs/<run2>] \\
        --episodes 16 --horizon 15 --out benchmarks/results/dreamerv3_model_bias.json

With ``--held-short M,...`` (reacher tasks) two controlled readings are added: scripted
episodes aimed M short of the target read by the same model (does an arm held off the
target fool it?), and the policy's own episodes filtered again with its actions, zero
actions and the scripted controller's actions as the RSSM's action input (do the
observations or the actions mislead it?).

Writes the JSON and a plot beside it (``.png``: predicted and real H-step reward over
the episode per run; with a distance, the decoded distance against the real one; with
``--held-short``, the reward head by action input). Refuses a multi-task run (its task
inputs are not wired here) and a TD-MPC2 run. The test suite runs the arithmetic, the
controller and the plot, not the rollouts (they need a trained run).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))      # scripted_reacher beside
# the parts live in their own modules beside; tests/benchmarks/test_model_bias.py reads them here
from model_bias_fields import (DISTANCE_DIMS, aligned, bias_summary,  # noqa: E402,F401
                               binned_medians, decoder_fields, ensemble_fields,
                               false_successes, real_future)
from model_bias_measure import measure  # noqa: E402
from model_bias_plot import plot  # noqa: E402
from model_bias_readings import held_short_action, obs_aligned_reward  # noqa: E402,F401


def _offsets(text: str) -> list[float]:
    """``0,0.04,0.08`` -> [0.0, 0.04, 0.08] (argparse type: metres, each >= 0)."""
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give distances in metres, e.g. "
                                         "0,0.04,0.08") from None
    if not vals or not all(np.isfinite(v) and v >= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: give distances >= 0 m, e.g. 0,0.04,0.08")
    return vals


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv=None) -> int:
    from wmx.runs.cli_common import HelpFormatter
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--run", action="append", required=True, metavar="[LABEL=]RUN_DIR",
                   help="a single-task DreamerV3 run (repeatable; LABEL names it in the "
                        "JSON and plot, default the run's name)")
    p.add_argument("--episodes", type=int, default=16, help="real episodes per run")
    p.add_argument("--horizon", type=int, default=15,
                   help="imagined steps per start (the agent's imag_horizon is 15)")
    p.add_argument("--seed-index", type=int, default=0, help="which of the run's seeds")
    p.add_argument("--data-episodes", type=int, default=64,
                   help="offline runs: the reward head and the decoder on this many of the "
                        "dataset's episodes too (0: not)")
    p.add_argument("--held-short", type=_offsets, default=None, metavar="M[,M...]",
                   help="reacher tasks: also read the model on scripted episodes aimed these "
                        "distances (m) short of the target, e.g. 0,0.04,0.08,0.12,0.16 (the "
                        "reward's radius is about 0.06)")
    p.add_argument("--held-short-episodes", type=int, default=8,
                   help="scripted episodes per --held-short distance")
    p.add_argument("--dump", action="store_true",
                   help="also save each run's arrays as <out stem>_<label>.npz")
    p.add_argument("--out", default=str(REPO / "benchmarks/results/dreamerv3_model_bias.json"),
                   help="result JSON (the plot is written beside it, .png)")
    args = p.parse_args(argv)
    if args.episodes < 2 or args.horizon < 1:
        p.error("--episodes must be >= 2 and --horizon >= 1")
    if args.held_short_episodes < 1:
        p.error(f"--held-short-episodes must be >= 1, got {args.held_short_episodes}")
    runs = {}
    for item in args.run:
        label, sep, path = item.partition("=")
        path = path if sep else label
        label = label if sep else Path(path).name
        if label in runs:
            p.error(f"two runs labelled {label!r}: name them, --run LABEL=RUN_DIR")
        runs[label] = Path(path).expanduser().resolve()
    if args.held_short:                                   # before any run is measured
        from wmx.evaluate.runs import open_run
        for label, run_dir in runs.items():
            task = open_run(run_dir).tasks[0]
            if task not in DISTANCE_DIMS:
                p.error(f"--held-short: run {label}'s task {task} has no finger-to-target "
                        "distance (the reacher tasks have); drop the flag or that run")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = {}
    for label, run_dir in runs.items():
        print(f"{label}: {run_dir} ...", flush=True)
        dump = (Path(args.out).with_name(f"{Path(args.out).stem}_{label.replace(' ', '_')}.npz")
                if args.dump else None)
        results[label] = measure(run_dir, args.episodes, args.horizon, args.seed_index, dump,
                                 args.data_episodes, args.held_short, args.held_short_episodes)
        r = results[label]
        rh = r["reward_head_on_policy"]
        print(f"{label}: return {r['episode_return_mean']:.1f}; next {args.horizon} steps: "
              f"model {r['pred_h_sum_mean']:.2f}, env {r['real_h_sum_mean']:.2f}, bias "
              f"{r['bias_mean']:+.2f} ± {r['bias_stderr'] or 0:.2f}; reward head on the policy's "
              f"states: {rh['pred_mean']:.3f} for the env's {rh['real_mean']:.3f} per step, "
              f"{_fmt(rh['pred_mean_where_env_paid_0'])} where it paid 0 "
              f"({rh['rows_env_paid_0']}/{rh['rows']} rows)", flush=True)
        if "ensemble" in r:
            en = r["ensemble"]
            print(f"{label}: reward ensemble of {en['heads']} (λ {en['penalty_weight']:g}): "
                  f"std {en['std_on_policy_mean']:.3f} on the policy's states, "
                  f"{_fmt(en['std_on_policy_where_false_success'])} at false successes, "
                  f"{en['std_imagined_mean']:.3f} imagined; penalised {args.horizon}-step "
                  f"bias {en['penalised_bias_mean']:+.2f}", flush=True)
        dec = r["decoder_on_policy"]
        td = dec.get("target_distance", {}).get("false_successes")
        if td and td["real"]:
            print(f"{label}: {dec['false_success_rows']} false successes (env paid 0, head "
                  f"said >= half the top reward): finger-to-target distance real "
                  f"{td['real']['median']:.3f}, decoded {td['decoded']['median']:.3f} "
                  "(medians)", flush=True)
        if "reward_head_on_data" in r:
            rd = r["reward_head_on_data"]
            print(f"{label}: reward head on {rd['episodes']} dataset episodes: "
                  f"{rd['pred_mean']:.3f} for the data's {rd['real_mean']:.3f} per step, "
                  f"{_fmt(rd['pred_mean_where_env_paid_0'])} where it paid 0 "
                  f"({rd['rows_env_paid_0']}/{rd['rows']} rows)", flush=True)
            tu = rd["decoder"].get("target_distance", {}).get("other_unpaid")
            if tu and tu["real"]:
                print(f"{label}: on the dataset's other unpaid rows the finger-to-target "
                      f"distance is {tu['real']['median']:.3f}, decoded "
                      f"{tu['decoded']['median']:.3f} (medians)", flush=True)
        for name, h in r.get("refiltered", {}).items():
            fs = h["decoder"]["target_distance"]["false_successes"]
            print(f"{label}: the policy's episodes filtered again with {name.replace('_', ' ')}: "
                  f"reward head {_fmt(h['pred_mean_where_env_paid_0'])} where the env paid 0; "
                  f"{h['decoder']['false_success_rows']} false successes"
                  + (f", distance real {fs['real']['median']:.3f}, decoded "
                     f"{fs['decoded']['median']:.3f}" if fs["real"] else ""), flush=True)
        for off, h in r.get("held_short", {}).items():
            if off == "all":
                continue
            a = h["decoder"]["target_distance"]["all"]
            print(f"{label}: aimed {off} short of the target (scripted, {h['episodes']} "
                  f"episodes): distance real {a['real']['median']:.3f}, decoded "
                  f"{a['decoded']['median']:.3f} (medians); reward head {h['pred_mean']:.3f} "
                  f"for the env's {h['real_mean']:.3f} per step, "
                  f"{_fmt(h['pred_mean_where_env_paid_0'])} where it paid 0", flush=True)
    from check_run import portable
    doc = {"runs": results, "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "command": " ".join(sys.argv)}
    for run_dir in runs.values():                 # paths relative to each run's data root
        doc = portable(doc, run_dir)
    out.write_text(json.dumps(doc, indent=1))
    plot(results, out.with_suffix(".png"))
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
