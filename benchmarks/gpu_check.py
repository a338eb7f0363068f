"""gpu_check: both agents' paper-size speed and a short paper-protocol learning run, on a GPU.

One prepared script for a machine with an NVIDIA GPU and the CUDA install
(README, "On a GPU"). It runs six stages (seven with a prepared offline run),
each in its own process under a hard time limit, within one wall-clock budget
(default 570 s, so a 10-minute slot keeps a margin; ``--plan`` prints the
stages and budgets):

  probe               jax's devices and versions (nothing else runs without a GPU)
  device_tests        tests/nn/test_rbg_bits.py on the GPU: wmx's Philox kernel for the
                      Q-dropout masks gives jax.random's "rbg" bits on this backend too
  tdmpc2_speed        benchmarks/tdmpc2_speed.py, wmx only: one update (batch 256)
                      and one planning decision (512 samples, 6 iterations) at model size 5
  dreamerv3_speed     benchmarks/dreamerv3_speed.py, wmx only: one training step
                      (16 x 64 + 1 rows) and one policy step (16 envs) at 12m
  tdmpc2_learning     benchmarks/learning/tdmpc2_online.py --preset paper on
                      cartpole-balance (seeds 0 1), as many env steps as fit (--budget-min)
  dreamerv3_learning  benchmarks/learning/dreamerv3_online.py --preset paper on
                      cartpole-balance (seeds 0 1, 16 envs, train ratio 512), as above
  dreamerv3_offline   only with --dreamerv3-offline-run RUN_DIR: that offline check run,
                      prepared elsewhere (benchmarks/learning/dreamerv3_offline.py
                      --prepare-only --pack DIR; DIR copied beside it), trained with
                      --resume for as many updates as fit (--budget-min)

A stage past its limit is killed with its process group and marked
``timeout``; the rest still run. Time a stage leaves unused goes to the stages
after it; the total never exceeds the budget. A learning run stopped by its
limit keeps the chunks it finished: its curve is read back from metrics.csv.

Writes ``<out>/gpu_check.json`` (device name, jax and plugin versions, each
stage's status, wall time, limit, command and results), ``<out>/gpu_check.png``
(return against env steps of both learning runs) and ``<out>/gpu_check/`` (the
stages' own JSON, logs and the learning runs' metrics.csv). The JSON is
rewritten after every stage, so a killed check still leaves what it measured.

Without a GPU visible to jax it prints one line and exits 0, writing nothing
(exit 1 if an NVIDIA driver is present but jax has no GPU backend: install the
CUDA lock). ``--force-cpu`` runs the same stages on the CPU at tiny sizes
(TD-MPC2 size 1, DreamerV3 1m, the tiny preset on probe-action): a smoke test
of this script, not a measurement.

    python benchmarks/gpu_check.py --out DIR            # on the GPU machine
    python benchmarks/gpu_check.py --plan               # stages, limits, commands
    python benchmarks/gpu_check.py --only tdmpc2_speed tdmpc2_learning --out DIR
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DEFAULT_TOTAL_S = 570.0
FINISH_RESERVE_S = 30.0
"""Seconds kept after the last stage for the JSON and the plot (part of the total)."""
TASK = "cartpole-balance"
"""Default task of both learning stages (--tdmpc2-task / --dreamerv3-task choose others)."""


@dataclass
class Stage:
    """One stage: its name, its share of the budget (s at the default total) and argv."""
    name: str
    budget_s: float
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    learning: str | None = None   # agent name of a learning stage
    tail_s: float = 0.0           # learning: seconds kept after --budget-min for startup,
    #                               the chunk in flight, the final evaluation and writing


def stages(raw: Path, home: Path, smoke: bool, tdmpc2_task: str = TASK,
           dreamerv3_task: str = TASK, offline_run: Path | None = None) -> list[Stage]:
    """The stages (budgets at DEFAULT_TOTAL_S; with ``offline_run`` the plan's total is
    larger until `scaled`) writing under ``raw``; ``home``: the online learning runs'
    data root. ``smoke``: the --force-cpu sizes (probe-action, the task arguments
    unused); ``*_task``: the learning stages' Playground tasks; ``offline_run``: a
    prepared DreamerV3 offline check run, trained in its own home folder by the
    ``dreamerv3_offline`` stage (None: no such stage)."""
    py = sys.executable
    probe = [py, str(Path(__file__).resolve()), "--probe"]
    no_prealloc = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}   # two processes share the GPU
    if smoke:
        td_speed = ["--sizes", "1", "--rounds", "3", "--calls", "1"]
        dv_speed = ["--sizes", "1m", "--rounds", "3", "--train-calls", "1",
                    "--policy-calls", "2"]
        learn_common = ["--task", "probe-action", "--preset", "tiny", "--seeds", "0",
                        "--eval-every", "40", "--eval-episodes", "2", "--env-steps", "120"]
        td_learn = learn_common + ["--set", "seed_steps=40"]
        dv_learn = learn_common
        budgets = (30, 30, 90, 150, 110, 130)
    else:
        td_speed = ["--sizes", "5", "--rounds", "5", "--calls", "10"]
        dv_speed = ["--sizes", "12m", "--rounds", "3", "--train-calls", "5",
                    "--policy-calls", "20"]
        td_learn = ["--task", tdmpc2_task, "--preset", "paper", "--seeds", "0", "1",
                    "--env-steps", "50000", "--eval-every", "5000", "--eval-episodes", "10"]
        # 2 seeds vmapped (the online criterion's; nearly free on a GPU) and a checkpoint every
        # 100 ticks (~30 s on an H200), so the budget stop ends the run inside its limit
        dv_learn = ["--task", dreamerv3_task, "--preset", "paper", "--seeds", "0", "1",
                    "--env-steps", "64000", "--eval-every", "16000", "--eval-episodes", "10",
                    "--chunk-ticks", "100"]
        budgets = (30, 25, 65, 95, 140, 185)
    learn_out = ["--home", str(home), "--out", str(raw / "learning")]
    offline = [] if offline_run is None else [
        Stage("dreamerv3_offline", budgets[5],
              [py, str(HERE / "learning" / "dreamerv3_offline.py"), "--resume",
               str(offline_run), "--out", str(raw / "offline")],
              learning="dreamerv3_offline", tail_s=60)]
    return [
        Stage("probe", budgets[0], probe),
        # wmx.nn.rbg_bits reproduces XLA's RngBitGenerator bits on the backend it runs on;
        # the GPU's generator is checked here (the test suite runs on the CPU only)
        Stage("device_tests", budgets[1],
              [py, "-m", "pytest", "-q", str(ROOT / "tests" / "nn" / "test_rbg_bits.py")]),
        Stage("tdmpc2_speed", budgets[2],
              [py, str(HERE / "tdmpc2_speed.py"), *td_speed, "--kinds", "update", "plan",
               "--retries", "0", "--no-online", "--out", str(raw / "tdmpc2_speed.json")],
              env=no_prealloc),
        Stage("dreamerv3_speed", budgets[3],
              [py, str(HERE / "dreamerv3_speed.py"), *dv_speed, "--load-retries", "0",
               "--online-presets", "--compile-cache", "", "--logs", str(raw / "logs"),
               "--out", str(raw / "dreamerv3_speed.json")], env=no_prealloc),
        Stage("tdmpc2_learning", budgets[4],
              [py, str(HERE / "learning" / "tdmpc2_online.py"), *td_learn, *learn_out],
              learning="tdmpc2", tail_s=45),
        Stage("dreamerv3_learning", budgets[5],
              [py, str(HERE / "learning" / "dreamerv3_online.py"), *dv_learn, *learn_out],
              learning="dreamerv3", tail_s=60),
        *offline,
    ]


# ---- the probe (runs in its own process: the orchestrator never touches the GPU) ----
def probe_main() -> None:
    """Print one JSON line: jax's backend, devices and versions."""
    import importlib.metadata as md
    import jax
    devices = jax.devices()
    mem = None
    try:
        mem = devices[0].memory_stats()
    except Exception:  # noqa: BLE001 - not every backend reports
        pass
    versions = {}
    for dist in ("jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda12-pjrt", "nvidia-cudnn-cu12",
                 "nvidia-cublas-cu12", "jax-cuda13-plugin", "jax-cuda13-pjrt",
                 "nvidia-cudnn-cu13", "nvidia-cublas", "mujoco", "mujoco-mjx", "playground"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    print(json.dumps({
        "backend": jax.default_backend(), "jax": jax.__version__, "versions": versions,
        "devices": [{"id": d.id, "platform": d.platform, "kind": d.device_kind}
                    for d in devices],
        "gpu": any(d.platform in ("gpu", "cuda", "rocm") for d in devices),
        "device_memory_bytes_limit": (mem or {}).get("bytes_limit"),
        "default_matmul_precision": jax.config.jax_default_matmul_precision}))


def nvidia_driver() -> str | None:
    """nvidia-smi's GPU name, driver and memory (one line per GPU), or None without a driver."""
    if shutil.which("nvidia-smi") is None:
        return "driver present (no nvidia-smi)" if Path("/proc/driver/nvidia").exists() else None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


# ---- running a stage ----------------------------------------------------------------
def run_stage(argv: list[str], env: dict, log: Path, timeout_s: float) -> dict:
    """Run argv in its own session with output to ``log``; kill its process group at
    ``timeout_s``. Returns {"returncode", "timed_out", "wall_s"}."""
    log.parent.mkdir(parents=True, exist_ok=True)
    # this checkout's wmx, whatever an installed wmx points at
    path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": path, **env},
                                start_new_session=True, preexec_fn=_die_with_parent)
        timed_out = False
        try:
            proc.wait(timeout=max(timeout_s, 1.0))
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc)
        except BaseException:
            kill_group(proc)
            raise
    return {"returncode": proc.returncode, "timed_out": timed_out,
            "wall_s": round(time.monotonic() - t0, 2)}


def _die_with_parent() -> None:
    """In the stage's process: SIGKILL it when the check's process dies (Linux
    prctl PR_SET_PDEATHSIG), so a killed check leaves no stage running."""
    try:
        import ctypes
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _exit_on_signal(signum, frame) -> None:
    """SIGTERM/SIGHUP: unwind (the running stage is killed, the JSON written)."""
    raise SystemExit(128 + signum)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGTERM the stage's process group, SIGKILL it 10 s later if it is still there."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def log_tail(log: Path, n: int = 8) -> list[str]:
    try:
        lines = log.read_text(errors="replace").replace("\r", "\n").splitlines()
    except OSError:
        return []
    return [ln[-300:] for ln in lines if ln.strip()][-n:]


# ---- reading the stages' results ----------------------------------------------------
def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def tdmpc2_speed_results(path: Path) -> dict | None:
    """Medians (ms), matmul GFLOP and the rate they imply (TFLOP/s) per quantity."""
    res = read_json(path)
    if res is None:
        return None
    out = {"xla_matmul_gflop_per_s": res.get("ceiling_before", {}).get("xla_gflop_per_s")}
    for kind in ("update", "plan"):
        for q in res.get(kind, []):
            out[f"{kind}_size{q['model_size']}"] = {
                "median_ms": q["wmx_median_ms"], "cpu_median_ms": q["wmx_cpu_median_ms"],
                "gflop": q["gflop"], "tflop_per_s": q["gflop"] / q["wmx_median_ms"]}
    return out


def dreamerv3_speed_results(path: Path) -> dict | None:
    """Medians (ms), compile time (s), matmul GFLOP and TFLOP/s per item."""
    res = read_json(path)
    if res is None:
        return None
    out = {"xla_matmul_gflop_per_s": res.get("matmul_baseline", {}).get("gflop_per_s")}
    for name, item in res.get("items", {}).items():
        w = item["wmx"]
        out[name] = {"median_ms": w["median_ms"], "cpu_median_ms": w["cpu_median_ms"],
                     "compile_s": w.get("compile_s"), "gflop": w.get("gflop"),
                     "tflop_per_s": (w["gflop"] / w["median_ms"]) if w.get("gflop") else None}
    for name, m in res.get("memory", {}).items():
        dev = m.get("device_memory") or {}
        out.setdefault("memory", {})[name] = {
            "peak_rss_mib": m.get("peak_rss_mib"),
            "device_peak_bytes_in_use": dev.get("peak_bytes_in_use")}
    return out


def metrics_curves(metrics_csv: Path) -> dict:
    """{"eval": {env_steps: [mean return per seed]}, "train": {...}} from a run's metrics.csv."""
    out: dict = {"eval": {}, "train": {}}
    try:
        with metrics_csv.open() as f:
            for r in csv.DictReader(f):
                if r.get("kind") in out and r.get("return") not in ("", None):
                    out[r["kind"]].setdefault(str(int(r["env_steps"])), []).append(
                        float(r["return"]))
    except OSError:
        pass
    return out


def learning_results(raw: Path, home: Path, agent: str, task: str) -> dict | None:
    """The learning script's JSON if it finished, else the curves its run's metrics.csv
    holds (a run stopped by the stage limit); the run's config and metrics are copied
    to ``raw/learning/<agent>_run/``."""
    runs = sorted((home / "runs").glob(f"learning-{agent}-{task}-*"))
    run_dir = runs[-1] if runs else None
    if run_dir is not None:
        keep = raw / "learning" / f"{agent}_run"
        keep.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "metrics.csv"):
            if (run_dir / name).exists():
                shutil.copy2(run_dir / name, keep / name)
    res = read_json(raw / "learning" / f"{agent}_online_{task}.json")
    if res is not None:
        keys = ("agent", "task", "seeds", "preset", "n_envs", "env_steps_reached",
                "finished", "wall_s", "eval_curve", "train_curve", "final_mean_eval_return",
                f"published_{agent}_at_same_env_steps")
        return {"source": "learning script JSON", **{k: res.get(k) for k in keys}}
    if run_dir is None:
        return None
    curves = metrics_curves(run_dir / "metrics.csv")
    xs = [int(x) for c in curves.values() for x in c]
    return {"source": "metrics.csv (the run was stopped by the stage limit)",
            "agent": agent, "task": task, "env_steps_reached": max(xs, default=0),
            "eval_curve": curves["eval"], "train_curve": curves["train"]}


def offline_results(raw: Path, run_dir: Path) -> dict:
    """The offline check's JSON entries if it wrote them, else the per-task eval curves
    of its run's metrics.csv (a run stopped by the stage limit); the run's config and
    metrics, its summary.json when it finished and its final evaluation
    (report/report.json, as ``run_report.json``) are copied to ``raw/offline/run_<name>``
    (two folders below the output)."""
    keep = raw / "offline"
    keep.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "benchmark.json", "metrics.csv", "summary.json",
                 "report/report.json"):
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, keep / f"run_{Path(name).name}")
    res = read_json(raw / "offline" / "dreamerv3_offline.json")
    if res is not None:
        return {"source": "offline check JSON", "run_dir": str(run_dir),
                "updates_reached": res.get("updates_reached"), "passed": res.get("passed"),
                "eval_curve": {t: v.get("offline_eval_return")
                               for t, v in (res.get("tasks") or {}).items()},
                "final_return": {t: v.get("offline_final_return")
                                 for t, v in (res.get("tasks") or {}).items()},
                "source_final_return": {t: v.get("source_final_return")
                                        for t, v in (res.get("tasks") or {}).items()}}
    sys.path.insert(0, str(HERE / "learning"))
    from offline_check import eval_curves, last_updates      # csv and numpy only, no jax
    return {"source": "metrics.csv (the check wrote no result: stopped at the stage limit, "
                      "or failed)",
            "run_dir": str(run_dir), "updates_reached": last_updates(run_dir),
            "eval_curve": {t: {str(u): sum(v) / len(v) for u, v in c.items()}
                           for t, c in eval_curves(run_dir).items()},
            "final_return": None}


def plot(results: dict, path: Path, title: str = "gpu_check") -> bool:
    """Return against env steps of both learning runs (seed means; eval solid, training
    episodes dashed). False (nothing written) without a curve to draw."""
    series = [(agent, kind, r[f"{kind}_curve"]) for agent, r in results.items() if r
              for kind in ("eval", "train") if r.get(f"{kind}_curve")]
    if not series:
        return False
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors = {"tdmpc2": "tab:blue", "dreamerv3": "tab:orange"}
    labels = {"tdmpc2": "TD-MPC2", "dreamerv3": "DreamerV3"}
    for agent, kind, curve in series:
        xs = sorted(curve, key=int)
        ys = [sum(curve[x]) / len(curve[x]) for x in xs]
        ax.plot([int(x) for x in xs], ys, marker="o", ms=3,
                ls="-" if kind == "eval" else "--", color=colors.get(agent),
                label=f"{labels.get(agent, agent)} {results[agent].get('task', '')} "
                      f"{'eval' if kind == 'eval' else 'training episodes'}")
    ax.set_xlabel("env steps")
    ax.set_ylabel("return (mean over seeds)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def write_json(path: Path, obj: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def git_commit() -> str | None:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


# ---- the check ----------------------------------------------------------------------
def scaled(plan: list[Stage], total_s: float) -> list[Stage]:
    """Budgets scaled so that the stages plus FINISH_RESERVE_S sum to ``total_s``."""
    k = (total_s - FINISH_RESERVE_S) / sum(s.budget_s for s in plan)
    for s in plan:
        s.budget_s = round(s.budget_s * k, 1)
    return plan


def print_plan(plan: list[Stage], total_s: float, only: set[str] | None) -> None:
    print(f"gpu_check plan: {len(plan)} stages within {total_s:.0f} s "
          f"({FINISH_RESERVE_S:.0f} s kept for the JSON and the plot)")
    def show(a: str) -> str:
        return (os.path.relpath(a, ROOT) if a.startswith(str(ROOT)) else a) or "''"

    runs = [s for s in plan if only is None or s.name in only or s.name == "probe"]
    for s in plan:
        if s not in runs:
            mark = "  (skipped)"
        elif s.name == "probe" or len(runs) == len(plan):
            mark = ""
        else:    # the skipped stages' budgets go to the stages that run (main's limits)
            limit = total_s - FINISH_RESERVE_S - sum(o.budget_s for o in runs if o is not s)
            mark = f"  (limit ~{limit:.0f} s with the skipped stages' budgets)"
        extra = (f" --budget-min <(limit - {s.tail_s:.0f} s) / 60>" if s.learning else "")
        print(f"  {s.name:19s} {s.budget_s:6.1f} s{mark}  "
              f"{' '.join(show(a) for a in s.argv[1:])}{extra}")
    print(f"  {'total':19s} {sum(s.budget_s for s in plan) + FINISH_RESERVE_S:6.1f} s "
          f"(a stage's limit: its budget plus what earlier stages left unused"
          + ("; ~: when the stages before it take their budgets)" if len(runs) < len(plan)
             else ")"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(HERE / "results"),
                   help="folder of gpu_check.json, gpu_check.png and gpu_check/ "
                        "(default benchmarks/results)")
    p.add_argument("--total-s", type=float, default=DEFAULT_TOTAL_S,
                   help=f"wall-clock budget of the whole check, s (default {DEFAULT_TOTAL_S:.0f}); "
                        "the stage budgets scale with it")
    p.add_argument("--only", nargs="+", default=None, metavar="STAGE",
                   help="run only these stages (the probe always runs)")
    p.add_argument("--plan", "--dry-run", action="store_true",
                   help="print the stages, their budgets (s) and commands; run nothing")
    p.add_argument("--force-cpu", action="store_true",
                   help="no GPU needed: the stages at tiny sizes on the CPU (JAX_PLATFORMS=cpu), "
                        "a smoke test of this script")
    p.add_argument("--keep-home", action="store_true",
                   help="keep the learning runs' data root (checkpoints, replay, episode sets); "
                        "by default it is a temporary folder, removed at the end")
    p.add_argument("--tdmpc2-task", default=TASK,
                   help=f"task of the TD-MPC2 learning stage (default {TASK})")
    p.add_argument("--dreamerv3-task", default=TASK,
                   help=f"task of the DreamerV3 learning stage (default {TASK}; reacher-easy "
                        "for the DreamerV3 online criterion, with --only dreamerv3_learning "
                        "so the stage gets the whole budget)")
    p.add_argument("--dreamerv3-offline-run", default=None, metavar="RUN_DIR",
                   help="adds the dreamerv3_offline stage: this offline check run, made by "
                        "benchmarks/learning/dreamerv3_offline.py --prepare-only (its home "
                        "folder, two levels up, copied with it; --pack DIR copies only what "
                        "training needs), trained with --resume; "
                        "with --only dreamerv3_offline it gets the whole budget")
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe:
        probe_main()
        return 0
    if args.total_s <= FINISH_RESERVE_S + 10:
        p.error(f"--total-s {args.total_s:g}: must exceed {FINISH_RESERVE_S + 10:.0f} s")

    out = Path(args.out).resolve()
    raw = out / "gpu_check"
    home = Path(tempfile.gettempdir()) / "wmx_gpu_check_home_XXXXXXXX"   # made when running
    tasks = dict(tdmpc2_task=args.tdmpc2_task, dreamerv3_task=args.dreamerv3_task)
    offline_run = None
    if args.dreamerv3_offline_run:
        offline_run = Path(args.dreamerv3_offline_run).expanduser().resolve()
        sys.path.insert(0, str(HERE / "learning"))
        from check_run import read_json
        from offline_check import resumable_run, source_run   # the check's own; no jax
        check = "benchmarks/learning/dreamerv3_offline.py"
        try:
            resumable_run(offline_run, "dreamerv3", report_only=False)
            bench = read_json(offline_run / "benchmark.json", "--resume")
            for src in bench.get("sources") or []:      # a copied home needs its sources
                source_run(offline_run.parent.parent / src)
        except (SystemExit, ValueError) as e:       # the check's own one-line refusals
            why = str(e).removeprefix(f"--resume {offline_run}: ").removeprefix("--resume: ")
            p.error(f"--dreamerv3-offline-run {offline_run}: {why} (the stage trains "
                    f"DreamerV3 offline check runs, made by {check} --prepare-only)")
    plan = scaled(stages(raw, home, args.force_cpu, **tasks, offline_run=offline_run),
                  args.total_s)
    names = [s.name for s in plan]
    only = set(args.only) if args.only else None
    if only and "dreamerv3_offline" in only and offline_run is None:
        p.error("--only dreamerv3_offline: the stage needs --dreamerv3-offline-run RUN_DIR")
    if only and not only <= set(names):
        p.error(f"--only: unknown stage(s) {sorted(only - set(names))}; stages: {', '.join(names)}")
    if args.plan:
        print_plan(plan, args.total_s, only)
        return 0

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    t_start = time.monotonic()
    deadline = t_start + args.total_s
    env_cpu = {"JAX_PLATFORMS": "cpu"} if args.force_cpu else {}
    # the probe: nothing is written before it has found a GPU
    with tempfile.TemporaryDirectory() as tmp:
        r = run_stage(plan[0].argv, env_cpu, Path(tmp) / "probe.log", plan[0].budget_s)
        probe_log = Path(tmp) / "probe.log"
        lines = [ln for ln in probe_log.read_text(errors="replace").splitlines()
                 if ln.startswith("{")]
        info = json.loads(lines[-1]) if r["returncode"] == 0 and lines else None
        if info is None:
            tail = " | ".join(log_tail(probe_log, 3))
            print(f"gpu_check: the jax probe failed (exit {r['returncode']}"
                  f"{', timed out' if r['timed_out'] else ''}): {tail}")
            return 1
    driver = nvidia_driver()
    if not info["gpu"] and not args.force_cpu:
        platforms = "/".join(sorted({d["platform"] for d in info["devices"]}))
        forced = os.environ.get("JAX_PLATFORMS", "")
        if forced and not any(p in forced for p in ("cuda", "gpu", "rocm")):
            print(f"gpu_check: no GPU used: JAX_PLATFORMS={forced} is set (jax {info['jax']} "
                  f"sees only {platforms} devices); nothing run")
            return 0
        if driver:
            print(f"gpu_check: an NVIDIA driver is present ({driver.splitlines()[0]}) but jax "
                  f"{info['jax']} sees only {platforms} devices: install "
                  "requirements-lock-cuda12.txt (README, 'On a GPU'); nothing run")
            return 1
        print(f"gpu_check: no GPU found (jax {info['jax']} sees only {platforms} devices); "
              "nothing run")
        return 0

    raw.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="wmx_gpu_check_home_"))
    plan = scaled(stages(raw, home, args.force_cpu, **tasks, offline_run=offline_run),
                  args.total_s)
    record = {
        "what": "benchmarks/gpu_check.py: paper-size speed and short paper-protocol learning "
                "runs of TD-MPC2 and DreamerV3",
        "mode": "force-cpu smoke (tiny sizes, not a measurement)" if args.force_cpu else "gpu",
        "device": info["devices"][0]["kind"], "devices": info["devices"],
        "backend": info["backend"], "jax": info["jax"], "versions": info["versions"],
        "device_memory_bytes_limit": info["device_memory_bytes_limit"],
        "default_matmul_precision": info["default_matmul_precision"],
        "nvidia_smi": driver, "python": sys.version.split()[0],
        "git_commit": git_commit(), "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "total_budget_s": args.total_s, "stages": []}
    record["stages"].append({"name": "probe", "status": "ok", "budget_s": plan[0].budget_s,
                             "wall_s": r["wall_s"]})
    json_path = out / "gpu_check.json"
    write_json(json_path, record)
    print(f"gpu_check: {record['device']} ({info['backend']}), jax {info['jax']}; "
          f"budget {args.total_s:.0f} s -> {json_path}", flush=True)
    learning: dict = {}
    try:
        for i, st in enumerate(plan[1:], 1):
            entry = {"name": st.name, "budget_s": st.budget_s,
                     "command": [a for a in st.argv], "env": st.env}
            record["stages"].append(entry)
            if only is not None and st.name not in only:
                entry["status"] = "skipped"
                continue
            later = sum(s.budget_s for s in plan[i + 1:]
                        if only is None or s.name in only)
            limit = deadline - time.monotonic() - later - FINISH_RESERVE_S
            if limit < 10:
                entry.update(status="not run", reason=f"{limit:.0f} s left in the budget")
                continue
            argv = list(st.argv)
            if st.learning:
                budget_min = max(0.05, (limit - st.tail_s) / 60)
                argv += ["--budget-min", f"{budget_min:.2f}"]
                entry["command"] = argv
            if st.name == "dreamerv3_offline":     # an earlier call's result is not this one's
                for stale in (raw / "offline").glob("dreamerv3_offline.*"):
                    stale.unlink()
            log = raw / "logs" / f"{st.name}.log"
            print(f"[{time.monotonic() - t_start:5.0f} s] {st.name}: limit {limit:.0f} s",
                  flush=True)
            res = run_stage(argv, {**st.env, **env_cpu}, log, limit)
            entry.update(limit_s=round(limit, 1), log=str(log.relative_to(out)), **res)
            entry["status"] = ("timeout" if res["timed_out"] else
                               "ok" if res["returncode"] == 0 else "failed")
            if st.name == "device_tests":
                entry["results"] = pytest_summary(log)
            elif st.name == "tdmpc2_speed":
                entry["results"] = tdmpc2_speed_results(raw / "tdmpc2_speed.json")
            elif st.name == "dreamerv3_speed":
                entry["results"] = dreamerv3_speed_results(raw / "dreamerv3_speed.json")
            elif st.name == "dreamerv3_offline":
                entry["results"] = offline_results(raw, offline_run)
            elif st.learning:
                task = argv[argv.index("--task") + 1]
                entry["results"] = learning[st.learning] = learning_results(
                    raw, home, st.learning, task)
            if entry["status"] != "ok":
                entry["log_tail"] = log_tail(log)
            print(f"[{time.monotonic() - t_start:5.0f} s] {st.name}: {entry['status']} "
                  f"in {res['wall_s']:.0f} s", flush=True)
            write_json(json_path, record)
    finally:
        for entry in record["stages"]:
            entry.setdefault("status", "interrupted")   # the check itself was stopped
        title = (f"gpu_check on {record['device']}: "
                 + ("--force-cpu smoke, tiny preset, probe-action" if args.force_cpu
                    else "paper protocol, " + ", ".join(sorted(set(tasks.values())))))
        if learning and plot(learning, out / "gpu_check.png", title):
            record["plot"] = "gpu_check.png"
        record["wall_s"] = round(time.monotonic() - t_start, 1)
        if args.keep_home:
            record["home"] = str(home)
        else:
            shutil.rmtree(home, ignore_errors=True)
        write_json(json_path, record)
    summarise(record)
    return 0


def pytest_summary(log: Path) -> dict:
    """{"passed": n, "failed": n, ...} from the last summary line of a pytest log."""
    lines = [x for x in log.read_text(errors="replace").splitlines() if " in " in x]
    counts = re.findall(r"(\d+) (passed|failed|errors?|skipped)", lines[-1]) if lines else []
    return {kind: int(n) for n, kind in counts}


def summarise(record: dict) -> None:
    """A few lines per stage on stdout."""
    print(f"\n{record['device']}: {record['mode']}, {record['wall_s']:.0f} s")
    for st in record["stages"][1:]:
        line = f"  {st['name']:19s} {st['status']:8s}"
        if "wall_s" in st:
            line += f" {st['wall_s']:6.0f} s"
        res = st.get("results") or {}
        if st["name"] == "device_tests":
            line += "  " + ", ".join(f"{n} {kind}" for kind, n in res.items())
        elif "speed" in st["name"]:
            line += "  " + ", ".join(f"{k} {v['median_ms']:.2f} ms" for k, v in res.items()
                                     if isinstance(v, dict) and "median_ms" in v)
        elif st["name"] == "dreamerv3_offline" and res:
            line += f"  {res.get('updates_reached') or 0:,} updates"
            for task, curve in (res.get("eval_curve") or {}).items():
                if curve:
                    last = max(curve, key=int)
                    line += f", {task} eval {curve[last]:.1f} at {int(last):,}"
        elif res:
            ev = res.get("eval_curve") or {}
            last = max(ev, key=int) if ev else None
            line += f"  {res.get('env_steps_reached', 0):,} env steps"
            if last is not None:
                vals = ev[last]
                line += f", eval return {sum(vals) / len(vals):.1f} at {int(last):,}"
        print(line)


if __name__ == "__main__":
    sys.exit(main())
