"""Time to the first update of a fresh and of a second, identical train_online invocation.

The second invocation finds its programs in JAX's persistent compilation cache
(``<home>/cache/jax``, on by default) and should skip compiling. Both run in
one fresh data root, one after the other, as separate processes:

    python benchmarks/compile_cache.py --out benchmarks/results/compile_cache_probe.json

Per invocation (run in a child process that calls ``train_online``'s
``main``) it records: the time from the child's start (after Python and JAX
imports) to the end of the first chunk with an update, i.e. when its
metrics row is appended; and, from ``jax.monitoring``, the seconds spent in
XLA backend compiles, the persistent-cache hits and the time they took to
load. A third run with ``--no-compile-cache`` is the uncached reference in
the same session. Use a small preset (the default ``tiny``) so the first
chunk's own compute does not hide the compile time.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path


CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
from collections import defaultdict
import jax.monitoring as mon
from wmx.metrics_csv import MetricsCSV
from wmx.train_online import cli
durations, events, marks = defaultdict(float), defaultdict(int), {}
mon.register_event_duration_secs_listener(lambda k, v, **kw: durations.__setitem__(k, durations[k] + v))
mon.register_event_listener(lambda k, **kw: events.__setitem__(k, events[k] + 1))
append = MetricsCSV.append
def timed_append(self, rows):
    if "first_update_s" not in marks and any(r.get("kind") == "train" and int(r.get("updates") or 0) > 0 for r in rows):
        marks["first_update_s"] = time.perf_counter() - t0
    return append(self, rows)
MetricsCSV.append = timed_append
code = cli.main(sys.argv[2:])
marks["process_s"] = time.perf_counter() - t0
json.dump({"code": code, **marks, "durations": durations, "events": events}, open(sys.argv[1], "w"))
"""


def _invoke(home: Path, name: str, args: argparse.Namespace, extra: list[str]) -> dict:
    argv = ["--agent", "tdmpc2", "--task", args.task, "--preset", args.preset,
            "--env-steps", str(args.env_steps), "--seed-steps", str(args.seed_steps),
            "--episode-length", str(args.episode_length), "--eval-every", str(10 ** 9),
            "--eval-episodes", "1", "--home", str(home), "--name", name, "--no-progress",
            "--no-export", *extra]
    env = {k: v for k, v in os.environ.items() if k != "WMX_NO_COMPILE_CACHE"}
    report = home / f"{name}.json"
    load = os.getloadavg()
    out = subprocess.run([sys.executable, "-c", CHILD, str(report), *argv], capture_output=True,
                         text=True, env=env)
    if out.returncode:
        raise SystemExit(f"train_online {' '.join(argv)} failed:\n{out.stderr[-3000:]}")
    r = json.loads(report.read_text())
    d, e = r["durations"], r["events"]
    return {"name": name, "flags": extra, "first_update_s": round(r["first_update_s"], 2),
            "process_s": round(r["process_s"], 2),
            "backend_compile_s": round(d.get("/jax/core/compile/backend_compile_duration", 0), 2),
            "cache_hits": e.get("/jax/compilation_cache/cache_hits", 0),
            "cache_load_s": round(d.get("/jax/compilation_cache/cache_retrieval_time_sec", 0), 2),
            "load_before": load}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="probe-action", help="train_online's task (default "
                    "probe-action: no MJX compile, so the agent's programs dominate)")
    ap.add_argument("--preset", default="tiny", help="TD-MPC2 preset (default tiny)")
    ap.add_argument("--episode-length", type=int, default=20, help="T in agent steps")
    ap.add_argument("--env-steps", type=int, default=80, help="env steps of each run")
    ap.add_argument("--seed-steps", type=int, default=20,
                    help="random-action agent steps before the first update")
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here (it is always printed)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="wmx-cc-") as tmp:
        home = Path(tmp)
        runs = [_invoke(home, "fresh", args, []), _invoke(home, "cached", args, []),
                _invoke(home, "uncached", args, ["--no-compile-cache"])]
        cache_files = sum(1 for _ in (home / "cache" / "jax").iterdir())
    fresh, cached = runs[0]["first_update_s"], runs[1]["first_update_s"]
    result = {"task": args.task, "preset": args.preset, "episode_length": args.episode_length,
              "env_steps": args.env_steps, "runs": runs, "cache_entries": cache_files,
              "cached_over_fresh_first_update": round(cached / fresh, 3),
              "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(),
                          "python": platform.python_version()},
              "date": time.strftime("%Y-%m-%d %H:%M")}
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
