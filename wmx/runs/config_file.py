"""``--config FILE``: flag values from a YAML or JSON file, below the flags typed.

Precedence, highest first: a flag typed on the command line > the config
file > the preset (``--preset``, the agent's hyperparameters) > the defaults.
The file is a mapping whose keys are flag names without the dashes
(``env_steps: 20000`` or ``env-steps: 20000``; ``seeds: [0, 1]``), plus

- ``agent_overrides``: {field: value} of the agent's config, applied over the
  preset and under ``--set`` and the agent flags typed (what ``--set`` writes
  into a run's config.json);
- a trainer's own aliases (`add_config_argument` ``keys``), so a run's saved
  ``config.json`` can be given back as it is: its keys are the run config's
  fields (``checkpoint_every_chunks`` -> ``--checkpoint-every``), and the
  fields derived from others (``ignored``: e.g. the TaskSet, the code
  version) are skipped.

A run's saved ``config.json`` also records, in ``resolved_agent_config``, the values
its machine-dependent agent fields resolved to (`wmx.runs.pins`: DreamerV3's
compute_dtype "auto" became "bfloat16" on an accelerator). A new run from it, of the
same agent and preset, computes as that run did on any machine (`with_file_pins`),
unless the file's ``agent_overrides`` or a flag typed sets the field: ``--set
compute_dtype=auto`` lets this machine choose.

The file's values become the parser's defaults before the command line is
parsed (`parse_with_config`), so a typed flag overrides them and
``--resume`` (whose flags are checked against the run's saved config) refuses
``--config`` like any other flag that does not apply to a resumed run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Sequence

PRECEDENCE = "precedence: a flag typed > --config FILE > --preset > the defaults"
RUN_KIND_KEYS = {"train_online": "task", "train_offline": "dataset"}
"""The config.json key only each trainer's runs have (OnlineRunConfig.task,
OfflineRunConfig.dataset): which trainer a run's config belongs to."""

FILE_OVERRIDES = "config_agent_overrides"
"""Namespace dest holding the file's ``agent_overrides`` (`wmx.runs.cli_common.agent_overrides`
merges them under the typed agent flags)."""

FILE_RUN = "config_saved_run"
"""Namespace dest holding, for a file that is a run's saved config.json, its ``agent``,
``preset`` and ``resolved_agent_config`` (`with_file_pins`); None otherwise."""


def add_config_argument(p: argparse.ArgumentParser, keys: dict[str, str] | None = None,
                        ignored: Iterable[str] = (), *, trainer: bool = True,
                        saved_keys: dict[str, str] | None = None) -> None:
    """Add ``--config FILE`` to a parser; ``keys``: file key -> flag dest aliases (a saved
    config.json's field names), ``ignored``: file keys skipped (derived fields);
    ``saved_keys``: aliases that apply only to a run's saved config.json (`is_saved_run`),
    where a field's name is also a flag's of another meaning (train_offline: the saved
    ``tasks`` are the evaluated ones, ``--eval-tasks``); ``trainer`` False: the help
    names no trainer keys (agent_overrides, --preset)."""
    p.add_argument("--config", metavar="FILE", default=None,
                   help="YAML (.yaml/.yml) or JSON file of flag values: keys are flag names "
                        "without dashes (e.g. env_steps: 20000, seeds: [0, 1]) and "
                        "agent_overrides: {field: value}; a run's saved config.json works "
                        f"as it is; {PRECEDENCE}" if trainer else
                        "YAML (.yaml/.yml) or JSON file of flag values: keys are flag names "
                        "without dashes (e.g. episodes: 20, tasks: [cartpole-balance]); "
                        "precedence: a flag typed > --config FILE > the defaults")
    p.set_defaults(**{FILE_OVERRIDES: {}, FILE_RUN: None})
    p._wmx_config_keys = (dict(keys or {}), frozenset(ignored))   # read by parse_with_config
    p._wmx_config_saved_keys = dict(saved_keys or {})
    p._wmx_config_trainer = trainer                                # agent_overrides allowed


def load_config_file(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML or JSON file (JSON for .json, YAML otherwise: YAML reads
    JSON too). Raises FileNotFoundError for a missing file, ValueError (naming the file
    and the parser's message) for unparsable text or a top level that is not a mapping."""
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise FileNotFoundError(f"--config {path}: no such file") from None
    except OSError as e:
        raise ValueError(f"--config {path}: cannot read it ({e.strerror})") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml
            data = yaml.safe_load(text)
    except Exception as e:  # noqa: BLE001 - json / yaml syntax errors of any kind
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"--config {path}: not valid {'JSON' if path.suffix.lower() == '.json' else 'YAML'}"
                         f" ({first})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: the top level must be a mapping of flag names to "
                         f"values, got {type(data).__name__}")
    return data


def _actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {a.dest: a for a in parser._actions
            if a.option_strings and a.dest not in ("help", "config")}


def _convert(action: argparse.Action, key: str, value: Any, path: str) -> Any:
    """A file value as the flag would have parsed it: ``type`` applied to strings (and to
    each element of a list flag), booleans for switches, choices checked."""
    flag = action.option_strings[-1] if action.option_strings else key
    bad = f"--config {path}: {key}: "
    if value is None:                     # JSON null / YAML ~: the flag's own default
        return action.default
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        if not isinstance(value, bool):
            raise ValueError(bad + f"{flag} is a switch: write true or false, got {value!r}")
        return value
    if isinstance(action, argparse._AppendAction):
        value = value if isinstance(value, list) else [value]
        return [str(v) if action.type is None else _typed(action, v, bad) for v in value]
    many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
    if many:
        value = value if isinstance(value, list) else [value]
        if action.nargs == "+" and not value:
            raise ValueError(bad + f"{flag} needs at least one value")
        out = [_typed(action, v, bad) for v in value]
    else:
        if isinstance(value, (list, dict)):
            raise ValueError(bad + f"{flag} takes one value, got {value!r}")
        out = _typed(action, value, bad)
    if action.choices is not None:
        for v in (out if many else [out]):
            if v not in action.choices:
                raise ValueError(bad + f"{v!r} is not one of {list(action.choices)}")
    return out


PATH_FLAGS = frozenset({"home", "resume", "init_from", "run", "runs", "out"})
"""Dests of the flags that take a path or a run name: a config file must give them a
string (a number there is a mistake: ``home: 3``)."""

_KIND = {bool: "a boolean", int: "an integer", float: "a number", list: "a list",
         dict: "a mapping"}


def _typed(action: argparse.Action, v: Any, bad: str) -> Any:
    """One value through the flag's ``type`` (numbers kept as they are, booleans refused
    where a number or a name is expected). A flag without a type takes text: a string,
    or a number as its digits (``model_size: 5``), except a path flag (`PATH_FLAGS`),
    which takes a string only."""
    flag = action.option_strings[-1]
    if v is None:
        return v
    if action.type is None:
        if isinstance(v, str):
            return v
        kind = _KIND.get(type(v), type(v).__name__)
        if action.dest in PATH_FLAGS:
            raise ValueError(bad + f"{flag} takes a path (a string), got {v!r} ({kind}); "
                                   "write the path, in quotes where it looks like a number")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return str(v)
        raise ValueError(bad + f"{flag} takes a name (a string), got {v!r} ({kind})")
    if isinstance(v, bool):
        raise ValueError(bad + f"expected a value for {flag}, got {v!r}")
    if action.type is int and isinstance(v, int):
        return v
    if action.type is float and isinstance(v, (int, float)):
        return float(v)
    try:
        return action.type(str(v))
    except (argparse.ArgumentTypeError, ValueError, TypeError) as e:
        raise ValueError(bad + f"{v!r}: {e}") from None


def is_saved_run(data: dict[str, Any]) -> bool:
    """Whether a config file's mapping is a run's saved config.json (it holds the fields a
    trainer derives, ``training_hash`` or ``resolved_agent_config``) rather than a file
    written by hand, whose keys are flag names."""
    return "training_hash" in data or isinstance(data.get("resolved_agent_config"), dict)


def config_defaults(parser: argparse.ArgumentParser, data: dict[str, Any],
                    path: str) -> dict[str, Any]:
    """{dest: value} of a config file's mapping for ``parser`` (`add_config_argument`'s
    aliases and ignored keys applied). Raises ValueError naming the file and the key for
    an unknown key (listing the known ones) or a value of the wrong kind."""
    keys, ignored = getattr(parser, "_wmx_config_keys", ({}, frozenset()))
    if is_saved_run(data):
        keys = {**keys, **getattr(parser, "_wmx_config_saved_keys", {})}
    trainer = getattr(parser, "_wmx_config_trainer", True)
    actions = _actions(parser)
    out: dict[str, Any] = {}
    if trainer and isinstance(data.get("resolved_agent_config"), dict):    # a run's config
        out[FILE_RUN] = {"agent": data.get("agent", "tdmpc2"), "preset": data.get("preset"),
                         "resolved_agent_config": data["resolved_agent_config"]}
    for key, value in data.items():
        k = str(key)
        if k in ignored:
            continue
        if k == "agent_overrides" and trainer:
            if not isinstance(value, dict):
                raise ValueError(f"--config {path}: agent_overrides must be a mapping of the "
                                 f"agent's config fields to values, got {value!r}")
            out[FILE_OVERRIDES] = {str(f).replace("-", "_"): v for f, v in value.items()}
            continue
        dest = keys.get(k, k.replace("-", "_"))
        dest = "set_" if dest == "set" else dest
        action = actions.get(dest)
        if action is None:
            _refuse_other_trainers(parser.prog, data, path)
            known = sorted({d.replace("set_", "set") for d in actions} | set(keys)
                           | ({"agent_overrides"} if trainer else set()))
            raise ValueError(f"--config {path}: unknown key {k!r}; known keys: "
                             f"{', '.join(known)}")
        out[dest] = _convert(action, k, value, path)
    return out


def with_file_pins(rc: Any, args: argparse.Namespace) -> Any:
    """A new run config ``rc`` (online or offline) made with ``--config`` of a run's saved
    config.json: each machine-dependent agent field (`wmx.runs.pins`) that neither the
    file's ``agent_overrides`` nor a typed flag sets gets the value the saved run resolved
    it to, where this machine would resolve it otherwise (a run that computed in bfloat16
    on an accelerator computes in bfloat16 on the CPU too; an explicit ``compute_dtype:
    auto`` resolves here). ``rc`` as it is for another file, or when the run is of
    another agent or preset (the saved values are that preset's)."""
    saved = getattr(args, FILE_RUN, None)
    if not saved or (saved["agent"], saved["preset"]) != (rc.agent, rc.preset):
        return rc
    import dataclasses
    import logging

    from wmx.runs import pins
    over = pins.restore_overrides(
        rc.agent_module, saved, rc.agent_overrides,
        lambda o: dataclasses.replace(rc, agent_overrides=o).agent_config,
        keep=rc.agent_overrides)
    if over == rc.agent_overrides:
        return rc
    added = {k: v for k, v in over.items() if k not in rc.agent_overrides}
    logging.getLogger("wmx.runs").info(
        "--config %s: %s as the saved run resolved it (its resolved_agent_config); "
        "--set KEY=VALUE chooses otherwise", getattr(args, "config", None),
        ", ".join(f"{k}={v}" for k, v in added.items()))
    return dataclasses.replace(rc, agent_overrides=over)


def _refuse_other_trainers(prog: str, data: dict[str, Any], path: str) -> None:
    """Raise ValueError naming the trainer whose run config ``data`` is, when it is another
    trainer's than ``prog``'s (a train_offline config.json given to train_online)."""
    own = RUN_KIND_KEYS.get(prog)
    other = next((p for p, k in RUN_KIND_KEYS.items() if p != prog and k in data), None)
    if own is not None and other is not None and own not in data:
        raise ValueError(f"--config {path} is a {other} run's config (it has "
                         f"'{RUN_KIND_KEYS[other]}', not '{own}'); pass it to "
                         f"`{other} --config`, or write a {prog} config")


def parse_with_config(parser: argparse.ArgumentParser,
                      argv: Sequence[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)`` with the values of ``--config FILE`` (when typed) as
    defaults under the flags typed. A bad file (missing, unparsable, an unknown key, a
    wrong value) prints ``<prog>: error: <one line>`` and exits with status 2, as
    argparse's own usage errors."""
    argv = list(argv)
    pre = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    pre.add_argument("--config", default=None)
    try:
        known, _ = pre.parse_known_args(argv)
    except argparse.ArgumentError:        # `--config` without a file: the parser's own error
        return parser.parse_args(argv)
    if known.config is not None and hasattr(parser, "_wmx_config_keys"):
        try:
            defaults = config_defaults(parser, load_config_file(known.config), known.config)
        except (ValueError, FileNotFoundError) as e:
            print(f"{parser.prog}: error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        parser.set_defaults(**defaults)
        _relax_required(parser, defaults)
        args = parser.parse_args(argv)
        _typed_member_wins(parser, args, defaults, argv)
        return args
    return parser.parse_args(argv)


def _relax_required(parser: argparse.ArgumentParser, defaults: dict[str, Any]) -> None:
    """A required flag (or required group) that the file gives is no longer required on
    the command line."""
    for a in parser._actions:
        if a.required and a.dest in defaults:
            a.required = False
    for g in parser._mutually_exclusive_groups:
        if g.required and any(a.dest in defaults for a in g._group_actions):
            g.required = False


def _typed_member_wins(parser: argparse.ArgumentParser, args: argparse.Namespace,
                       defaults: dict[str, Any], argv: Sequence[str]) -> None:
    """In a mutually exclusive group, a flag typed replaces the file's choice (e.g.
    ``evaluate --runs A B`` over a file's ``run: C``): the file's member goes back to None."""
    from wmx.runs.cli_common import given_flags
    typed = given_flags(parser, argv)
    for g in parser._mutually_exclusive_groups:
        dests = {a.dest for a in g._group_actions}
        if dests & typed:
            for d in (dests - typed) & set(defaults):
                setattr(args, d, None)
