"""Host memory of a train_online run from inside: resident, or in use by malloc?

`memory_watch.py` samples a run's resident set size (RSS) from outside; when it grows,
it cannot say whether the run keeps more objects (a leak) or glibc's allocator keeps
freed memory it cannot hand back (fragmented arenas). This script runs ``train_online``
in its own process and samples both at the start of every chunk (or ``--chunk-ticks``
part), right after the trainer's ``malloc_trim`` (`wmx.runs.heap.release_free_heap`):
RSS (/proc/self/statm) and the bytes malloc has handed out and not had back
(``mallinfo2``: ``uordblks`` + ``hblkhd``, summed over every arena). The run is the
trainer's own, with the huge-page tunable the trainers use (restarted with it once, as
they are). After ``--parts`` samples it asks the trainer to stop, as Ctrl-C does (the
part that runs finishes and checkpoints).

Writes ``--out`` (JSON, replaced atomically after every sample) with the per-part
samples and the growth per part of each (least-squares slope from the first part with
training updates on), and a plot beside it.

    python benchmarks/memory_in_use.py --parts 40 --out benchmarks/results/dreamerv3_memory_in_use_cpu.json \\
        -- --agent dreamerv3 --task reacher-easy --preset cpu --env-steps 16000 --chunk-ticks 4 \\
           --seeds 0 --eval-every 100000 --no-export --no-progress
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_watch import save_figure, write_json  # noqa: E402

_MIB = 2**20


class _Mallinfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                                               "hblkhd", "usmblks", "fsmblks", "uordblks",
                                               "fordblks", "keepcost")]


def sample() -> dict | None:
    """This process's memory now, MiB: ``rss`` (resident), ``in_use`` (handed out by malloc
    and not freed: small and large blocks), ``arena`` (the arenas' size, free parts
    included), ``mmapped`` (blocks malloc mapped on their own). None off glibc 2.33+
    (no ``mallinfo2``)."""
    try:
        fn = ctypes.CDLL(None).mallinfo2
    except (AttributeError, OSError):
        return None
    fn.restype = _Mallinfo2
    mi = fn()
    rss = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return {"rss_mib": round(rss / _MIB, 2), "in_use_mib": round((mi.uordblks + mi.hblkhd) / _MIB, 2),
            "arena_mib": round(mi.arena / _MIB, 2), "mmapped_mib": round(mi.hblkhd / _MIB, 2)}


def slope(samples: list[dict], key: str, first: int) -> float | None:
    """MiB per part of ``key`` over the samples from index ``first`` on (a least-squares
    line); None with fewer than 3."""
    ys = [s[key] for s in samples[first:]]
    if len(ys) < 3:
        return None
    return float(np.polyfit(np.arange(len(ys)), ys, 1)[0])


def plot(samples: list[dict], path: Path, title: str) -> None:
    """RSS and the bytes in use against the part index."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3.5))
    xs = [s["part"] for s in samples]
    ax.plot(xs, [s["rss_mib"] for s in samples], marker=".", lw=1, label="resident (RSS)")
    ax.plot(xs, [s["in_use_mib"] for s in samples], marker=".", lw=1,
            label="in use (malloc, after malloc_trim)")
    ax.set_xlabel("part (sampled at its start)")
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=7)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    save_figure(fig, path)


def main(argv=None) -> int:
    from wmx.runs.heap import restart_with_huge_pages
    restart_with_huge_pages(argv)         # from a command line: the trainers' allocator
    argv = list(sys.argv[1:] if argv is None else argv)
    ours, theirs = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv \
        else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="%(prog)s [--parts N] [--steady-from K] --out JSON -- "
                                      "TRAIN_ONLINE_ARGS")
    p.add_argument("--parts", type=int, default=40,
                   help="samples (chunk starts) to take, then stop the run as Ctrl-C does")
    p.add_argument("--steady-from", type=int, default=1,
                   help="first sample of the steady state the slopes are fitted on (default 1: "
                        "after the first part, which compiles; DreamerV3 online trains from "
                        "tick 64 on, so with --chunk-ticks C give 64 / C + 1)")
    p.add_argument("--out", type=Path, required=True, help="JSON to write (plot beside it)")
    args = p.parse_args(ours)
    if not theirs:
        p.error("give train_online's arguments after --")
    if sample() is None:
        print("memory_in_use: this C library has no mallinfo2 (glibc 2.33+ needed)",
              file=sys.stderr)
        return 2
    import wmx.train_online.loop as loop
    from wmx.train_online import cli
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0, samples = time.monotonic(), []
    res = {"train_online": theirs, "glibc_tunables": os.environ.get("GLIBC_TUNABLES"),
           "steady_from": args.steady_from, "samples": samples}
    trim = loop.release_free_heap

    def at_chunk_start() -> bool:
        released = trim()
        samples.append({"part": len(samples), "t_s": round(time.monotonic() - t0, 1),
                        **sample()})
        res.update(rss_mib_per_part=slope(samples, "rss_mib", args.steady_from),
                   in_use_mib_per_part=slope(samples, "in_use_mib", args.steady_from))
        write_json(args.out, res)
        if len(samples) == args.parts:
            os.kill(os.getpid(), signal.SIGINT)     # the trainer stops after this part
        return released

    loop.release_free_heap = at_chunk_start
    try:
        rc = cli.main(theirs)
    finally:
        loop.release_free_heap = trim
    if samples:
        import textwrap
        plot(samples, args.out.with_suffix(".png"),
             "\n".join(textwrap.wrap(f"train_online {' '.join(theirs)}", 95)[:3]))
    print(json.dumps({k: res.get(k) for k in ("steady_from", "rss_mib_per_part",
                                             "in_use_mib_per_part")}, indent=1))
    from wmx.runs.interrupt import EXIT_INTERRUPTED
    return 0 if rc in (0, EXIT_INTERRUPTED) else rc


if __name__ == "__main__":
    sys.exit(main())
