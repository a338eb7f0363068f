"""What the online and offline learning checks do alike with their run directories.

A check's run is a trainer's run directory (train_online's or train_offline's) that the
check also describes in its ``benchmark.json``; this module keeps the parts both kinds
share: the resume command the run records for `wmx runs info`, reading a run's JSON files
with a one-line error for a damaged one, training under the run's lock, the code version
and device of every training call, and the paths a result file records (relative to the
data root, so a result names no machine's folders).
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import sys
import time
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


def last_logged(run_dir: Path, column: str) -> int:
    """The largest ``column`` (a step: "env_steps", "updates") of the whole rows of the
    run's metrics.csv (0 without one): a row a killed process left incomplete is left out,
    as a resume drops it (`wmx.metrics_csv.kept_rows`)."""
    from wmx.metrics_csv import kept_rows
    path = Path(run_dir) / "metrics.csv"
    try:
        with path.open(newline="") as f:
            columns = next(csv.reader(f), [])
    except OSError:
        return 0
    if column not in columns:
        return 0
    return max((int(r[column]) for r in kept_rows(path, columns, column, sys.maxsize)),
               default=0)


def record_training_call(run_dir: Path, **span: int) -> None:
    """Append this call's code version, device and ``span`` (e.g. ``updates_from``,
    ``updates_to``; ``env_steps_from``, ``env_steps_to``) to the run's benchmark.json as
    an entry of ``training_calls`` (written atomically): a run prepared on one machine and
    trained on another (``--pack``, a device call) records where and by which commit it
    trained (in a copy without ``.git``, `wmx.version.code_version` reads
    ``$WMX_CODE_VERSION``)."""
    from wmx.runs.cli_common import replace_json
    from wmx.version import code_version, device_label
    path = Path(run_dir) / "benchmark.json"
    bench = read_json(path, "--resume") if path.is_file() else {}
    bench.setdefault("training_calls", []).append({
        "code_version": code_version(), "device": device_label(), **span,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S")})
    replace_json(path, bench, sort_keys=False)


def _trained(call: dict) -> bool:
    """Whether a training call (`record_training_call`'s entry) moved its run on: some span
    ``<x>_from`` .. ``<x>_to`` grew (a call on a finished run trains nothing)."""
    spans = [(v, call.get(k[:-len("_from")] + "_to")) for k, v in call.items()
             if k.endswith("_from")]
    return not spans or any(a != b for a, b in spans)


def trained_where(run_dir: Path) -> tuple[str | None, str | None, dict | None]:
    """(code version, device, prepared) of a check run: the distinct code versions and
    devices of its training calls that trained (benchmark.json ``training_calls``; a call
    on a finished run, e.g. to re-judge it, trained nothing), each "+"-joined in call
    order, else those its config.json recorded when the run was created (None for a run
    made before they were recorded); ``prepared`` is the creation's pair when it was
    recorded and differs from the first training call's (the run was made elsewhere, e.g.
    packed on a CPU: a run resumed at a later commit where it was made is not), else
    None."""
    def _read(name: str) -> dict:
        try:
            data = json.loads((Path(run_dir) / name).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}
    created = _read("config.json")
    made = (created.get("code_version"), created.get("device"))
    calls = [c for c in _read("benchmark.json").get("training_calls") or []
             if isinstance(c, dict) and _trained(c)]
    if not calls:
        return made[0], made[1], None

    def joined(key: str) -> str | None:
        seen = list(dict.fromkeys(c.get(key) for c in calls if c.get(key)))
        return "+".join(seen) if seen else None
    first = (calls[0].get("code_version"), calls[0].get("device"))
    elsewhere = any(m is not None and m != f for m, f in zip(made, first))
    prepared = {"code_version": made[0], "device": made[1]} if elsewhere else None
    return joined("code_version"), joined("device"), prepared


@contextlib.contextmanager
def training_call(run_dir: Path, column: str) -> Iterator[dict[str, int]]:
    """Record the training call around the block in the run's benchmark.json
    (`record_training_call`): ``<column>_from`` is the last logged ``column`` ("updates",
    "env_steps") before the block, ``<column>_to`` what the block puts in the yielded
    dict under "to" (the trainer's summary), else the last logged after it. A call the
    block leaves by an exception (a NaN stop, a crash) is recorded too, its checkpointed
    chunks being kept, and an error while recording it does not hide that exception."""
    start = last_logged(run_dir, column)
    span: dict[str, int] = {}

    def record() -> None:
        to = span.get("to")
        record_training_call(run_dir, **{f"{column}_from": start, f"{column}_to":
                                         last_logged(run_dir, column) if to is None else to})
    try:
        yield span
    except BaseException:
        with contextlib.suppress(Exception, SystemExit):
            record()
        raise
    record()

