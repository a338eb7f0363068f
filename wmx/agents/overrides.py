"""Agent config overrides from the command line, checked before a config is built.

``--set KEY=VALUE`` values are parsed as JSON (`wmx.runs.cli_common.parse_set`), and a
``--config`` file's ``agent_overrides`` are YAML, so an override can have any type; a
config dataclass would take it as it comes and fail later (a traceback, or a run that
trains with ``horizon=true``). `check_override_types` compares each value with the
field's annotation: bool for ``bool``, an integer (not a bool) for ``int``, a finite
number for ``float``, a string for ``str``, and also ``None`` for ``X | None``.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from typing import Any, Iterable

from wmx.sizes import noun_for

_WORDS = {bool: "true or false", int: "an integer", float: "a finite number",
          str: "a string"}
_EXAMPLES = {bool: "true", int: "5", float: "0.5", str: "name"}


def _accepts(typ: type, value: Any) -> bool:
    if typ is bool:
        return isinstance(value, bool)
    if typ is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if typ is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    return isinstance(value, typ)


def _base(annotation: Any) -> tuple[type | None, bool]:
    """(the plain type the annotation names or None when it is not one of bool, int,
    float, str; whether None is allowed)."""
    args = typing.get_args(annotation)
    optional = type(None) in args
    plain = [a for a in args if a is not type(None)] if args else [annotation]
    typ = plain[0] if len(plain) == 1 and plain[0] in _WORDS else None
    return typ, optional


def check_override_types(cls: type, overrides: dict[str, Any]) -> None:
    """Raise ValueError (one line: the field, the value, what it takes, an example) for
    the first override whose value does not fit its field of dataclass ``cls``.
    Unknown fields and fields of other types are left to the caller."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for key, value in overrides.items():
        if key not in names:
            continue
        typ, optional = _base(hints[key])
        if typ is None or (value is None and optional) or _accepts(typ, value):
            continue
        none = " or null" if optional else ""
        raise ValueError(f"{cls.__name__} field {key}={value!r}: takes {_WORDS[typ]}{none} "
                         f"(e.g. --set {key}={_EXAMPLES[typ]})")


def refuse_task_fields(overrides: dict[str, Any], fields: tuple[str, ...]) -> None:
    """Raise ValueError when an override names one of ``fields``, which the task or
    TaskSet sets (dims, episode length, number of tasks)."""
    bad = sorted(set(overrides) & set(fields))
    if bad:
        raise ValueError(f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} set by the "
                         "task or TaskSet; drop the override")


def close_names(key: str, names: Iterable[str]) -> list[str]:
    """Up to three of ``names`` close to ``key`` (difflib, cutoff 0.6), closest first."""
    return difflib.get_close_matches(key, list(names), n=3, cutoff=0.6)


def did_you_mean(names: list[str]) -> str:
    """``did you mean 'a' or 'b'?`` for close names (`close_names`), '' for none."""
    return f"did you mean {' or '.join(map(repr, names))}?" if names else ""


def check_field_names(cls: type, overrides: dict[str, Any], agent: str) -> None:
    """Raise ValueError, one line, for override keys that are not fields of the config
    dataclass ``cls``: each with its close field names ("did you mean"), or, when none is
    close, every field name (the command line has no other list of them)."""
    names = [f.name for f in dataclasses.fields(cls)]
    bad = sorted(set(overrides) - set(names))
    if not bad:
        return
    hints = {b: close_names(b, names) for b in bad}
    said = "; ".join(f"{b!r}: {did_you_mean(h)}" for b, h in hints.items() if h)
    msg = (f"unknown {agent} config {noun_for(len(bad), 'field')} {bad}"
           + (f" ({said})" if said else ""))
    if not all(hints.values()):
        msg += f"; the fields: {', '.join(sorted(names))}"
    raise ValueError(msg)
