"""The host loop's counters (saved in every checkpoint's host.json), its evaluation and stop
rules, atomic JSON.

Both trainers keep one `HostState`; the fields a trainer does not use keep
their defaults. `eval_point` is the one rule for when a chunk ends with an
evaluation: on schedule, at the end, and at a deadline (budget) stop, where
the evaluation uses the next scheduled evaluation's keys without consuming
them, so a run stopped and resumed evaluates exactly as the uninterrupted run.
`stop_reason` is the one rule for when a chunk ends the call early: a stop
request, the deadline, or the chunk limit.
"""
from __future__ import annotations

import dataclasses
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

from wmx import temporaries
from wmx.runs.interrupt import requested


@dataclass
class HostState:
    """Counters of a trainer's host loop.

    Common: eval_index (evaluations done on schedule: the rollout keys' index),
    wall_s (seconds spent in chunks and evaluations), finished, last_eval
    (the last evaluation's returns: online {seed: [returns]}, offline
    {task: {seed: [returns]}}).
    Online (train_online): next_tick (absolute tick of the next chunk),
    next_eval_env_steps, exported_rounds (rounds whose episodes were exported).
    Offline (train_offline): updates (done), training_hash and dataset (the
    run the checkpoint belongs to), streams (the streaming feed's iterator
    states, one per seed, or None).
    Both: metrics_rows, the data rows metrics.csv held when the checkpoint was saved
    (None in a checkpoint written before it was recorded; `wmx.metrics_csv.check_resume`).
    """

    eval_index: int = 0
    wall_s: float = 0.0
    finished: bool = False
    last_eval: dict[str, Any] = field(default_factory=dict)
    next_tick: int = 0
    next_eval_env_steps: int = 0
    exported_rounds: int = 0
    updates: int = 0
    training_hash: str = ""
    dataset: str = ""
    streams: list[dict] | None = None
    metrics_rows: int | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "HostState":
        """The counters of a host.json; unknown keys are refused (ValueError)."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"host.json has unknown counters {unknown}: written by another "
                             "version of wmx; start a new run")
        return cls(**d)


def resume_points(run_dir: Path, ckpt: Path, host: dict[str, Any],
                  keep_until: Callable[[dict[str, Any]], int]) -> list[tuple[Path, int,
                                                                         int | None]]:
    """`wmx.metrics_csv.check_resume`'s points of a resume from checkpoint ``ckpt`` (host.json
    ``host``): it, then the run's older checkpoints whose host.json reads, newest first,
    each with ``keep_until(host dict)`` (the last metrics step it keeps) and its recorded
    ``metrics_rows``."""
    from wmx.checkpoint import CheckpointDamagedError, list_checkpoints, read_host
    points = [(Path(ckpt), keep_until(host), host.get("metrics_rows"))]
    for older in reversed([c for c in list_checkpoints(run_dir)
                           if int(c.name) < int(Path(ckpt).name)]):
        try:
            h = read_host(older)
        except CheckpointDamagedError:
            continue
        points.append((older, keep_until(h), h.get("metrics_rows")))
    return points


def check_metrics_on_resume(run_dir: Path, columns, step_column: str,
                            keep_until: Callable[[dict[str, Any]], int], found=None,
                            log=None) -> None:
    """Refuse a resume of ``run_dir`` whose metrics.csv lost rows or gained some
    (`wmx.metrics_csv.check_resume` over `resume_points`), before anything is written.

    Args:
        run_dir: the run; columns, step_column: its metrics.csv's (`MetricsCSV`);
        keep_until: host.json dict -> the last ``step_column`` value a resume from that
            checkpoint keeps.
        found: (checkpoint folder, host.json dict) the resume starts from (default: the
            newest whose host.json reads, `wmx.checkpoint.newest_intact` for no item);
            nothing to check when None and the run has no checkpoint.
        log: the logger for `newest_intact`'s warning line.
    Raises:
        wmx.metrics_csv.MetricsLostError: a ValueError, one line.
    """
    from wmx.checkpoint import newest_intact
    from wmx.metrics_csv import check_resume
    found = found if found is not None else newest_intact(run_dir, (), log)
    if found is not None:
        check_resume(Path(run_dir) / "metrics.csv", columns, step_column,
                     resume_points(run_dir, found[0], found[1], keep_until))


class EvalPoint(NamedTuple):
    """evaluate: run an evaluation after this chunk; advance: it is the scheduled
    one (consume its index). Whether the run stops is `stop_reason`'s."""

    evaluate: bool
    advance: bool


def eval_point(scheduled: bool, final: bool, stop: str | None) -> EvalPoint:
    """Whether the chunk that just ended evaluates, and whether that consumes the schedule.

    Args:
        scheduled: an evaluation is due by the schedule.
        final: the run's last chunk (it always evaluates, on the schedule).
        stop: `stop_reason`'s answer for this chunk (None: the run goes on). A
            "deadline" stop evaluates off the schedule (advance False: the next
            scheduled evaluation's keys, not consumed); an "interrupted" or
            "chunks" stop evaluates only when one is due anyway.
    """
    due = scheduled or final
    return EvalPoint(evaluate=due or stop == "deadline", advance=due)


def stop_reason(chunks_done: int, stop_after_chunks: int | None, deadline: float | None,
                stop_request: threading.Event | None, now: float | None = None) -> str | None:
    """Why a trainer's run stops after the chunk that just ended, None when it goes on.

    Args:
        chunks_done: chunks of this call of the trainer's ``run``, the one that just
            ended included.
        stop_after_chunks: ``run``'s limit of chunks per call (None: no limit).
        deadline: a ``time.monotonic()`` value or None.
        stop_request: set by a first Ctrl-C or SIGTERM (None: no handler installed).
        now: the clock (default ``time.monotonic()``).

    Returns:
        "interrupted" (``stop_request`` is set; it comes first, as it suppresses the
        deadline's off-schedule evaluation in `eval_point`), "deadline" (``now`` is past
        it), "chunks" (``stop_after_chunks`` reached), or None. The caller leaves out
        the run's last chunk, after which the run ends anyway.
    """
    if requested(stop_request):
        return "interrupted"
    if deadline is not None and (time.monotonic() if now is None else now) > deadline:
        return "deadline"
    if stop_after_chunks is not None and chunks_done >= stop_after_chunks:
        return "chunks"
    return None


def env_steps_at_tick(tick: int, T: int, n_envs: int, action_repeat: int) -> int:
    """Env steps of an online run (all its envs, one seed) before absolute ``tick``.

    A round is T + 1 ticks per env: T agent steps, then the held tick that resets
    and emits no env step (reference_design §5.2). Inside a round (``--chunk-ticks``
    checkpoints) the round's ticks so far count. Returns an int (env steps =
    agent steps × action_repeat)."""
    rounds, into = divmod(int(tick), T + 1)
    return (rounds * T + min(into, T)) * n_envs * action_repeat


def write_json_atomic(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON to ``path`` through an owned temporary and a rename,
    so a reader (or a killed writer's successor) never sees a partial file."""
    path = Path(path)
    tmp = path.with_name(temporaries.owned_name(path.name))
    try:
        tmp.write_text(json.dumps(obj, indent=1))
        os.replace(tmp, path)
    except BaseException:
        temporaries.remove(tmp)
        raise
