"""Beam job: pool the store's episode sets of any TaskSet into a dataset.

    beam run pipelines/build_taskset.py --taskset TASKSET.json [--home DIR]
        [--sources SET ...] [--num_shards N] [beam options]

The TaskSet JSON is `wmx.schemas.taskset.TaskSet.to_json()`. Beam options
(--runner, --direct_num_workers, --direct_running_mode, ...) pass through.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout


def add_common_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--home", default=None, help="wmx data root (default $WMX_HOME or ~/.wmx)")
    ap.add_argument("--sources", nargs="+", default=None,
                    help="episode sets to pool (set id, <task>/<set-id>, hash prefix or "
                         "path); default: every set of each task")
    ap.add_argument("--num_shards", type=int, default=None,
                    help="ArrayRecord shards (default ceil(episodes/512)); the content "
                         "hash does not depend on it")


def run(taskset, args, beam_args) -> int:
    from wmx.paths import wmx_home
    from wmx.pipelines.sources import BuildInputError, make_plan, run_build
    runner = next((a.split("=", 1)[1] for a in beam_args if a.startswith("--runner=")),
                  "DirectRunner")
    try:
        plan = make_plan(wmx_home(args.home), taskset, args.sources, args.num_shards,
                         runner=runner)
    except (BuildInputError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = sum(s.num_episodes for s in plan.sources)
    print(f"building {plan.name}: {len(plan.sources)} episode sets, {n} episodes, "
          f"{plan.num_shards} shards")
    dest = run_build(plan, beam_args)
    print(f"dataset {plan.name}@{Path(dest).name[:10]} at {dest}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--taskset", required=True, help="TaskSet JSON file")
    add_common_args(ap)
    args, beam_args = ap.parse_known_args(argv)
    from wmx.schemas.taskset import TaskSet
    return run(TaskSet.from_json(Path(args.taskset).read_text()), args, beam_args)


if __name__ == "__main__":
    sys.exit(main())
