"""Ctrl-C during training: stop after the running chunk with its checkpoint, or at once.

A chunk is one XLA execution that Python cannot cancel (a DreamerV3 part on the
2-core CPU runs ~10 minutes), and the process cannot exit before it ends. So the
first interrupt (SIGINT) only asks the trainer to stop after the running chunk:
its checkpoint is written, and ``--resume`` continues exactly (as after a
``--budget-min`` stop, without the evaluation). A second interrupt exits at once
with status 130, losing the running chunk; the newest checkpoint stays intact
(checkpoints are renamed into place, DESIGN.md §1).
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

EXIT_INTERRUPTED = 130
"""Exit status of a trainer stopped by Ctrl-C, after the first interrupt (once the chunk's
checkpoint is written) or the second (at once): 128 + SIGINT, the shell's convention, so
``train_online ... && next-step`` does not go on with an unfinished run."""


@contextlib.contextmanager
def stop_on_interrupt(what: str = "the running chunk", *,
                      enabled: bool = True) -> Iterator[threading.Event]:
    """Install the two-step SIGINT handler for the block; yields the stop request.

    Args:
        what: the unit the trainer finishes before it stops (said in the message).
        enabled: False leaves Ctrl-C as it is (a multi-process run, whose processes
            must stop after the same chunk, gets Python's KeyboardInterrupt).
    Yields:
        A `threading.Event` set by the first interrupt; the trainers' ``run`` take it
        as ``stop_request``. When not enabled, or off the main thread (where Python
        cannot install a signal handler), the event is never set.
    """
    request = threading.Event()
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield request
        return

    def handler(signum, frame):
        if request.is_set():
            sys.stderr.write("\ninterrupted again: exiting now; the newest checkpoint is kept "
                             "(--resume continues from it)\n")
            sys.stderr.flush()
            os._exit(EXIT_INTERRUPTED)
        request.set()
        sys.stderr.write(f"\ninterrupt: stopping after {what} and its checkpoint "
                         "(--resume continues exactly); press Ctrl-C again to exit now and "
                         "lose it\n")
        sys.stderr.flush()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield request
    finally:
        signal.signal(signal.SIGINT, previous)


def requested(stop_request: threading.Event | None) -> bool:
    """Whether a trainer's ``stop_request`` (None: the caller installed no handler) is set."""
    return stop_request is not None and stop_request.is_set()


def exit_status(prog: str, stop_request: threading.Event, finished: bool, hint: str) -> int:
    """A trainer's exit status after its run: EXIT_INTERRUPTED, with ``prog``'s one-line
    message and the resume ``hint`` on stderr, when the first Ctrl-C stopped an unfinished
    run; else 0."""
    if stop_request.is_set() and not finished:
        print(f"{prog}: stopped by Ctrl-C after the running chunk, with its checkpoint; "
              f"{hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return 0
