"""Learning check: does DreamerV3 learn from a fixed dataset, beside TD-MPC2 on the same data?

Pools the full training histories (every exported episode set) of finished
single-task ``train_online`` runs (the TD-MPC2 offline check's sources, or
DreamerV3 online runs) into one dataset with the Beam build, exactly as
``tdmpc2_offline.py`` does (its source, pooling and build functions are
reused; the same sources give the same dataset hash), trains multi-task
DreamerV3 on it with ``train_offline``'s loop (deviations W-D5, W-D8),
evaluates every task on its real Playground env, and compares with each
source agent's final return. With ``--tdmpc2-run`` (the TD-MPC2 offline
check's run on the same dataset) its curves go beside DreamerV3's in the
JSON and the plot, and ``evaluate --runs`` writes the side-by-side report.
Writes ``benchmarks/results/dreamerv3_offline.json`` and ``.png``;
``docs/validation.md`` records the results.

Acceptance (issue 14): for every task whose source agent learned it (source
final return >= ``--learned-min``, default 100: a normalised score of 10), the
offline DreamerV3 model's final evaluation return reaches at least half of
the source's final return. A source agent's final return is the mean over
its seeds of the last eval row of each seed in its metrics.csv.

    python benchmarks/learning/dreamerv3_offline.py --home H \\
        --sources H/runs/<cartpole run> H/runs/<pendulum run> H/runs/<reacher run> \\
        --updates 20000 --preset cpu --eval-every 5000 --budget-min 60 \\
        --tdmpc2-run H/runs/offline-check-<time>
    python benchmarks/learning/dreamerv3_offline.py --resume H/runs/dv3-offline-check-<time>

Nothing here runs in the test suite (a check takes hours of CPU).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tdmpc2_offline import (RATIO, build_dataset, eval_curves, pooled_sources,  # noqa: E402
                            source_run)

REPO = Path(__file__).resolve().parents[2]
RESULT_NAME = "dreamerv3_offline"
LEARNED_MIN = 100.0
"""Source final return from which a task counts as learned (normalised score 10)."""


def new_offline_run(home: Path, ref: str, args, episode_length: int | None) -> Path:
    """Validate the dataset and write a DreamerV3 offline run directory's config.json (as
    train_offline does; batch: the preset's windows unless --batch-size) and return it."""
    from wmx.datasets.store import Store
    from wmx.runs.offline_config import OfflineRunConfig
    from wmx.train_offline.cli import resolve_and_validate
    from wmx.version import code_version
    ds = resolve_and_validate(ref, home)
    rc = OfflineRunConfig(
        dataset=f"{ds.name}@{ds.content_hash}", taskset=ds.taskset.to_dict(),
        agent="dreamerv3", seeds=tuple(args.seeds), updates=args.updates,
        batch_size=args.batch_size, preset=args.preset,
        log_every=math.gcd(args.eval_every, args.log_every), eval_every=args.eval_every,
        checkpoint_every=args.eval_every, eval_episodes=args.eval_episodes,
        episode_length=episode_length)
    run_dir = Store(home).ensure_layout().runs_dir / \
        f"dv3-offline-check-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True)
    meta = {**rc.to_json(), "code_version": code_version(), "dataset_path": str(ds.path),
            "training_hash": rc.training_hash(), "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (run_dir / "config.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return run_dir


def judge(tasks: dict[str, dict], curves: dict[str, dict[int, list[float]]],
          learned_min: float = LEARNED_MIN) -> dict:
    """Per task: source final return, whether the source learned it (>= learned_min),
    the offline eval curve (mean over seeds), final and best offline return, ratio final /
    source, pass (final >= RATIO x source; None, not counted, for a task the source did
    not learn). Overall pass: every learned task passes, and at least one was learned."""
    per = {}
    for name, t in tasks.items():
        curve = {u: float(np.mean(v)) for u, v in curves.get(name, {}).items()}
        final = curve[max(curve)] if curve else None
        src = t["final_return"]
        learned = src >= learned_min
        per[name] = {"source_runs": t["runs"], "source_final_return": src,
                     "source_final_return_per_seed": t["per_seed"], "source_learned": learned,
                     "offline_eval_return": {str(u): v for u, v in curve.items()},
                     "offline_eval_return_per_seed": {str(u): v for u, v in
                                                      curves.get(name, {}).items()},
                     "offline_final_return": final,
                     "offline_best_return": max(curve.values()) if curve else None,
                     "ratio": None if final is None or src <= 0 else final / src,
                     "pass": None if not learned else bool(final is not None
                                                           and final >= RATIO * src)}
    learned = [p for p in per.values() if p["source_learned"]]
    return {"tasks": per, "tasks_learned_by_source": len(learned),
            "tasks_passing": sum(p["pass"] is True for p in learned),
            "learned_min": learned_min,
            "passed": bool(learned) and all(p["pass"] for p in learned)}


def tdmpc2_beside(run_dir: Path | None, dataset: str) -> dict | None:
    """The TD-MPC2 offline run's per-task eval curves (mean over seeds) when it trained on
    ``dataset``; None without a run. Raises SystemExit when it trained on another dataset
    (the comparison needs identical data)."""
    if run_dir is None:
        return None
    cfg = json.loads((Path(run_dir) / "config.json").read_text())
    if cfg.get("dataset") != dataset or cfg.get("agent", "tdmpc2") != "tdmpc2":
        raise SystemExit(f"--tdmpc2-run {run_dir} is agent {cfg.get('agent')} on "
                         f"{cfg.get('dataset')}; the check needs TD-MPC2 on {dataset}")
    return {"run_dir": str(run_dir),
            "eval_return": {t: {str(u): float(np.mean(v)) for u, v in c.items()}
                            for t, c in eval_curves(Path(run_dir)).items()}}


def compare_report(home: Path, runs: list[str], out: Path, episodes: int) -> str | None:
    """``evaluate --runs TDMPC2_RUN DREAMERV3_RUN --out OUT`` (each run's report is written
    first when missing); returns the report path, or None when evaluate failed."""
    from wmx.evaluate import cli as evaluate_cli
    argv = ["--runs", *runs, "--episodes", str(episodes), "--out", str(out), "--home",
            str(home), "--force"]
    print("$ evaluate " + " ".join(argv))
    return str(out / "compare.md") if evaluate_cli.main(argv) == 0 else None


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tasks, beside = res["tasks"], (res.get("tdmpc2") or {}).get("eval_return", {})
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for ax, (name, t) in zip(axes[0], tasks.items()):
        per_seed = {int(u): v for u, v in t["offline_eval_return_per_seed"].items()}
        top = [t["source_final_return"], 1.0]
        if per_seed:
            xs = np.array(sorted(per_seed))
            ax.plot(xs, [np.mean(per_seed[x]) for x in xs], "o-", label="offline DreamerV3")
            if any(len(v) > 1 for v in per_seed.values()):
                ax.fill_between(xs, [min(per_seed[x]) for x in xs],
                                [max(per_seed[x]) for x in xs], alpha=0.2, label="seed range")
            top += [max(v) for v in per_seed.values()]
        if beside.get(name):
            c = {int(u): v for u, v in beside[name].items()}
            ax.plot(sorted(c), [c[u] for u in sorted(c)], "s--", label="offline TD-MPC2")
            top += list(c.values())
        src = t["source_final_return"]
        ax.axhline(src, color="k", lw=1, label=f"source agent {src:.0f}")
        ax.axhline(RATIO * src, color="gray", ls="--", lw=1,
                   label=f"{RATIO:g} x source {RATIO * src:.0f}")
        verdict = {True: "pass", False: "fail", None: "not learned by the source"}[t["pass"]]
        ax.set_title(f"{name}: {verdict}", fontsize=10)
        ax.set_xlabel("updates")
        ax.set_ylabel("eval return")
        ax.set_ylim(0, 1.1 * max(top))
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"offline DreamerV3 vs source agents: {res['tasks_passing']}/"
                 f"{res['tasks_learned_by_source']} learned tasks at >= {RATIO:g}x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--home", default=None, help="data root holding the source runs' episode sets")
    p.add_argument("--sources", nargs="+", metavar="RUN_DIR", default=None,
                   help="finished train_online runs (their episode sets are in the store)")
    p.add_argument("--tdmpc2-run", default=None, metavar="RUN_DIR",
                   help="the TD-MPC2 offline run on the same dataset, shown beside")
    p.add_argument("--updates", type=int, default=20_000)
    p.add_argument("--batch-size", type=int, default=None,
                   help="windows per update (default: the preset's, 16 x 65 rows)")
    p.add_argument("--preset", default="cpu")
    p.add_argument("--eval-every", type=int, default=5_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--log-every", type=int, default=500,
                   help="updates per chunk (reduced to divide --eval-every)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--learned-min", type=float, default=LEARNED_MIN,
                   help="source final return from which a task counts as learned")
    p.add_argument("--budget-min", type=float, default=None,
                   help="stop after this many minutes (whole chunks); record as far as reached")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue an earlier (budget-stopped) check run")
    p.add_argument("--out", default=str(REPO / "benchmarks/results"))
    args = p.parse_args(argv)

    from wmx.paths import wmx_home
    from wmx.runs.offline_config import OfflineRunConfig
    from wmx.train_offline.loop import run
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.resume:
        run_dir = Path(args.resume).expanduser().resolve()
        home = run_dir.parent.parent
        bench = json.loads((run_dir / "benchmark.json").read_text())
    else:
        if not args.sources:
            p.error("--sources RUN_DIR ... is required (or --resume RUN_DIR)")
        home = wmx_home(args.home)
        bench = {"sources": [str(Path(s).expanduser().resolve()) for s in args.sources],
                 "tdmpc2_run": args.tdmpc2_run and str(Path(args.tdmpc2_run).resolve()),
                 "learned_min": args.learned_min}
    runs = [source_run(Path(s)) for s in bench["sources"]]
    tasks = pooled_sources(runs)
    if not args.resume:
        Ts = {r["episode_length"] for r in runs}
        if len(Ts) > 1:
            raise SystemExit(f"the source runs use different --episode-length overrides {Ts}; "
                             "give runs with one T")
        ref = build_dataset(home, tasks, out)
        run_dir = new_offline_run(home, ref, args, Ts.pop())
        (run_dir / "benchmark.json").write_text(json.dumps({**bench, "dataset": ref},
                                                           indent=1))
    rc = OfflineRunConfig.from_json(json.loads((run_dir / "config.json").read_text()))
    beside = tdmpc2_beside(bench.get("tdmpc2_run") and Path(bench["tdmpc2_run"]), rc.dataset)
    print(f"offline run {run_dir}: {rc.updates:,d} updates x batch {rc.batch} windows, preset "
          f"{rc.preset}, tasks {list(rc.task_set.names)}, seeds {list(rc.seeds)}")
    t0 = time.perf_counter()
    deadline = None if args.budget_min is None else time.monotonic() + 60 * args.budget_min
    summary = run(rc, run_dir, home=home, progress=True, deadline=deadline)
    wall = time.perf_counter() - t0
    res = judge(tasks, eval_curves(run_dir), bench.get("learned_min", LEARNED_MIN))
    report = None
    if beside is not None and summary["finished"]:
        report = compare_report(home, [beside["run_dir"], str(run_dir)],
                                out / f"{RESULT_NAME}_report", rc.eval_episodes)
    res.update({"dataset": rc.dataset, "run_dir": str(run_dir), "preset": rc.preset,
                "seeds": list(rc.seeds), "batch_size": rc.batch,
                "updates_planned": rc.updates, "updates_reached": summary["updates"],
                "finished": summary["finished"], "eval_every": rc.eval_every,
                "eval_episodes": rc.eval_episodes, "wall_s_this_call": round(wall, 1),
                "run_wall_s": summary.get("wall_s"), "tdmpc2": beside,
                "comparison_report": report,
                "criterion": f"on every task the source learned (final return >= "
                             f"{res['learned_min']:g}), offline final eval return >= {RATIO:g}"
                             " x source final return",
                "date": time.strftime("%Y-%m-%dT%H:%M:%S")})
    (out / f"{RESULT_NAME}.json").write_text(json.dumps(res, indent=1))
    plot(res, out / f"{RESULT_NAME}.png")
    print(json.dumps({k: {"source": v["source_final_return"], "learned": v["source_learned"],
                          "offline": v["offline_final_return"], "ratio": v["ratio"],
                          "pass": v["pass"]} for k, v in res["tasks"].items()}, indent=1))
    print(f"passed: {res['passed']} ({res['tasks_passing']}/{res['tasks_learned_by_source']} "
          f"learned tasks); updates {summary['updates']:,d}/{rc.updates:,d}; results in "
          f"{out / (RESULT_NAME + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
