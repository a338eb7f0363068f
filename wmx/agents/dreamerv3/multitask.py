"""Multi-task DreamerV3: the task tables, the task embedding and the per-row task inputs
(a wmx extension, not in the reference: deviation W-D8, docs/deviations.md).

One model trains on the episodes of several tasks of a TaskSet, zero-padded at
the end to the widest observation O and action A (the pooled dataset's
layout). The single-task functions take the task data through one optional
argument, ``task`` (a `TaskInputs` gathered per row); with ``task=None`` they
compute exactly the reference's single-task step (the parity tests run that
path). Where the task enters:

- encoder: input concat(symlog(obs) * obs_mask, e) (padded obs dims masked);
- dynamics: the RSSM core's action input concat(a / max(1, |a|) * action_mask, e)
  (padded action dims masked: in the observed sequence, in imagination and
  when acting);
- actor and critic (imagination, replay critic, slow critic): input
  concat(feat, sg(e)): the embedding is trained by the world-model losses
  only, as every imagination loss trains only its own network (spec 3.4) and
  as TD-MPC2's policy reads sg(e);
- losses: the decoder's symlog MSE sums over the task's obs dims; the actor's
  log-probability and entropy sum over the task's action dims (and the
  entropy bounds of the 'rand' metric use them); the per-task discount γ_i
  replaces the fixed γ = 1 − 1/return_horizon where DreamerV3 uses it: the
  continue target γ_i (1 − terminal) (contdisc) and the replay critic's
  λ-return. The imagination return keeps disc = 1 (contdisc folds γ_i into
  the continue head's prediction, spec 3.6).

So a padded observation or action dimension changes no loss and no gradient
(tests/agents/dreamerv3/test_dreamerv3_multitask.py).

Task embedding: a learned table ``params["task_emb"]`` f32[n_tasks, task_dim]
(unit-variance init), looked up with a max-norm-1 projection
e = w · min(1, 1 / ‖w‖) (TD-MPC2's nn.Embedding(max_norm=1) semantics,
written as a differentiable function of the parameters instead of a renorm
written back into them).

Source: tdmpc2_spec 1.21-1.23 (the multi-task mechanisms followed here);
dreamerv3_spec 2.9, 2.13, 3.6, 3.11-3.12, 3.19 (where γ and the masks enter);
deviation W-D8.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from wmx.agents.dreamerv3.config import DreamerV3Config

sg = jax.lax.stop_gradient


class TaskContext(NamedTuple):
    """Per-task tables of a TaskSet, indexed by task id (a traced argument).

    obs_masks f32[n_tasks, O]: 1 on the first obs_dims[i] dims of task i;
    action_masks f32[n_tasks, A]: 1 on its first action_dims[i] dims;
    discounts f32[n_tasks]: γ_i (`make_task_context`); obs_dims, action_dims
    i32[n_tasks]: the tasks' unpadded widths.
    """

    obs_masks: jnp.ndarray
    action_masks: jnp.ndarray
    discounts: jnp.ndarray
    obs_dims: jnp.ndarray
    action_dims: jnp.ndarray


class TaskInputs(NamedTuple):
    """The task data of a batch of rows (leading dims [...] of the ids).

    emb f32[..., task_dim]: the looked-up embedding (max-norm 1);
    obs_mask f32[..., O]; action_mask f32[..., A]; discount f32[...] (γ_i);
    action_dim f32[...] (valid action dims, for the entropy bounds).
    """

    emb: jnp.ndarray
    obs_mask: jnp.ndarray
    action_mask: jnp.ndarray
    discount: jnp.ndarray
    action_dim: jnp.ndarray


def _prefix(dims: list[int], width: int) -> np.ndarray:
    d = np.asarray(dims, np.int64)
    return (np.arange(width)[None, :] < d[:, None]).astype(np.float32)


def make_task_context(cfg: DreamerV3Config, taskset: Any) -> TaskContext:
    """The `TaskContext` of a TaskSet (task id = position) for the multi-task config.

    Discounts: cfg.task_discount "taskset" (the default) gives each task its
    stored TaskSet discount (TD-MPC2's T heuristic, tdmpc2_spec 2.20), "horizon"
    every task γ = 1 − 1/return_horizon (DreamerV3's fixed discount, spec 3.6);
    float32.
    Raises ValueError when the config is single-task, or its number of tasks or
    padded widths do not fit the TaskSet.
    """
    c = cfg.resolved()
    tasks = list(taskset.tasks)
    if not c.multitask or c.num_tasks != len(tasks):
        raise ValueError(f"the dreamerv3 config has num_tasks={c.num_tasks}, the TaskSet "
                         f"{taskset.name} {len(tasks)} tasks; build the config with "
                         "make_config(..., taskset=...)")
    obs_dims = [int(t.obs_dim) for t in tasks]
    act_dims = [int(t.action_dim) for t in tasks]
    if max(obs_dims) > c.obs_dim or max(act_dims) > c.action_dim:
        raise ValueError(f"TaskSet {taskset.name} needs widths ({max(obs_dims)}, "
                         f"{max(act_dims)}), the config has ({c.obs_dim}, {c.action_dim})")
    if c.task_discount == "taskset":
        gam = [float(t.discount) for t in tasks]
    else:
        gam = [c.gamma] * len(tasks)
    return TaskContext(jnp.asarray(_prefix(obs_dims, c.obs_dim)),
                       jnp.asarray(_prefix(act_dims, c.action_dim)),
                       jnp.asarray(np.asarray(gam, np.float32)),
                       jnp.asarray(np.asarray(obs_dims, np.int32)),
                       jnp.asarray(np.asarray(act_dims, np.int32)))


def init_task_embedding(draw, cfg: DreamerV3Config) -> jnp.ndarray:
    """The embedding table f32[num_tasks, task_dim], unit-variance entries (a `nets.Draw`)."""
    c = cfg.resolved()
    return draw((c.num_tasks, c.task_dim))


def task_embedding(table: jnp.ndarray, ids: jnp.ndarray) -> jnp.ndarray:
    """Rows of ``table`` f32[n, E] at ``ids`` int[...] projected to norm <= 1:
    e = w · min(1, 1/‖w‖), f32[..., E] (differentiable in the table)."""
    w = table[jnp.asarray(ids, jnp.int32)]
    norm = jnp.sqrt(jnp.sum(w * w, axis=-1, keepdims=True))
    return w * jnp.minimum(1.0, 1.0 / jnp.maximum(norm, 1e-12))


def task_inputs(params: dict, tasks: TaskContext, ids: jnp.ndarray) -> TaskInputs:
    """The `TaskInputs` of rows with task ids ``ids`` int[...] (embedding from
    ``params["task_emb"]``, masks and γ from ``tasks``)."""
    ids = jnp.asarray(ids, jnp.int32)
    return TaskInputs(task_embedding(params["task_emb"], ids), tasks.obs_masks[ids],
                      tasks.action_masks[ids], tasks.discounts[ids],
                      tasks.action_dims[ids].astype(jnp.float32))


def flatten(task: TaskInputs | None, lead: int = 2) -> TaskInputs | None:
    """``task`` with its first ``lead`` axes merged (rows [B, T] -> imagination
    starts [B·T], batch-major as `ac_loss`); None stays None."""
    if task is None:
        return None
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[lead:]), task)


def ac_input(x: jnp.ndarray, task: TaskInputs | None) -> jnp.ndarray:
    """The actor / critic input: feat x [..., F], or concat(x, sg(e)) [..., F + E]
    with the task's embedding broadcast over x's extra leading axes (imagined
    steps), in x's dtype (the compute dtype)."""
    if task is None:
        return x
    e = sg(task.emb)
    e = e if e.dtype == x.dtype else e.astype(x.dtype)
    e = e.reshape(*e.shape[:-1], *(1,) * (x.ndim - e.ndim), e.shape[-1])
    return jnp.concatenate([x, jnp.broadcast_to(e, (*x.shape[:-1], e.shape[-1]))], -1)


def broadcast_to_steps(v: jnp.ndarray, x: jnp.ndarray) -> jnp.ndarray:
    """Per-start values v f32[N, ...] with axes added after N to broadcast against
    x f32[N, steps, ...] (a mask over the imagined steps)."""
    return v.reshape(v.shape[0], *(1,) * (x.ndim - v.ndim), *v.shape[1:])
