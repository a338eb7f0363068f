"""Learning check: does offline multi-task TD-MPC2 learn from the online agents' data?

Pools the full training histories (every exported episode set) of finished
single-task ``train_online`` runs into one dataset (the Beam build,
``pipelines/build_mt19.py --tasks ... --sources ...``), trains multi-task
TD-MPC2 on it with ``train_offline``'s loop, evaluates every task on its
real Playground env, and compares with each source agent's final return.
Writes ``benchmarks/results/tdmpc2_offline.json`` and ``.png``;
``docs/validation.md`` records the results.

Acceptance (multi-task issue): on a dataset pooled from the full training
histories of single-task runs on at least 3 tasks, the offline model's
final evaluation return reaches at least half of the source agent's final
return on at least 2 of 3 tasks. A source agent's final return is the mean
over its seeds of the last eval row of each seed in its metrics.csv.

    python benchmarks/learning/tdmpc2_offline.py --home H \\
        --sources H/runs/<cartpole run> H/runs/<pendulum run> H/runs/<reacher run> \\
        --updates 20000 --batch-size 256 --preset cpu --eval-every 5000 --budget-min 60
    python benchmarks/learning/tdmpc2_offline.py --resume H/runs/offline-check-<time>
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
RESULT_NAME = "tdmpc2_offline"
RATIO = 0.5
"""Offline final return / source final return needed for a task to pass."""


# ---- source runs --------------------------------------------------------------------------
def source_run(run_dir: Path) -> dict:
    """Task, episode sets and final return of one finished train_online run.

    Raises ValueError when the run is unfinished, exported nothing or has no eval row.
    """
    run_dir = Path(run_dir).expanduser().resolve()
    cfg = json.loads((run_dir / "config.json").read_text())
    summary_path = run_dir / "summary.json"
    if not summary_path.is_file():
        raise ValueError(f"source run {run_dir} is not finished (no summary.json); finish it "
                         "with train_online --resume first")
    sets = json.loads(summary_path.read_text()).get("episode_sets") or {}
    if not sets:
        raise ValueError(f"source run {run_dir} exported no episode sets")
    last: dict[str, float] = {}
    with (run_dir / "metrics.csv").open() as f:
        for r in csv.DictReader(f):
            if r["kind"] == "eval":
                last[r["seed"]] = float(r["return"])       # rows are in env-step order
    if not last:
        raise ValueError(f"source run {run_dir} has no eval row in metrics.csv")
    return {"run_dir": str(run_dir), "task": cfg["task"],
            "episode_length": cfg.get("episode_length"),
            "final_return_per_seed": last,
            "final_return": float(np.mean(list(last.values()))),
            "episode_sets": [sets[k] for k in sorted(sets, key=int)]}


def pooled_sources(runs: list[dict]) -> dict[str, dict]:
    """Per task (mt30 order): the runs, their episode sets and the source final return
    (mean over every seed of the task's runs)."""
    from wmx.envs.registry import task_names
    out: dict[str, dict] = {}
    for r in runs:
        t = out.setdefault(r["task"], {"runs": [], "episode_sets": [], "per_seed": []})
        t["runs"].append(r["run_dir"])
        t["episode_sets"] += r["episode_sets"]
        t["per_seed"] += list(r["final_return_per_seed"].values())
    order = task_names()
    return {k: {**v, "final_return": float(np.mean(v["per_seed"]))}
            for k, v in sorted(out.items(), key=lambda kv: order.index(kv[0]))}


# ---- dataset ------------------------------------------------------------------------------
def taskset_for(tasks: dict[str, dict]):
    """The TaskSet to build: the mt19 subset of the tasks, with each task's T, action
    repeat and discount taken from its episode sets when a source run overrode T."""
    from wmx.schemas.manifest import EpisodeSetManifest
    from wmx.schemas.taskset import TaskSet, mt19
    sub = mt19().subset(list(tasks))
    infos = []
    for t in sub.tasks:
        found = {EpisodeSetManifest.load(Path(d)).task for d in tasks[t.name]["episode_sets"]}
        if len(found) != 1:
            raise ValueError(f"task {t.name}: the source episode sets disagree on the task "
                             f"description {sorted(map(str, found))}")
        infos.append(found.pop())
    if tuple(infos) == sub.tasks:
        return sub, False
    Ts = "-".join(str(i.episode_length) for i in infos)
    return TaskSet(name=f"{sub.name}-T{Ts}", tasks=tuple(infos),
                   reference_scores=sub.reference_scores,
                   reference_source=sub.reference_source), True


def build_dataset(home: Path, tasks: dict[str, dict], out_dir: Path) -> str:
    """``name@<hash>`` of the dataset pooling exactly the sources' episode sets; built
    with the Beam job (build_mt19.py --tasks --sources, or build_taskset.py for runs
    with a T override) unless it is in the store already."""
    from wmx.cli import beam
    from wmx.cli.demo import find_dataset
    ts, custom = taskset_for(tasks)
    set_dirs = [Path(d) for t in tasks.values() for d in t["episode_sets"]]
    ref = find_dataset(home, ts.name, set_dirs)
    if ref is not None:
        print(f"dataset {ref} pools these episode sets already; not rebuilt")
        return ref
    sources = [f"{d.parent.name}/{d.name}" for d in set_dirs]
    if custom:
        spec = out_dir / f"{ts.name}.taskset.json"
        spec.write_text(ts.to_json())
        argv = ["run", str(REPO / "pipelines/build_taskset.py"), "--taskset", str(spec)]
    else:
        argv = ["run", str(REPO / "pipelines/build_mt19.py"), "--tasks", ",".join(ts.names)]
    argv += ["--home", str(home), "--sources", *sources]
    print("$ beam " + " ".join(argv))
    if beam.main(argv) != 0:
        raise SystemExit("the dataset build failed")
    ref = find_dataset(home, ts.name, set_dirs)
    if ref is None:
        raise SystemExit(f"the build finished but no dataset {ts.name} is in {home}")
    return ref


# ---- offline run --------------------------------------------------------------------------
def new_offline_run(home: Path, ref: str, args, episode_length: int | None) -> Path:
    """Validate the dataset, write the run directory's config.json (as train_offline
    does) and the benchmark's bookkeeping; returns the run directory."""
    from wmx.version import code_version
    from wmx.datasets.store import Store
    from wmx.train_offline.cli import resolve_and_validate
    from wmx.runs.offline_config import OfflineRunConfig
    ds = resolve_and_validate(ref, home)
    log_every = math.gcd(args.eval_every, args.log_every)
    rc = OfflineRunConfig(
        dataset=f"{ds.name}@{ds.content_hash}", taskset=ds.taskset.to_dict(),
        seeds=tuple(args.seeds), updates=args.updates, batch_size=args.batch_size,
        preset=args.preset, log_every=log_every, eval_every=args.eval_every,
        checkpoint_every=args.eval_every, eval_episodes=args.eval_episodes,
        episode_length=episode_length)
    store = Store(home).ensure_layout()
    run_dir = store.runs_dir / f"offline-check-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True)
    meta = {**rc.to_json(), "code_version": code_version(), "dataset_path": str(ds.path),
            "training_hash": rc.training_hash(), "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (run_dir / "config.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return run_dir


def eval_curves(run_dir: Path) -> dict[str, dict[int, list[float]]]:
    """{task: {updates: [eval return per seed]}} from an offline run's metrics.csv."""
    out: dict[str, dict[int, list[float]]] = {}
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return out
    with path.open() as f:
        for r in csv.DictReader(f):
            if r["kind"] == "eval" and r["task"] != "mean":
                out.setdefault(r["task"], {}).setdefault(int(r["updates"]), []).append(
                    float(r["return"]))
    return {t: dict(sorted(c.items())) for t, c in out.items()}


def judge(tasks: dict[str, dict], curves: dict[str, dict[int, list[float]]],
          min_pass: int = 2) -> dict:
    """Per task: source final return, offline eval curve (mean over seeds), final and
    best offline return, ratio final / source, pass (final >= RATIO x source; None,
    not counted, when the source return is <= 0: an agent that earned nothing sets no
    bar); overall pass: at least ``min_pass`` tasks pass and at least 3 were checked."""
    per = {}
    for name, t in tasks.items():
        curve = {u: float(np.mean(v)) for u, v in curves.get(name, {}).items()}
        final = curve[max(curve)] if curve else None
        src = t["final_return"]
        ratio = None if final is None or src <= 0 else final / src
        per[name] = {"source_runs": t["runs"], "source_final_return": src,
                     "source_final_return_per_seed": t["per_seed"],
                     "offline_eval_return": {str(u): v for u, v in curve.items()},
                     "offline_eval_return_per_seed": {str(u): v for u, v in
                                                      curves.get(name, {}).items()},
                     "offline_final_return": final,
                     "offline_best_return": max(curve.values()) if curve else None,
                     "ratio": ratio,
                     "pass": None if src <= 0 else bool(final is not None
                                                        and final >= RATIO * src)}
    n_pass = sum(p["pass"] is True for p in per.values())
    return {"tasks": per, "tasks_passing": n_pass, "tasks_checked": len(per),
            "min_tasks_passing": min_pass,
            "passed": bool(len(per) >= 3 and n_pass >= min_pass)}


def plot(res: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tasks = res["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 3.6), squeeze=False)
    for ax, (name, t) in zip(axes[0], tasks.items()):
        per_seed = {int(u): v for u, v in t["offline_eval_return_per_seed"].items()}
        if per_seed:
            xs = np.array(sorted(per_seed))
            ax.plot(xs, [np.mean(per_seed[x]) for x in xs], "o-", label="offline TD-MPC2")
            if any(len(v) > 1 for v in per_seed.values()):
                ax.fill_between(xs, [min(per_seed[x]) for x in xs],
                                [max(per_seed[x]) for x in xs], alpha=0.2, label="seed range")
        src = t["source_final_return"]
        ax.axhline(src, color="k", lw=1, label=f"source agent {src:.0f}")
        ax.axhline(RATIO * src, color="gray", ls="--", lw=1,
                   label=f"{RATIO:g} x source {RATIO * src:.0f}")
        verdict = {True: "pass", False: "fail", None: "source earned nothing"}[t["pass"]]
        ax.set_title(f"{name}: {verdict}", fontsize=10)
        ax.set_xlabel("updates")
        ax.set_ylabel("eval return")
        top = max([src, 1.0, *(max(v) for v in per_seed.values())])
        ax.set_ylim(0, 1.1 * top)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"offline multi-task TD-MPC2 vs source agents: "
                 f"{res['tasks_passing']}/{res['tasks_checked']} tasks at >= {RATIO:g}x")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--home", default=None, help="data root holding the source runs' episode sets")
    p.add_argument("--sources", nargs="+", metavar="RUN_DIR", default=None,
                   help="finished train_online runs (their episode sets are in the store)")
    p.add_argument("--updates", type=int, default=20_000)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--preset", default="cpu")
    p.add_argument("--eval-every", type=int, default=5_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--log-every", type=int, default=1_000,
                   help="updates per chunk (reduced to divide --eval-every)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--min-pass", type=int, default=2, help="tasks that must pass")
    p.add_argument("--budget-min", type=float, default=None,
                   help="stop after this many minutes (whole chunks); record as far as reached")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue an earlier (budget-stopped) offline check run")
    p.add_argument("--out", default=str(REPO / "benchmarks/results"))
    args = p.parse_args(argv)

    from wmx.paths import wmx_home
    from wmx.train_offline.loop import run
    from wmx.runs.offline_config import OfflineRunConfig
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.resume:
        run_dir = Path(args.resume).expanduser().resolve()
        home = run_dir.parent.parent
        bench = json.loads((run_dir / "benchmark.json").read_text())
        source_dirs = bench["sources"]
    else:
        if not args.sources:
            p.error("--sources RUN_DIR ... is required (or --resume RUN_DIR)")
        home = wmx_home(args.home)
        source_dirs = [str(Path(s).expanduser().resolve()) for s in args.sources]
    runs = [source_run(Path(s)) for s in source_dirs]
    tasks = pooled_sources(runs)
    if not args.resume:
        Ts = {r["episode_length"] for r in runs}
        if len(Ts) > 1:
            raise SystemExit(f"the source runs use different --episode-length overrides {Ts}; "
                             "give runs with one T")
        ref = build_dataset(home, tasks, out)
        run_dir = new_offline_run(home, ref, args, Ts.pop())
        (run_dir / "benchmark.json").write_text(json.dumps(
            {"sources": source_dirs, "dataset": ref, "min_pass": args.min_pass}, indent=1))
    rc = OfflineRunConfig.from_json(json.loads((run_dir / "config.json").read_text()))
    print(f"offline run {run_dir}: {rc.updates:,d} updates x batch {rc.batch_size}, preset "
          f"{rc.preset}, tasks {list(rc.task_set.names)}, seeds {list(rc.seeds)}")
    t0 = time.perf_counter()
    deadline = None if args.budget_min is None else time.monotonic() + 60 * args.budget_min
    summary = run(rc, run_dir, home=home, progress=True, deadline=deadline)
    wall = time.perf_counter() - t0
    min_pass = json.loads((run_dir / "benchmark.json").read_text()).get("min_pass", 2)
    res = judge(tasks, eval_curves(run_dir), min_pass)
    res.update({"dataset": rc.dataset, "run_dir": str(run_dir), "preset": rc.preset,
                "seeds": list(rc.seeds), "batch_size": rc.batch_size,
                "updates_planned": rc.updates, "updates_reached": summary["updates"],
                "finished": summary["finished"], "eval_every": rc.eval_every,
                "eval_episodes": rc.eval_episodes, "wall_s_this_call": round(wall, 1),
                "run_wall_s": summary.get("wall_s"),
                "criterion": f"offline final eval return >= {RATIO:g} x source final return "
                             f"on >= {min_pass} tasks (of >= 3)",
                "date": time.strftime("%Y-%m-%dT%H:%M:%S")})
    (out / f"{RESULT_NAME}.json").write_text(json.dumps(res, indent=1))
    plot(res, out / f"{RESULT_NAME}.png")
    print(json.dumps({k: {"source": v["source_final_return"], "offline": v["offline_final_return"],
                          "ratio": v["ratio"], "pass": v["pass"]}
                      for k, v in res["tasks"].items()}, indent=1))
    print(f"passed: {res['passed']} ({res['tasks_passing']}/{res['tasks_checked']} tasks); "
          f"updates {summary['updates']:,d}/{rc.updates:,d}; results in "
          f"{out / (RESULT_NAME + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
