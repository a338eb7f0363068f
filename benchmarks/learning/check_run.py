"""What the online and offline learning checks do alike with their run directories.

A check's run is a trainer's run directory (train_online's or train_offline's) that the
check also describes in its ``benchmark.json``; this module keeps the parts both kinds
share: the resume command the run records for `wmx runs info`, reading a run's JSON files
with a one-line error for a damaged one, training under the run's lock, and the paths a
result file records (relative to the data root, so a result names no machine's folders).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, Iterator


def parse(p: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``p.parse_args(argv)`` (``argv`` None: the command line) with ``given``: the dests of
    the flags typed, which ``--resume`` compares with the run's saved config
    (`wmx.runs.cli_common.resume_changes`)."""
    from wmx.runs.cli_common import given_flags
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    args.given = given_flags(p, argv)
    return args


def portable(obj: Any, run_dir: Path | str) -> Any:
    """``obj`` (a result: nested dicts, lists, strings, numbers) with every path under the
    run's data root (``run_dir``'s grandparent, ``<home>/runs/<name>``) written relative to
    it (``runs/<name>``, ``datasets/...``) and every path under the working directory
    relative to that (a results folder in the repository); ``.`` for either root itself.
    Strings are rewritten where a root occurs in them, so a recorded command line is too."""
    roots = [str(Path(run_dir).expanduser().resolve().parent.parent), str(Path.cwd())]

    def rewrite(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: rewrite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [rewrite(x) for x in v]
        if isinstance(v, str):
            for root in roots:
                if v == root:
                    return "."
                if root != "/":
                    v = v.replace(root + "/", "")
        return v
    return rewrite(obj)


def resume_command(agent: str, kind: str) -> str:
    """The command that continues a check run of ``agent`` (``kind``: "online" |
    "offline"), from the repository root, less the run directory: recorded in the run's
    benchmark.json as ``resume_command`` for `wmx runs info` to print."""
    return f"python benchmarks/learning/{agent}_{kind}.py --resume"


def read_json(path: Path, flag: str) -> dict[str, Any]:
    """The JSON object in ``path``. Raises SystemExit naming ``flag`` and the file when it
    is missing, unreadable or not an object (a damaged run directory)."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"{flag}: {path} is unreadable ({type(e).__name__}: {e}); the run "
                         "directory is damaged") from None
    if not isinstance(data, dict):
        raise SystemExit(f"{flag}: {path} holds no JSON object; the run directory is damaged")
    return data


def record_resume_command(run_dir: Path, agent: str, kind: str) -> None:
    """Add `resume_command` to the run's benchmark.json (written atomically; created when
    missing, replaced whole when damaged) unless it holds one."""
    from wmx.runs.cli_common import replace_json
    path = Path(run_dir) / "benchmark.json"
    try:
        bench = json.loads(path.read_text()) if path.is_file() else {}
    except ValueError:
        bench = {}
    if not isinstance(bench, dict):
        bench = {}
    if "resume_command" not in bench:
        replace_json(path, {**bench, "resume_command": resume_command(agent, kind)},
                     sort_keys=False)


@contextlib.contextmanager
def training(run_dir: Path, changes: dict[str, Any]) -> Iterator[Any]:
    """Hold the run's lock as the trainers do (`wmx.runs.owner.hold_run`: `wmx runs` shows
    it running, a second trainer fails at once), record ``changes`` (config.json keys a
    resume extends or changes) in its config.json under that lock, and yield Ctrl-C's
    stop request (`wmx.runs.interrupt.stop_on_interrupt`) for the trainer's loop. Turns on
    JAX's persistent compilation cache in the run's data root as the trainers' commands do
    (`wmx.runs.cli_common.enable_compile_cache`; off with WMX_NO_COMPILE_CACHE=1), so a
    resumed check loads its programs instead of compiling them again (minutes for the
    paper presets on an accelerator). Raises SystemExit when another process took the
    lock since the check looked."""
    from wmx.runs.cli_common import enable_compile_cache, rewrite_config
    from wmx.runs.interrupt import stop_on_interrupt
    from wmx.runs.owner import RunBusyError, hold_run
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(hold_run(run_dir))
        except RunBusyError as e:
            raise SystemExit(f"{run_dir}: {e}") from None
        enable_compile_cache(Path(run_dir).resolve().parent.parent)
        if changes:
            cfg = read_json(Path(run_dir) / "config.json", "--resume")
            rewrite_config(run_dir, {**cfg, **changes})
        yield stack.enter_context(stop_on_interrupt("the running chunk"))
