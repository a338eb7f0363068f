"""Environments: task registry, jittable Playground wrapper, probe envs and the
row collector (docs/architecture.md, wmx.envs)."""
from wmx.envs.base import Env, EnvState
from wmx.envs.registry import (MT19, MT19_TASKS, PROBE_TASKS, TaskSpec,
                               get_task, task_names)
from wmx.envs.playground import make_env
from wmx.envs.collector import (CollectorState, Row, collect_episodes,
                                collect_tick, init_collector, policy_view)

__all__ = ["Env", "EnvState", "TaskSpec", "MT19", "MT19_TASKS", "PROBE_TASKS",
           "get_task", "task_names", "make_env", "CollectorState", "Row",
           "init_collector", "policy_view", "collect_tick", "collect_episodes"]
