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
    from wmx.pipelines.options import check_beam_args
    from wmx.pipelines.sources import BuildInputError, build_failure, make_plan, run_build
    try:
        runner = check_beam_args(beam_args, ["--home", "--tasks", "--taskset", "--sources",
                                             "--num_shards"])
        plan = make_plan(wmx_home(args.home), taskset, args.sources, args.num_shards,
                         runner=runner)
    except (BuildInputError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n = sum(s.num_episodes for s in plan.sources)
    dups = sum(len(s.skip) for s in plan.sources)
    print(f"building {plan.name}: {len(plan.sources)} episode sets, {n - dups} episodes, "
          f"{plan.num_shards} shards" + (f" ({dups} duplicate episodes dropped, listed in "
                                         "the manifest's builder.duplicates)" if dups else ""))
    try:
        dest = run_build(plan, beam_args)
    except Exception as e:  # noqa: BLE001 - expected failures become one line, others re-raised
        line = build_failure(e)
        if line is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 1
    print(f"dataset {plan.name}@{Path(dest).name[:10]} at {dest}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--taskset", required=True, help="TaskSet JSON file")
    add_common_args(ap)
    args, beam_args = ap.parse_known_args(argv)
    from wmx.schemas.taskset import TaskSet
    try:
        taskset = TaskSet.from_json(Path(args.taskset).read_text())
    except (OSError, ValueError) as e:
        print(f"error: --taskset {args.taskset}: {e}", file=sys.stderr)
        return 2
    return run(taskset, args, beam_args)


if __name__ == "__main__":
    sys.exit(main())
