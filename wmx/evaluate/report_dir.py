"""Writing a report or comparison directory atomically, and what --force may replace.

`write_dir_atomically` fills a hidden owned temporary next to the target and renames it
in, so a reader never sees half a report and a killed process leaves nothing that
`wmx.temporaries` does not sweep; `is_replaceable` keeps ``--force`` from removing any
folder that is not a report or comparison (a run directory, a data root). Used by
`wmx.evaluate.report.write_report` and `wmx.evaluate.compare.write_comparison`.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from wmx import failpoints, temporaries
from wmx.datasets.store import commit_dir, make_staging_dir

__all__ = ["write_dir_atomically", "check_target", "REPLACEABLE_MARKS", "is_replaceable",
           "not_replaceable_message", "recover_dir"]


def write_dir_atomically(out: Path, fill, force: bool = False) -> Path:
    """Create directory ``out`` with ``fill(tmp_dir)`` in a hidden temporary sibling, then rename.

    On any exception in ``fill`` the temporary directory is removed and
    ``out`` is untouched. An existing ``out`` raises FileExistsError unless
    ``force``, and ValueError when it is neither empty nor a report or comparison
    (`is_replaceable`: a run directory or any other folder is never removed); with
    ``force`` it is moved aside (``.old-<name>~<owner>``), replaced, and
    removed only once the new directory is in place (restored if the rename
    fails). ``out`` must be a directory (ValueError for a file). First the
    temporaries that dead processes left next to ``out`` are removed
    (`wmx.temporaries`); a directory a killed process had moved aside, with
    nothing renamed in its place, is put back first.
    """
    out = Path(out)
    check_target(out, force)
    tmp = make_staging_dir(out.parent, out.name)
    old = None
    try:
        fill(tmp)
        failpoints.hit("report.filled")
        if out.exists():
            old = out.parent / temporaries.owned_name(out.name, prefix=temporaries.OLD)
            os.rename(out, old)
            failpoints.hit("report.swapped")
        try:
            commit_dir(tmp, out)
        except BaseException:
            if old is not None:
                os.rename(old, out)
                old = None
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if old is not None:
        temporaries.remove(old)
    return out


def check_target(out: Path, force: bool) -> None:
    """Refuse a target ``out`` that `write_dir_atomically` may not write, after putting back
    what a killed writer had moved aside (`recover_dir`).

    Raises:
        ValueError: ``out`` is a file, or an existing folder that is neither empty nor a
            report or comparison (`is_replaceable`).
        FileExistsError: ``out`` exists and ``force`` is False.
    """
    recover_dir(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a report directory; give a directory "
                         "(new, or an existing report with --force)")
    if out.exists() and not force:
        raise FileExistsError(f"{out} exists already; pass --force to replace it, or --out "
                              "another directory")
    if out.exists() and not is_replaceable(out):
        raise ValueError(not_replaceable_message(out))


REPLACEABLE_MARKS = ("report.json", "compare.json")
"""The file that makes a directory a report (`write_report`) or a comparison
(`compare.write_comparison`): only such a directory, or an empty one, is replaced."""


def is_replaceable(out: Path) -> bool:
    """Whether ``--force`` may replace directory ``out``: it is empty, or a report or a
    comparison (it holds one of `REPLACEABLE_MARKS`). Anything else (a run directory, a
    data root, a home folder) is never removed."""
    out = Path(out)
    try:
        return (not any(out.iterdir())
                or any((out / m).is_file() for m in REPLACEABLE_MARKS))
    except NotADirectoryError:
        return False


def not_replaceable_message(out: Path) -> str:
    """The one line refusing to replace ``out`` (not `is_replaceable`)."""
    return (f"--out {out} holds files that are not a report or a comparison (no "
            f"{' or '.join(REPLACEABLE_MARKS)}); --force replaces only those, so nothing "
            "was written: give --out a new directory")


def recover_dir(out: Path) -> None:
    """Put back ``out`` when a dead process moved it aside and died before renaming its
    replacement in; then sweep the dead processes' temporaries next to it."""
    parent = out.parent
    if not out.exists() and parent.is_dir():
        aside = sorted(p for p in parent.iterdir()
                       if p.name.startswith(f"{temporaries.OLD}{out.name}~")
                       and temporaries.is_stale(p.name))
        if aside:
            os.rename(aside[-1], out)
    temporaries.sweep(parent)
