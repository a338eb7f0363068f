"""The jitted programs of an offline run, for any multi-task agent of the protocol.

DESIGN.md §3 principle 1 and §5, reference_design §7: training is an
env-free ``lax.scan`` of updates (tdmpc2_spec 4.19: the online update, no
planning), seeds ``vmap``ped outside. The dataset enters the program as an
argument shared by the seeds (``in_axes=None``; never closed over, never
copied per seed): either the device-resident arrays (batches of the agent's
`batch_spec` sampled inside the scan by `wmx.datasets.samplers.sample`) or,
for datasets larger than memory, host batches of the streaming reader
stacked per chunk. All randomness of update i comes from
``fold_in(seed_key, i)`` (absolute, unbatched update index), so a run split
into chunks, or resumed by a new process, replays exactly what the
uninterrupted run does.

Evaluation (tdmpc2_spec 4.20, deviation T16): per task, the shared rollout
of `wmx.acting.make_evaluate_fn` on the task's env with the padded widths;
one jitted program per task (the env differs), cached.
"""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from wmx.acting import make_evaluate_fn
from wmx.datasets.samplers import sample, spec_keys
from wmx.envs.base import Env

# fold_in tags separating the key streams
_INIT, _SAMPLE, _NOISE = 0x1A1, 0x5A, 0x40


class OfflineCarry(NamedTuple):
    """Per-seed state of an offline run (seeds stacked on a leading axis).

    agent: the agent's training state (`Agent.init`); key u32[2]: the seed's
    raw PRNG key; n_updates i32[]: updates applied so far.
    """

    agent: Any
    key: jax.Array
    n_updates: jax.Array


def checkpoint_items(carries: OfflineCarry) -> dict[str, Any]:
    """The checkpoint items of the carries: "agent", "keys", "loop"."""
    return {"agent": carries.agent, "keys": carries.key,
            "loop": {"n_updates": carries.n_updates}}


def from_checkpoint_items(items: dict[str, Any]) -> OfflineCarry:
    return OfflineCarry(items["agent"], items["keys"], items["loop"]["n_updates"])


def init_carry(key: jax.Array, agent: ModuleType, cfg: Any) -> OfflineCarry:
    """Initial state of one seed from its key u32[2] (fresh parameters)."""
    return OfflineCarry(agent=agent.init(jax.random.fold_in(key, _INIT), cfg), key=key,
                        n_updates=jnp.zeros((), jnp.int32))


@functools.lru_cache(maxsize=8)
def _init_fn(agent: ModuleType, cfg: Any):
    return jax.jit(jax.vmap(lambda key: init_carry(key, agent, cfg)))


def init_carries(agent: ModuleType, cfg: Any, seeds: tuple[int, ...]) -> OfflineCarry:
    """Initial states of every seed (seed s starts from ``PRNGKey(s)``), stacked on axis 0."""
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    return _init_fn(agent, cfg)(keys)


def device_dataset(arrays: dict[str, Any], spec) -> dict[str, jax.Array]:
    """The arrays a batch of ``spec`` reads, on device (from
    `wmx.datasets.readers.load_numpy`): obs f32[N, T+1, O_max], action f32[N, T+1,
    A_max], reward f32[N, T+1], task i32[N], and for windows the flags bool[N, T+1]."""
    return jax.device_put({k: arrays[k] for k in spec_keys(spec)})


def _one_update(agent: ModuleType, cfg: Any, tasks: Any, carry: OfflineCarry, i, batch: dict):
    k_noise = jax.random.fold_in(jax.random.fold_in(carry.key, i), _NOISE)
    state, m, _ = agent.update(carry.agent, batch, k_noise, cfg, tasks=tasks)
    return OfflineCarry(state, carry.key, carry.n_updates + 1), m


def make_chunk_fn(agent: ModuleType, cfg: Any):
    """Jitted in-memory chunk ``(carries, data, tasks, idx i32[U]) -> (carries, sums)``.

    data: `device_dataset` arrays, shared by the seeds (unbatched argument);
    tasks: the agent's `task_context` of the TaskSet; idx: the absolute update
    indices of the chunk. Update i samples the agent's `batch_spec` with
    `wmx.datasets.samplers.sample` from ``fold_in(fold_in(key, i), _SAMPLE)``
    and draws the update's noise from ``fold_in(fold_in(key, i), _NOISE)``.
    sums: per seed, the sum over the chunk of each of the agent's METRIC_KEYS
    (f32[S]). Carries are donated. Cached per (agent, config).
    """
    return _chunk_fn(agent, cfg)


@functools.lru_cache(maxsize=8)
def _chunk_fn(agent: ModuleType, cfg: Any):
    spec = agent.batch_spec(cfg)

    def one_seed(carry, data, tasks, idx):
        def body(c, i):
            k = jax.random.fold_in(jax.random.fold_in(c.key, i), _SAMPLE)
            return _one_update(agent, cfg, tasks, c, i, sample(data, k, spec))
        carry, ms = jax.lax.scan(body, carry, idx)
        return carry, {k: v.sum() for k, v in ms.items()}

    return jax.jit(jax.vmap(one_seed, in_axes=(0, None, None, None)), donate_argnums=0)


def make_stream_chunk_fn(agent: ModuleType, cfg: Any):
    """Jitted streaming chunk ``(carries, batches, tasks, idx i32[U]) -> (carries, sums)``.

    batches: per seed, U stacked host batches of the streaming reader for the
    agent's `batch_spec` (leading axes [S, U]; each seed reads its own seeded
    stream). Otherwise as `make_chunk_fn`.
    """
    return _stream_chunk_fn(agent, cfg)


@functools.lru_cache(maxsize=8)
def _stream_chunk_fn(agent: ModuleType, cfg: Any):
    def one_seed(carry, batches, tasks, idx):
        def body(c, x):
            i, batch = x
            return _one_update(agent, cfg, tasks, c, i, batch)
        carry, ms = jax.lax.scan(body, carry, (idx, batches))
        return carry, {k: v.sum() for k, v in ms.items()}

    return jax.jit(jax.vmap(one_seed, in_axes=(0, 0, None, None)), donate_argnums=0)


def make_eval_fn(agent: ModuleType, cfg: Any, episodes: int, env: Env, task_id: int):
    """Jitted ``evaluate(agent_states, keys u32[S,2], tasks, index i32[]) -> f32[S, E]``.

    The shared evaluation rollout (`wmx.acting.make_evaluate_fn`) of task
    ``task_id`` on the seeds' policy parameters: per seed, ``episodes``
    eval_mode episodes vmapped from fresh initial states (reset key from the
    seed key folded with the evaluation index and the task id), acting on the
    zero-padded obs (the env takes the first ``env.action_dim`` dims).
    Raises ValueError when the env's dims exceed the padded widths.
    """
    fn = make_evaluate_fn(agent, cfg, episodes, env, int(task_id))

    def evaluate(states, keys, tasks, index):
        return fn(jax.vmap(agent.policy_params)(states), keys, tasks, index)

    return evaluate
