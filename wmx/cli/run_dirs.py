"""Run directories of the trainers' CLIs: the error boundary, --resume, atomic creation.

Shared by ``train_online`` and ``train_offline``: a run directory
``<home>/runs/<name>/`` appears only complete, with its ``config.json``
(written under a temporary name, then renamed), and bad input exits with
status 2 and one line on stderr, having written nothing.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable


def run_cli(prog: str, parser: argparse.ArgumentParser,
            body: Callable[[argparse.Namespace], int], argv: list[str] | None) -> int:
    """Parse ``argv`` and run ``body``; ValueError / FileExistsError /
    FileNotFoundError become ``<prog>: error: <message>`` on stderr and exit
    status 2 (argparse's own usage errors exit 2 as well)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = parser.parse_args(argv)
    try:
        return body(args)
    except (ValueError, FileExistsError, FileNotFoundError) as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 2


def resume_config(resume: str, home_flag: str | None, home: Path,
                  prog: str) -> tuple[Path, dict[str, Any], Path]:
    """``(run_dir, config.json as a dict, home)`` of ``--resume RUN_DIR``.

    The data root becomes the run's ``<home>`` (``<home>/runs/<name>``) unless
    ``--home`` was given. Raises FileNotFoundError when RUN_DIR holds no
    config.json."""
    run_dir = Path(resume).expanduser().resolve()
    cfg_path = run_dir / "config.json"
    if not cfg_path.is_file():
        raise FileNotFoundError(f"--resume {run_dir}: no config.json there; pass a run "
                                f"directory written by {prog}")
    if home_flag is None and run_dir.parent.name == "runs":
        home = run_dir.parent.parent
    return run_dir, json.loads(cfg_path.read_text()), home


def create_run_dir(runs_dir: Path, name: str, config: dict[str, Any]) -> Path:
    """Create ``runs_dir/name`` holding ``config.json`` (sorted keys), atomically.

    Raises FileExistsError (naming --name and --resume) when it exists."""
    run_dir = runs_dir / name
    if run_dir.exists():
        raise FileExistsError(f"run directory {run_dir} exists already; choose another "
                              "--name, or continue it with --resume " + str(run_dir))
    tmp = runs_dir / f".tmp-{name}-{os.getpid()}"
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
    os.replace(tmp, run_dir)
    return run_dir
