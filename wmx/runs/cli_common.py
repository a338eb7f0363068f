"""What the trainers' CLIs share: the error boundary, --resume, atomic run directories, agent flags.

Shared by ``train_online`` and ``train_offline``: a run directory
``<home>/runs/<name>/`` appears only complete, with its ``config.json``
(written under a temporary name, then renamed); bad input exits with
status 2 and one line on stderr, having written nothing; an expected
failure while running (no space left, a read-only data root, out of memory,
a non-finite loss) exits with status 1 and one line (`wmx.failures`),
and a run that fails before its first checkpoint is removed, so the same
command can simply be run again. ``--resume`` refuses every flag that
disagrees with the run's saved config, except the ones a trainer declares
safe (extending ``--env-steps`` / ``--updates``), see `resume_changes`.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Callable, Iterable

from wmx import temporaries
from wmx.runs.config_file import RUN_KIND_KEYS


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with a one-line usage error: ``PROG: error: MESSAGE (see PROG
    --help)`` on stderr, exit status 2, instead of the usage block before it. Its
    subparsers are of this class too; a missing subcommand is named by its choices
    (``required: {dataset,runs,demo}``), not by its dest."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        for action in self._actions:     # the usage's own spelling of the subcommands
            if isinstance(action, argparse._SubParsersAction) and action.metavar is None:
                action.metavar = "{" + ",".join(action.choices) + "}"
        return super().parse_known_args(args, namespace)

    def add_subparsers(self, **kwargs):
        kwargs.setdefault("parser_class", _Subcommand)
        return super().add_subparsers(**kwargs)


class _Subcommand(ArgumentParser):
    """A subcommand's parser: it names an argument it does not know itself (``wmx demo:
    error: unrecognized arguments: ... (see wmx demo --help)``) rather than leaving it to
    the top-level parser, whose --help does not list the subcommand's flags."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras


def count(text: str) -> int:
    """argparse type of a count flag: an integer, also written ``1e6`` or ``1_000_000``."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(value)


def at_least(least: int) -> Callable[[str], int]:
    """argparse type: a `count` of at least ``least`` (e.g. ``at_least(1)`` for updates,
    ``at_least(0)`` for seeds); a smaller value is an ArgumentTypeError naming the bound."""
    def parse(text: str) -> int:
        value = count(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} must be at least {least}")
        return value
    return parse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """``--help`` that appends "(default: X)" only where it says something: not when the help
    text already states its default, nor for a default of None, False or an empty list (a
    flag left unset)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, [], ()) \
                or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action)


def given_flags(parser: argparse.ArgumentParser, argv: Iterable[str]) -> set[str]:
    """The ``dest`` of every option typed in ``argv`` (``--flag`` or ``--flag=value``,
    unique abbreviations resolved as argparse does)."""
    opts = parser._option_string_actions
    out = set()
    for tok in argv:
        if tok == "--":
            break
        if not tok.startswith("-") or tok == "-" or tok[1:2].isdigit() or tok[1:2] == ".":
            continue
        key = tok.split("=", 1)[0]
        action = opts.get(key)
        if action is None and key.startswith("--") and parser.allow_abbrev:
            hits = {id(a): a for o, a in opts.items() if o.startswith(key)}
            action = next(iter(hits.values())) if len(hits) == 1 else None
        if action is not None:
            out.add(action.dest)
    return out


def configure_logging() -> None:
    """The commands' log lines: INFO and above on stderr with their time; JAX's backend
    probing (INFO "Unable to initialize backend 'tpu'" on every machine without one)
    only from WARNING."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("jax._src.xla_bridge").setLevel(logging.WARNING)


def run_cli(prog: str, parser: argparse.ArgumentParser,
            body: Callable[[argparse.Namespace], int], argv: list[str] | None) -> int:
    """Parse ``argv`` and run ``body``.

    ``args.given`` holds the dests of the flags typed (`given_flags`).
    ValueError / FileExistsError / FileNotFoundError (bad input) become
    ``<prog>: error: <message>`` on stderr and exit status 2 (argparse's own
    usage errors exit 2 as well); the expected runtime failures of
    `wmx.failures.describe` (disk, permissions, memory, non-finite
    values) one line and exit status 1 (`wmx.failures.report_failure`).
    Called from a command line (``argv`` None) the process first restarts itself with
    huge pages for malloc's mapped memory (`wmx.runs.heap.restart_with_huge_pages`).
    ``args.cleanup`` is a `contextlib.ExitStack` closed when ``body`` returns
    or raises (before the error line is printed; what is entered on it sees
    the exception): the run lock (`hold_run_dir`) and the loggers
    (`wmx.runs.loggers`) are entered on it."""
    from wmx.runs.heap import restart_with_huge_pages
    restart_with_huge_pages(argv)       # a command line only, not a caller in this process
    from wmx.failures import report_failure
    configure_logging()
    from wmx.runs.config_file import parse_with_config
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_with_config(parser, argv)       # --config FILE: defaults under the flags
    args.given = given_flags(parser, argv)
    try:
        with contextlib.ExitStack() as cleanup:
            args.cleanup = cleanup
            return body(args)
    except Exception as err:   # noqa: BLE001 - only the expected failures, the rest re-raised
        status = report_failure(prog, err, getattr(args, "resume_hint", ""))
        if status is None:
            raise
        return status


def hold_run_dir(args: argparse.Namespace, run_dir: Path, primary: bool = True) -> None:
    """Hold ``run_dir``'s lock (`wmx.runs.owner.hold_run`) until the CLI exits
    (``args.cleanup``), so `wmx runs` shows the run as running and a second trainer of it
    fails at once; a second call for the same run does nothing. A trainer takes it after
    checking its flags (bad input writes nothing, not even the lock file) and before it
    writes anything in the run. ``primary`` False (a dry run; a secondary process of a
    multi-host run): no lock. Raises `wmx.runs.owner.RunBusyError` (a ValueError) when
    another process trains it."""
    held = getattr(args, "held_runs", None)
    if held is None:
        held = args.held_runs = set()
    key = str(Path(run_dir).resolve())
    if primary and key not in held:
        from wmx.runs.owner import hold_run
        args.cleanup.enter_context(hold_run(run_dir))
        held.add(key)


def resume_config(resume: str, home_flag: str | None, home: Path,
                  prog: str) -> tuple[Path, dict[str, Any], Path]:
    """``(run_dir, config.json as a dict, home)`` of ``--resume RUN_DIR``.

    RUN_DIR is a run directory, or the bare name of one under ``<home>/runs/``
    (as `wmx runs ls` lists it) when no such directory is in the working folder.
    The data root becomes the run's ``<home>`` (``<home>/runs/<name>``, also where
    RUN_DIR is a symbolic link there to a run kept elsewhere: `home_of_run`) unless
    ``--home`` was given. Raises FileNotFoundError when RUN_DIR holds no
    config.json, ValueError when it is not JSON, not an object
    (`wmx.runs.listing.damaged_config_message`), or another trainer's run config
    (naming the trainer that continues it)."""
    given = Path(os.path.abspath(Path(resume).expanduser()))   # a link kept as given
    run_dir = given.resolve()
    named = Path(home) / "runs" / resume
    if (not run_dir.exists() and "/" not in resume and resume not in (".", "..")
            and (named / "config.json").is_file()):
        given, run_dir = Path(os.path.abspath(named)), named.resolve()
    cfg_path = run_dir / "config.json"
    if not cfg_path.is_file():
        what = "no config.json there" if run_dir.is_dir() else "no such directory"
        if "/" not in resume and resume not in (".", ".."):     # a bare name: looked there too
            what += f", nor a run {named}"
        raise FileNotFoundError(f"--resume {run_dir}: {what}; pass a run "
                                f"directory written by {prog}, or the name of one under "
                                f"{Path(home) / 'runs'} (`wmx runs ls`)")
    from wmx.runs.listing import config_problem, damaged_config_message, home_of_run
    if config_problem(cfg_path) not in (None, "is not a JSON object"):   # that: below
        raise ValueError(f"--resume: {damaged_config_message(run_dir)}")
    cfg = json.loads(cfg_path.read_text())
    key = RUN_KIND_KEYS.get(prog)
    if not isinstance(cfg, dict) or (key is not None and key not in cfg):
        other = next((p for p, k in RUN_KIND_KEYS.items()
                      if p != prog and isinstance(cfg, dict) and k in cfg), None)
        fix = (f"continue it with `{other} --resume {run_dir}`" if other
               else f"pass a run directory written by {prog}")
        raise ValueError(f"--resume {run_dir}: not a {prog} run (its config.json has no "
                         f"'{key}'); {fix}")
    if home_flag is None and home_of_run(given) is not None:
        home = home_of_run(given)
    return run_dir, cfg, home


def warn_if_restarting(run_dir: Path) -> bool:
    """Log a warning when ``--resume`` of ``run_dir`` starts over: it has metrics.csv rows
    but no checkpoint (checkpoints/ deleted or emptied), so the run trains again from the
    beginning and those rows are replaced. Returns whether it warned."""
    from wmx.checkpoint import list_checkpoints
    metrics = Path(run_dir) / "metrics.csv"
    if list_checkpoints(run_dir) or not metrics.is_file():
        return False
    with metrics.open() as f:
        rows = sum(1 for _ in f) - 1
    if rows <= 0:
        return False
    logging.getLogger("wmx.runs").warning(
        "%s has no checkpoint (checkpoints/ is empty or gone) but %d metrics.csv rows: "
        "--resume starts the run again from the beginning and replaces them; stop now "
        "(Ctrl-C) to keep them", run_dir, rows)
    return True


AGENT_DESTS = ("agent", "preset", "model_size", "set_")
"""The agent flags of `add_agent_arguments` (plus every registered agent's own flags)."""


def _flag(dest: str) -> str:
    return "--set" if dest == "set_" else "--" + dest.replace("_", "-")


def _same(a: Any, b: Any) -> bool:
    norm = (lambda v: list(v) if isinstance(v, (list, tuple)) else v)
    return norm(a) == norm(b)


def resume_changes(args: argparse.Namespace, saved: dict[str, Any], fields: dict[str, str],
                   free: Iterable[str] = (), extendable: Iterable[str] = (),
                   changeable: Iterable[str] = (), overrides: dict[str, Any] | None = None,
                   as_overrides: Iterable[str] = (),
                   new_run: str = "start a new run (--name)",
                   config_of: Callable[[dict[str, Any]], Any] | None = None) -> dict[str, Any]:
    """Check the flags typed with ``--resume`` against the run's saved config.

    fields: flag dest -> key of the saved config it sets; free: dests that may
    be given freely (output and display flags); extendable: dests whose value
    may grow (the trainer then checks the extension is exact); changeable: dests whose
    saved value a resumed run may replace (settings that change no result); overrides: the
    agent-config overrides of the typed agent flags (`agent_overrides`) and of the
    dests in ``as_overrides`` (e.g. train_online's --batch-size), compared key by
    key with the saved ``agent_overrides`` or, for a key the run did not override, with
    the value it resolved to (``resolved_agent_config``, where a machine-dependent field
    the run was saved without has its pinned value, `wmx.runs.pins`; a key that config
    lacks is refused as unknown, with close names); new_run: how the command starts a new run
    instead (the errors' advice); config_of: agent overrides -> the agent config the run
    builds with them over its saved ones, so a value no config takes (``--set
    offline_bc_weight=abc``) is refused first, with the message a new run gives, not as a
    conflict. A flag equal to the saved
    value is accepted. Returns {config key: new value} of the extended and changed fields.
    Raises ValueError naming the flag, its value and the saved value for any
    other difference, and for a flag that has no meaning for a resumed run.
    """
    if config_of is not None and overrides:
        check_override_values(overrides, config_of)
    free = set(free) | {"resume", "home", "dry_run", "no_progress"}
    extendable = set(extendable)
    changes: dict[str, Any] = {}
    agent_flags = set(AGENT_DESTS[2:]) | set(_registry_flags()) | set(as_overrides)
    for dest in sorted(getattr(args, "given", set())):
        if dest in free or dest in agent_flags:
            continue
        if dest not in fields:
            raise ValueError(f"{_flag(dest)} does not apply to a resumed run (--resume continues "
                             f"the run in its directory with its saved config); drop it")
        key = fields[dest]
        new, old = getattr(args, dest), saved.get(key)
        if _same(new, old):
            continue
        if dest in changeable or (dest in extendable and isinstance(new, int)
                                  and isinstance(old, int) and new > old):
            changes[key] = new
            continue
        more = (f"; {_flag(dest)} may only grow (extend the run)" if dest in extendable else "")
        raise ValueError(f"--resume: {_flag(dest)} {_show(new)} conflicts with the run's saved "
                         f"{key} {_show(old)}{more}. A resumed run keeps its config: drop the "
                         f"flag to continue it, or {new_run}")
    saved_over = saved.get("agent_overrides") or {}
    resolved = saved.get("resolved_agent_config")
    resolved = dict(resolved) if isinstance(resolved, dict) else {}
    if resolved:      # a field added since the run was saved: the value the run used
        from wmx.agents.registry import get_agent
        from wmx.runs.pins import saved_values
        resolved.update(saved_values(get_agent(saved.get("agent", "tdmpc2")), saved))
    for key, new in (overrides or {}).items():
        if key in saved_over:
            if _same(new, saved_over[key]):
                continue
        elif resolved and key not in resolved:
            from wmx.agents.overrides import close_names, did_you_mean
            hint = did_you_mean(close_names(key, resolved))
            raise ValueError(f"--resume: the run's agent config has no field {key!r}"
                             + (f"; {hint}" if hint else "") + "; drop the flag to continue "
                             "the run")
        elif key in resolved and _same(new, resolved[key]):
            continue                                 # the value the run resolved to: no change
        was = (_show(saved_over[key]) if key in saved_over else
               f"{_show(resolved[key])} (the preset's)" if key in resolved else
               "(preset default)")
        raise ValueError(f"--resume: the agent setting {key}={_show(new)} conflicts with the "
                         f"run's saved {key}={was}. A resumed run keeps its config: drop the "
                         f"flag to continue it, or {new_run}")
    return changes


def check_override_values(overrides: dict[str, Any],
                          config_of: Callable[[dict[str, Any]], Any]) -> None:
    """Raise the agent's own ValueError (`wmx.agents.overrides.check_override_types`, the
    config's range checks) for an override of a known field whose value the config refuses:
    ``config_of(overrides of the fields the config has)`` builds it. Unknown fields are left
    to the caller (`resume_changes` names close ones)."""
    import dataclasses
    names = {f.name for f in dataclasses.fields(config_of({}))}
    known = {k: v for k, v in overrides.items() if k in names}
    if known:
        config_of(known)


def agent_config_of(rc: Any) -> Callable[[dict[str, Any]], Any]:
    """`resume_changes`'s ``config_of`` for a run config ``rc`` (online or offline): overrides
    -> the agent config of ``rc`` with them over its saved agent overrides."""
    import dataclasses
    return lambda over: dataclasses.replace(
        rc, agent_overrides={**rc.agent_overrides, **over}).agent_config


def _show(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return " ".join(map(str, v))
    return str(v)


def _registry_flags() -> list[str]:
    from wmx.agents.registry import all_flags
    return list(all_flags())


def replace_json(path: Path, data: dict[str, Any], sort_keys: bool = True) -> None:
    """Write ``data`` to ``path`` as JSON atomically: an owned temporary beside it
    (`wmx.temporaries`), then a rename, so readers see the old file or the new one."""
    path = Path(path)
    tmp = path.parent / temporaries.owned_name(path.name)
    tmp.write_text(json.dumps(data, indent=1, sort_keys=sort_keys))
    os.replace(tmp, path)


def rewrite_config(run_dir: Path, config: dict[str, Any]) -> None:
    """Replace ``run_dir/config.json`` atomically (an extended run's new config)."""
    replace_json(Path(run_dir) / "config.json", config)


def run_has_finished(run_dir: Path) -> bool:
    """Whether the run wrote its end: summary.json, or a newest checkpoint marked
    ``finished`` (a trainer killed between that checkpoint and summary.json; the newest
    intact one, `wmx.checkpoint.newest_intact`). Such a run cannot be extended exactly
    (its restored state says finished)."""
    from wmx.checkpoint import newest_intact
    if (Path(run_dir) / "summary.json").exists():
        return True
    found = newest_intact(run_dir)
    return found is not None and bool(found[1].get("finished"))


RUN_NAME_MAX = 200
"""Longest --name in bytes (file systems allow 255, temporaries add a prefix)."""


def run_name(value: str) -> str:
    """argparse type of ``--name``: one folder name under ``<home>/runs/``. Raises
    argparse.ArgumentTypeError for a path (``/``, ``..``), a hidden name (``wmx runs ls``
    would not list it) or a name too long for the file system."""
    if not value or "/" in value or "\0" in value or value.startswith("."):
        raise argparse.ArgumentTypeError(
            f"{value!r}: a run name is one folder name under <home>/runs/, without '/' and "
            "not starting with '.' (e.g. --name cartpole-seed0)")
    if len(value.encode()) > RUN_NAME_MAX:
        raise argparse.ArgumentTypeError(
            f"a run name of {len(value.encode())} bytes is too long; use at most {RUN_NAME_MAX}")
    return value


def create_run_dir(runs_dir: Path, name: str, config: dict[str, Any]) -> Path:
    """Create ``runs_dir/name`` holding ``config.json`` (sorted keys), atomically.

    Raises FileExistsError (naming --name and --resume) when it exists."""
    run_dir = runs_dir / name
    if run_dir.exists():
        raise FileExistsError(f"run directory {run_dir} exists already; choose another "
                              "--name, or continue it with --resume " + str(run_dir))
    tmp = temporaries.make_dir(runs_dir, name)
    try:
        (tmp / "config.json").write_text(json.dumps(config, indent=1, sort_keys=True))
        os.replace(tmp, run_dir)
    except BaseException:
        temporaries.remove(tmp)
        raise
    return run_dir


def sweep_stale(store, run_dir: Path | None = None) -> None:
    """Remove what dead processes of this host left behind (`wmx.temporaries`): the
    store's temporaries and, given a run, those in the run and its checkpoints/."""
    removed = store.sweep_temporaries()
    if run_dir is not None:
        removed += temporaries.sweep(run_dir) + temporaries.sweep(Path(run_dir) / "checkpoints")
    if removed:
        logging.getLogger("wmx.runs").info(
            "removed %d temporaries left by processes that no longer run: %s", len(removed),
            ", ".join(str(p) for p in removed[:5]) + (" ..." if len(removed) > 5 else ""))


def remove_if_unstarted(run_dir: Path) -> bool:
    """Remove ``run_dir`` when it holds no checkpoint (a run that failed before its first
    one; nothing in it can be resumed); returns whether it was removed."""
    ckpts = Path(run_dir) / "checkpoints"
    if ckpts.is_dir() and any(p.name.isdigit() for p in ckpts.iterdir()):
        return False
    shutil.rmtree(run_dir, ignore_errors=True)
    return True


# ---- agent flags -----------------------------------------------------------------------
def add_agent_arguments(p: argparse.ArgumentParser, mode: str) -> None:
    """--agent, --preset, --model-size, --set KEY=VALUE and every registered agent's own
    flags of ``mode`` ("online" | "offline"; each rejected for an agent that does not
    understand it, `agent_overrides`)."""
    from wmx.agents.registry import AGENTS, agent_names
    names = agent_names(mode)
    p.add_argument("--agent", default="tdmpc2", help=f"agent to train: {' | '.join(names)}")
    p.add_argument("--preset", default="cpu", help="paper | cpu | tiny (the agent's presets)")
    p.add_argument("--model-size", default=None,
                   help="model size, e.g. tdmpc2 1/5/19/48/317 or dreamerv3 12m: sets the "
                        "network widths, replacing the preset's (its other settings stay)")
    p.add_argument("--set", dest="set_", action="append", default=[], metavar="KEY=VALUE",
                   help="any field of the agent's config (repeatable), e.g. --set horizon=5 "
                        "(tdmpc2) or --set imag_horizon=10 (dreamerv3); "
                        "values are parsed as JSON numbers/booleans where they can be")
    owners: dict[str, list[str]] = {}
    for e in AGENTS.values():
        if mode in e.modes:
            for k in e.flags:
                if not (mode == "offline" and k in e.online_flags):
                    owners.setdefault(k, []).append(e.name)
    for k, who in owners.items():
        typ = next(AGENTS[n].flags[k] for n in who)
        said = next((AGENTS[n].flag_help[k] for n in who if k in AGENTS[n].flag_help),
                    f"explicit {k} (overrides the preset)")
        p.add_argument(f"--{k.replace('_', '-')}", type=typ, default=None,
                       help=f"{'/'.join(who)}: {said}")


def parse_set(items: list[str]) -> dict[str, Any]:
    """{key: value} of ``--set KEY=VALUE`` items (JSON values where they parse, else
    strings). Raises ValueError for an item without '=' or an empty key."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ValueError(f"--set {item!r}: write KEY=VALUE with a field of the agent's "
                             "config, e.g. --set horizon=5 (tdmpc2), --set imag_horizon=10 "
                             "(dreamerv3)")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def agent_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The config overrides of the flags: a ``--config`` file's ``agent_overrides``
    (lowest), the agent's own flags, --model-size (as the agent's size type) and --set
    (wins). Raises ValueError for a flag another agent owns or a model size of the
    wrong kind."""
    from wmx.agents.registry import all_flags, check_flags, get_entry
    from wmx.runs.config_file import FILE_OVERRIDES
    given = {k: getattr(args, k, None) for k in all_flags()}
    check_flags(args.agent, given)
    over = dict(getattr(args, FILE_OVERRIDES, None) or {})
    over.update({k: v for k, v in given.items() if v is not None})
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
