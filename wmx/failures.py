"""One-line descriptions of the runtime failures a command expects: disk, permissions, memory, NaN.

Every command ends on bad input or an expected failure with one line on
standard error naming the problem and the fix, and a non-zero exit status
(2: bad input, nothing written; 1: a failure while running). `describe`
turns the expected runtime failures into that line (an `ExpectedFailure`,
an OSError of the disk or of permissions, an XLA out-of-memory error);
anything else is a bug and keeps its traceback. `report_failure` prints
that line (or a bad input's message) and gives the exit status; every
command's error boundary calls it.
"""
from __future__ import annotations

import errno
import sys

class ExpectedFailure(RuntimeError):
    """A failure while running that the message fully explains (e.g. a non-finite loss,
    `wmx.runs.finite.NonFiniteError`): reported as one line, exit status 1."""


BAD_INPUT = (ValueError, FileExistsError, FileNotFoundError)
"""The exceptions a command reports as bad input: their message, exit status 2."""

_DISK = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_ACCESS = (errno.EROFS, errno.EACCES, errno.EPERM)


def is_out_of_memory(err: BaseException) -> bool:
    """An XLA allocation failure (``RESOURCE_EXHAUSTED``) or a MemoryError."""
    return isinstance(err, MemoryError) or (
        type(err).__name__ in ("JaxRuntimeError", "XlaRuntimeError")
        and "RESOURCE_EXHAUSTED" in str(err))


def describe(err: BaseException, resume_hint: str = "") -> str | None:
    """The one-line message for an expected runtime failure, None for anything else
    (FileNotFoundError / FileExistsError are the callers' input errors).

    resume_hint: what to rerun once fixed (e.g. "continue with --resume RUN_DIR").
    """
    tail = f"; then {resume_hint}" if resume_hint else ""
    if isinstance(err, ExpectedFailure):
        return str(err)
    if is_out_of_memory(err):
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return (f"out of memory ({first[:200]}): lower --batch-size (or the number of "
                f"--seeds, the model size){tail}")
    text = str(err)
    if isinstance(err, OSError) and err.errno in _DISK or "No space left on device" in text:
        where = f" writing {err.filename}" if getattr(err, "filename", None) else ""
        return (f"no space left on the device{where}: free space or use a data root on "
                f"a larger disk (--home){tail}")
    if isinstance(err, OSError) and err.errno in _ACCESS:
        return (f"cannot write {err.filename or 'a file'}: {err.strerror} (a read-only "
                f"filesystem or missing permissions): use a writable data root (--home) or "
                f"fix its permissions{tail}")
    if isinstance(err, OSError) and not isinstance(err, (FileNotFoundError, FileExistsError)):
        where = f": {err.filename}" if err.filename else ""
        return f"{err.strerror or err}{where}{tail}"
    return None


def report_failure(prog: str | None, err: BaseException, hint: str = "",
                   bad_input: tuple[type[BaseException], ...] = BAD_INPUT) -> int | None:
    """The error contract of a command's boundary: print one line for ``err`` on
    standard error and return the exit status, or None (nothing printed) for a bug,
    which the caller re-raises with its traceback.

    An expected runtime failure (`describe`, ``hint`` its resume hint) is status 1;
    an instance of ``bad_input`` (its message) status 2. The line is
    ``<prog>: error: <message>``, or ``error: <message>`` when ``prog`` is None.
    """
    line, status = describe(err, hint), 1
    if line is None and isinstance(err, bad_input):
        line, status = str(err), 2
    if line is None:
        return None
    print(f"error: {line}" if prog is None else f"{prog}: error: {line}", file=sys.stderr)
    return status
