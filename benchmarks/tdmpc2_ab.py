"""A/B timing of two wmx checkouts' TD-MPC2 update and planning decision.

Each checkout runs in its own worker process (``PYTHONPATH=<checkout>``);
the driver alternates blocks (A, B, A, B, ...) and reports per quantity the
median process CPU time per call (and wall time) over all blocks, after one
warm-up call. The programs are `tdmpc2_speed.py`'s (paper config, walker dims
O=24, A=6; update batch 256 with the state fed back; decision with fresh
draws per call).

    python benchmarks/tdmpc2_ab.py --a /work/main --b . --sizes 1 5 \\
        --what plan update --rounds 4 --calls 3
    python benchmarks/tdmpc2_ab.py --a . --b . --a-env GLIBC_TUNABLES=glibc.malloc.hugetlb=1 \\
        --b-env GLIBC_TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4194304
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

BENCH_DIR = str(Path(__file__).resolve().parent)

WORKER = r"""
import json, sys, time
sys.path.insert(0, BENCH_DIR)
from tdmpc2_speed import wmx_plan, wmx_update   # wmx from the checkout on PYTHONPATH

def mk_update(size):
    return wmx_update(size)[0]

def mk_plan(size):
    return wmx_plan(size)[0]

fns = {}
for line in sys.stdin:
    q, n = json.loads(line)
    if q not in fns:
        what, size = q.split(":")
        fns[q] = (mk_update if what == "update" else mk_plan)(int(size))
        fns[q]()
    cpu, wall = [], []
    for _ in range(n):
        c0, w0 = time.process_time(), time.perf_counter()
        fns[q]()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - w0)
    print(json.dumps({"cpu": cpu, "wall": wall}), flush=True)
"""


def start(path: str, extra_env: list[str] = ()) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(path),
               **dict(kv.split("=", 1) for kv in extra_env))
    return subprocess.Popen([sys.executable, "-c",
                             f"BENCH_DIR = {BENCH_DIR!r}\n" + WORKER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, env=env,
                            cwd=os.path.abspath(path))


def ask(p: subprocess.Popen, q: str, n: int) -> dict:
    p.stdin.write(json.dumps([q, n]) + "\n")
    p.stdin.flush()
    return json.loads(p.stdout.readline())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", default="/work/main")
    ap.add_argument("--b", default=".")
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 5])
    ap.add_argument("--what", nargs="+", default=["plan", "update"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--calls", type=int, default=3)
    ap.add_argument("--a-env", action="append", default=[], metavar="KEY=VALUE",
                    help="environment of A's worker (repeatable), e.g. GLIBC_TUNABLES=...: "
                         "one checkout under two process settings")
    ap.add_argument("--b-env", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    workers = {"A": start(args.a, args.a_env), "B": start(args.b, args.b_env)}
    res = {}
    for what in args.what:
        for size in args.sizes:
            q = f"{what}:{size}"
            got = {"A": {"cpu": [], "wall": []}, "B": {"cpu": [], "wall": []}}
            for r in range(args.rounds):
                for side in (("A", "B") if r % 2 == 0 else ("B", "A")):
                    x = ask(workers[side], q, args.calls)
                    got[side]["cpu"] += x["cpu"]
                    got[side]["wall"] += x["wall"]
            med = {s: {k: 1e3 * statistics.median(v) for k, v in d.items()}
                   for s, d in got.items()}
            res[q] = med
            print(f"{q}: A cpu {med['A']['cpu']:.1f} ms wall {med['A']['wall']:.1f} | "
                  f"B cpu {med['B']['cpu']:.1f} ms wall {med['B']['wall']:.1f} | "
                  f"B/A cpu {med['B']['cpu'] / med['A']['cpu']:.3f} "
                  f"wall {med['B']['wall'] / med['A']['wall']:.3f} "
                  f"(load {os.getloadavg()[0]:.1f})", flush=True)
    for p in workers.values():
        p.stdin.close()
        p.wait()
    print(json.dumps(res))


if __name__ == "__main__":
    main()
