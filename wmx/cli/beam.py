"""The `beam` command: run a Beam job file as `__main__` with the given args.

Apache Beam installs no command of its own; wmx provides
`beam run JOB.py [beam options and job args]`, e.g.
`beam run pipelines/build_mt19.py --direct_num_workers=2`.
"""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

USAGE = "usage: beam run JOB.py [args...]   (runs JOB.py as __main__ with args)"


def _where_instead(job: Path) -> str:
    """The rest of the not-found line: a relative path is taken from the current folder,
    so name the repository's job of that name where wmx's checkout has one."""
    from wmx.paths import REPO_ROOT
    if job.is_absolute():
        return "; give the path of a Beam job script"
    there = REPO_ROOT / "pipelines" / job.name
    if there.is_file():
        return (f" (a relative path is taken from the current folder, {Path.cwd()}); "
                f"wmx's repository has it at: beam run {there}")
    return (f" (a relative path is taken from the current folder, {Path.cwd()}); give the "
            f"path of a Beam job script, e.g. beam run {REPO_ROOT / 'pipelines' / 'build_mt19.py'}")


def main(argv: list[str] | None = None) -> int:
    """Entry point of `beam`. Returns the exit status.

    `beam run JOB.py ARGS...` sets `sys.argv = [JOB.py, *ARGS]` and runs the file
    as `__main__`. An unknown subcommand or a missing job name prints the usage, a job
    file not found one line naming where wmx's repository has a job of that name; each
    returns 2.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] != "run":
        print(f"beam: unknown command {argv[0]!r}; the command is `beam run JOB.py`\n{USAGE}",
              file=sys.stderr)
        return 2
    if len(argv) < 2:
        print(f"beam: error: `beam run` needs a job file, e.g. beam run "
              f"pipelines/build_mt19.py\n{USAGE}", file=sys.stderr)
        return 2
    job = Path(argv[1])
    if not job.is_file():
        print(f"beam: job file {job} not found{_where_instead(job)}", file=sys.stderr)
        return 2
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [str(job), *argv[2:]]
    sys.path.insert(0, str(job.resolve().parent))
    try:
        runpy.run_path(str(job), run_name="__main__")
    except SystemExit as e:  # the job's own exit status
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
    return 0


if __name__ == "__main__":
    sys.exit(main())
