"""A/B of glibc malloc tunables on wmx's DreamerV3 training step: time and resident memory.

glibc reads ``GLIBC_TUNABLES`` only at process start, so each variant is its own worker
process (`dreamerv3_speed.py`'s wmx worker: the paper config at ``--size``, walker dims,
a batch of 16 windows of 64 + 1 rows, the trainers' compile options); the driver
alternates their timed blocks (round r starts at variant r mod n) and records, per
variant, the median wall and process-CPU time per training step over all blocks and the
worker's resident memory (RSS) after every block: does a variant keep its memory flat
over many steps, and at what cost in time? wmx against wmx, for a setting of the
trainers' restart (`wmx.runs.heap`); not a speed target (those are ratios against the
official code, `dreamerv3_speed.py`).

    python benchmarks/allocator_ab.py --size 1m --rounds 8 --calls 5 \\
        --variants glibc.malloc.hugetlb=1 glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=131072 \\
        --out benchmarks/results/allocator_ab_1m.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from _worker import Worker  # noqa: E402
from memory_watch import write_json  # noqa: E402


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid``, MiB (/proc/<pid>/statm)."""
    pages = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def summary(blocks: list[dict]) -> dict:
    """Medians over every call of a variant's blocks, and its RSS after the first and the
    last block with the growth per block in between (MiB)."""
    wall = [x for b in blocks for x in b["wall_ms"]]
    cpu = [x for b in blocks for x in b["cpu_ms"]]
    rss = [b["rss_mib"] for b in blocks]
    return {"median_wall_ms": statistics.median(wall), "median_cpu_ms": statistics.median(cpu),
            "calls": len(wall), "rss_first_mib": rss[0], "rss_last_mib": rss[-1],
            "rss_mib_per_block": (rss[-1] - rss[0]) / (len(rss) - 1) if len(rss) > 1 else None}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--variants", nargs="+", required=True, metavar="TUNABLES",
                   help="GLIBC_TUNABLES of each worker ('' for none)")
    p.add_argument("--size", default="1m", choices=("1m", "12m"))
    p.add_argument("--rounds", type=int, default=8, help="blocks per variant")
    p.add_argument("--calls", type=int, default=5, help="timed training steps per block")
    p.add_argument("--logs", default=None,
                   help="worker logs (default: a folder in the temporary directory)")
    p.add_argument("--out", type=Path, required=True, help="JSON to write")
    args = p.parse_args(argv)
    from dreamerv3_speed import ACTION_DIM, BATCH_LENGTH, BATCH_SIZE, N_ENVS, OBS_DIM
    import tempfile
    logs = Path(args.logs) if args.logs else Path(tempfile.gettempdir()) / "wmx_allocator_ab_logs"
    env = {"WMX_HUGE_PAGES": "0"}
    workers = [Worker(f"v{i}", [sys.executable, str(HERE / "dreamerv3_speed.py"), "--worker"],
                      logs / f"v{i}.log", env={**env, "GLIBC_TUNABLES": v})
               for i, v in enumerate(args.variants)]
    res: dict = {"size": args.size, "variants": args.variants, "rounds": args.rounds,
                 "calls": args.calls, "cpus": os.cpu_count(),
                 "started": time.strftime("%Y-%m-%d %H:%M:%S"), "blocks": {}}
    try:
        for w in workers:
            w.send("setup", size=args.size, obs_dim=OBS_DIM, action_dim=ACTION_DIM,
                   batch_size=BATCH_SIZE, batch_length=BATCH_LENGTH, n_envs=N_ENVS)
        for w in workers:
            w.recv()
            w.call("time", item="train", repeats=1)          # warm-up
        blocks = {v: [] for v in args.variants}
        n = len(workers)
        for r in range(args.rounds):
            for k in range(n):
                i = (r + k) % n
                t = workers[i].call("time", item="train", repeats=args.calls)
                blocks[args.variants[i]].append({"round": r, **t,
                                                 "rss_mib": round(rss_mib(workers[i].pid), 1)})
            res["blocks"] = blocks
            res["summary"] = {v: summary(b) for v, b in blocks.items()}
            write_json(args.out, res)
            print(f"round {r + 1}/{args.rounds}: " + "; ".join(
                f"[{v or 'none'}] {s['median_wall_ms']:.0f} ms, RSS {s['rss_last_mib']:.0f} MiB"
                for v, s in res["summary"].items()), flush=True)
    finally:
        for w in workers:
            w.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
