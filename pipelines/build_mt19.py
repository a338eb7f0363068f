"""Beam job: build the mt19 pooled dataset from the episode sets in the store.

    beam run pipelines/build_mt19.py [--home DIR] [--tasks a,b,...]
        [--sources SET ...] [--num_shards N] [--dask_workers N] [beam options]
    python pipelines/build_mt19.py ...          (same)

All episode sets of each mt19 task by default; --tasks builds a subset, which
is a different TaskSet with its own name (mt19-<8 hex>); a task without episode
sets is an error naming it. DirectRunner by default (--direct_num_workers=N
--direct_running_mode=multi_processing); --runner=dask on a local Dask cluster
of --dask_workers processes, or on any Dask cluster with
--dask_client_address=HOST:PORT (the store on a filesystem every worker sees);
--runner=flink|spark|dataflow are documented, untested (docs/datasets.md).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from build_taskset import BEAM_EPILOG, add_common_args, run  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Build mt19 (or a --tasks subset) with Beam.",
                                 epilog=BEAM_EPILOG,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=None,
                    help="comma-separated subset of mt19 tasks (its own TaskSet name, "
                         "mt19-<8 hex>)")
    add_common_args(ap)
    args, beam_args = ap.parse_known_args(argv)
    from wmx.schemas.taskset import mt19
    ts = mt19()
    if args.tasks:
        try:
            ts = ts.subset([t.strip() for t in args.tasks.split(",") if t.strip()])
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return run(ts, args, beam_args)


if __name__ == "__main__":
    sys.exit(main())
