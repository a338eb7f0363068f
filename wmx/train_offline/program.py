"""The jitted programs of an offline run, for any agent of the protocol (one model of one
task or of several).

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

Past one device (DESIGN.md §5; `--devices N`): a 1-D mesh "data" of N
devices (`data_mesh`). Parameters, optimiser states, keys and the in-memory
dataset are replicated; each update's batch is sharded on its batch axis
(`wmx.datasets.samplers.batch_axes` of the spec) with a sharding constraint
inside the jitted chunk, so each device runs the update on B/N items and the
compiler reduces the gradients over the mesh. Seeds stay vmapped (the seed
axis is not sharded). The global batch and the key streams do not depend on
N, so N devices compute the updates of one device up to float32 reordering of
that reduction. One device (mesh None) is the single-device program, unchanged.

Evaluation (tdmpc2_spec 4.20, deviation T16): per task, the shared rollout
of `wmx.acting.make_evaluate_fn` on the task's env (a multi-task model: with
the padded widths and its task id; a single-task one: at the task's own);
one jitted program per task (the env differs), cached.
"""
from __future__ import annotations

import functools
from types import ModuleType
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from wmx.acting import EvalProgram, make_evaluate_fn
from wmx.datasets.samplers import batch_axes, sample, spec_keys
from wmx.envs.base import Env
from wmx.sizes import counted
from wmx.xla_cpu import options_key

# fold_in tags separating the key streams
_INIT, _SAMPLE, _NOISE = 0x1A1, 0x5A, 0x40
DATA_AXIS = "data"
"""The mesh axis the batch is sharded over."""


class OfflineCarry(NamedTuple):
    """Per-seed state of an offline run (seeds stacked on a leading axis).

    agent: the agent's training state (`Agent.init`); key u32[2]: the seed's
    raw PRNG key; n_updates i32[]: updates applied so far.
    """

    agent: Any
    key: jax.Array
    n_updates: jax.Array


def checkpoint_items(carries: OfflineCarry) -> dict[str, Any]:
    """The checkpoint items of the carries: "agent", "keys", "loop" (replicated arrays
    as their single-device copy, `local`: a checkpoint does not depend on the device
    count)."""
    carries = local(carries)
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


# ---- devices ------------------------------------------------------------------------------
def data_mesh(n_devices: int) -> Mesh | None:
    """The 1-D mesh (axis "data") of the first ``n_devices`` of ``jax.devices()`` (with
    `jax.distributed.initialize`, the devices of every process), or None for one device
    (the single-device program).

    Raises ValueError when fewer devices exist, or when several processes run and the
    mesh would leave out some of their devices.
    """
    devices = jax.devices()
    if not 1 <= n_devices <= len(devices):
        raise ValueError(f"--devices {n_devices}: {counted(len(devices), 'device')} available "
                         f"({devices[0].platform})")
    if jax.process_count() > 1 and n_devices != len(devices):
        raise ValueError(f"--devices {n_devices}: with {jax.process_count()} processes the "
                         f"run uses all {len(devices)} devices (omit --devices)")
    if n_devices == 1:
        return None
    return Mesh(np.asarray(devices[:n_devices]), (DATA_AXIS,))


def check_batch(spec, n_devices: int) -> None:
    """Raise ValueError unless the global batch of ``spec`` splits evenly over the devices."""
    if spec.batch % n_devices:
        raise ValueError(f"--batch-size {spec.batch} is not divisible by --devices {n_devices}:"
                         " each device takes an equal share of the batch")


def batch_shardings(spec, mesh: Mesh, lead: int = 0) -> dict[str, NamedSharding]:
    """Per batch key, the sharding of its batch axis over the mesh axis "data" (after
    ``lead`` leading axes: 2 for the streaming feed's [S, U, ...] stacks)."""
    return {k: NamedSharding(mesh, PartitionSpec(*(None,) * (lead + a), DATA_AXIS))
            for k, a in batch_axes(spec).items()}


def _put(tree: Any, sharding) -> Any:
    if jax.process_count() == 1:
        return jax.device_put(tree, sharding)

    def one(x, s):   # every process holds the whole value; each places its devices' parts
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, s, lambda index: x[index])
    if isinstance(sharding, dict):
        return {k: one(v, sharding[k]) for k, v in tree.items()}
    return jax.tree.map(lambda x: one(x, sharding), tree)


def replicate(tree: Any, mesh: Mesh | None) -> Any:
    """``tree`` on the run's devices: committed to the first device (mesh None), else a
    copy on every device of the mesh (parameters, keys, task tables, the dataset)."""
    if mesh is None:
        return jax.device_put(tree, jax.devices()[0])
    return _put(tree, NamedSharding(mesh, PartitionSpec()))


def local(tree: Any) -> Any:
    """Arrays replicated over several devices as their copy on this process's first
    device of the mesh; anything else (single-device arrays, shapes) as it is."""
    def one(x):
        if isinstance(x, jax.Array) and len(x.sharding.device_set) > 1:
            return x.addressable_data(0)
        return x
    return jax.tree.map(one, tree)


def shard_batches(batches: dict[str, np.ndarray], spec, mesh: Mesh | None) -> dict[str, Any]:
    """The streaming feed's host batches [S, U, ...] placed with the batch axis sharded over
    the mesh (`batch_shardings` with lead 2); unchanged (host arrays) without a mesh."""
    if mesh is None:
        return batches
    return _put(batches, batch_shardings(spec, mesh, lead=2))


def _constrain(batch: dict, spec, mesh: Mesh | None) -> dict:
    if mesh is None:
        return batch
    return jax.lax.with_sharding_constraint(batch, batch_shardings(spec, mesh))


def _jit(fn, mesh: Mesh | None, options: dict[str, str]):
    """``jax.jit`` of a chunk program: carries donated, the agent's compile options
    (`Agent.compiler_options`), replicated outputs with a mesh."""
    if mesh is None:
        return jax.jit(fn, donate_argnums=0, compiler_options=options)
    return jax.jit(fn, donate_argnums=0, out_shardings=NamedSharding(mesh, PartitionSpec()),
                   compiler_options=options)


def device_dataset(arrays: dict[str, Any], spec, mesh: Mesh | None = None) -> dict[str, jax.Array]:
    """The arrays a batch of ``spec`` reads, on device (from
    `wmx.datasets.readers.load_numpy`): obs f32[N, T+1, O_max], action f32[N, T+1,
    A_max], reward f32[N, T+1], task i32[N], and for windows the flags bool[N, T+1];
    replicated over the mesh when there is one."""
    data = {k: arrays[k] for k in spec_keys(spec)}
    if mesh is None:
        return jax.device_put(data)
    return replicate(data, mesh)


def _one_update(agent: ModuleType, cfg: Any, tasks: Any, carry: OfflineCarry, i, batch: dict):
    k_noise = jax.random.fold_in(jax.random.fold_in(carry.key, i), _NOISE)
    state, m, _ = agent.update(carry.agent, batch, k_noise, cfg, tasks=tasks)
    return OfflineCarry(state, carry.key, carry.n_updates + 1), m


def make_chunk_fn(agent: ModuleType, cfg: Any, mesh: Mesh | None = None):
    """Jitted in-memory chunk ``(carries, data, tasks, idx i32[U]) -> (carries, sums)``.

    data: `device_dataset` arrays, shared by the seeds (unbatched argument);
    tasks: the agent's `task_context` of the TaskSet; idx: the absolute update
    indices of the chunk. Update i samples the agent's `batch_spec` with
    `wmx.datasets.samplers.sample` from ``fold_in(fold_in(key, i), _SAMPLE)``
    and draws the update's noise from ``fold_in(fold_in(key, i), _NOISE)``.
    sums: per seed, the sum over the chunk of each of the agent's METRIC_KEYS
    (f32[S]). Carries are donated. With a ``mesh`` (`data_mesh`) the sampled batch
    is sharded over it and the carries come back replicated (place the carries, data
    and tasks with `replicate`). Cached per (agent, config, mesh, compile options).

    Raises ValueError when the batch does not split evenly over the mesh.
    """
    return _chunk_fn(agent, cfg, mesh, options_key(agent.compiler_options(cfg)))


@functools.lru_cache(maxsize=8)
def _chunk_fn(agent: ModuleType, cfg: Any, mesh: Mesh | None, options: tuple):
    spec = agent.batch_spec(cfg)
    if mesh is not None:
        check_batch(spec, mesh.size)

    def one_seed(carry, data, tasks, idx):
        def body(c, i):
            k = jax.random.fold_in(jax.random.fold_in(c.key, i), _SAMPLE)
            batch = _constrain(sample(data, k, spec), spec, mesh)
            return _one_update(agent, cfg, tasks, c, i, batch)
        carry, ms = jax.lax.scan(body, carry, idx)
        return carry, {k: v.sum() for k, v in ms.items()}

    return _jit(jax.vmap(one_seed, in_axes=(0, None, None, None)), mesh, dict(options))


def make_stream_chunk_fn(agent: ModuleType, cfg: Any, mesh: Mesh | None = None):
    """Jitted streaming chunk ``(carries, batches, tasks, idx i32[U]) -> (carries, sums)``.

    batches: per seed, U stacked host batches of the streaming reader for the
    agent's `batch_spec` (leading axes [S, U]; each seed reads its own seeded
    stream; with a mesh, placed by `shard_batches`). Otherwise as `make_chunk_fn`.
    """
    return _stream_chunk_fn(agent, cfg, mesh, options_key(agent.compiler_options(cfg)))


@functools.lru_cache(maxsize=8)
def _stream_chunk_fn(agent: ModuleType, cfg: Any, mesh: Mesh | None, options: tuple):
    spec = agent.batch_spec(cfg)
    if mesh is not None:
        check_batch(spec, mesh.size)

    def one_seed(carry, batches, tasks, idx):
        def body(c, x):
            i, batch = x
            return _one_update(agent, cfg, tasks, c, i, _constrain(batch, spec, mesh))
        carry, ms = jax.lax.scan(body, carry, (idx, batches))
        return carry, {k: v.sum() for k, v in ms.items()}

    return _jit(jax.vmap(one_seed, in_axes=(0, 0, None, None)), mesh, dict(options))


def make_eval_fn(agent: ModuleType, cfg: Any, episodes: int, env: Env,
                 task_id: int) -> EvalProgram:
    """``evaluate(agent_states, keys u32[S,2], tasks, index i32[]) -> f32[S, E]`` (an
    `wmx.acting.EvalProgram`).

    The shared evaluation rollout (`wmx.acting.make_evaluate_fn`) of task
    ``task_id`` (the run's id of the task for a multi-task config, None for a
    single-task one: `OfflineRunConfig.model_task_id`) on the seeds' policy
    parameters: per seed, ``episodes`` eval_mode episodes vmapped from fresh
    initial states (reset key from the seed key folded with the evaluation index
    and the task id), acting on the zero-padded obs (the env takes the first
    ``env.action_dim`` dims).
    Replicated arguments (a run on several devices) are evaluated from their copy on
    one device (`local`). Raises ValueError when the env's dims exceed the padded widths.
    """
    fn = make_evaluate_fn(agent, cfg, episodes, env, None if task_id is None else int(task_id))

    def args(states, keys, tasks, index):
        states, keys, tasks = local((states, keys, tasks))
        return (jax.vmap(agent.policy_params)(states), keys, tasks, index)

    return EvalProgram(fn, args)
