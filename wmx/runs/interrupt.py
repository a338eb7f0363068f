"""Ctrl-C or SIGTERM during training: stop after the running chunk with its checkpoint, or at once.

A chunk is one XLA execution that Python cannot cancel (a DreamerV3 part on the
2-core CPU runs ~10 minutes), and the process cannot exit before it ends. So the
first interrupt (SIGINT, Ctrl-C) or termination request (SIGTERM: ``kill``,
``timeout``, a batch scheduler) only asks the trainer to stop after the running
chunk: its checkpoint is written, and ``--resume`` continues exactly (as after a
``--budget-min`` stop, without the evaluation). A second signal of either kind
exits at once with status 128 + its number, losing the running chunk; the newest
checkpoint stays intact (checkpoints are renamed into place, DESIGN.md §1). Before the
run's first checkpoint there is none: the message says so, and that ``--resume`` starts
the run from the beginning (with its saved config).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

EXIT_INTERRUPTED = 128 + signal.SIGINT
"""Exit status of a trainer stopped by Ctrl-C, after the first interrupt (once the chunk's
checkpoint is written) or the second (at once): 128 + SIGINT = 130, the shell's convention,
so ``train_online ... && next-step`` does not go on with an unfinished run."""

EXIT_TERMINATED = 128 + signal.SIGTERM
"""Exit status (143) of a trainer stopped by SIGTERM, the same way."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that ask a trainer to stop (`stop_on_interrupt`)."""


class StopRequest(threading.Event):
    """A trainer's stop request: a `threading.Event` that also keeps the number of the first
    signal that set it (``signum``; None while unset)."""

    def __init__(self) -> None:
        super().__init__()
        self.signum: int | None = None


def _said(signum: int | None) -> str:
    return "Ctrl-C" if signum in (None, signal.SIGINT) else signal.Signals(signum).name


@contextlib.contextmanager
def stop_on_interrupt(what: str = "the running chunk", *, enabled: bool = True,
                      run_dir: str | Path | None = None) -> Iterator[StopRequest]:
    """Install the two-step SIGINT and SIGTERM handler for the block; yields the stop request.

    Args:
        what: the unit the trainer finishes before it stops (said in the message).
        enabled: False leaves the signals as they are (a multi-process run, whose processes
            must stop after the same chunk, gets Python's KeyboardInterrupt / the default
            SIGTERM action).
        run_dir: the run's directory: the second signal's message says whether it has a
            checkpoint to resume from (None: one is assumed).
    Yields:
        A `StopRequest` set by the first signal; the trainers' ``run`` take it as
        ``stop_request``. When not enabled, or off the main thread (where Python cannot
        install a signal handler), it is never set.
    """
    request = StopRequest()
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield request
        return

    from wmx.checkpoint import list_checkpoints

    def handler(signum, frame):
        if request.is_set():
            if run_dir is None or list_checkpoints(Path(run_dir)):
                kept = "the newest checkpoint is kept (--resume continues from it)"
            else:
                kept = "the run has no checkpoint yet (--resume starts it from the beginning)"
            sys.stderr.write(f"\n{_said(signum)} again: exiting now; {kept}\n")
            sys.stderr.flush()
            os._exit(128 + signum)
        request.signum = signum
        request.set()
        again = "press Ctrl-C" if signum == signal.SIGINT else "send the signal"
        sys.stderr.write(f"\n{_said(signum)}: stopping after {what} and its checkpoint "
                         f"(--resume continues exactly); {again} again to exit now and lose "
                         "it\n")
        sys.stderr.flush()

    previous = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield request
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def requested(stop_request: threading.Event | None) -> bool:
    """Whether a trainer's ``stop_request`` (None: the caller installed no handler) is set."""
    return stop_request is not None and stop_request.is_set()


def exit_status(prog: str, stop_request: threading.Event, finished: bool, hint: str) -> int:
    """A trainer's exit status after its run: 128 + the signal's number (`EXIT_INTERRUPTED`,
    `EXIT_TERMINATED`), with ``prog``'s one-line message and the resume ``hint`` on stderr,
    when the first signal stopped an unfinished run; else 0 (a signal that came during the
    last chunk, after which the run finished, is said in one line)."""
    if not stop_request.is_set():
        return 0
    signum = getattr(stop_request, "signum", None) or signal.SIGINT
    if finished:                  # the stop came in the last chunk: the run is whole
        print(f"{prog}: {_said(signum)} came during the run's last chunk: the run finished "
              "(its final evaluation included); nothing to resume", file=sys.stderr)
        return 0
    print(f"{prog}: stopped by {_said(signum)} after the running chunk, with its "
          f"checkpoint; {hint}", file=sys.stderr)
    return 128 + signum
