"""``--agent`` names -> agent modules implementing `wmx.agents.api.Agent`, imported lazily.

Each entry also declares, without importing the agent, the command-line flags
only that agent understands (field name -> Python type), so the CLIs can
offer them and reject them with a clear error for another agent, and the
type of its ``--model-size`` values. Everything else of a config goes
through the generic ``--set key=value``.

Adding an agent: one `AgentEntry` here (docs/architecture.md "Adding an agent").
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from types import ModuleType


@dataclass(frozen=True)
class AgentEntry:
    """name: the ``--agent`` value; module: the dotted module implementing the
    protocol; flags: {config field: type} of its own CLI flags; model_size:
    the type of its model-size names (int for TD-MPC2's 1/5/19/48/317, str for
    DreamerV3's "12m"); modes: "online" and/or "offline"; offline_batch_size:
    train_offline's default ``--batch-size`` (None: the preset's batch); online_flags:
    the flags that act only in online training (train_offline does not offer them);
    flag_help: {field: help text} for flags whose unit or meaning their name does not
    say (the others read "explicit <field> (overrides the preset)")."""

    name: str
    module: str
    flags: dict[str, type] = field(default_factory=dict)
    model_size: type = int
    modes: tuple[str, ...] = ("online", "offline")
    offline_batch_size: int | None = None
    online_flags: tuple[str, ...] = ()
    flag_help: dict[str, str] = field(default_factory=dict)


AGENTS: dict[str, AgentEntry] = {
    "tdmpc2": AgentEntry(
        "tdmpc2", "wmx.agents.tdmpc2.agent",
        flags={"enc_dim": int, "mlp_dim": int, "latent_dim": int, "num_enc_layers": int,
               "num_q": int, "seed_steps": int, "num_samples": int, "num_elites": int,
               "num_pi_trajs": int, "iterations": int, "task_dim": int},
        model_size=int, offline_batch_size=1024,       # spec 4.19: the paper's offline batch
        online_flags=("seed_steps",),
        flag_help={"seed_steps": "agent steps (env steps / action repeat, summed over the "
                                 "lockstep envs) of uniform-random actions before the first "
                                 "update (default max(1000, 5 T), spec 4.3)"}),
    "dreamerv3": AgentEntry(
        "dreamerv3", "wmx.agents.dreamerv3.agent",
        flags={"units": int, "deter": int, "hidden": int, "classes": int,
               "imag_horizon": int, "train_ratio": float},
        model_size=str,                  # offline batch: the preset's 16 windows of 64 + 1
        online_flags=("train_ratio",),
        flag_help={"train_ratio": "replayed rows trained on per agent step (paper 512; one "
                                  "update of B x T rows every B*T/ratio agent steps)"}),
}


def agent_names(mode: str | None = None) -> tuple[str, ...]:
    """Registered agent names (those supporting ``mode`` when given)."""
    return tuple(n for n, e in AGENTS.items() if mode is None or mode in e.modes)


def get_entry(name: str, mode: str | None = None) -> AgentEntry:
    """The registry entry of ``name``. Raises ValueError naming the known agents."""
    entry = AGENTS.get(name)
    if entry is None or (mode is not None and mode not in entry.modes):
        known = agent_names(mode)
        where = f" for {mode} training" if mode else ""
        raise ValueError(f"--agent {name!r} is not available{where}; choose one of {list(known)}")
    return entry


def get_agent(name: str, mode: str | None = None) -> ModuleType:
    """Import and return the agent module of ``name`` (see `wmx.agents.api.Agent`)."""
    return importlib.import_module(get_entry(name, mode).module)


def all_flags() -> dict[str, type]:
    """Every agent-specific flag of every registered agent (field -> type)."""
    out: dict[str, type] = {}
    for e in AGENTS.values():
        out.update(e.flags)
    return out


def check_flags(name: str, given: dict) -> None:
    """Raise ValueError when ``given`` (flag field -> value, None = not given)
    holds a flag that agent ``name`` does not understand."""
    entry = get_entry(name)
    foreign = sorted(k for k, v in given.items() if v is not None and k not in entry.flags)
    if foreign:
        owners = {k: [e.name for e in AGENTS.values() if k in e.flags] for k in foreign}
        flags = ", ".join(f"--{k.replace('_', '-')} ({'/'.join(owners[k])})" for k in foreign)
        raise ValueError(f"{flags} not understood by --agent {name}; use --set key=value with "
                         f"a field of the {name} config instead")
