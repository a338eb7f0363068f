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
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# this folder's helper modules, and this checkout's wmx, whatever an installed wmx points at
sys.path[:0] = [str(HERE), str(ROOT)]
from wmx.version import code_version  # noqa: E402  (no jax: the orchestrator never imports it)

from _device_plot import learning_of, plot, plot_title, speed_series  # noqa: E402,F401
from _device_probe import nvidia_driver, probe_main, tpu_device_files  # noqa: E402
from _device_record import (call_of, check_record, passed_stages, portable,  # noqa: E402,F401
                            summarise, unwritable, with_kept, write_json)
from _device_results import (dreamerv3_speed_results, learning_results,  # noqa: E402
                             offline_results, pytest_results, read_json, tdmpc2_speed_results)
from _device_run import KILL_GRACE_S, _exit_on_signal, log_tail, run_stage  # noqa: E402
from _device_stages import (FINISH_RESERVE_S, TASK, Stage, default_shared,  # noqa: E402
                            fixtures_found, print_plan, scaled, selected, stages)

DEFAULT_TOTAL_S = 570.0


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


if __name__ == "__main__":
    sys.exit(main())
