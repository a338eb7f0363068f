"""The C heap of a wmx process (glibc): free memory back to the OS between a trainer's
chunks (``malloc_trim``), and huge pages for what malloc maps (a restart at start).

XLA's CPU runtime allocates and frees its buffers from many threads; glibc gives
each thread an arena and keeps what is freed there for reuse instead of
returning it, so a long run's resident memory climbs by tens of MiB per chunk
while the memory in use stays flat (docs/performance.md, "Host memory of a long
run": 3.0 GB held by the allocator, 1.3 GB in use, after 1,100 ticks).
``malloc_trim(0)`` hands the free pages of every arena back (``madvise``), so
resident memory follows the memory in use. Both trainers' loops call
`release_free_heap` before every chunk (so after the previous one); it changes no
number of a run.

XLA also maps a program's temporaries afresh at every call, one page fault per 4 KiB
page; the command lines restart once with glibc's huge-page tunable
(`restart_with_huge_pages`; docs/performance.md "Huge pages"). Neither changes a result.
"""
from __future__ import annotations

import ctypes
from pathlib import Path


def release_free_heap() -> bool:
    """Give the free pages of every glibc malloc arena back to the OS.

    Returns:
        True when memory was released; False when none was or the C library has
        no ``malloc_trim`` (not glibc: macOS, musl), where this does nothing.
    """
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return bool(trim(0))


HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"
"""glibc (2.35+) tunable: malloc asks for transparent huge pages (``madvise``) on the
memory it maps. XLA's CPU runtime maps its temporaries afresh at every program call
(hundreds of MiB for a training step); with 4 KiB pages each call then takes one page
fault per page (70,500 for the DreamerV3 1m step), with huge pages ~1% of that (790-950
at 1m, ~6,000 at 12m; docs/performance.md, "Huge pages")."""
HUGE_PAGES_ENV = "WMX_HUGE_PAGES"
"""Set to 0 (or off, false, no) to keep the process's allocator settings as they are."""
THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def huge_pages_argv(environ: dict[str, str], orig_argv: list[str], executable: str,
                    libc: tuple[str, str], thp: str | None = "madvise") -> list[str] | None:
    """The command line to re-execute this process with `HUGE_PAGES_TUNABLE` added to
    ``GLIBC_TUNABLES`` (which glibc reads only at start), or None when there is nothing
    to do: not glibc 2.35+, the kernel's THP mode ``never``, ``WMX_HUGE_PAGES=0``, or a
    ``glibc.malloc.hugetlb`` value already set (by the user, or by the re-executed
    process itself).

    Args:
      environ: the environment; updated in place when a command line is returned.
      orig_argv: ``sys.orig_argv`` (interpreter options and ``-m`` kept).
      executable: ``sys.executable``. libc: ``platform.libc_ver()``.
      thp: the THP mode (`thp_mode`; None when unknown).
    """
    name, version = libc
    if (name != "glibc" or not executable or not orig_argv or thp == "never"
            or environ.get(HUGE_PAGES_ENV, "1").strip().lower() in ("0", "off", "false", "no")):
        return None
    try:
        if tuple(int(x) for x in version.split(".")[:2]) < (2, 35):
            return None
    except ValueError:
        return None
    tunables = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in tunables:
        return None
    environ["GLIBC_TUNABLES"] = f"{tunables}:{HUGE_PAGES_TUNABLE}" if tunables else HUGE_PAGES_TUNABLE
    return [executable, *orig_argv[1:]]


def thp_mode(path: str = THP_ENABLED) -> str | None:
    """The kernel's transparent-huge-page mode ("always", "madvise" or "never"; the
    bracketed word of ``path``), or None where it cannot be read (not Linux)."""
    try:
        text = Path(path).read_text()
        return text[text.index("[") + 1:text.index("]")]
    except (OSError, ValueError):
        return None


def _replayable() -> bool:
    """Whether re-running ``sys.orig_argv`` starts this program again: not a script read
    from standard input, not an interactive interpreter or a notebook kernel (a restart
    would lose their state)."""
    import sys
    return (sys.argv[0] not in ("", "-") and not sys.flags.interactive
            and not hasattr(sys, "ps1") and "ipykernel" not in sys.modules)


def restart_with_huge_pages(argv: list[str] | None = None) -> None:
    """Re-execute this process (`os.execv`) with huge pages for malloc's mapped memory
    (`huge_pages_argv`); returns only when there is nothing to do or the restart fails
    (``OSError``; the process then goes on unchanged). Call it first thing in a
    command-line entry point, before anything is written or any thread started, with the
    entry point's ``argv``: a list means an in-process caller (a test), never restarted."""
    if argv is not None or not _replayable():
        return
    import os
    import platform
    import sys
    before = os.environ.get("GLIBC_TUNABLES")
    argv = huge_pages_argv(os.environ, list(sys.orig_argv), sys.executable, platform.libc_ver(),
                           thp_mode())
    if argv is None:
        return
    for stream in (sys.stdout, sys.stderr):     # None when the descriptor is closed
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
    try:
        os.execv(argv[0], argv)
    except OSError:                     # cannot restart: go on as the process is
        if before is None:
            os.environ.pop("GLIBC_TUNABLES", None)
        else:
            os.environ["GLIBC_TUNABLES"] = before
