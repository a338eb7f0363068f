"""Named points where a test can kill (SIGKILL) or signal the process, to check crash safety.

``WMX_FAILPOINT=<name>[:<n>[:<SIGNAL>]]`` in the environment kills the process the
n-th time (default 1st) it passes `hit(<name>)`, or sends it that signal instead
(``SIGINT``, ``SIGTERM``: a Ctrl-C or a ``kill`` arriving there); unset, `hit` is a
dict look-up. tests/reliability/test_kill.py runs each stage in a subprocess with
a point set and checks that nothing partial is visible and that a rerun or
``--resume`` completes with the uninterrupted run's outputs.

Points: ``metrics.appended`` (rows appended to metrics.csv, before the
chunk's checkpoint), ``checkpoint.written`` (a checkpoint complete in its
temporary folder, before the rename), ``episode_set.staged`` (an episode set
complete in its temporary folder, before the rename), ``build.shard_written``
(a pooled build's shard written in the staging folder), ``build.finalize``
(the build's manifest written, before the rename into the store),
``report.filled`` (a report complete in its temporary folder) and
``report.swapped`` (``--force``: the old report moved aside, the new one not
yet renamed in).
"""
from __future__ import annotations

import os
import signal

ENV = "WMX_FAILPOINT"
_counts: dict[str, int] = {}


def hit(name: str) -> None:
    """Count a pass through point ``name``; SIGKILL this process (or send it the signal
    named) when WMX_FAILPOINT says so."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    point, _, rest = spec.partition(":")
    if point != name:
        return
    nth, _, sig = rest.partition(":")
    _counts[name] = _counts.get(name, 0) + 1
    if _counts[name] == (int(nth) if nth else 1):
        os.kill(os.getpid(), getattr(signal, sig) if sig else signal.SIGKILL)
