"""Ctrl-C or SIGTERM during a pooled build: stop it, remove its staging folder, write nothing.

A build has no unit worth finishing (the trainers finish their running chunk,
`wmx.runs.interrupt`): the first SIGINT (Ctrl-C) or SIGTERM raises `BuildInterrupted`
in the launching process's main thread, wherever the pipeline is, and
`wmx.pipelines.sources.run_build_result` removes the staging folder and re-raises it;
the job prints one line and exits with 128 + the signal's number (130, 143). Beam
wraps an exception raised inside a step (``RuntimeError: KeyboardInterrupt [while
running ...]``) or may go on after it, so the guard also records the signal and the
launcher checks that record: once a signal came, the dataset is not renamed into the
store even where the pipeline returned. A second signal while the build stops removes
the staging folder and exits at once, as does a build that has not stopped 15 s after
the first (`BuildGuard`; the staging folder is removed then too). While the launcher
renames the finished dataset into place, and while a Dask cluster or client is set up
(`deferred_signals`), the guard only records.

The DirectRunner's SDK workers (``--direct_running_mode=multi_processing``:
subprocesses running Beam's ``apache_beam.runners.worker.sdk_worker_main``, through
`wmx.pipelines.sdk_worker` under wmx's direct runner) get a terminal's
Ctrl-C themselves, but not a SIGTERM sent to the launcher, and Beam's teardown waits
for a worker in the middle of a bundle forever; so from the first signal until the
guard ends, those workers (also one Beam starts meanwhile) are sent SIGTERM every
0.2 s (`terminate_sdk_workers`). The errors Beam's threads then raise (``Worker
subprocess exited with return code -15``), and the signal's exception where it lands
in a callback that cannot raise (a garbage-collector callback), are not printed while
the build stops.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable, Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a build."""

SDK_WORKER = "apache_beam.runners.worker.sdk_worker_main"
"""The module Beam's multi_processing SDK worker processes run."""
SDK_WORKERS = (SDK_WORKER, "wmx.pipelines.sdk_worker")
"""The modules such a worker process runs: Beam's, or wmx's quiet start of it
(`wmx.pipelines.sdk_worker`, what `wmx.pipelines.direct_runner` runs)."""


def terminate_sdk_workers() -> int:
    """Send SIGTERM to this process's descendants that run Beam's SDK worker (`SDK_WORKERS`);
    returns how many. Processes that end meanwhile or cannot be read are skipped."""
    import psutil
    n = 0
    for proc in psutil.Process().children(recursive=True):
        try:
            if any(m in part for part in proc.cmdline() for m in SDK_WORKERS):
                proc.terminate()
                n += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return n


def signal_name(signum: int) -> str:
    """'Ctrl-C' for SIGINT, else the signal's name ('SIGTERM')."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


class BuildInterrupted(KeyboardInterrupt):
    """A build stopped by a signal; ``signum`` is its number (exit status 128 + it).

    Args:
        message: what happened (Beam re-creates the exception with its step's name
            appended, so the message is the first argument).
        signum: the signal's number.
    """

    def __init__(self, message: str = "", signum: int = signal.SIGINT):
        super().__init__(message, signum)
        self.signum = int(signum)

    def __str__(self) -> str:
        return str(self.args[0])


class BuildGuard:
    """The signal record of one build (`guard_build`).

    ``signum``: the first signal's number, or None; ``armed``: a signal raises
    `BuildInterrupted` in the main thread (the launcher disarms it once the exception
    reached it, and while it renames the dataset into place: then a signal is only
    recorded); ``stopping``: a signal stopped the build; ``paths``: what `exit_now`
    removes.

    From the first signal until the guard closes a thread (`_stop_helper`) sends Beam's
    SDK workers SIGTERM every 0.2 s and, when the guard is still armed `GRACE_S` after
    the signal (the exception has not reached the launcher: Python drops an exception
    raised in a callback that cannot raise, e.g. a garbage-collector callback, and
    Beam's waits for a killed worker's data never end), removes what the build wrote
    and exits, as a second signal does.
    """

    GRACE_S = 15.0

    def __init__(self, on_exit: Callable[[], None]):
        self.paths: list[str] = []
        self.signum: int | None = None
        self.armed = True
        self.stopping = False
        self._on_exit = on_exit
        self._previous_hook = threading.excepthook
        self._previous_unraisable = sys.unraisablehook
        self._closed = threading.Event()
        self._helper: threading.Thread | None = None

    def handler(self, signum, frame) -> None:
        """The SIGINT / SIGTERM handler (see the module doc)."""
        if self.signum is None:
            self.signum = signum
            if self.armed:
                self.stopping = True
                self._start_helper()
                raise BuildInterrupted(f"interrupted by {signal_name(signum)}", signum)
            return
        if self.stopping:
            self.exit_now(f"{signal_name(signum)} again")

    def exit_now(self, why: str) -> None:
        """Terminate the SDK workers, remove the staging folder and exit with 128 + the
        first signal's number, saying ``why`` in one line."""
        sys.stderr.write(f"\n{why}: the build stops now; nothing was written\n")
        sys.stderr.flush()
        with contextlib.suppress(Exception):
            terminate_sdk_workers()
            self._on_exit()
        os._exit(128 + (self.signum or signal.SIGINT))

    def _start_helper(self) -> None:
        if self._helper is None:
            self._helper = threading.Thread(target=self._stop_helper, name="wmx-build-stop",
                                            daemon=True)
            self._helper.start()

    def _stop_helper(self) -> None:
        import time
        start = time.monotonic()
        while not self._closed.is_set():
            with contextlib.suppress(Exception):
                terminate_sdk_workers()
            if self.armed and time.monotonic() - start > self.GRACE_S:
                self.exit_now(f"the build did not stop within {self.GRACE_S:g} s of "
                              f"{signal_name(self.signum)}")
            self._closed.wait(0.2)

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """A block a signal must not cut short (a Dask cluster or client being set up,
        which would be left half-started): a signal in it is recorded, and raised as
        `BuildInterrupted` when the block ends."""
        if not self.armed:
            yield
            return
        self.armed = False
        try:
            yield
        finally:
            self.armed = True
        if self.signum is not None and not self.stopping:
            self.stopping = True
            self._start_helper()
            raise BuildInterrupted(f"interrupted by {signal_name(self.signum)}", self.signum)

    def close(self) -> None:
        """End the stop helper (the guard's end)."""
        self._closed.set()
        if self._helper is not None:
            self._helper.join()

    def unraisablehook(self, unraisable) -> None:
        """`sys.unraisablehook` while guarded: the signal's exception, raised where Python
        cannot propagate it (e.g. a garbage-collector callback), is dropped; it is
        recorded already."""
        if not isinstance(unraisable.exc_value, BuildInterrupted):
            self._previous_unraisable(unraisable)

    def excepthook(self, args) -> None:
        """`threading.excepthook` while guarded: an error of another thread is dropped once
        the build stops (Beam's threads fail as its workers end), else printed as usual."""
        if not self.stopping:
            self._previous_hook(args)

    def check(self) -> None:
        """Raise `BuildInterrupted` when a signal came (call with the guard disarmed)."""
        if self.signum is not None:
            self.stopping = True
            raise BuildInterrupted(f"interrupted by {signal_name(self.signum)}", self.signum)


_current: BuildGuard | None = None


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """`BuildGuard.deferred` of the build guard in force, if any (else nothing)."""
    if _current is None:
        yield
        return
    with _current.deferred():
        yield


@contextlib.contextmanager
def guard_build(*paths: str | os.PathLike) -> Iterator[BuildGuard]:
    """Install the build's SIGINT and SIGTERM handler for the block (main thread only;
    elsewhere Python cannot install one and the guard records nothing). Guards nest: a
    build job guards its planning (no paths), `run_build_result` the build.

    Args:
        paths: what the build writes before the dataset is in place (its staging folder,
            its ``.result`` file, its temporary folder), removed before the process
            exits at once (`BuildGuard.exit_now`); more may be added to
            ``guard.paths`` while the block runs.
    Yields:
        The `BuildGuard`; the previous handlers are put back on exit.
    """
    guard = BuildGuard(lambda: None)
    guard.paths = [str(x) for x in paths]

    def remove() -> None:
        for x in guard.paths:
            shutil.rmtree(x, ignore_errors=True)
            with contextlib.suppress(OSError):
                os.unlink(x)
    guard._on_exit = remove
    if threading.current_thread() is not threading.main_thread():
        yield guard
        return
    global _current
    previous = {s: signal.signal(s, guard.handler) for s in SIGNALS}
    threading.excepthook, sys.unraisablehook = guard.excepthook, guard.unraisablehook
    outer, _current = _current, guard
    try:
        yield guard
    finally:
        _current = outer
        guard.close()
        threading.excepthook, sys.unraisablehook = (guard._previous_hook,
                                                    guard._previous_unraisable)
        for s, h in previous.items():
            signal.signal(s, h)
