"""The jitted programs of an offline multi-task TD-MPC2 run: update chunks and evaluation.

DESIGN.md §3 principle 1 and §5, reference_design §7: training is an
env-free ``lax.scan`` of updates (tdmpc2_spec 4.19: the online update, no
planning), seeds ``vmap``ped outside. The dataset enters the program as an
argument shared by the seeds (``in_axes=None``; never closed over, never
copied per seed): either the device-resident arrays (slices sampled inside
the scan, uniform over the pooled episodes) or, for datasets larger than
memory, host batches stacked per chunk. All randomness of update i comes
from ``fold_in(seed_key, i)`` (absolute, unbatched update index), so a run
split into chunks, or resumed by a new process, replays exactly what the
uninterrupted run does.

Evaluation (tdmpc2_spec 4.20, deviation T16): per task, ``E`` eval_mode
episodes vmapped from fresh initial states with the padded planner
(`multitask.plan_task`), through the shared rollout of `wmx.evaluate.rollout`;
one jitted program per task (the env differs), cached.
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from wmx.agents.tdmpc2.config import TDMPC2Config
from wmx.agents.tdmpc2.multitask import TaskContext
from wmx.agents.tdmpc2.update import (Batch, TrainState, draw_update_noise, init_train_state,
                                      update)
from wmx.datasets.samplers import sample_slices
from wmx.envs.base import Env
from wmx.evaluate.rollout import make_rollout_fn

# fold_in tags separating the key streams
_INIT, _SAMPLE, _NOISE = 0x1A1, 0x5A, 0x40

METRIC_KEYS = ("consistency_loss", "reward_loss", "value_loss", "pi_loss", "total_loss",
               "grad_norm", "pi_grad_norm", "pi_scale")
SLICE_KEYS = ("obs", "action", "reward", "task")
"""Dataset arrays the in-memory program reads (see `device_dataset`)."""


class OfflineCarry(NamedTuple):
    """Per-seed state of an offline run (seeds stacked on a leading axis).

    train: update state (params incl. the task embedding, optimisers,
    RunningScale, ...); key u32[2]: the seed's raw PRNG key; n_updates i32[]:
    updates applied so far.
    """

    train: TrainState
    key: jax.Array
    n_updates: jax.Array


def init_carry(key: jax.Array, cfg: TDMPC2Config) -> OfflineCarry:
    """Initial state of one seed from its key u32[2] (fresh parameters)."""
    return OfflineCarry(train=init_train_state(jax.random.fold_in(key, _INIT), cfg), key=key,
                        n_updates=jnp.zeros((), jnp.int32))


@functools.lru_cache(maxsize=8)
def _init_fn(cfg: TDMPC2Config):
    return jax.jit(jax.vmap(lambda key: init_carry(key, cfg)))


def init_carries(cfg: TDMPC2Config, seeds: tuple[int, ...]) -> OfflineCarry:
    """Initial states of every seed (seed s starts from ``PRNGKey(s)``), stacked on axis 0."""
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    return _init_fn(cfg)(keys)


def device_dataset(arrays: dict[str, Any]) -> dict[str, jax.Array]:
    """The arrays the in-memory chunk reads, on device: obs f32[N, T+1, O_max],
    action f32[N, T+1, A_max], reward f32[N, T+1], task i32[N] (from
    `wmx.datasets.readers.load_numpy`)."""
    return jax.device_put({k: arrays[k] for k in SLICE_KEYS})


def _one_update(cfg: TDMPC2Config, tasks: TaskContext, carry: OfflineCarry, i, batch: dict):
    k_noise = jax.random.fold_in(jax.random.fold_in(carry.key, i), _NOISE)
    b = Batch(obs=batch["obs"], action=batch["action"], reward=batch["reward"],
              task=batch["task"].astype(jnp.int32))
    train, m = update(carry.train, b, draw_update_noise(k_noise, cfg), cfg, tasks=tasks)
    return (OfflineCarry(train, carry.key, carry.n_updates + 1),
            {k: jnp.asarray(m[k], jnp.float32) for k in METRIC_KEYS})


def make_chunk_fn(cfg: TDMPC2Config):
    """Jitted in-memory chunk ``(carries, data, tasks, idx i32[U]) -> (carries, sums)``.

    data: `device_dataset` arrays, shared by the seeds (unbatched argument);
    tasks: the TaskSet's `TaskContext`; idx: the absolute update indices of
    the chunk. Update i samples ``cfg.batch_size`` slices of H+1 rows with
    ``sample_slices`` (uniform over episodes, then starts; tdmpc2_spec 4.8,
    4.19) from ``fold_in(fold_in(key, i), _SAMPLE)``. sums: per seed, the
    sum over the chunk of each metric of METRIC_KEYS (f32[S]). Carries are
    donated. Cached per config.
    """
    return _chunk_fn(cfg.resolved())


@functools.lru_cache(maxsize=8)
def _chunk_fn(cfg: TDMPC2Config):
    def one_seed(carry, data, tasks, idx):
        def body(c, i):
            k = jax.random.fold_in(jax.random.fold_in(c.key, i), _SAMPLE)
            batch = sample_slices(data, k, cfg.batch_size, cfg.horizon)
            return _one_update(cfg, tasks, c, i, batch)
        carry, ms = jax.lax.scan(body, carry, idx)
        return carry, {k: v.sum() for k, v in ms.items()}

    return jax.jit(jax.vmap(one_seed, in_axes=(0, None, None, None)), donate_argnums=0)


def make_stream_chunk_fn(cfg: TDMPC2Config):
    """Jitted streaming chunk ``(carries, batches, tasks, idx i32[U]) -> (carries, sums)``.

    batches: per seed, U stacked host batches of `stream_slices`: obs
    f32[S, U, H+1, B, O], action f32[S, U, H, B, A], reward f32[S, U, H, B],
    task i32[S, U, B] (each seed reads its own seeded stream). Otherwise as
    `make_chunk_fn`.
    """
    return _stream_chunk_fn(cfg.resolved())


@functools.lru_cache(maxsize=8)
def _stream_chunk_fn(cfg: TDMPC2Config):
    def one_seed(carry, batches, tasks, idx):
        def body(c, x):
            i, batch = x
            return _one_update(cfg, tasks, c, i, batch)
        carry, ms = jax.lax.scan(body, carry, (idx, batches))
        return carry, {k: v.sum() for k, v in ms.items()}

    return jax.jit(jax.vmap(one_seed, in_axes=(0, 0, None, None)), donate_argnums=0)


def make_eval_fn(cfg: TDMPC2Config, episodes: int, env: Env, task_id: int):
    """Jitted ``evaluate(params, keys u32[S,2], tasks, index i32[]) -> returns f32[S, E]``.

    The shared evaluation rollout (`wmx.evaluate.rollout.make_rollout_fn`)
    for task ``task_id``: per seed, ``episodes`` eval_mode episodes vmapped
    from fresh initial states (reset key from the seed key folded with the
    evaluation index and the task id), acting with `plan_task` on the
    zero-padded obs (the env takes the first ``env.action_dim`` dims). Returns
    the undiscounted episode returns. Raises ValueError when the env's dims
    exceed the padded widths. Cached per (config, episodes, env, task id).
    """
    return make_rollout_fn(cfg, episodes, env, int(task_id))
