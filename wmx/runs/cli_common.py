"""What the trainers' CLIs share: the error boundary, --resume, atomic run directories, agent flags.

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


# ---- agent flags -----------------------------------------------------------------------
def add_agent_arguments(p: argparse.ArgumentParser, mode: str) -> None:
    """--agent, --preset, --model-size, --set KEY=VALUE and every registered agent's own
    flags (each rejected for an agent that does not understand it, `agent_overrides`)."""
    from wmx.agents.registry import AGENTS, agent_names
    names = agent_names(mode)
    p.add_argument("--agent", default="tdmpc2", help=f"agent to train: {' | '.join(names)}")
    p.add_argument("--preset", default="cpu", help="paper | cpu | tiny (the agent's presets)")
    p.add_argument("--model-size", default=None,
                   help="model size, e.g. tdmpc2 1/5/19/48/317 (fills the widths the preset "
                        "leaves)")
    p.add_argument("--set", dest="set_", action="append", default=[], metavar="KEY=VALUE",
                   help="any field of the agent's config (repeatable), e.g. --set horizon=5; "
                        "values are parsed as JSON numbers/booleans where they can be")
    owners: dict[str, list[str]] = {}
    for e in AGENTS.values():
        if mode in e.modes:
            for k in e.flags:
                owners.setdefault(k, []).append(e.name)
    for k, who in owners.items():
        typ = next(AGENTS[n].flags[k] for n in who)
        p.add_argument(f"--{k.replace('_', '-')}", type=typ, default=None,
                       help=f"{'/'.join(who)}: explicit {k} (overrides the preset)")


def parse_set(items: list[str]) -> dict[str, Any]:
    """{key: value} of ``--set KEY=VALUE`` items (JSON values where they parse, else
    strings). Raises ValueError for an item without '=' or an empty key."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: write KEY=VALUE, e.g. --set horizon=5")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def agent_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config overrides of the flags: the agent's own flags, --model-size (as the
    agent's size type) and --set (wins). Raises ValueError for a flag another agent
    owns or a model size of the wrong kind."""
    from wmx.agents.registry import all_flags, check_flags, get_entry
    given = {k: getattr(args, k, None) for k in all_flags()}
    check_flags(args.agent, given)
    over = {k: v for k, v in given.items() if v is not None}
    if args.model_size is not None:
        typ = get_entry(args.agent).model_size
        try:
            over["model_size"] = typ(args.model_size)
        except ValueError:
            raise ValueError(f"--model-size {args.model_size!r} is not a {args.agent} model "
                             "size") from None
    over.update(parse_set(args.set_))
    return over


def print_counts(header: str, counts: dict[str, int]) -> None:
    """Print a header line, then the parameters per module and the total."""
    print(header)
    for k, v in counts.items():
        if k != "total":
            print(f"  {k:<12s} {v:>12,d}")
    print(f"  {'total':<12s} {counts['total']:>12,d}")


# ---- persistent compilation cache ----------------------------------------------------------
COMPILE_CACHE_MIN_SECONDS = 0.2
"""Programs that compile faster than this are not written to the cache (JAX's
``jax_persistent_cache_min_compile_time_secs``)."""


def add_cache_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-compile-cache", action="store_true",
                   help="do not use JAX's persistent compilation cache (<home>/cache/jax); by "
                        "default a second run of the same configuration skips compiling")


def enable_compile_cache(home: Path, enabled: bool = True) -> Path | None:
    """Turn on JAX's persistent compilation cache in ``<home>/cache/jax``.

    A second invocation of the same programs (same config, shapes, jax and
    XLA flags) then loads them instead of compiling. Off when ``enabled`` is
    False or the environment sets WMX_NO_COMPILE_CACHE=1 (the test suite does,
    so tests never share compiled programs through the disk). Returns the
    cache folder, or None when off. The setting is process-wide (a JAX
    config); the first folder set in a process stays in use.
    """
    if not enabled or os.environ.get("WMX_NO_COMPILE_CACHE", "") not in ("", "0"):
        return None
    import jax
    path = Path(home) / "cache" / "jax"
    path.mkdir(parents=True, exist_ok=True)
    if jax.config.jax_compilation_cache_dir is None:
        jax.config.update("jax_compilation_cache_dir", str(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs",
                          COMPILE_CACHE_MIN_SECONDS)
    return path
