"""The ``metrics.csv`` of a run: appended between chunks, trimmed on resume."""
from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Sequence


class MetricsCSV:
    """Appends rows with fixed ``columns`` to ``path``.

    On resume (``keep_until`` given) the rows whose ``step_column`` is past
    the checkpoint are dropped, so a resumed run writes exactly the rows of
    the uninterrupted one. Missing values are written as empty fields.
    """

    def __init__(self, path: Path, columns: Sequence[str], step_column: str,
                 keep_until: int | None = None):
        self.path = Path(path)
        self.columns = tuple(columns)
        if keep_until is not None and self.path.exists():
            with self.path.open() as f:
                rows = [r for r in csv.DictReader(f) if int(r[step_column]) <= keep_until]
            self._write_all(rows)
        elif not self.path.exists():
            self._write_all([])

    def _write_all(self, rows) -> None:
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", newline="") as f:
            w = csv.DictWriter(f, self.columns)
            w.writeheader()
            w.writerows(rows)
        tmp.replace(self.path)

    def append(self, rows: list[dict[str, Any]]) -> None:
        with self.path.open("a", newline="") as f:
            w = csv.DictWriter(f, self.columns)
            for r in rows:
                w.writerow({k: r.get(k, "") for k in self.columns})
