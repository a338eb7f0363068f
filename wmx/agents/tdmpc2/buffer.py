"""Episode ring buffer of TD-MPC2 (tdmpc2_spec 4.7-4.9, reference_design §4.4).

The buffer holds whole fixed-length episodes in obs-aligned rows
(DESIGN.md §4): row k of an episode is (obs_k, the action chosen at obs_k,
the reward received on entering obs_k). Episodes are written in rounds of
``n_envs`` lockstep episodes; round ``e`` (absolute episode index of every
env) lives in slot ``(e mod R) * n_envs + env``. A round becomes sampleable
once its held tick has passed: while round ``e`` is being written, rounds
``e - c .. e - 1`` with ``c = min(e, R - 1)`` are the committed ones. This is
the b67b21c whole-episode design (capacity in episodes, uniform episode then
uniform start), which for fixed-length episodes samples from the same
distribution as the paper-era SliceSampler (spec 4.8); deviation T26 gives
the capacity rule.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp


class EpisodeBuffer(NamedTuple):
    """Ring storage of ``R * n_envs`` episodes of ``T + 1`` rows.

    Fields: ``obs f32[R*n, T+1, O]``, ``action f32[R*n, T+1, A]`` (the
    last row of an episode is 0), ``reward f32[R*n, T+1]`` (row 0 is 0).
    The number of rounds R and n_envs are static (array shapes); which
    rounds are committed follows from the absolute tick (no stored counter).
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array


class SliceBatch(NamedTuple):
    """A TD-MPC2 training batch, time-major (tdmpc2_spec 2.1).

    ``obs f32[H+1, B, O]``, ``action f32[H, B, A]``, ``reward f32[H, B]``.
    Transition t is (obs[t], action[t], reward[t], obs[t+1]).
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array


def num_rounds(buffer_size: int, total_env_steps: int, episode_length: int,
               n_envs: int) -> int:
    """Rounds R of the ring: ceil(min(buffer_size, total) / (T n_envs)) + 1.

    The extra round is the staging round, written in place and never sampled
    (deviation T26). ``total_env_steps`` counts agent steps over all envs for
    the whole run. Raises ValueError on non-positive sizes.
    """
    if min(buffer_size, total_env_steps, episode_length, n_envs) <= 0:
        raise ValueError(
            "buffer_size, total_env_steps, episode_length and n_envs must be > 0, got "
            f"{buffer_size}, {total_env_steps}, {episode_length}, {n_envs}")
    cap = min(buffer_size, total_env_steps)
    return math.ceil(cap / (episode_length * n_envs)) + 1


def init_buffer(rounds: int, n_envs: int, episode_length: int, obs_dim: int,
                action_dim: int) -> EpisodeBuffer:
    """Zero-filled ring for ``rounds * n_envs`` episodes of ``T + 1`` rows."""
    n = rounds * n_envs
    rows = episode_length + 1
    return EpisodeBuffer(
        obs=jnp.zeros((n, rows, obs_dim), jnp.float32),
        action=jnp.zeros((n, rows, action_dim), jnp.float32),
        reward=jnp.zeros((n, rows), jnp.float32),
    )


def write_rows(buf: EpisodeBuffer, episode: jax.Array, row: jax.Array,
               obs: jax.Array, action: jax.Array, reward: jax.Array) -> EpisodeBuffer:
    """Write row ``row`` of round ``episode`` for every env.

    ``episode`` and ``row`` are unbatched int32 scalars (absolute round index
    and row index k in 0..T); ``obs f32[n, O]``, ``action f32[n, A]``,
    ``reward f32[n]`` hold one row per env.
    """
    n_envs = obs.shape[0]
    rounds = buf.obs.shape[0] // n_envs
    base = (episode % rounds) * n_envs
    slots = base + jnp.arange(n_envs)
    return EpisodeBuffer(
        obs=buf.obs.at[slots, row].set(obs),
        action=buf.action.at[slots, row].set(action),
        reward=buf.reward.at[slots, row].set(reward),
    )


def committed_rounds(buf: EpisodeBuffer, n_envs: int, episode: jax.Array) -> jax.Array:
    """Number of sampleable rounds while round ``episode`` is in progress."""
    rounds = buf.obs.shape[0] // n_envs
    return jnp.minimum(episode, rounds - 1)


def draw_slice_indices(key: jax.Array, batch_size: int, n_committed_eps: jax.Array,
                       episode_length: int, horizon: int) -> tuple[jax.Array, jax.Array]:
    """Uniform committed-episode ordinal and uniform start (tdmpc2_spec 4.8).

    Returns ``(u i32[B] in [0, n_committed_eps), start i32[B] in [0, T - H])``.
    These are the sampler's random draws (the seam for injected batches).
    """
    k_ep, k_start = jax.random.split(key)
    u = jax.random.randint(k_ep, (batch_size,), 0, jnp.maximum(n_committed_eps, 1))
    start = jax.random.randint(k_start, (batch_size,), 0, episode_length - horizon + 1)
    return u, start


def sample(buf: EpisodeBuffer, key: jax.Array, batch_size: int, horizon: int,
           n_envs: int, episode: jax.Array) -> SliceBatch:
    """Sample B slices of H+1 rows from the committed rounds.

    ``episode`` is the unbatched index of the round in progress; it must be
    >= 1 (the schedule only updates after a committed round). Slices never
    cross episodes: obs rows s..s+H, actions rows s..s+H-1, rewards rows
    s+1..s+H (obs-aligned rows, reference_design §4.4).
    """
    rounds = buf.obs.shape[0] // n_envs
    episode_length = buf.obs.shape[1] - 1
    c = committed_rounds(buf, n_envs, episode)
    u, start = draw_slice_indices(key, batch_size, c * n_envs, episode_length, horizon)
    rnd = (episode - c + u // n_envs) % rounds
    slot = rnd * n_envs + u % n_envs
    offsets = start[:, None] + jnp.arange(horizon + 1)[None, :]          # [B, H+1]
    obs = buf.obs[slot[:, None], offsets]                                # [B, H+1, O]
    action = buf.action[slot[:, None], offsets[:, :horizon]]            # [B, H, A]
    reward = buf.reward[slot[:, None], offsets[:, 1:]]                  # [B, H]
    return SliceBatch(obs=jnp.swapaxes(obs, 0, 1),
                      action=jnp.swapaxes(action, 0, 1),
                      reward=jnp.swapaxes(reward, 0, 1))


def round_slots(rounds: int, n_envs: int, episode: int) -> list[int]:
    """Host helper: the slots that hold round ``episode`` in a ring of ``rounds`` rounds."""
    base = (episode % rounds) * n_envs
    return list(range(base, base + n_envs))
