"""TD-MPC2 multi-task mechanisms (tdmpc2_spec 1.21-1.24, 2.3, 2.18, 2.20, 3.9, 3.12).

The multi-task agent is the single-task code with task data plugged in; this
module holds that data and the embedding look-ups, and the single-task
functions take it through optional arguments:

- `update.update(state, batch, noise, cfg, tasks)` with `batch.task` i32[B]
  and a `TaskContext` (renorm + write-back at the two look-ups of spec 1.22,
  per-sample discounts, policy masks, stop-gradient embedding in the policy
  loss);
- `planner.plan(..., task_emb=, action_mask=, discount=)`, wrapped here by
  `plan_task`.

With `tasks=None` / no task arguments they compute exactly the single-task
update and plan. The machinery is data (a mask table, a discount table and an
embedding table indexed by task id), spec 4.A.

Multi-task config (`multitask_config`): `TDMPC2Config` with num_tasks =
len(taskset), task_dim = 96 (T14: the paper's value for every size; the
reference's parse_cfg forces 64 in multi-task mode except for mt80 and model
sizes 1/317, whatever the config says), obs_dim = max obs dim and
action_dim = max action dim (the padded A_max, so the "+2 iterations when
A >= 20" rule of spec 3.1 reads the padded width, as the reference does).

Deviations: T14 (task_dim 96), T15 (`eval_task_embedding` / `plan_task`
renorm the looked-up row without persisting it; the reference's act()
writes its renorm back into the table), T33 (renorm scale in float32).
Parity: tests/agents/tdmpc2/test_{update,planner}_mt_parity.py replay
fixtures/tdmpc2_mt through `update.update_with_aux(..., tasks)` and
`plan_task_with_stats`.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from wmx.agents.tdmpc2 import planner as pl
from wmx.agents.tdmpc2.config import TDMPC2Config, discount_from_episode_length, make_config

TASK_DIM = 96
"""Paper task-embedding width for every model size (Table 8/9; deviation T14)."""

MAX_NORM = 1.0
RENORM_EPS = 1e-7


class TaskContext(NamedTuple):
    """Per-task tables of a task set, indexed by task id (spec 1.23, 2.20).

    action_masks f32[n_tasks, A_max]: prefix masks, 1 on the first
    action_dims[i] dims of task i, 0 on the padding. discounts f32[n_tasks]:
    gamma of each task (float32, as the reference's tensor). action_dims
    i32[n_tasks]: valid action dims. A pytree of arrays: pass it through
    `jax.jit` as a normal (traced) argument.
    """

    action_masks: jnp.ndarray
    discounts: jnp.ndarray
    action_dims: jnp.ndarray

    @property
    def num_tasks(self) -> int:
        return int(self.action_masks.shape[0])


def prefix_masks(action_dims, max_action_dim: int | None = None) -> np.ndarray:
    """f32[n, A_max] with M[i, :action_dims[i]] = 1, else 0 (spec 1.23).

    A_max defaults to max(action_dims). Raises ValueError for dims < 1 or
    above `max_action_dim`.
    """
    dims = np.asarray(action_dims, np.int64).reshape(-1)
    if dims.size == 0 or np.any(dims < 1):
        raise ValueError(f"action_dims must be a non-empty list of ints >= 1, got {dims.tolist()}")
    amax = int(dims.max()) if max_action_dim is None else int(max_action_dim)
    if np.any(dims > amax):
        raise ValueError(f"action_dims {dims.tolist()} exceed the padded width {amax}")
    return (np.arange(amax)[None, :] < dims[:, None]).astype(np.float32)


def make_task_context(taskset: Any, *, discount: str = "taskset",
                      max_action_dim: int | None = None) -> TaskContext:
    """The `TaskContext` of a `wmx.schemas.taskset.TaskSet` (task id = position).

    discount: "taskset" uses each TaskInfo's stored discount; "heuristic"
    recomputes gamma(T) of spec 2.20 from its episode_length (T agent steps:
    500 -> 0.99, 100 -> 0.95). Either way the table is rounded to float32
    (spec 2.20, §0.5 item 12d). max_action_dim: padded width (default
    taskset.max_action_dim). Raises ValueError for an unknown `discount` mode.
    """
    if discount not in ("taskset", "heuristic"):
        raise ValueError(f"discount must be 'taskset' or 'heuristic', got {discount!r}")
    tasks = list(taskset.tasks)
    dims = [int(t.action_dim) for t in tasks]
    amax = max(dims) if max_action_dim is None else int(max_action_dim)
    if discount == "taskset":
        gam = [float(t.discount) for t in tasks]
    else:
        gam = [discount_from_episode_length(int(t.episode_length)) for t in tasks]
    return TaskContext(action_masks=jnp.asarray(prefix_masks(dims, amax)),
                       discounts=jnp.asarray(np.asarray(gam, np.float32)),
                       action_dims=jnp.asarray(np.asarray(dims, np.int32)))


def multitask_config(taskset: Any, preset: str = "paper", **overrides: Any) -> TDMPC2Config:
    """Resolved multi-task `TDMPC2Config` for a TaskSet (spec 1.21, 4.19).

    num_tasks = len(taskset), task_dim = 96 (T14), obs_dim =
    taskset.max_obs_dim, action_dim = taskset.max_action_dim (padded A_max;
    the planner's +2 iteration rule reads it), episode_length = the first
    task's T (the reference forwards envs[0]'s; the multi-task update and
    planner use the per-task discounts of the `TaskContext` instead of
    cfg.discount). Preset "paper" also defaults batch_size to 1024 (spec
    4.19: the paper's offline batch). `overrides` win over all of these.
    Raises ValueError like `make_config` (unknown preset / field).
    """
    kw: dict[str, Any] = dict(num_tasks=len(taskset), task_dim=TASK_DIM,
                              obs_dim=int(taskset.max_obs_dim),
                              action_dim=int(taskset.max_action_dim),
                              episode_length=int(taskset.tasks[0].episode_length))
    if preset == "paper":
        kw["batch_size"] = 1024
    kw.update(overrides)
    return make_config(preset, **kw)


def check_task_context(tasks: TaskContext, cfg: TDMPC2Config) -> None:
    """Raise ValueError unless `tasks` fits the multi-task config `cfg`."""
    cfg = cfg.resolved()
    if not cfg.multitask:
        raise ValueError("a TaskContext was given but cfg.num_tasks == 0 (single task); "
                         "build the config with multitask_config(taskset, ...)")
    want = {"action_masks": (cfg.num_tasks, cfg.action_dim), "discounts": (cfg.num_tasks,),
            "action_dims": (cfg.num_tasks,)}
    for name, shape in want.items():
        got = tuple(jnp.shape(getattr(tasks, name)))
        if got != shape:
            raise ValueError(f"TaskContext.{name} has shape {got}, cfg needs {shape} "
                             "(num_tasks, padded action_dim)")


# ---- task embedding (spec 1.22) ----------------------------------------------------
def renorm_rows(table: jnp.ndarray, ids: jnp.ndarray, max_norm: float = MAX_NORM) -> jnp.ndarray:
    """Look-up-time max-norm renorm with write-back (torch Embedding(max_norm=1), spec 1.22).

    table f32[n_tasks, D]; ids int[...] (any shape, repeats allowed). Each
    looked-up row w with ||w|| > max_norm becomes w * (max_norm / (||w|| + 1e-7));
    other rows (and rows not in `ids`) are returned unchanged. Outside
    autograd: the result is stop-gradiented. Returns the new table.
    The scale is computed in float32; torch computes it in float64 from the
    float32 norm and rounds it, so a renormed row can differ by 1 float32 ulp
    (deviation T33). Source: spec 1.22; fixtures/tdmpc2_mt/README.md semantics 1.
    """
    table = jax.lax.stop_gradient(table)
    ids = jnp.asarray(ids, jnp.int32).reshape(-1)
    rows = table[ids]
    n = jnp.linalg.norm(rows, axis=-1, keepdims=True)
    scale = jnp.float32(max_norm) / (n + jnp.float32(RENORM_EPS))
    return table.at[ids].set(jnp.where(n > max_norm, rows * scale, rows))


def task_embedding(params: dict, ids: jnp.ndarray) -> jnp.ndarray:
    """Plain gather e = params["task_emb"][ids]: f32[..., task_dim] (no renorm).

    Differentiable w.r.t. the table (identity on the gathered rows). Call
    `renorm_rows` first where the reference renorms (spec 1.22).
    """
    return params["task_emb"][jnp.asarray(ids, jnp.int32)]


def lookup_task_embedding(params: dict, ids: jnp.ndarray) -> tuple[dict, jnp.ndarray]:
    """Training look-up: renorm the looked-up rows, write them back, gather.

    Returns (params with the renormed "task_emb", e f32[..., task_dim]).
    `update` does this at the two binding look-ups of spec 1.22.
    """
    params = {**params, "task_emb": renorm_rows(params["task_emb"], ids)}
    return params, task_embedding(params, ids)


def eval_task_embedding(params: dict, task_id: jnp.ndarray) -> jnp.ndarray:
    """Evaluation look-up: the renormed row of `task_id`, NOT written back (T15).

    task_id int[] (or int[...]); returns f32[task_dim] (or f32[..., task_dim]).
    The reference's act() persists this renorm; wmx keeps params read-only
    at evaluation, so evaluating never changes the model (T15; the row used
    is the same). Scale in float32 as `renorm_rows` (T33).
    """
    ids = jnp.asarray(task_id, jnp.int32)
    rows = params["task_emb"][ids]
    n = jnp.linalg.norm(rows, axis=-1, keepdims=True)
    scale = jnp.float32(MAX_NORM) / (n + jnp.float32(RENORM_EPS))
    return jnp.where(n > MAX_NORM, rows * scale, rows)


# ---- observations / planning ---------------------------------------------------------
def pad_obs(obs: Any, width: int) -> jnp.ndarray:
    """Zero-pad obs f32[..., S_i] at the end to f32[..., width] (spec 1.23, 4.16).

    Raises ValueError when S_i > width.
    """
    obs = jnp.asarray(obs, jnp.float32)
    s = obs.shape[-1]
    if s > width:
        raise ValueError(f"obs has {s} dims, more than the padded width {width}")
    return jnp.pad(obs, [(0, 0)] * (obs.ndim - 1) + [(0, width - s)])


def _task_plan_args(params: dict, obs_padded: jnp.ndarray, cfg: TDMPC2Config,
                    tasks: TaskContext, task_id: jnp.ndarray) -> dict:
    """The multi-task hooks of `planner.plan` for one task: {task_emb (renormed,
    not persisted: T15), action_mask f32[A_max], discount f32[]}. Raises
    ValueError for a wrong obs width or a context not matching cfg."""
    check_task_context(tasks, cfg)
    if jnp.shape(obs_padded) != (cfg.obs_dim,):
        raise ValueError(f"plan_task takes one env's padded obs f32[{cfg.obs_dim}], got "
                         f"shape {jnp.shape(obs_padded)}; use pad_obs(obs, cfg.obs_dim)")
    task_id = jnp.asarray(task_id, jnp.int32)
    return dict(task_emb=eval_task_embedding(params, task_id),
                action_mask=tasks.action_masks[task_id],
                discount=tasks.discounts[task_id])


@functools.partial(jax.jit, static_argnames=("cfg",))
def plan_task(params: dict, obs_padded: jnp.ndarray, prev_mean: jnp.ndarray, t0: jnp.ndarray,
              noise: pl.PlanNoise, cfg: TDMPC2Config, tasks: TaskContext,
              task_id: jnp.ndarray, *, eval_mode: Any) -> tuple[jnp.ndarray, jnp.ndarray, dict]:
    """One multi-task MPPI decision for one env (spec 3.9, 3.12, 3.25).

    obs_padded f32[S_max] (see `pad_obs`); prev_mean f32[H, A_max] (one
    buffer whatever the task, as the reference's `_prev_mean`); t0 bool[];
    noise from `planner.draw_plan_noise(key, cfg, eval_mode)`; task_id i32[]
    (traced); eval_mode bool (traced; removes only the final exploration
    noise). Applies the task's embedding (renormed, not persisted: T15), its
    prefix action mask (policy, candidates, mean/std after the clamp; masked
    dims of the action are exactly 0) and its float32 discount (gamma^t as
    float32 products). Returns `planner.plan`'s (action f32[A_max],
    new_prev_mean f32[H, A_max], info); the env takes
    action[:action_dims[task]].
    Raises ValueError for a wrong obs width or a context not matching cfg.
    Source: tdmpc2_spec 3.9, 3.12; fixtures/tdmpc2_mt/README.md
    (tests/agents/tdmpc2/test_planner_mt_parity.py).
    """
    cfg = cfg.resolved()
    hooks = _task_plan_args(params, obs_padded, cfg, tasks, task_id)
    return pl.plan(params, obs_padded, prev_mean, t0, noise, cfg, eval_mode=eval_mode, **hooks)


@functools.partial(jax.jit, static_argnames=("cfg",))
def plan_task_with_stats(params: dict, obs_padded: jnp.ndarray, prev_mean: jnp.ndarray,
                         t0: jnp.ndarray, noise: pl.PlanNoise, cfg: TDMPC2Config,
                         tasks: TaskContext, task_id: jnp.ndarray, *, eval_mode: Any
                         ) -> tuple[jnp.ndarray, jnp.ndarray, dict]:
    """`plan_task` returning every intermediate (`planner.plan_with_stats`'s info).

    Same arguments, hooks and first two outputs as `plan_task`; info as
    `planner.plan_with_stats` (incl. `terminal_discount` f32[], the float32
    gamma_task^H). For parity tests and debugging. Raises like `plan_task`.
    """
    cfg = cfg.resolved()
    hooks = _task_plan_args(params, obs_padded, cfg, tasks, task_id)
    return pl.plan_with_stats(params, obs_padded, prev_mean, t0, noise, cfg,
                              eval_mode=eval_mode, **hooks)
