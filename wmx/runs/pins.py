"""Agent config fields whose value depends on the machine a run was created on, or that
were added after runs were saved.

An agent lists them in its ``PINNED_FIELDS`` (`wmx.agents.api.Agent`): field ->
the value every run saved before the field existed trained with. DreamerV3's
``compute_dtype`` is one: its presets say "auto", which becomes "bfloat16" on an
accelerator and "float32" on the CPU when the config is built (dreamerv3_spec
1.12, deviation D4). Its offline terms' fields (``offline_*``, W-D10, W-D11) are
others: added later, off (0) for every run saved before them; no machine
resolves them differently, so only the hashes below concern them.

A run resolves such a field once, when it is created, and its config.json
records the value in ``resolved_agent_config``. Whoever loads the run later
(``--resume``, evaluation, ``--init-from``) must build the same agent config on
any machine, so the run configs' ``from_json`` adds the recorded value to the
agent overrides where this machine would resolve it differently
(`restore_overrides`; also over an explicit "auto"); a run saved before the field
existed gets the field's pinned value. A new run made with ``--config`` of a saved
config.json does the same for the fields its flags and the file's ``agent_overrides``
leave unset (`wmx.runs.config_file.with_file_pins`). The run hashes leave a field out
where it has its pinned value (`hash_view`), so those runs keep the hashes their
checkpoints and episode sets were made with.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping


def saved_values(agent: Any, saved: Mapping[str, Any]) -> dict[str, Any]:
    """{field: the value the saved run resolved it to} for the agent's pinned fields.

    Args:
        agent: the run's agent module.
        saved: the run's config.json as a dict.
    Returns:
        ``saved["resolved_agent_config"][field]``, or the field's pinned value when the
        run was saved before the field existed (or without a resolved config).
    Source: deviation D4 (runs saved before compute_dtype computed in float32).
    """
    resolved = saved.get("resolved_agent_config")
    resolved = resolved if isinstance(resolved, Mapping) else {}
    return {k: resolved.get(k, v) for k, v in agent.PINNED_FIELDS.items()}


def restore_overrides(agent: Any, saved: Mapping[str, Any], overrides: Mapping[str, Any],
                      config_of: Callable[[dict[str, Any]], Any],
                      keep: Iterable[str] = ()) -> dict[str, Any]:
    """A saved run's agent overrides, with each pinned field whose value this machine would
    resolve differently from the run's saved value set to that value: a field the
    overrides leave out (the preset's "auto", a field added since), and one they set to a
    value the config resolves (an explicit ``compute_dtype: auto``). A value the config
    takes as it is (``compute_dtype: float32``, ``offline_bc_weight: 0.3``) stays.

    Args:
        agent: the run's agent module.
        saved: the run's config.json as a dict.
        overrides: its ``agent_overrides``.
        config_of: overrides -> the agent config this machine builds from them.
        keep: fields left as ``overrides`` say (a new run's explicit choices,
            `wmx.runs.config_file.with_file_pins`).
    Returns:
        A new dict when a field was set, else ``dict(overrides)``: with it
        ``config_of`` gives the run's saved values of the pinned fields not in ``keep``.
    """
    out = dict(overrides)
    keep = set(keep)
    want = {k: v for k, v in saved_values(agent, saved).items() if k not in keep}
    if not want:
        return out
    cfg = config_of(out)
    out.update({k: v for k, v in want.items() if getattr(cfg, k) != v
                and not (k in out and getattr(cfg, k) == out[k])})   # explicit: as given
    return out


def hash_view(agent: Any, d: Mapping[str, Any]) -> dict[str, Any]:
    """A run config dict (``to_json``) for hashing: the pinned fields left out of
    ``agent_overrides`` (``resolved_agent_config`` has the value the run uses) and out
    of ``resolved_agent_config`` where they have their pinned value, so a run keeps
    the hash it had before the field existed."""
    pins = agent.PINNED_FIELDS
    if not pins:
        return dict(d)
    out = dict(d)
    if isinstance(d.get("agent_overrides"), Mapping):
        out["agent_overrides"] = {k: v for k, v in d["agent_overrides"].items()
                                  if k not in pins}
    if isinstance(d.get("resolved_agent_config"), Mapping):
        out["resolved_agent_config"] = {k: v for k, v in d["resolved_agent_config"].items()
                                        if not (k in pins and v == pins[k])}
    return out
