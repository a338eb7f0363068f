"""Starting a run's agents from another run's checkpoint (`train_online --init-from`).

A single-task model trained offline (e.g. ``train_offline --agent dreamerv3
--tasks cartpole-balance``, which gives DreamerV3's online agent shapes) or
online is fine-tuned online: the new run's agent states are the source's
trained states (parameters, optimizer and normaliser states, as the
checkpoint's "agent" item holds them), everything else is fresh (an empty
replay, reset envs, the run's own keys and schedule).

`resolve_source(path)` picks the checkpoint when the run is created (the newest
complete one of a run directory, or a given checkpoint folder); the run's
config.json stores that folder, so a restart before the run's first
checkpoint starts from the same states. `load_agent_states` checks the source
against the run and reads the states.

Errors (ValueError, one line each): no run or checkpoint at the path; the source
trained another agent, another task, or a multi-task model; its model has
other shapes than the run's config (the differing config fields are named); a
seed of the run is not among the source's seeds.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jax

from wmx.checkpoint import newest_intact, restore_checkpoint


def resolve_source(path: str | Path) -> Path:
    """The checkpoint folder ``--init-from PATH`` names, resolved: PATH itself when it is
    a checkpoint (``<run>/checkpoints/<step>``), else the newest intact checkpoint of
    the run directory PATH (`wmx.checkpoint.newest_intact`). Raises ValueError when
    there is none (CheckpointDamagedError when none is intact)."""
    p = Path(path).expanduser().resolve()
    if (p / "host.json").is_file() and (p / "items").is_dir():
        return p
    if not (p / "config.json").is_file():
        raise ValueError(f"--init-from {path}: not a run directory (no config.json) nor a "
                         "checkpoint folder")
    found = newest_intact(p, ("agent",))
    if found is None:
        raise ValueError(f"--init-from {path}: the run has no complete checkpoint yet")
    return found[0]


@dataclasses.dataclass(frozen=True)
class Source:
    """What a checkpoint's run trained: agent name, resolved agent config, its tasks
    (one for a single-task model), seeds, whether the model is multi-task, and an
    offline run's TaskSet (None for an online run)."""

    agent: str
    config: Any
    tasks: tuple[str, ...]
    seeds: tuple[int, ...]
    multitask: bool
    agent_module: Any
    task_set: Any = None


def read_source(ckpt: Path) -> Source:
    """The `Source` of checkpoint folder ``ckpt`` (its run's config.json, two levels up:
    an offline run has a ``dataset``, an online run a ``task``)."""
    run_dir = Path(ckpt).parent.parent
    cfg_path = run_dir / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"--init-from {ckpt}: no config.json in its run directory {run_dir}")
    d = json.loads(cfg_path.read_text())
    if "dataset" in d:
        from wmx.runs.offline_config import OfflineRunConfig
        rc = OfflineRunConfig.from_json(d)
        return Source(rc.agent, rc.agent_config, rc.train_task_set.names, rc.seeds,
                      rc.multitask, rc.agent_module, rc.train_task_set)
    from wmx.runs.online_config import OnlineRunConfig
    rc = OnlineRunConfig.from_json(d)
    return Source(rc.agent, rc.agent_config, (rc.task,), rc.seeds, False, rc.agent_module)


def _shapes(agent, cfg) -> Any:
    return jax.tree.map(lambda x: (x.shape, x.dtype),
                        jax.eval_shape(lambda k: agent.init(k, cfg), jax.random.PRNGKey(0)))


def single_task_offline_agents(taskset: Any) -> tuple[str, ...]:
    """The offline agents whose ``train_offline --tasks T`` (a TaskSet of one task) makes a
    single-task model, the only kind ``--init-from`` takes (DreamerV3's; TD-MPC2's offline
    models are multi-task for any number of tasks).

    Args:
      taskset: a `TaskSet`; its first task makes the one-task set each agent's
        ``make_config`` is asked about.

    Returns:
      The agents' ``--agent`` names, in the registry's order.
    """
    from wmx.agents.registry import agent_names, get_agent
    one = taskset.subset(taskset.names[:1])
    out = []
    for name in agent_names("offline"):
        agent = get_agent(name, "offline")
        cfg = agent.make_config(agent.PRESETS[0], {}, taskset=one)
        if not int(getattr(cfg, "num_tasks", 0) or 0):
            out.append(name)
    return tuple(out)


def _multitask_error(src: Source, task: str, where: str) -> str:
    """The one-line refusal of a multi-task source, with a fix that works for its agent."""
    from wmx.sizes import counted
    what = (f"{where}: the source is a multi-task {src.agent} model of "
            f"{counted(len(src.tasks), 'task')} ({', '.join(src.tasks)})")
    single = single_task_offline_agents(src.task_set) if src.task_set is not None else ()
    if src.agent in single:
        return (f"{what}; fine-tune a single-task model (train_offline --agent {src.agent} "
                f"--tasks {task})")
    offline = (f"a single-task offline run of {' or '.join(single)} (train_offline --agent "
               f"{single[0]} --tasks {task}) or " if single else "")
    return (f"{what}, and {src.agent}'s offline models are multi-task for any number of "
            f"tasks; --init-from takes {offline}an online run of {task}")


def check_source(src: Source, agent_name: str, cfg: Any, task: str,
                 seeds: tuple[int, ...], where: str = "--init-from") -> None:
    """Raise ValueError (one line) unless the source's states fit a run of ``agent_name``
    with config ``cfg`` on ``task`` and ``seeds``."""
    if src.agent != agent_name:
        raise ValueError(f"{where}: the source trained agent {src.agent}, this run is "
                         f"--agent {agent_name}")
    if src.multitask:
        raise ValueError(_multitask_error(src, task, where))
    if src.tasks != (task,):
        raise ValueError(f"{where}: the source trained on {src.tasks[0]}, this run's task is "
                         f"{task}")
    agent = src.agent_module
    if _shapes(agent, src.config) != _shapes(agent, cfg):
        a, b = dataclasses.asdict(src.config), dataclasses.asdict(cfg)
        diff = [f"{k} {a[k]} (run: {b.get(k)})" for k in sorted(a) if a[k] != b.get(k)]
        raise ValueError(f"{where}: the source's model has other shapes than this run's config; "
                         f"source fields that differ: {'; '.join(diff)}. Pass the source's "
                         "--preset / --model-size / --set")
    missing = [s for s in seeds if s not in src.seeds]
    if missing:
        raise ValueError(f"{where}: seeds {missing} are not among the source's seeds "
                         f"{list(src.seeds)} (each seed starts from its own trained state)")


def load_agent_states(ckpt: Path, agent_name: str, cfg: Any, task: str,
                      seeds: tuple[int, ...]) -> Any:
    """The agent states of ``seeds`` from checkpoint folder ``ckpt`` (`resolve_source`),
    stacked on a leading seed axis in the order of ``seeds``, each the source's state of
    the same seed, as the run's config lays them out.

    Raises ValueError as `check_source`, or when the checkpoint does not match its own
    run's config (`wmx.checkpoint.restore_checkpoint`).
    """
    src = read_source(ckpt)
    check_source(src, agent_name, cfg, task, tuple(seeds))
    agent = src.agent_module
    one = jax.eval_shape(lambda k: agent.init(k, cfg), jax.random.PRNGKey(0))
    like = jax.tree.map(lambda x: jax.ShapeDtypeStruct((len(src.seeds), *x.shape), x.dtype),
                        one)
    items, _ = restore_checkpoint(ckpt, {"agent": like})
    idx = [src.seeds.index(s) for s in seeds]
    return jax.tree.map(lambda x: x[jax.numpy.asarray(idx)], items["agent"])
