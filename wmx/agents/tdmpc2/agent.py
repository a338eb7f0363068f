"""TD-MPC2 through the agent protocol (`wmx.agents.api.Agent`): an adapter, no new algorithm.

Every name maps onto the existing modules: config (`config.make_config`,
`multitask.multitask_config`), state (`update.init_train_state`), acting
(`planner.plan` / `multitask.plan_task`, one warm-start mean per env as the
carry), training (`update.update` on `update.draw_update_noise` draws) and,
online, the episode ring (`buffer`) with the seed-phase / update-to-data
schedule (`schedule`). Keys are used exactly as the trainers used them
before the protocol existed, so runs are unchanged by it.

Source: tdmpc2_spec §1-§4 (PE); deviations T7, T9, T14-T16, T26 (docs/deviations.md).
"""
from __future__ import annotations

from typing import Any, Mapping

import jax
import jax.numpy as jnp
from flax import struct

from wmx import xla_cpu
from wmx.agents.api import BatchSpec, BoundSchedule
from wmx.agents.overrides import check_override_types, refuse_task_fields
from wmx.agents.tdmpc2 import buffer as buffer_lib
from wmx.agents.tdmpc2 import schedule as sched_lib
from wmx.agents.tdmpc2 import world_model as wm
from wmx.agents.tdmpc2.config import PRESETS as _PRESETS
from wmx.agents.tdmpc2.config import TDMPC2Config
from wmx.agents.tdmpc2.config import make_config as _make_config
from wmx.agents.tdmpc2.multitask import make_task_context, multitask_config, plan_task
from wmx.agents.tdmpc2.planner import draw_plan_noise, plan
from wmx.agents.tdmpc2.update import Batch, TrainState, draw_update_noise, init_train_state
from wmx.agents.tdmpc2.update import update as _update

NAME = "tdmpc2"
PRESETS = tuple(_PRESETS)
METRIC_KEYS = ("consistency_loss", "reward_loss", "value_loss", "pi_loss", "total_loss",
               "grad_norm", "pi_grad_norm", "pi_scale")
LOSS_KEY = "total_loss"
"""The METRIC_KEYS entry progress bars show."""
MULTITASK = True
METRICS_SINCE_LOG = False
"""metrics.csv shows the last update's values (as the reference's logger)."""
EVAL_PROTOCOL = ("eval_mode MPPI: the planner's mean action, no exploration noise "
                 "(tdmpc2_spec 4.20-4.21)")
PINNED_FIELDS: dict = {}
"""None: no field depends on the machine. TD-MPC2 computes in float32 on every backend,
as the official code at 5f6fade does (no autocast; docs/deviations.md, TD-MPC2)."""

_WIDTHS = ("enc_dim", "mlp_dim", "latent_dim", "num_enc_layers", "num_q")


# ---- configuration ------------------------------------------------------------------
def make_config(preset: str, overrides: Mapping[str, Any], *, task: Any = None,
                taskset: Any = None) -> TDMPC2Config:
    """The resolved `TDMPC2Config` of a preset plus overrides, for one task or a TaskSet.

    An explicit ``model_size`` replaces the preset's widths with that size's
    (explicit width overrides still win), so ``--preset cpu --model-size 5``
    is the paper's 5M model. task: a registry `TaskSpec` (obs/action dims,
    T); taskset: a `TaskSet` (`multitask.multitask_config`: padded widths,
    task_dim 96, T14). Raises ValueError for an unknown preset or field, or
    when not exactly one of task / taskset is given.
    """
    if (task is None) == (taskset is None):
        raise ValueError("make_config needs exactly one of task= (online) or taskset= (offline)")
    if preset not in _PRESETS:
        raise ValueError(f"--preset {preset!r} is unknown for tdmpc2; choose one of "
                         f"{sorted(_PRESETS)}")
    over = dict(overrides)
    refuse_task_fields(over, ("obs_dim", "action_dim", "episode_length", "num_tasks"))
    check_override_types(TDMPC2Config, over)
    if "model_size" in over:
        for width in _WIDTHS:
            if width in _PRESETS[preset] and width not in over:
                over[width] = None
    if taskset is not None:
        return multitask_config(taskset, preset, **over)
    return _make_config(preset, obs_dim=task.obs_dim, action_dim=task.action_dim,
                        episode_length=task.T, **over)


def param_counts(cfg: TDMPC2Config) -> dict[str, int]:
    """Parameters per module (task_emb included when multi-task) and "total";
    the target Q ensemble is not counted (spec 1.24)."""
    params = jax.eval_shape(lambda: wm.init_params(jax.random.PRNGKey(0), cfg))
    counts = dict(wm.param_count(params))
    counts.setdefault("total", sum(v for k, v in counts.items() if k != "total"))
    return counts


# ---- state --------------------------------------------------------------------------
def init(key: jax.Array, cfg: TDMPC2Config) -> TrainState:
    """`update.init_train_state`: parameters, both optimisers, RunningScale, step."""
    return init_train_state(key, cfg)


def policy_params(state: TrainState) -> dict:
    return state.params


def task_context(cfg: TDMPC2Config, taskset: Any):
    """`multitask.make_task_context` (masks, float32 discounts, dims) or None."""
    return make_task_context(taskset) if cfg.resolved().multitask else None


# ---- acting -------------------------------------------------------------------------
def init_policy(cfg: TDMPC2Config, n: int) -> jax.Array:
    """The MPPI warm-start means f32[n, H, A] (zeros)."""
    cfg = cfg.resolved()
    return jnp.zeros((n, cfg.horizon, cfg.action_dim), jnp.float32)


def policy(params: dict, cfg: TDMPC2Config, carry: jax.Array, obs: jax.Array,
           is_first: jax.Array, key: jax.Array, *, eval_mode: bool, tasks: Any = None,
           task_id: Any = None) -> tuple[jax.Array, jax.Array, dict]:
    """One MPPI decision per env (spec 3.C): the warm start is dropped where is_first (t0).

    key is split into one key per env, each drawing that env's
    `draw_plan_noise(k, cfg, eval_mode)`. Multi-task: `plan_task` with the
    task's embedding (renormed, not persisted, T15), mask and discount.
    Returns (new means f32[n, H, A], actions f32[n, A], {}).
    """
    keys = jax.random.split(key, obs.shape[0])
    noise = jax.vmap(lambda k: draw_plan_noise(k, cfg, eval_mode))(keys)
    if task_id is None:
        act, mean, _ = jax.vmap(lambda o, pm, t0, nz: plan(params, o, pm, t0, nz, cfg,
                                                           eval_mode=eval_mode)
                                )(obs, carry, is_first, noise)
    else:
        act, mean, _ = jax.vmap(lambda o, pm, t0, nz: plan_task(params, o, pm, t0, nz, cfg,
                                                                tasks, task_id,
                                                                eval_mode=eval_mode)
                                )(obs, carry, is_first, noise)
    return mean, act, {}


# ---- training -----------------------------------------------------------------------
def batch_spec(cfg: TDMPC2Config) -> BatchSpec:
    """B slices of H+1 rows inside one episode (spec 4.8)."""
    cfg = cfg.resolved()
    return BatchSpec("slices", cfg.horizon + 1, cfg.batch_size, False)


def update(state: TrainState, batch: Mapping[str, jax.Array], key: jax.Array,
           cfg: TDMPC2Config, tasks: Any = None) -> tuple[TrainState, dict, dict]:
    """`update.update` on a slice batch (obs f32[H+1,B,O], action f32[H,B,A], reward
    f32[H,B], task i32[B] when multi-task) with `draw_update_noise(key, cfg)`.
    Returns (state, {METRIC_KEYS: f32[]}, {})."""
    b = Batch(obs=batch["obs"], action=batch["action"], reward=batch["reward"],
              task=None if tasks is None else batch["task"].astype(jnp.int32))
    state, m = _update(state, b, draw_update_noise(key, cfg), cfg, tasks=tasks)
    return state, {k: jnp.asarray(m[k], jnp.float32) for k in METRIC_KEYS}, {}


def compiler_options(cfg: TDMPC2Config) -> dict[str, str]:
    """XLA's own dots instead of YNNPACK fusions on the CPU unless ``WMX_CPU_DOTS`` says
    otherwise, and native row reductions (`wmx.xla_cpu`): the online chunk runs planning
    decisions, and the size-1 decision is ~25% faster with XLA's dots on AVX2, the update
    as fast or ~3% faster (docs/performance.md, "Dot backend"); without the tree-reduction rewrite, and with the parameter gradients' column
    sums as dots (`wmx.nn.affine`), the decision is another 6-11% faster and the update
    as fast or 9% faster ("Native row sums")."""
    del cfg
    return xla_cpu.training_options(prefer_xla_dots=True, native_row_reductions=True)


# ---- online -------------------------------------------------------------------------
def schedule(cfg: TDMPC2Config, episode_length: int, n_envs: int) -> BoundSchedule:
    """The seed phase, burst and UTD-1 schedule (`schedule`, T7) as the protocol's."""
    return BoundSchedule(sched_lib.make_schedule(episode_length, n_envs,
                                                 cfg.resolved().seed_steps),
                         sched_lib.action_mode, sched_lib.n_updates, sched_lib.first_update_tick)


@struct.dataclass
class Replay:
    """The episode ring (`buffer.EpisodeBuffer`) and its static n_envs."""

    buffer: buffer_lib.EpisodeBuffer
    n_envs: int = struct.field(pytree_node=False)


def init_replay(cfg: TDMPC2Config, n_envs: int, episode_length: int,
                total_agent_steps: int) -> Replay:
    """A ring of whole rounds holding the run (capacity rule T26)."""
    cfg = cfg.resolved()
    rounds = buffer_lib.num_rounds(cfg.buffer_size, total_agent_steps, episode_length, n_envs)
    return Replay(buffer_lib.init_buffer(rounds, n_envs, episode_length, cfg.obs_dim,
                                         cfg.action_dim), n_envs)


def _T(replay: Replay) -> int:
    return replay.buffer.obs.shape[1] - 1


def replay_add(replay: Replay, tick, row, entries: dict, cfg: TDMPC2Config) -> Replay:
    """Write the tick's row (obs, action, reward of every env) into round tick // (T+1)."""
    del entries, cfg
    episode, k = sched_lib.tick_position(tick, _T(replay))
    return replay.replace(buffer=buffer_lib.write_rows(replay.buffer, episode, k, row.obs,
                                                       row.action, row.reward))


def init_metrics(cfg: TDMPC2Config) -> dict:
    """{METRIC_KEYS: f32[] 0}: the last update's metrics, before any update."""
    return {k: jnp.zeros((), jnp.float32) for k in METRIC_KEYS}


def read_metrics(metrics: dict) -> dict[str, float]:
    return {k: float(metrics[k]) for k in METRIC_KEYS}


def replay_train(state: TrainState, replay: Replay, tick, key: jax.Array, cfg: TDMPC2Config,
                 metrics: dict) -> tuple[TrainState, Replay, dict]:
    """The schedule's updates after ``tick``, each on B slices of the committed rounds.

    Update j draws its slices and noise from ``split(fold_in(key, j))``; the slices
    are drawn under the name scope "sample_batch" (op metadata only).
    """
    cfg = cfg.resolved()
    T, n_envs = _T(replay), replay.n_envs
    n = schedule(cfg, T, n_envs).n_updates(tick)
    episode, _ = sched_lib.tick_position(tick, T)

    def body(j, c):
        st, _ = c
        k_sample, k_noise = jax.random.split(jax.random.fold_in(key, j))
        with jax.named_scope("sample_batch"):
            sb = buffer_lib.sample(replay.buffer, k_sample, cfg.batch_size, cfg.horizon,
                                   n_envs, episode)
        st, m, _ = update(st, {"obs": sb.obs, "action": sb.action, "reward": sb.reward},
                          k_noise, cfg)
        return st, m

    state, metrics = jax.lax.fori_loop(0, n, body, (state, metrics))
    return state, replay, metrics
