"""The outputs of an official DreamerV3 run: metrics.csv, the summary and the logs' tar.

`finish` writes them (into the logdir, and copies them to --out); `convert_only` is the
--convert-only mode of `official_dreamerv3.py`.
"""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

from _official_logs import (PROGRESS, convert, fail, run_record, summarize,
                            write_metrics_csv)
from _official_settings import LOG_FILES, LOGS_TAR, METRICS_CSV, SUMMARY

def finish(logdir: Path, record: dict, call: dict | None, out: str | None) -> dict:
    """Write metrics.csv and official_summary.json into ``logdir`` (and copy them, with the
    official logs, to ``out`` when given); return the summary.

    Args:
      logdir: the run's logdir.
      record: its settings (wmx_run.json, or the flags' for a plain official logdir).
      call: this call's figures (None for --convert-only).
      out: a folder to copy metrics.csv and the summary to, with the official logs and
        the driver's records in one `LOGS_TAR` (three files; four with a training call's
        `RUN_LOG`: the device brings back 8 at most), or None.
    Returns:
      The summary dict.
    """
    rows = convert(logdir, record.get("seed", 0), record.get("envs") or 16,
                   record.get("action_repeat", 2))
    write_metrics_csv(logdir / METRICS_CSV, rows)
    summary = summarize(logdir, record, call)
    (logdir / SUMMARY).write_text(json.dumps(summary, indent=1))
    if out:
        dest = Path(out)
        dest.mkdir(parents=True, exist_ok=True)
        for name in (METRICS_CSV, SUMMARY):
            (dest / name).write_bytes((logdir / name).read_bytes())
        with tarfile.open(dest / LOGS_TAR, "w:gz") as tar:
            for name in LOG_FILES:
                if (logdir / name).is_file():
                    tar.add(logdir / name, arcname=name)
    last = summary["last_return"]
    print(f"[official_dreamerv3] {logdir}: env steps {summary['env_steps']}, train steps "
          f"{summary['train_steps']}, wall {summary['wall_s']} s, episodes "
          f"{summary['episodes']}, last return "
          f"{'-' if last is None else f'{last:.1f}'}; wrote {METRICS_CSV} and {SUMMARY}",
          flush=True)
    return summary


def convert_only(args) -> None:
    """The --convert-only mode: metrics.csv and the summary of a finished (or stopped) run.

    Args:
      args: the parsed flags; ``--seed`` and ``--envs`` replace the run's recorded values
        (needed for a logdir that this driver did not write: default seed 0, 16 envs).
    """
    logdir = Path(args.convert_only).expanduser()
    if not (logdir / "scores.jsonl").is_file() and not (logdir / PROGRESS).is_file():
        fail(f"--convert-only {logdir}: no scores.jsonl there; pass the logdir of an "
             "official DreamerV3 run")
    record = run_record(logdir) or {}
    record = {"seed": 0, "envs": 16, "action_repeat": 2, **record}
    if args.seed is not None:
        record["seed"] = args.seed
    if args.envs is not None:
        record["envs"] = args.envs
    finish(logdir, record, None, args.out)


