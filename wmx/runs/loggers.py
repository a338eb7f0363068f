"""The trainers' metric loggers: metrics.csv (always), TensorBoard and W&B, fed the same rows.

``--logger csv,tensorboard,wandb`` (`add_logger_argument`, `parse_loggers`)
picks them; ``csv`` is always on. The trainers' host loops append rows to
`wmx.metrics_csv.MetricsCSV`; `RunLoggers.attach` wraps it so that each
append also goes to the other loggers, with the same keys and x axis:

- the x axis (``step``) is the row's ``env_steps`` online (agent steps x
  action repeat) and its ``updates`` offline;
- a row's numeric columns, except its identifiers (``seed``, ``kind``,
  ``task``) and the x column, become scalars tagged ``<kind>/<column>``,
  offline evaluation rows ``<kind>/<task>/<column>`` (task "mean": the mean
  score). Empty fields are skipped.

**TensorBoard** (tensorboardX, no TensorFlow): one event-file folder per seed,
``<run>/tensorboard/seed_<s>/``, so TensorBoard overlays the seeds in one
chart (``tensorboard --logdir <run>/tensorboard``). **W&B** (the optional
``wandb`` package): one W&B run per wmx run, tags suffixed ``/seed_<s>``,
plotted against the x column (``define_metric``); its id is kept in
``<run>/loggers.json`` so ``--resume`` continues the same W&B run. Without
WANDB_MODE and without an API key (WANDB_API_KEY or ``wandb login``'s netrc
entry) or without a connection to the W&B host, it runs in offline mode
(``wandb sync <run>/wandb/offline-run-*`` uploads it later).

On resume metrics.csv drops the rows past the checkpoint (the resumed run
writes them again); TensorBoard does the same (the writer's ``purge_step``:
TensorBoard hides the events at and after it), and a logger that a run did
not have before gets the rows kept so far first (backfill), so each
logger holds what metrics.csv holds. W&B cannot delete logged points: rows
of an interrupted stretch that the resumed run redoes appear twice there.
"""
from __future__ import annotations

import argparse
import csv
import importlib.util
import io
import json
import logging
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any, Sequence

from wmx.runs.host import write_json_atomic

log = logging.getLogger("wmx.runs")

LOGGERS = ("csv", "tensorboard", "wandb")
IDENTIFIERS = ("seed", "kind", "task")
STATE_FILE = "loggers.json"
TB_DIR = "tensorboard"
_PACKAGES = {"tensorboard": ("tensorboardX", "pip install tensorboardX (a dependency of wmx: "
                                             "pip install -e . installs it)"),
             "wandb": ("wandb", "pip install 'wmx[wandb]' (or pip install wandb)")}


def add_logger_argument(p: argparse.ArgumentParser) -> None:
    """``--logger`` on a trainer's parser (default None: csv, or a resumed run's loggers)."""
    p.add_argument("--logger", default=None, metavar="NAMES",
                   help="comma-separated metric loggers: csv (always on), tensorboard "
                        "(<run>/tensorboard/, no TensorFlow needed), wandb (the optional "
                        "extra wmx[wandb]; offline mode without an API key or network). "
                        "Default: csv; with --resume, the run's loggers")


def parse_loggers(text: str | None) -> tuple[str, ...]:
    """``"tensorboard,wandb"`` -> ("csv", "tensorboard", "wandb") (csv first, always).

    Raises ValueError (one line) for an unknown name, or for a logger whose
    package is not installed, naming what to install."""
    names = ["csv"]
    for raw in (text or "").split(","):
        n = raw.strip().lower()
        if not n:
            continue
        if n not in LOGGERS:
            raise ValueError(f"--logger {text}: unknown logger {n!r}; choose from "
                             f"{', '.join(LOGGERS)} (comma-separated)")
        if n not in names:
            names.append(n)
    for n in names:
        if n in _PACKAGES and importlib.util.find_spec(_PACKAGES[n][0]) is None:
            module, how = _PACKAGES[n]
            raise ValueError(f"--logger {n} needs the {module} package, which is not "
                             f"installed: {how}")
    return tuple(names)


def resolve_loggers(text: str | None, run_dir: Path | None) -> tuple[str, ...]:
    """The loggers of a run: ``--logger`` when given, else (a resumed run) the ones its
    ``loggers.json`` lists, else csv alone. Raises ValueError as `parse_loggers`."""
    if text is None and run_dir is not None:
        saved = _state(Path(run_dir)).get("loggers")
        if saved:
            return parse_loggers(",".join(saved))
    return parse_loggers(text)


def open_run_loggers(args: argparse.Namespace, run_dir: Path, resumed: bool,
                     primary: bool = True) -> "RunLoggers":
    """The trainer CLIs' loggers of ``run_dir``, entered on ``args.cleanup`` (closed when
    the CLI exits): ``--logger`` (`resolve_loggers`: a resumed run keeps its loggers
    unless it is given), csv alone for a secondary process of a multi-host run
    (``primary`` False). The run's config.json is the W&B config."""
    names = resolve_loggers(args.logger, run_dir if resumed else None) if primary else ("csv",)
    try:
        config = json.loads((Path(run_dir) / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    return args.cleanup.enter_context(RunLoggers(names, run_dir, config=config))


def _state(run_dir: Path) -> dict[str, Any]:
    try:
        d = json.loads((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def _number(v: Any) -> float | None:
    if v is None or v == "":
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def scalars(row: dict[str, Any], x: str) -> tuple[int, str, dict[str, float]] | None:
    """(step, seed, {tag: value}) of one metrics row (see the module doc); None for a row
    without a step."""
    step = _number(row.get(x))
    if step is None:
        return None
    kind = str(row.get("kind") or "metrics")
    task = str(row.get("task") or "")
    prefix = f"{kind}/{task}/" if task else f"{kind}/"
    vals = {}
    for k, v in row.items():
        if k in IDENTIFIERS or k == x:
            continue
        f = _number(v)
        if f is not None:
            vals[prefix + k] = f
    return int(step), str(row.get("seed", "")), vals


class _TensorBoard:
    """One tensorboardX SummaryWriter per seed under ``<run>/tensorboard/seed_<s>/``."""

    def __init__(self, root: Path, purge_after: int | None, backfill: list[dict], x: str):
        from tensorboardX import SummaryWriter
        self._cls, self.root, self.x = SummaryWriter, root, x
        self.existed = root.is_dir() and any(root.rglob("events.out.tfevents.*"))
        # resuming a run that logged here: hide the events past the kept rows
        self.purge = (purge_after + 1) if (self.existed and purge_after is not None) else None
        self.writers: dict[str, Any] = {}
        if not self.existed:
            self.log(backfill)

    def _writer(self, seed: str):
        w = self.writers.get(seed)
        if w is None:
            folder = self.root / f"seed_{seed}"
            folder.mkdir(parents=True, exist_ok=True)
            purge = self.purge if any(folder.glob("events.out.tfevents.*")) else None
            # the suffix orders (and keeps apart) files a writer makes within one second:
            # their names otherwise differ only in whole seconds
            w = self.writers[seed] = self._cls(logdir=str(folder), purge_step=purge,
                                               flush_secs=30,
                                               filename_suffix=f".{time.time_ns()}")
        return w

    def log(self, rows: list[dict]) -> None:
        touched = set()
        for r in rows:
            s = scalars(r, self.x)
            if s is None:
                continue
            step, seed, vals = s
            w = self._writer(seed)
            touched.add(seed)
            for tag, v in vals.items():
                w.add_scalar(tag, v, global_step=step)
        for seed in touched:
            self.writers[seed].flush()

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
        self.writers = {}


def _api_key_present() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    import netrc
    try:
        return netrc.netrc().authenticators(_wandb_host()) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _wandb_host() -> str:
    from urllib.parse import urlparse
    return urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or ""


def _reachable(host: str, timeout: float = 3.0) -> bool:
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def wandb_mode() -> str:
    """WANDB_MODE when set, else "online" with an API key and a reachable W&B host,
    else "offline"."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return mode
    return "online" if _api_key_present() and _reachable(_wandb_host()) else "offline"


class _Wandb:
    """One W&B run per wmx run (id kept in loggers.json), metrics against the x column."""

    def __init__(self, run_dir: Path, name: str, config: dict, backfill: list[dict], x: str):
        import wandb
        state = _state(run_dir).get("wandb") or {}
        new = not state.get("id")
        run_id = state.get("id") or secrets.token_hex(6)
        project = state.get("project") or os.environ.get("WANDB_PROJECT", "wmx")
        self.mode, self.x = wandb_mode(), x
        self.run = wandb.init(project=project, name=name, id=run_id, resume="allow",
                              dir=str(run_dir), config=config, mode=self.mode,
                              settings=wandb.Settings(console="off", silent=True))
        self.state = {"id": run_id, "project": project, "mode": self.mode,
                      "dir": str(Path(self.run.dir).parent)}
        self.run.define_metric(x)
        self.run.define_metric("*", step_metric=x)
        if new:
            self.log(backfill)

    def log(self, rows: list[dict]) -> None:
        by_step: dict[int, dict[str, float]] = {}
        for r in rows:
            s = scalars(r, self.x)
            if s is None:
                continue
            step, seed, vals = s
            d = by_step.setdefault(step, {self.x: step})
            d.update({f"{tag}/seed_{seed}": v for tag, v in vals.items()})
        for step in sorted(by_step):
            self.run.log(by_step[step])

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)


class _Tee:
    """A `MetricsCSV` look-alike: ``append(rows)`` writes metrics.csv, then the loggers."""

    def __init__(self, csv_writer, loggers: "RunLoggers"):
        self.csv, self.loggers = csv_writer, loggers
        self.path, self.columns = csv_writer.path, csv_writer.columns

    def append(self, rows: list[dict[str, Any]]) -> None:
        self.csv.append(rows)
        self.loggers.log(rows)


class RunLoggers:
    """The loggers of one trainer process besides metrics.csv; a context manager.

    names: from `parse_loggers` ("csv" needs nothing here); run_dir: the run;
    name: the run's name (W&B display name); config: the run's config.json
    (W&B config). Nothing is opened before `attach`. On exit every logger is
    closed (event files flushed; the W&B run finished, exit code 1 when the
    block raised); a logger that fails to close logs a warning and the others
    still close.
    """

    def __init__(self, names: Sequence[str], run_dir: Path, *, name: str = "",
                 config: dict | None = None):
        self.names = tuple(names)
        self.run_dir = Path(run_dir)
        self.name = name or self.run_dir.name
        self.config = dict(config or {})
        self.sinks: dict[str, Any] = {}

    def __enter__(self) -> "RunLoggers":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(failed=exc_type is not None)

    def attach(self, csv_writer, x: str):
        """Open the loggers for a run whose metrics.csv ``csv_writer`` holds the rows kept
        (after the resume trim) and return the writer to append to: ``csv_writer``
        itself when csv is the only logger. x: the x-axis column."""
        extra = [n for n in self.names if n != "csv"]
        if not extra:
            return csv_writer
        kept = _read_rows(Path(csv_writer.path))
        steps = [int(v) for v in (_number(r.get(x)) for r in kept) if v is not None]
        last = max(steps, default=-1)
        state = {"loggers": list(self.names)}
        if "tensorboard" in extra:
            self.sinks["tensorboard"] = _TensorBoard(self.run_dir / TB_DIR, last, kept, x)
        if "wandb" in extra:
            wb = self.sinks["wandb"] = _Wandb(self.run_dir, self.name, self.config, kept, x)
            state["wandb"] = wb.state
        write_json_atomic(self.run_dir / STATE_FILE, {**_state(self.run_dir), **state})
        return _Tee(csv_writer, self)

    def log(self, rows: list[dict[str, Any]]) -> None:
        """Send metrics rows (dicts of metrics.csv columns) to every open logger."""
        for sink in self.sinks.values():
            sink.log(rows)

    def close(self, failed: bool = False) -> None:
        """Close every open logger (idempotent)."""
        sinks, self.sinks = self.sinks, {}
        for n, sink in sinks.items():
            try:
                sink.close(failed) if n == "wandb" else sink.close()
            except Exception as e:  # noqa: BLE001 - closing one must not stop the others
                log.warning("closing the %s logger failed: %s", n, e)


def _read_rows(path: Path) -> list[dict[str, str]]:
    try:
        text = path.read_text()
    except OSError:
        return []
    return list(csv.DictReader(io.StringIO(text, newline="")))
