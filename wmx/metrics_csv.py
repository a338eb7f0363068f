"""The ``metrics.csv`` of a run: appended between chunks, trimmed on resume."""
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
    file never ends in a partial row.
    """

    def __init__(self, path: Path, columns: Sequence[str], step_column: str,
                 keep_until: int | None = None):
        self.path = Path(path)
        self.columns = tuple(columns)
        if keep_until is not None and self.path.exists():
            text = self.path.read_text()
            text = text[:text.rfind("\n") + 1]        # a last line without its newline is cut
            rows = [r for r in csv.DictReader(io.StringIO(text, newline=""))
                    if _complete(r, self.columns) and _step(r[step_column]) is not None
                    and _step(r[step_column]) <= keep_until]
            self._write_all(rows)
        elif not self.path.exists():
            self._write_all([])

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
        failpoints.hit("metrics.appended")


def _complete(row: dict, columns: Sequence[str]) -> bool:
    return None not in row and all(row.get(c) is not None for c in columns)


def _step(value: str) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None

