"""device_check: both agents' speed, the parity suite and the random-bit kernel on a GPU or a TPU.

One prepared script for a machine with an accelerator: an NVIDIA GPU with the
CUDA lock, or a TPU with the TPU lock (docs/accelerators.md). It runs its
stages one after another, each in its own process under a hard time limit,
within one wall-clock budget (default 570 s, so a 10-minute slot keeps a
margin; ``--plan`` prints the stages, budgets and commands). The default run:

  probe                 jax's platform, devices and versions (nothing else runs without a
                        GPU or a TPU)
  device_tests          tests/nn/test_rbg_bits.py on the device: wmx's Philox kernel for the
                        Q-dropout masks gives the CPU's bits (digests pinned on the CPU) and,
                        on a GPU, jax.random's "rbg" bits (a TPU's RngBitGenerator is
                        another algorithm: those comparisons skip there)
  parity                the whole parity suite (the tests of the *parity* modules, recordings
                        of the official code) on the device at
                        JAX_DEFAULT_MATMUL_PRECISION=highest; needs the shared folder's
                        fixtures/ (--shared)
  tdmpc2_speed          benchmarks/tdmpc2_speed.py, wmx only: one planning decision (512
                        samples, 6 iterations) and one update (batch 256) at model size 5
  dreamerv3_speed_f32   benchmarks/dreamerv3_speed.py, wmx only: one training step
                        (16 x 64 + 1 rows) and one policy step (16 envs) at 12m, unbatched
                        and vmapped over 2 and 5 seeds' states, float32
  dreamerv3_speed_bf16  the same with --compute-dtype bfloat16

and, only when named with ``--only``:

  tdmpc2_learning       benchmarks/learning/tdmpc2_online.py --preset paper on
                        cartpole-balance (seeds 0 1), as many env steps as fit (--budget-min)
  dreamerv3_learning    benchmarks/learning/dreamerv3_online.py --preset paper on
                        cartpole-balance (seeds 0 1, 16 envs, train ratio 512), as above
  dreamerv3_offline     needs --dreamerv3-offline-run RUN_DIR: that offline check run,
                        prepared elsewhere (benchmarks/learning/dreamerv3_offline.py
                        --prepare-only --pack DIR; DIR copied beside it), trained with
                        --resume for as many updates as fit (--budget-min)

The stages that run share the budget by their weights. One process at a time
holds the device: a TPU refuses a second process ("libtpu multi-process
lockfile"), so this script never opens it itself (the probe is a stage) and
the stages never overlap. A stage past its limit gets SIGTERM with its process
group and SIGKILL ``KILL_GRACE_S`` later (``timeout -k`` semantics: a trainer
that finishes its chunk on SIGTERM cannot overrun), and is marked
``timeout``; the rest still run. Time a stage leaves unused goes to the
stages after it; the total never exceeds the budget. A learning run stopped
by its limit keeps the chunks it finished: its curve is read back from
metrics.csv.

Writes ``<out>/device_check.json`` (platform, device kind and count, device
memory, jax and plugin versions, each stage's status, wall time, limit,
command and results: the pytest stages' passed/failed counts and each failure's
test and message; the speed stages' medians, per-seed times and peak device
memory), ``<out>/device_check.png`` (each stage's wall time and status, the
speed stages' ms per seed against the seeds vmapped, and return against env steps
of the learning runs when one ran; ``--replot JSON`` draws a record again) and
``<out>/device_check/`` (the stages' own JSON, junit
XML, logs and the learning runs' metrics.csv). The JSON is rewritten after
every stage, so a killed check still leaves what it measured.

Without a GPU or a TPU visible to jax it prints one line and exits 0, writing
nothing (exit 1 if an NVIDIA driver or a TPU device file is present but jax
has no backend for it: install the matching lock). ``--force-cpu`` runs the
same stages on the CPU at tiny sizes (TD-MPC2 size 1, DreamerV3 1m, one parity
module, the tiny preset on probe-action): a smoke test of this script, not a
measurement.

    python benchmarks/device_check.py --out DIR            # on the GPU or TPU machine
    python benchmarks/device_check.py --plan               # stages, limits, commands
    python benchmarks/device_check.py --only parity tdmpc2_speed --shared SHARED --out DIR

On a TPU the default stages need two 10-minute calls (XLA compiles the 12m programs for
minutes there); the second continues the first's JSON:

    python benchmarks/device_check.py --only device_tests parity tdmpc2_speed --out DIR
    python benchmarks/device_check.py --continue --out DIR
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
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))    # this checkout's wmx, whatever an installed wmx points at
from wmx.version import code_version  # noqa: E402  (no jax: the orchestrator never imports it)
DEFAULT_TOTAL_S = 570.0
FINISH_RESERVE_S = 30.0
"""Seconds kept after the last stage for the JSON and the plot (part of the total; they
cover the last stage's kill grace)."""
KILL_GRACE_S = 10.0
"""Seconds between a late stage's SIGTERM and its SIGKILL (``timeout -k`` grace)."""
TASK = "cartpole-balance"
"""Default task of both learning stages (--tdmpc2-task / --dreamerv3-task choose others)."""
ACCELERATORS = ("gpu", "tpu")
"""jax device platforms this check runs on (jax names CUDA and ROCm devices "gpu")."""
MESSAGE_LINES = 6
"""Lines of a failing test's message kept in the record."""
PARITY_FILES = "tests/**/test_*parity*.py"
"""The parity suite: the modules tests/conftest.py marks `parity`. They are named, not
collected from tests/ (-m parity), so a module whose imports the device's environment
lacks (Beam, say) cannot stop the stage at collection."""


@dataclass
class Stage:
    """One stage: its name, its weight in the budget (s at the default total when the
    default stages run), argv, environment changes (None unsets a variable), whether it
    runs by default, and for learning stages the agent and a tail."""
    name: str
    budget_s: float
    argv: list[str]
    env: dict[str, str | None] = field(default_factory=dict)
    default: bool = True          # False: runs only when named with --only
    learning: str | None = None   # agent name of a learning stage
    tail_s: float = 0.0           # learning: seconds kept after --budget-min for startup,
    #                               the chunk in flight, the final evaluation and writing


def stages(raw: Path, home: Path, smoke: bool, tdmpc2_task: str = TASK,
           dreamerv3_task: str = TASK, offline_run: Path | None = None,
           shared: Path | None = None) -> list[Stage]:
    """Every stage of the check, writing under ``raw``.

    Args:
      raw: the folder of the stages' own files (``<out>/device_check``).
      home: the online learning runs' data root.
      smoke: the --force-cpu sizes (probe-action, one parity module; the task
        arguments unused).
      tdmpc2_task, dreamerv3_task: the learning stages' Playground tasks.
      offline_run: a prepared DreamerV3 offline check run, trained in its own home
        folder by the ``dreamerv3_offline`` stage (None: no such stage).
      shared: the shared folder (its fixtures/ feed the parity suite), passed to the
        parity stage as WMX_SHARED; None leaves WMX_SHARED as it is.

    Returns:
      The stages in running order, budgets at `DEFAULT_TOTAL_S` before `scaled`.
    """
    py = sys.executable
    probe = [py, str(Path(__file__).resolve()), "--probe"]
    no_prealloc = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}   # a GPU's memory as it is used
    if smoke:
        td_speed = ["--sizes", "1", "--rounds", "3", "--calls", "1"]
        dv_speed = ["--sizes", "1m", "--seeds", "1", "2", "--rounds", "3", "--train-calls",
                    "1", "--policy-calls", "2"]
        parity = [str(ROOT / "tests" / "agents" / "dreamerv3" / "test_laprop_parity.py")]
        learn_common = ["--task", "probe-action", "--preset", "tiny", "--seeds", "0",
                        "--eval-every", "40", "--eval-episodes", "2", "--env-steps", "120"]
        td_learn = learn_common + ["--set", "seed_steps=40"]
        dv_learn = learn_common
        # probe, device_tests, parity, tdmpc2_speed, dreamerv3 f32, bf16; learning td, dv
        budgets = (30, 30, 60, 90, 150, 150, 110, 130)
    else:
        td_speed = ["--sizes", "5", "--rounds", "5", "--calls", "10"]
        dv_speed = ["--sizes", "12m", "--seeds", "1", "2", "5", "--rounds", "3",
                    "--train-calls", "5", "--policy-calls", "20"]
        parity = [str(p) for p in sorted(ROOT.glob(PARITY_FILES))]
        td_learn = ["--task", tdmpc2_task, "--preset", "paper", "--seeds", "0", "1",
                    "--env-steps", "50000", "--eval-every", "5000", "--eval-episodes", "10"]
        # 2 seeds vmapped (the online criterion's; nearly free on a GPU) and a checkpoint every
        # 100 ticks (~30 s on an H200), so the budget stop ends the run inside its limit
        dv_learn = ["--task", dreamerv3_task, "--preset", "paper", "--seeds", "0", "1",
                    "--env-steps", "64000", "--eval-every", "16000", "--eval-episodes", "10",
                    "--chunk-ticks", "100"]
        # parity: 108 of the suite's 128 tests (17 skipped) took 208 s on a TPU v5e, the
        # device tests ~40 s; on a TPU the speed stages compile for minutes, so the default
        # stages take two calls there (--only ... then --continue, docs/accelerators.md)
        budgets = (20, 45, 235, 70, 110, 110, 140, 185)
    learn_out = ["--home", str(home), "--out", str(raw / "learning")]
    # pytest: -v so that a stage killed before its junit XML is written still names its
    # tests in the log; the parity tests at the default optimisation level (tests/conftest.py)
    pytest = [py, "-m", "pytest", "-v", "--tb=short", "-p", "no:xdist", "-p", "no:cacheprovider"]
    parity_env = {"JAX_DEFAULT_MATMUL_PRECISION": "highest", "JAX_PLATFORMS": None,
                  "WMX_TEST_XLA_OPT": None}
    if shared is not None:
        parity_env["WMX_SHARED"] = str(shared)

    def dreamerv3_speed(name: str, weight: float, extra: list[str]) -> Stage:
        return Stage(name, weight,
                     [py, str(HERE / "dreamerv3_speed.py"), *dv_speed, *extra,
                      "--load-retries", "0", "--online-presets", "--compile-cache", "",
                      "--logs", str(raw / "logs" / name), "--out", str(raw / f"{name}.json")],
                     env=no_prealloc)

    offline = [] if offline_run is None else [
        Stage("dreamerv3_offline", budgets[7],
              [py, str(HERE / "learning" / "dreamerv3_offline.py"), "--resume",
               str(offline_run), "--out", str(raw / "offline")],
              default=False, learning="dreamerv3_offline", tail_s=60)]
    return [
        Stage("probe", budgets[0], probe),
        # wmx.nn.rbg_bits gives the CPU's bits on every backend (and jax.random's on a GPU);
        # checked here on the device (the test suite runs on the CPU only)
        Stage("device_tests", budgets[1],
              [*pytest, "--junitxml", str(raw / "device_tests.xml"),
               str(ROOT / "tests" / "nn" / "test_rbg_bits.py")]),
        Stage("parity", budgets[2],
              [*pytest, "-m", "parity", "--junitxml", str(raw / "parity.xml"), *parity],
              env=parity_env),
        Stage("tdmpc2_speed", budgets[3],
              [py, str(HERE / "tdmpc2_speed.py"), *td_speed, "--kinds", "plan", "update",
               "--retries", "0", "--no-online", "--out", str(raw / "tdmpc2_speed.json")],
              env=no_prealloc),
        dreamerv3_speed("dreamerv3_speed_f32", budgets[4], []),
        dreamerv3_speed("dreamerv3_speed_bf16", budgets[5], ["--compute-dtype", "bfloat16"]),
        Stage("tdmpc2_learning", budgets[6],
              [py, str(HERE / "learning" / "tdmpc2_online.py"), *td_learn, *learn_out],
              default=False, learning="tdmpc2", tail_s=45),
        Stage("dreamerv3_learning", budgets[7],
              [py, str(HERE / "learning" / "dreamerv3_online.py"), *dv_learn, *learn_out],
              default=False, learning="dreamerv3", tail_s=60),
        *offline,
    ]


def selected(plan: list[Stage], only: set[str] | None) -> list[Stage]:
    """The stages that run: the probe, then those named in ``only``, or without it the
    default stages."""
    return [s for s in plan if s.name == "probe" or (s.name in only if only else s.default)]


# ---- the probe (runs in its own process: the orchestrator never opens the device) -------
def probe_main() -> None:
    """Print one JSON line: jax's backend, platform, devices, device memory and versions."""
    import importlib.metadata as md
    import jax
    devices = jax.devices()
    mem = None
    try:
        mem = devices[0].memory_stats()
    except Exception:  # noqa: BLE001 - not every backend reports
        pass
    versions = {}
    for dist in ("jax", "jaxlib", "libtpu", "libtpu-nightly", "jax-cuda12-plugin",
                 "jax-cuda12-pjrt", "nvidia-cudnn-cu12", "nvidia-cublas-cu12",
                 "jax-cuda13-plugin", "jax-cuda13-pjrt", "nvidia-cudnn-cu13", "nvidia-cublas",
                 "mujoco", "mujoco-mjx", "playground"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    platform = devices[0].platform
    print(json.dumps({
        "backend": jax.default_backend(), "platform": platform, "jax": jax.__version__,
        "versions": versions, "device_kind": devices[0].device_kind,
        "device_count": len(devices),
        "devices": [{"id": d.id, "platform": d.platform, "kind": d.device_kind}
                    for d in devices],
        "accelerator": platform in ACCELERATORS,
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


def tpu_device_files() -> list[str]:
    """The device files a TPU VM's chips appear as (/dev/accel*; /dev/vfio/<n> on v5e and
    later), [] elsewhere."""
    found = [str(p) for p in sorted(Path("/dev").glob("accel*"))]
    vfio = Path("/dev/vfio")
    if vfio.is_dir():
        found += [str(p) for p in sorted(vfio.iterdir()) if p.name.isdigit()]
    return found


# ---- running a stage ----------------------------------------------------------------
def run_stage(argv: list[str], env: dict, log: Path, timeout_s: float,
              grace_s: float = KILL_GRACE_S) -> dict:
    """Run argv in its own session with output to ``log``, as ``timeout -k grace_s
    timeout_s`` would: at ``timeout_s`` SIGTERM to its process group, SIGKILL ``grace_s``
    later if it is still there.

    Args:
      argv: the command.
      env: changes to this process's environment (a None value unsets the variable).
      log: the file of its stdout and stderr.
      timeout_s: its limit, s.
      grace_s: seconds between SIGTERM and SIGKILL.

    Returns:
      {"returncode", "timed_out", "wall_s"}.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    # this checkout's wmx, whatever an installed wmx points at
    path = os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)
    full = {**os.environ, "PYTHONPATH": path}
    for k, v in env.items():
        if v is None:
            full.pop(k, None)
        else:
            full[k] = v
    t0 = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT, env=full,
                                start_new_session=True, preexec_fn=_die_with_parent)
        timed_out = False
        try:
            proc.wait(timeout=max(timeout_s, 1.0))
            if group_alive(proc.pid):     # what it left running (the next stage may need
                kill_group(proc, grace_s)  # the device to itself)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_group(proc, grace_s)
        except BaseException:
            kill_group(proc, grace_s)
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


def kill_group(proc: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """SIGTERM the stage's process group, SIGKILL whatever of it is left ``grace_s`` later
    (also children that outlive a leader that exited on SIGTERM), and reap the leader."""
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(proc.pid):
            break
        time.sleep(0.05)
    _signal_group(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    """Whether any process of the group ``pgid`` is still there."""
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def log_tail(log: Path, n: int = 8) -> list[str]:
    """The last ``n`` non-empty lines of a stage's log (each cut to 300 characters)."""
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


def pytest_results(xml: Path, log: Path, slowest: int = 5) -> dict:
    """A pytest stage's result: from its junit XML, or, when pytest was stopped before
    writing it, from the per-test lines of its ``-v`` log.

    Args:
      xml: the junit XML pytest writes at the end of the session.
      log: the stage's log.
      slowest: how many of the slowest tests to list (junit only).

    Returns:
      {"source", "passed", "failed", "errors", "skipped", "failures": [{"test", "kind",
      "message"}: the first `MESSAGE_LINES` non-empty lines of each failure's or error's
      message (numpy's tolerance, mismatch count and largest differences), at most 800
      characters], "slowest": [[test, s], ...], "time_s"}; from the log, the counts and
      the failing tests' names (messages are in the log).
    """
    try:
        root = ET.parse(xml).getroot()
    except (OSError, ET.ParseError):
        root = None
    if root is not None:
        out = {"source": "junit XML", "passed": 0, "failed": 0, "errors": 0, "skipped": 0,
               "failures": [], "time_s": 0.0}
        times = []
        for case in root.iter("testcase"):
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            t = float(case.get("time") or 0.0)
            out["time_s"] += t
            times.append([name, round(t, 2)])
            bad = case.find("failure")
            kind = "failed"
            if bad is None:
                bad, kind = case.find("error"), "errors"
            if bad is not None:
                out[kind] += 1
                msg = bad.get("message") or (bad.text or "").strip()
                head = [x for x in msg.splitlines() if x.strip()][:MESSAGE_LINES]
                out["failures"].append({"test": name, "kind": kind,
                                        "message": "\n".join(head)[:800]})
            elif case.find("skipped") is not None:
                out["skipped"] += 1
            else:
                out["passed"] += 1
        out["time_s"] = round(out["time_s"], 1)
        out["slowest"] = sorted(times, key=lambda x: -x[1])[:slowest]
        return out
    try:
        text = log.read_text(errors="replace")
    except OSError:
        text = ""
    out = {"source": "log (no junit XML: pytest was stopped)"}
    per_test = re.findall(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", text, re.M)
    kinds = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped"}
    for kind in kinds.values():
        out[kind] = 0
    for _, status in per_test:
        if status in kinds:
            out[kinds[status]] += 1
    out["failures"] = [{"test": t, "kind": kinds[s], "message": None}
                       for t, s in per_test if s in ("FAILED", "ERROR")]
    return out


def tdmpc2_speed_results(path: Path) -> dict | None:
    """Medians (ms), per-seed medians, matmul GFLOP, the rate they imply (TFLOP/s) and the
    device's peak bytes in use, per program (``update_size5``, ``plan_size5_seeds2``...)."""
    res = read_json(path)
    if res is None:
        return None
    out = {"xla_matmul_gflop_per_s": res.get("ceiling_before", {}).get("xla_gflop_per_s")}
    for kind in ("update", "plan"):
        for q in res.get(kind, []):
            n = q.get("seeds", 1)
            mem = q.get("device_memory") or {}
            out[f"{kind}_size{q['model_size']}" + (f"_seeds{n}" if n > 1 else "")] = {
                "median_ms": q["wmx_median_ms"], "cpu_median_ms": q["wmx_cpu_median_ms"],
                "seeds": n, "per_seed_ms": q["wmx_median_ms"] / n,
                "gflop": q["gflop"], "tflop_per_s": q["gflop"] / q["wmx_median_ms"],
                "device_peak_bytes_in_use": mem.get("peak_bytes_in_use")}
    return out


def dreamerv3_speed_results(path: Path, compute_dtype: str = "float32") -> dict | None:
    """Medians (ms), per-seed medians, compile time (s), matmul GFLOP, TFLOP/s and the
    device's peak bytes in use per item (``train_12m``, ``policy_12m_seeds5``...), and
    the stage's ``compute_dtype`` (its --compute-dtype)."""
    res = read_json(path)
    if res is None:
        return None
    out = {"xla_matmul_gflop_per_s": res.get("matmul_baseline", {}).get("gflop_per_s"),
           "compute_dtype": compute_dtype}
    for name, item in res.get("items", {}).items():
        w = item["wmx"]
        n = w.get("seeds", 1)
        mem = w.get("device_memory") or {}
        out[name] = {"median_ms": w["median_ms"], "cpu_median_ms": w["cpu_median_ms"],
                     "seeds": n, "per_seed_ms": w["median_ms"] / n,
                     "compile_s": w.get("compile_s"), "gflop": w.get("gflop"),
                     "tflop_per_s": (w["gflop"] / w["median_ms"]) if w.get("gflop") else None,
                     "xla_total_mib": (w.get("xla_buffers") or {}).get("total_mib"),
                     "device_peak_bytes_in_use": mem.get("peak_bytes_in_use")}
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


def write_json(path: Path, obj: dict, places: dict[str, str] | None = None) -> None:
    """Write ``obj`` as JSON (atomically); ``places`` {absolute path: its name} renames
    the machine's folders in every string, so the record reads the same on any machine."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(portable(obj, places or {}), indent=1))
    os.replace(tmp, path)


def portable(obj, places: dict[str, str]):
    """``obj`` with every string's absolute folders (`places`' keys, longest first) renamed:
    ``<out>``, ``<home>``, ``<shared>``, the checkout as a relative path, ``python``."""
    if isinstance(obj, dict):
        return {k: portable(v, places) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable(v, places) for v in obj]
    if isinstance(obj, str):
        for old in sorted(places, key=len, reverse=True):
            obj = obj.replace(old, places[old])
        return obj
    return obj


# ---- the check ----------------------------------------------------------------------
def scaled(plan: list[Stage], total_s: float, only: set[str] | None = None) -> list[Stage]:
    """Budgets scaled so that the stages that run (`selected`) plus FINISH_RESERVE_S sum to
    ``total_s``; the probe keeps its own (it only opens the device), the stages that do
    not run keep their weights at the same scale."""
    probe, rest = plan[0].budget_s, selected(plan, only)[1:]
    k = (total_s - FINISH_RESERVE_S - probe) / (sum(s.budget_s for s in rest) or 1.0)
    for s in plan[1:]:
        s.budget_s = int(s.budget_s * k * 10) / 10     # rounded down: never over the total
    return plan


def print_plan(plan: list[Stage], total_s: float, only: set[str] | None,
               shared: Path | None) -> None:
    """The stages, their budgets and commands (and why a stage does not run)."""
    runs = selected(plan, only)
    print(f"device_check plan: {len(runs)} stages within {total_s:.0f} s "
          f"({FINISH_RESERVE_S:.0f} s kept for the JSON and the plot; a late stage gets "
          f"SIGTERM, then SIGKILL {KILL_GRACE_S:.0f} s later)")

    def show(a: str) -> str:
        return (os.path.relpath(a, ROOT) if a.startswith(str(ROOT)) else a) or "''"

    for s in plan:
        if s in runs:
            budget, mark = f"{s.budget_s:6.1f} s", ""
        else:
            budget = "     - "
            mark = ("  (skipped)" if only or s.default else f"  (only with --only {s.name})")
        extra = (f" --budget-min <(limit - {s.tail_s:.0f} s) / 60>" if s.learning else "")
        env = [f"-u {k}" for k, v in s.env.items() if v is None] + [
            f"{k}={v}" for k, v in s.env.items()
            if v is not None and k != "XLA_PYTHON_CLIENT_PREALLOCATE"]
        argv = ["python"] + [show(a) for a in s.argv[1:]]
        if s.name == "parity" and len(argv) > 12:
            n_files = sum(a.endswith(".py") for a in argv)
            argv = [a for a in argv if not a.endswith(".py")] + [f"<{n_files} *parity* modules>"]
        print(f"  {s.name:21s} {budget}{mark}  {'env ' + ' '.join(env) + ' ' if env else ''}"
              f"{' '.join(argv)}{extra}")
    print(f"  {'total':21s} {sum(s.budget_s for s in runs) + FINISH_RESERVE_S:6.1f} s "
          "(a stage's limit: its budget plus what earlier stages left unused)")
    if any(s.name == "parity" for s in runs) and not fixtures_found(shared):
        print(f"  note: no fixtures/ in {shared or 'the default shared folder'}: the parity "
              "stage will fail; pass --shared DIR (the folder holding fixtures/)")


def default_shared() -> Path:
    """WMX_SHARED, else the folder ``shared`` beside the checkout (`wmx.paths.shared_dir`'s
    rule, without its check)."""
    env = os.environ.get("WMX_SHARED")
    return Path(env).expanduser().resolve() if env else ROOT.parent / "shared"


def fixtures_found(shared: Path | None) -> bool:
    """Whether ``shared`` holds the parity fixtures (fixtures/ with a folder per agent)."""
    return shared is not None and (shared / "fixtures").is_dir()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=str(HERE / "results"),
                   help="folder of device_check.json, device_check.png and device_check/ "
                        "(default benchmarks/results)")
    p.add_argument("--total-s", type=float, default=DEFAULT_TOTAL_S,
                   help=f"wall-clock budget of the whole check, s (default {DEFAULT_TOTAL_S:.0f}); "
                        "the stage budgets scale with it")
    p.add_argument("--only", nargs="+", default=None, metavar="STAGE",
                   help="run only these stages (the probe always runs); the learning stages "
                        "run only when named here")
    p.add_argument("--replot", metavar="JSON", default=None,
                   help="only draw the plot of a device_check record again (beside it, same "
                        "name with .png); no device needed")
    p.add_argument("--plan", "--dry-run", action="store_true",
                   help="print the stages, their budgets (s) and commands; run nothing")
    p.add_argument("--shared", default=None, metavar="DIR",
                   help="the shared folder whose fixtures/ the parity stage reads (passed on as "
                        "WMX_SHARED; default: WMX_SHARED, else ../shared beside the checkout)")
    p.add_argument("--force-cpu", action="store_true",
                   help="no accelerator needed: the stages at tiny sizes on the CPU "
                        "(JAX_PLATFORMS=cpu), a smoke test of this script")
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
                   help="adds the dreamerv3_offline stage (run with --only dreamerv3_offline): "
                        "this offline check run, made by "
                        "benchmarks/learning/dreamerv3_offline.py --prepare-only (its home "
                        "folder, two levels up, copied with it; --pack DIR copies only what "
                        "training needs), trained with --resume")
    p.add_argument("--continue", dest="continue_", action="store_true",
                   help="continue the check in --out: keep the stages an earlier call there "
                        "passed (status ok, on the same kind of device) and run the others that "
                        "are selected, a failed, timed-out or interrupted stage again; one JSON "
                        "holds every stage (a TPU needs two 10-minute calls for the default "
                        "stages, docs/accelerators.md)")
    p.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe:
        probe_main()
        return 0
    if args.replot is not None:
        src = Path(args.replot)
        record = read_json(src)
        if not check_record(record):
            p.error(f"--replot {args.replot}: not a readable device_check record; give the "
                    "device_check JSON a check wrote")
        png = src.with_suffix(".png")
        if not plot(record, png, plot_title(record)):
            p.error(f"--replot {args.replot}: no stage has a status, nothing to draw")
        print(f"device_check: {png}")
        return 0
    out = Path(args.out).resolve()
    raw = out / "device_check"
    home = Path(tempfile.gettempdir()) / "wmx_device_check_home_XXXXXXXX"   # made when running
    tasks = dict(tdmpc2_task=args.tdmpc2_task, dreamerv3_task=args.dreamerv3_task)
    shared = default_shared()
    if args.shared is not None:
        shared = Path(args.shared).expanduser().resolve()
        if not fixtures_found(shared):
            p.error(f"--shared {args.shared}: no fixtures/ folder there; give the shared folder "
                    "that holds fixtures/ (the parity tests' recordings)")
    offline_run = None
    if args.dreamerv3_offline_run:
        offline_run = Path(args.dreamerv3_offline_run).expanduser().resolve()
        sys.path.insert(0, str(HERE / "learning"))
        from check_run import read_json as read_check_json
        from offline_check import resumable_run, source_run   # the check's own; no jax
        check = "benchmarks/learning/dreamerv3_offline.py"
        try:
            resumable_run(offline_run, "dreamerv3", report_only=False)
            bench = read_check_json(offline_run / "benchmark.json", "--resume")
            for src in bench.get("sources") or []:      # a copied home needs its sources
                source_run(offline_run.parent.parent / src)
        except (SystemExit, ValueError) as e:       # the check's own one-line refusals
            why = str(e).removeprefix(f"--resume {offline_run}: ").removeprefix("--resume: ")
            p.error(f"--dreamerv3-offline-run {offline_run}: {why} (the stage trains "
                    f"DreamerV3 offline check runs, made by {check} --prepare-only)")
    only = set(args.only) if args.only else None
    earlier = None
    kept: dict[str, dict] = {}
    if args.continue_:
        path = out / "device_check.json"
        if not path.is_file():
            p.error(f"--continue: no device_check.json in {out} to continue; run the check "
                    "once without --continue")
        earlier = read_json(path)
        if not check_record(earlier):
            p.error(f"--continue: {path} is not a device_check record (damaged or of another "
                    "program); give another --out, or move that file away to start again")
        kept = passed_stages(earlier)
    if not args.plan and (why := unwritable(out)):
        p.error(f"--out {out}: {why}; give a folder this user can write")

    def make_plan(home: Path) -> list[Stage]:
        return scaled(stages(raw, home, args.force_cpu, **tasks, offline_run=offline_run,
                             shared=shared), args.total_s, only)

    unscaled = stages(raw, home, args.force_cpu, **tasks, offline_run=offline_run)
    names = [s.name for s in unscaled]
    least = FINISH_RESERVE_S + unscaled[0].budget_s + 10
    if args.total_s < least:
        p.error(f"--total-s {args.total_s:g}: give at least {least:.0f} s (the probe, "
                f"{FINISH_RESERVE_S:.0f} s for the JSON and 10 s for a stage)")
    if only and "dreamerv3_offline" in only and offline_run is None:
        p.error("--only dreamerv3_offline: the stage needs --dreamerv3-offline-run RUN_DIR")
    if only and not only <= set(names):
        p.error(f"--only: unknown stage(s) {sorted(only - set(names))}; stages: {', '.join(names)}")
    if kept:                        # the stages an earlier call passed do not run again
        only = {s.name for s in selected(unscaled, only)[1:]} - set(kept)
    if kept and not only:
        print(f"device_check: --continue: every selected stage is already ok in "
              f"{out / 'device_check.json'}; nothing run")
        return 0
    if args.plan:
        if kept:
            print(f"--continue: kept from {out / 'device_check.json'}: {', '.join(kept)}")
        print_plan(make_plan(home), args.total_s, only, shared)
        return 0

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _exit_on_signal)
    t_start = time.monotonic()
    deadline = t_start + args.total_s
    env_cpu = {"JAX_PLATFORMS": "cpu"} if args.force_cpu else {}
    plan = make_plan(home)
    # the probe: nothing is written before it has found a GPU or a TPU
    with tempfile.TemporaryDirectory() as tmp:
        probe_log = Path(tmp) / "probe.log"
        r = run_stage(plan[0].argv, env_cpu, probe_log, plan[0].budget_s)
        lines = [ln for ln in probe_log.read_text(errors="replace").splitlines()
                 if ln.startswith("{")]
        info = json.loads(lines[-1]) if r["returncode"] == 0 and lines else None
        if info is None:
            tail = " | ".join(log_tail(probe_log, 3))
            held = (" (another process holds the TPU: one at a time can use it)"
                    if "lockfile" in tail else "")
            print(f"device_check: the jax probe failed (exit {r['returncode']}"
                  f"{', timed out' if r['timed_out'] else ''}){held}: {tail}")
            return 1
    driver = nvidia_driver()
    if not info["accelerator"] and not args.force_cpu:
        platforms = "/".join(sorted({d["platform"] for d in info["devices"]}))
        forced = os.environ.get("JAX_PLATFORMS", "")
        if forced and not any(x in forced for x in ("cuda", "gpu", "rocm", "tpu")):
            print(f"device_check: no accelerator used: JAX_PLATFORMS={forced} is set (jax "
                  f"{info['jax']} sees only {platforms} devices); nothing run")
            return 0
        if driver:
            print(f"device_check: an NVIDIA driver is present ({driver.splitlines()[0]}) but jax "
                  f"{info['jax']} sees only {platforms} devices: install "
                  "requirements-lock-cuda12.txt (docs/accelerators.md, 'On a GPU'); nothing run")
            return 1
        tpu_files = tpu_device_files()
        if tpu_files:
            print(f"device_check: a TPU device file is present ({tpu_files[0]}) but jax "
                  f"{info['jax']} sees only {platforms} devices: install "
                  "requirements-lock-tpu.txt (docs/accelerators.md, 'On a TPU'); nothing run")
            return 1
        print(f"device_check: no GPU or TPU found (jax {info['jax']} sees only {platforms} "
              "devices); nothing run")
        return 0

    if earlier is not None:
        if (earlier.get("platform"), earlier.get("device_kind")) != (info["platform"],
                                                                     info["device_kind"]):
            print(f"device_check: --continue: {out / 'device_check.json'} is of a "
                  f"{earlier.get('device_kind')} ({earlier.get('platform')}), this device is "
                  f"a {info['device_kind']}; give another --out")
            return 2
    raw.mkdir(parents=True, exist_ok=True)
    home = Path(tempfile.mkdtemp(prefix="wmx_device_check_home_"))
    plan = make_plan(home)
    runs = selected(plan, only)
    record = {
        "what": "benchmarks/device_check.py: the random-bit kernel and the parity suite on the "
                "device, both agents' speed, and (when selected) short paper-protocol learning "
                "runs",
        "mode": ("force-cpu smoke (tiny sizes, not a measurement)" if args.force_cpu
                 else info["platform"]),
        "platform": info["platform"], "device_kind": info["device_kind"],
        "device_count": info["device_count"], "devices": info["devices"],
        "backend": info["backend"], "jax": info["jax"], "versions": info["versions"],
        "device_memory_bytes_limit": info["device_memory_bytes_limit"],
        "default_matmul_precision": info["default_matmul_precision"],
        "nvidia_smi": driver, "python": sys.version.split()[0],
        "git_commit": code_version(), "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "total_budget_s": args.total_s, "kill_grace_s": KILL_GRACE_S,
        "shared": str(shared) if any(s.name == "parity" for s in runs) else None,
        "stages": []}
    if earlier is not None:      # the calls so far, oldest first; this call's fields on top
        record["calls"] = [*(earlier.get("calls") or [call_of(earlier)]), call_of(record)]
        if record["shared"] is None:
            record["shared"] = earlier.get("shared")
    record["stages"].append({"name": "probe", "status": "ok", "budget_s": plan[0].budget_s,
                             "wall_s": r["wall_s"]})
    json_path = out / "device_check.json"
    places = {str(out): "<out>", str(ROOT) + os.sep: "", sys.executable: "python"}
    if not args.keep_home:           # a kept home is named as it is, to be found
        places[str(home)] = "<home>"
    if fixtures_found(shared):       # a folder without fixtures is named in the refusal
        places[str(shared)] = "<shared>"
    write_json(json_path, with_kept(record, kept), places)
    print(f"device_check: {info['device_count']} x {record['device_kind']} ({info['platform']}),"
          f" jax {info['jax']}; budget {args.total_s:.0f} s -> {json_path}", flush=True)
    learning: dict = {}
    try:
        for i, st in enumerate(plan[1:], 1):
            entry = {"name": st.name, "budget_s": st.budget_s,
                     "command": list(st.argv), "env": st.env}
            if st.name in kept:
                record["stages"].append(kept[st.name])
                continue
            record["stages"].append(entry)
            if st not in runs:
                entry["status"] = "skipped"
                continue
            later = sum(s.budget_s for s in plan[i + 1:] if s in runs)
            limit = deadline - time.monotonic() - later - FINISH_RESERVE_S
            if limit < 10:
                entry.update(status="not run", reason=f"{limit:.0f} s left in the budget")
                continue
            if st.name == "parity" and not fixtures_found(shared):
                entry.update(status="failed", reason=(
                    f"no fixtures/ in {shared}: pass --shared DIR, the folder that holds "
                    "fixtures/ (the parity tests' recordings)"))
                print(f"[{time.monotonic() - t_start:5.0f} s] parity: failed: {entry['reason']}",
                      flush=True)
                continue
            argv = list(st.argv)
            if st.learning:
                budget_min = max(0.05, (limit - st.tail_s) / 60)
                argv += ["--budget-min", f"{budget_min:.2f}"]
                entry["command"] = argv
            if st.name == "dreamerv3_offline":     # an earlier call's result is not this one's
                for stale in (raw / "offline").glob("dreamerv3_offline.*"):
                    stale.unlink()
            for stale in (raw / f"{st.name}.xml", raw / f"{st.name}.json"):
                stale.unlink(missing_ok=True)
            log = raw / "logs" / f"{st.name}.log"
            print(f"[{time.monotonic() - t_start:5.0f} s] {st.name}: limit {limit:.0f} s",
                  flush=True)
            res = run_stage(argv, {**st.env, **env_cpu}, log, limit)
            entry.update(limit_s=round(limit, 1), log=str(log.relative_to(out)), **res)
            entry["status"] = ("timeout" if res["timed_out"] else
                               "ok" if res["returncode"] == 0 else "failed")
            if st.name in ("device_tests", "parity"):
                entry["results"] = pytest_results(raw / f"{st.name}.xml", log)
            elif st.name == "tdmpc2_speed":
                entry["results"] = tdmpc2_speed_results(raw / "tdmpc2_speed.json")
            elif st.name.startswith("dreamerv3_speed"):
                dtype = (argv[argv.index("--compute-dtype") + 1] if "--compute-dtype" in argv
                         else "float32")
                entry["results"] = dreamerv3_speed_results(raw / f"{st.name}.json", dtype)
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
            write_json(json_path, with_kept(record, kept), places)
    finally:
        for entry in record["stages"]:
            entry.setdefault("status", "interrupted")   # the check itself was stopped
        title = plot_title(record) + (": --force-cpu smoke, tiny preset" if args.force_cpu
                                      else "")
        try:
            if plot(with_kept(record, kept), out / "device_check.png", title):
                record["plot"] = "device_check.png"
        except Exception as e:   # noqa: BLE001 - the JSON matters more than its plot
            print(f"device_check: the plot failed ({type(e).__name__}: {e}); the JSON is "
                  "written")
        record["wall_s"] = round(time.monotonic() - t_start, 1)
        if "calls" in record:
            record["calls"][-1]["wall_s"] = record["wall_s"]
        if args.keep_home:
            record["home"] = str(home)
        else:
            shutil.rmtree(home, ignore_errors=True)
        write_json(json_path, with_kept(record, kept), places)
    summarise(record)
    return 0


def check_record(record) -> bool:
    """Whether ``record`` reads as a device_check JSON: a mapping whose ``stages`` is a list
    of mappings, each with a text ``name``."""
    return (isinstance(record, dict) and isinstance(record.get("stages"), list)
            and all(isinstance(e, dict) and isinstance(e.get("name"), str)
                    for e in record["stages"]))


def unwritable(out: Path) -> str | None:
    """Why the check could not write ``out`` (a file on the way, a folder without write
    permission), or None; nothing is created."""
    p = out
    while not p.exists():
        if p.parent == p:
            return "no existing folder above it"
        p = p.parent
    if not p.is_dir():
        return f"{p} is not a folder"
    if not os.access(p, os.W_OK | os.X_OK):
        return f"{p} is not writable"
    return None


def with_kept(record: dict, kept: dict[str, dict]) -> dict:
    """``record`` with the kept stages (`passed_stages`) that this call has not reached
    yet appended, so that a JSON written mid-call, or by a killed call, still holds them."""
    seen = {e["name"] for e in record["stages"]}
    rest = [e for name, e in kept.items() if name not in seen]
    return {**record, "stages": record["stages"] + rest} if rest else record


def passed_stages(record: dict) -> dict[str, dict]:
    """{name: entry} of the stages an earlier call passed (status ok), each marked with the
    call that ran it (``call``: its start time); a stage that failed, timed out, was not
    run, skipped or interrupted (any status but ok) runs again."""
    started = record.get("started")
    return {e["name"]: {**e, "call": e.get("call", started)}
            for e in record.get("stages", [])[1:]
            if isinstance(e, dict) and e.get("status") == "ok"}


def call_of(record: dict) -> dict:
    """One call of a check continued over several: its start, commit, budget and wall time."""
    return {k: record.get(k) for k in ("started", "git_commit", "total_budget_s", "wall_s")}


def summarise(record: dict) -> None:
    """A few lines per stage on stdout."""
    print(f"\n{record['device_kind']}: {record['mode']}, {record['wall_s']:.0f} s")
    for st in record["stages"][1:]:
        if st["status"] == "skipped":
            continue
        line = f"  {st['name']:21s} {st['status']:8s}"
        if "wall_s" in st:
            line += f" {st['wall_s']:6.0f} s"
        if st.get("reason"):
            line += f"  {st['reason']}"
        elif st["status"] in ("failed", "timeout") and st.get("log_tail"):
            line += f"  log: {st['log_tail'][-1][-150:]}"
        res = st.get("results") or {}
        if st["name"] in ("device_tests", "parity") and res:
            line += "  " + ", ".join(f"{res[k]} {k}" for k in
                                     ("passed", "failed", "errors", "skipped") if res.get(k))
            for f in res.get("failures", [])[:10]:
                head = " / ".join(x.strip() for x in (f["message"] or "").splitlines()
                                  if x.strip())
                line += f"\n      {f['test']}: {head[:200]}"
        elif "speed" in st["name"]:
            line += "  " + ", ".join(
                f"{k} {v['median_ms']:.2f} ms" + (f" ({v['per_seed_ms']:.2f}/seed)"
                                                  if v.get("seeds", 1) > 1 else "")
                for k, v in res.items() if isinstance(v, dict) and "median_ms" in v)
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
