"""Host memory of a long run, sampled from outside: does it stay flat?

Samples the resident set size (VmRSS, MiB) of a process and all its
descendants every ``--every`` seconds until the process exits (or
``--minutes`` pass), and, given the run directory, the env steps the run's
metrics.csv has reached and its newest checkpoint at each sample. Writes
``--out`` (JSON, replaced atomically after every sample, so a stopped watcher
loses nothing) and, at the end, a plot beside it. On CPU the device's buffers
are host memory, so this is the whole footprint of a CPU run (replay,
parameters, optimizer state, compiled programs).

Verdict: the growth from the first sample after the watched process wrote its
first checkpoint (the run's steady state: replay allocated at capacity, programs
compiled, a chunk or ``--chunk-ticks`` part done; a resumed run's older
checkpoints do not count) to the peak after it, in MiB and relative; ``flat``
when it is under ``--tolerance`` (default 10 %).

    python benchmarks/memory_watch.py --pid 1234 --run-dir RUN_DIR \\
        --out benchmarks/results/dreamerv3_memory_cartpole-balance.json
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import sys
import time
from pathlib import Path

_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (exists and is not a zombie waiting for its parent)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (Linux /proc/<pid>/task/*/children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        for task in Path(f"/proc/{p}/task").glob("*"):
            try:
                todo += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return out


def rss_mib(pids: list[int]) -> float:
    """Summed resident set size (MiB) of ``pids`` (/proc/<pid>/statm); gone ones count 0."""
    total = 0
    for p in pids:
        try:
            total += int(Path(f"/proc/{p}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total * _PAGE_MIB


def env_steps_reached(run_dir: Path | None) -> int | None:
    """The largest env_steps of any row of ``run_dir``/metrics.csv; None without one."""
    if run_dir is None or not (run_dir / "metrics.csv").exists():
        return None
    with (run_dir / "metrics.csv").open() as f:
        steps = [int(r["env_steps"]) for r in csv.DictReader(f) if r.get("env_steps")]
    return max(steps, default=None)


def newest_checkpoint(run_dir: Path | None) -> int | None:
    """The step (int) of the newest complete checkpoint in ``run_dir``/checkpoints (a
    numbered folder with its host.json, the rule of `wmx.checkpoint.list_checkpoints`,
    not imported so that the watcher loads no jax/orbax beside the run); None without one."""
    root = None if run_dir is None else run_dir / "checkpoints"
    if root is None or not root.is_dir():
        return None
    steps = [int(d.name) for d in root.iterdir()
             if d.name.isdigit() and (d / "host.json").is_file()]
    return max(steps, default=None)


def verdict(samples: list[dict], tolerance: float, run_watched: bool = True) -> dict:
    """Growth after the steady state: from the first sample whose newest checkpoint is
    not the one of the first sample (the watched process wrote one; the first sample
    when ``run_watched`` is False) to the peak after it. Returns {"baseline_mib",
    "peak_mib", "growth_mib", "growth_rel", "flat"}, or {"flat": None} while there is
    no steady state yet."""
    if run_watched:
        first = samples[0].get("checkpoint") if samples else None
        start = next((i for i, s in enumerate(samples)
                      if s.get("checkpoint") is not None and s["checkpoint"] != first), None)
    else:
        start = 0 if samples else None
    if start is None:
        return {"flat": None}
    base = samples[start]["rss_mib"]
    peak = max(s["rss_mib"] for s in samples[start:])
    growth = peak - base
    return {"baseline_mib": base, "peak_mib": peak, "growth_mib": growth,
            "growth_rel": growth / base if base else None,
            "flat": bool(base and growth / base < tolerance)}


def write_json(path: Path, obj: dict) -> None:
    """Replace ``path`` atomically (write a sibling, then rename)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=1))
    os.replace(tmp, path)


def plot(samples: list[dict], path: Path, title: str) -> None:
    """RSS against env steps (or minutes when no run directory was watched)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = [s.get("env_steps") for s in samples]
    use_steps = any(x is not None for x in steps)
    xs = [x or 0 for x in steps] if use_steps else [s["t_s"] / 60 for s in samples]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(xs, [s["rss_mib"] for s in samples], marker=".", lw=1)
    ax.set_xlabel("env steps logged" if use_steps else "minutes")
    ax.set_ylabel("resident memory (MiB)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def save_figure(fig, path: Path) -> None:
    """Write a matplotlib figure to ``path`` atomically (a sibling, then a rename) and
    close it."""
    import matplotlib.pyplot as plt
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pid", type=int, required=True, help="the run's process id")
    p.add_argument("--run-dir", type=Path, default=None,
                   help="its run directory (the env steps and newest checkpoint per sample)")
    p.add_argument("--every", type=float, default=30.0, help="seconds between samples")
    p.add_argument("--minutes", type=float, default=None, help="stop after this long")
    p.add_argument("--tolerance", type=float, default=0.10,
                   help="relative growth after the steady state still called flat")
    p.add_argument("--out", type=Path, required=True, help="JSON to write (plot beside it)")
    args = p.parse_args(argv)
    if not alive(args.pid):
        print(f"memory_watch: no process {args.pid}; give the pid of a running run",
              file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0, samples = time.monotonic(), []
    deadline = None if args.minutes is None else t0 + 60 * args.minutes
    # the run as its data root names it (runs/<name>), not a path of this machine
    run_name = (None if args.run_dir is None else
                f"{args.run_dir.resolve().parent.name}/{args.run_dir.resolve().name}")
    res = {"pid": args.pid, "run_dir": run_name,
           "every_s": args.every, "tolerance": args.tolerance, "samples": samples}
    while alive(args.pid) and (deadline is None or time.monotonic() < deadline):
        samples.append({"t_s": round(time.monotonic() - t0, 1),
                        "rss_mib": round(rss_mib(descendants(args.pid)), 1),
                        "env_steps": env_steps_reached(args.run_dir),
                        "checkpoint": newest_checkpoint(args.run_dir)})
        res["verdict"] = verdict(samples, args.tolerance, args.run_dir is not None)
        write_json(args.out, res)
        time.sleep(args.every)
    if samples:
        plot(samples, args.out.with_suffix(".png"), f"host memory, pid {args.pid}")
    print(json.dumps(res.get("verdict", {}), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
