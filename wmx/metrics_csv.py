"""The ``metrics.csv`` of a run: appended between chunks, trimmed on resume, checked against
the checkpoint a resume starts from.

Each checkpoint records how many rows metrics.csv held when it was saved (host.json's
``metrics_rows``); `check_resume` refuses a resume whose file holds another number of
rows up to that checkpoint (cut, emptied or edited by hand): continuing would silently
lose them, and the run would no longer hold the uninterrupted run's metrics. It names
an older checkpoint whose rows the file does hold, from which a resume redoes the lost
rows exactly.
"""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any, Sequence

from wmx import failpoints, temporaries


class MetricsCSV:
    """Appends rows with fixed ``columns`` to ``path``.

    On resume (``keep_until`` given) the rows whose ``step_column`` is past
    the checkpoint are dropped, so a resumed run writes exactly the rows of
    the uninterrupted one; ``keep_until=0`` (a run resumed without a
    checkpoint, i.e. from its start) drops every row. A row that a killed
    process left incomplete (missing fields, an unreadable step) is dropped
    too. Missing values are written as empty fields. Each ``append`` is one
    write of whole rows; a failed write (no space left) is cut back, so the
    file never ends in a partial row. ``rows``: the data rows the file holds (those kept,
    then those appended; None for a file opened without ``keep_until``), which the
    trainers record in each checkpoint.
    """

    def __init__(self, path: Path, columns: Sequence[str], step_column: str,
                 keep_until: int | None = None):
        self.path = Path(path)
        self.columns = tuple(columns)
        self.rows: int | None = None
        if keep_until is not None and self.path.exists():
            rows = kept_rows(self.path, self.columns, step_column, keep_until)
            self._write_all(rows)
            self.rows = len(rows)
        elif not self.path.exists():
            self._write_all([])
            self.rows = 0

    def _write_all(self, rows) -> None:
        tmp = self.path.with_name(temporaries.owned_name(self.path.name))
        try:
            with tmp.open("w", newline="") as f:
                w = csv.DictWriter(f, self.columns)
                w.writeheader()
                w.writerows(rows)
            tmp.replace(self.path)
        except BaseException:
            temporaries.remove(tmp)
            raise

    def append(self, rows: list[dict[str, Any]]) -> None:
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, self.columns)
        for r in rows:
            w.writerow({k: r.get(k, "") for k in self.columns})
        data = memoryview(buf.getvalue().encode())
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                while data:
                    data = data[os.write(fd, data):]
            except BaseException:
                os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)
        if self.rows is not None:
            self.rows += len(rows)
        failpoints.hit("metrics.appended")


def kept_rows(path: Path, columns: Sequence[str], step_column: str,
              keep_until: int) -> list[dict[str, str]]:
    """The complete rows of metrics.csv ``path`` whose ``step_column`` is at most
    ``keep_until`` (what a resume keeps; [] for a missing file). A last line without its
    newline, a row with missing fields or an unreadable step is left out."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    text = text[:text.rfind("\n") + 1]        # a last line without its newline is cut
    return [r for r in csv.DictReader(io.StringIO(text, newline=""))
            if _complete(r, columns) and _step(r[step_column]) is not None
            and _step(r[step_column]) <= keep_until]


class MetricsLostError(ValueError):
    """metrics.csv does not hold the rows the checkpoint a resume starts from recorded."""


def check_resume(path: Path, columns: Sequence[str], step_column: str,
                 points: Sequence[tuple[Path, int, int | None]]) -> None:
    """Check metrics.csv ``path`` before a resume trims it.

    Args:
        path: the run's metrics.csv.
        columns, step_column: as `MetricsCSV`'s.
        points: (checkpoint folder, its ``keep_until``, the rows it recorded or None for
            a checkpoint written before they were recorded), the checkpoint the resume
            starts from first, then the older ones, newest first.
    Raises:
        MetricsLostError: one line, when the file holds another number of rows up to the
            first checkpoint than it recorded, naming the counts, and either the older
            checkpoint whose rows the file holds (with the folders to delete so that a
            resume redoes the rest exactly) or that none does.
    """
    ckpt, until, want = points[0]
    if want is None:
        return
    have = len(kept_rows(path, columns, step_column, until))
    if have == want:
        return
    what = ("lost rows (cut or emptied)" if have < want else
            "rows the run did not write (edited by hand or joined with another file)")
    head = (f"{path} holds {have} rows up to {step_column} {until} where checkpoint "
            f"{ckpt.name} recorded {want}: it has {what}, and a resume would not give the "
            "uninterrupted run's metrics")
    for older, o_until, o_want in points[1:]:
        if o_want is not None and len(kept_rows(path, columns, step_column,
                                                o_until)) == o_want:
            newer = [str(c) for c, _, _ in points[:points.index((older, o_until, o_want))]]
            raise MetricsLostError(
                f"{head}; put the file back, or delete {' '.join(newer)} and resume again: "
                f"it continues from {older.name}, whose {o_want} rows the file holds, and "
                "redoes the rest exactly")
    raise MetricsLostError(f"{head}; put the file back, or start a new run (no checkpoint "
                           "left matches the rows the file holds)")


def _complete(row: dict, columns: Sequence[str]) -> bool:
    return None not in row and all(row.get(c) is not None for c in columns)


def _step(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None

