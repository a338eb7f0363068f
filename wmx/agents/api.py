"""The agent protocol: what trainers, acting and evaluation may know of an agent.

An agent is a module (``wmx.agents.<name>.agent``) whose top-level names
implement `Agent` below; `wmx.agents.registry` maps ``--agent`` names to those
modules. Trainers (`wmx.train_online`, `wmx.train_offline`), acting and
evaluation (`wmx.acting`) and the run tools (`wmx.runs`) call only these
names, never an agent's internals (DESIGN.md §2; docs/architecture.md
"The agent protocol" has the shapes and a walk-through of adding an agent).

Conventions. n: envs acted on together (lockstep envs, or evaluation
episodes); O, A: the config's observation and action widths (``cfg.obs_dim``,
``cfg.action_dim``; the padded widths of a multi-task config); B: batch.
All arrays are float32 unless said. Every function is pure and jittable
except `make_config`, `param_counts` and `schedule` (host, static). Seeds are
``vmap``ped by the callers, so nothing here sees a seed axis.

Randomness: every function that draws takes one key and derives its draws
from it in a documented, agent-owned way (the agents' ``draw_*_noise``
seams), so a run's key streams are fixed by the callers' ``fold_in`` tags.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, NamedTuple, Protocol, runtime_checkable

import jax

# ---- action modes of the online schedule (`Schedule.action_mode`) ----------------
HELD, RANDOM, POLICY = 0, 1, 2
"""HELD: the collector's held tick (no env step; the action is ignored and
stored as 0). RANDOM: uniform actions in [-1, 1] (seed phase). POLICY: the
agent's `policy` in training mode."""


class BatchSpec(NamedTuple):
    """What one update trains on (static, hashable).

    kind: "slices" (TD-MPC2: obs rows s..s+H, actions s..s+H-1, rewards
    s+1..s+H; time-major) or "windows" (DreamerV3: `length` consecutive rows,
    batch-major, annotated as dreamerv3_spec 5.3). length: rows per item
    (slices: H+1; windows: batch_length + replay context). batch: items per
    update. cross_episodes: whether an item may span an episode end (never
    for slices; windows as the agent's replay does).
    """

    kind: str
    length: int
    batch: int
    cross_episodes: bool = False


class Schedule(Protocol):
    """The online schedule of an agent: static arithmetic on the absolute tick.

    `action_mode` and `n_updates` take the absolute, unbatched tick index as a Python
    int or a jnp int scalar and return the same kind (DESIGN.md §3 principle 2).
    """

    def action_mode(self, tick: Any) -> Any:
        """HELD, RANDOM or POLICY for the row emitted at ``tick``."""

    def n_updates(self, tick: Any) -> Any:
        """Updates to run right after the row of ``tick`` was added to the replay."""

    def first_update_tick(self) -> int:
        """The first tick whose `n_updates` is positive (a Python int, host side)."""


@dataclass(frozen=True)
class BoundSchedule:
    """A `Schedule` from an agent's static schedule and its functions.

    inner: the agent's schedule value (e.g. its ``make_schedule(...)``);
    action_mode_fn / n_updates_fn: ``f(tick, inner)``, the agent's arithmetic;
    first_update_tick_fn: ``f(inner) -> int``, the first tick with ``n_updates`` > 0 in
    closed form (host side).
    """

    inner: Any
    action_mode_fn: Callable[[Any, Any], Any]
    n_updates_fn: Callable[[Any, Any], Any]
    first_update_tick_fn: Callable[[Any], int]

    def action_mode(self, tick: Any) -> Any:
        return self.action_mode_fn(tick, self.inner)

    def n_updates(self, tick: Any) -> Any:
        return self.n_updates_fn(tick, self.inner)

    def first_update_tick(self) -> int:
        """The absolute index of the first tick whose ``n_updates`` is positive."""
        return int(self.first_update_tick_fn(self.inner))


@runtime_checkable
class Agent(Protocol):
    """The names an agent module defines (checked by tests/agents/test_contract.py).

    Attributes:
      NAME: the ``--agent`` name.
      PRESETS: preset names `make_config` accepts (e.g. "paper", "cpu", "tiny").
      METRIC_KEYS: the scalar metrics `update` returns, in metrics.csv order.
      LOSS_KEY: the METRIC_KEYS entry a progress bar shows (the total loss).
      MULTITASK: whether the agent trains on a TaskSet of several tasks (offline,
        padded widths; `make_config(taskset=...)`).
      METRICS_SINCE_LOG: online metrics are means over the updates since the
        previous log (the online loop resets the carried metrics to `init_metrics`
        after each logged chunk), or, when False, the last update's values.
      EVAL_PROTOCOL: how the policy acts with ``eval_mode`` True, in a few words and
        with its spec item (evaluation reports print it).
      PINNED_FIELDS: config fields whose value `make_config` resolves from the machine
        (e.g. DreamerV3's compute_dtype "auto"), or that were added after runs were
        saved, each mapped to the value runs saved before the field existed used; a
        run keeps the value it was created with on any machine, and a run at that
        value keeps its hash (`wmx.runs.pins`). {} for none.
    """

    NAME: str
    PRESETS: tuple[str, ...]
    METRIC_KEYS: tuple[str, ...]
    LOSS_KEY: str
    MULTITASK: bool
    METRICS_SINCE_LOG: bool
    EVAL_PROTOCOL: str
    PINNED_FIELDS: Mapping[str, Any]

    # ---- configuration (host) ---------------------------------------------------
    def make_config(self, preset: str, overrides: Mapping[str, Any], *, task: Any = None,
                    taskset: Any = None) -> Any:
        """A frozen, hashable, resolved config.

        Args:
          preset: one of PRESETS. overrides: config fields (``--set`` and the
            agent's flags); ``model_size`` picks another size, explicit widths win.
          task: a `wmx.envs.registry.TaskSpec` (single task: its obs/action dims
            and T); taskset: a `wmx.schemas.taskset.TaskSet` (multi-task: padded
            widths, number of tasks; an agent may answer a one-task TaskSet with
            its single-task config of that task, as DreamerV3 does: then
            ``num_tasks`` is 0 and `task_context` None, and trainers feed the
            task's unpadded rows). Exactly one is given.
        Raises:
          ValueError naming the preset, field or value that is wrong.
        """

    def param_counts(self, cfg: Any) -> dict[str, int]:
        """Parameters per module and ``"total"`` (trained parameters only)."""

    # ---- state ---------------------------------------------------------------
    def init(self, key: jax.Array, cfg: Any) -> Any:
        """The training state (a pytree; what checkpoints hold as "agent")."""

    def policy_params(self, state: Any) -> Any:
        """The part of the training state `policy` needs."""

    def task_context(self, cfg: Any, taskset: Any) -> Any:
        """Per-task tables of a TaskSet (a pytree of arrays, a traced argument), or
        None for a single-task config (``cfg.num_tasks`` 0)."""

    # ---- acting --------------------------------------------------------------
    def init_policy(self, cfg: Any, n: int) -> Any:
        """The policy carry of n envs (a pytree with leading axis n)."""

    def policy(self, params: Any, cfg: Any, carry: Any, obs: jax.Array, is_first: jax.Array,
               key: jax.Array, *, eval_mode: bool, tasks: Any = None,
               task_id: Any = None) -> tuple[Any, jax.Array, dict]:
        """One action per env.

        Args:
          obs: f32[n, O] (zero-padded to O by the caller); is_first: bool[n], the
            carry is reset inside where it is True; key: one key for the n envs;
            eval_mode: static; tasks/task_id: `task_context` and i32[] for a
            multi-task config, None otherwise.
        Returns:
          (carry, action f32[n, A] in [-1, 1] at the config's width, entries): the
          entries are what the agent wants stored beside the row in its replay
          (a dict of arrays with leading axis n; empty for TD-MPC2).
        """

    # ---- training ------------------------------------------------------------
    def batch_spec(self, cfg: Any) -> BatchSpec:
        """What `update` trains on."""

    def update(self, state: Any, batch: Mapping[str, jax.Array], key: jax.Array, cfg: Any,
               tasks: Any = None) -> tuple[Any, dict, dict]:
        """One update on a batch of `batch_spec(cfg)` (`wmx.datasets.samplers.sample`).

        Returns (state, metrics {METRIC_KEYS: f32[]}, outs): outs is what the
        replay needs back (DreamerV3: the window's new latents; {} for TD-MPC2).
        """

    def compiler_options(self, cfg: Any) -> dict[str, str]:
        """XLA compile options of the agent's programs: the trainers' chunks and the
        evaluation rollout (`wmx.acting.make_evaluate_fn`), so an evaluation computes the
        policy as training does (`wmx.xla_cpu.training_options` with the agent's measured
        preference); {} for XLA's defaults."""

    # ---- online ----------------------------------------------------------------
    def schedule(self, cfg: Any, episode_length: int, n_envs: int) -> Schedule:
        """The online schedule for episodes of T agent steps on n_envs lockstep envs."""

    def init_replay(self, cfg: Any, n_envs: int, episode_length: int,
                    total_agent_steps: int) -> Any:
        """An empty replay (a pytree of fixed shapes) for a run of that many agent steps."""

    def replay_add(self, replay: Any, tick: Any, row: Any, entries: dict, cfg: Any) -> Any:
        """Add the row emitted at ``tick`` (`wmx.envs.collector.Row`, leading axis
        n_envs) with the policy's entries."""

    def init_metrics(self, cfg: Any) -> dict:
        """The online metrics carry before any update: a dict of f32[] zeros."""

    def read_metrics(self, metrics: dict) -> dict[str, float]:
        """Host: the logged value of each METRIC_KEYS entry from a (one seed's)
        metrics carry (numpy scalars); "" for a value not defined yet."""

    def replay_train(self, state: Any, replay: Any, tick: Any, key: jax.Array, cfg: Any,
                     metrics: dict) -> tuple[Any, Any, dict]:
        """Run `schedule(...).n_updates(tick)` updates after ``tick``: sample from
        the replay, update, write back what the update returns, and fold each
        update's metrics into the ``metrics`` carry (`init_metrics`'s structure;
        returned unchanged when no update runs)."""
