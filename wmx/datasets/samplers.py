"""In-jit samplers over a device-resident pooled dataset.

`data` is a pytree (dict) of device arrays, passed as an argument (never closed
over, DESIGN.md §5): obs f32[N, T+1, O], action f32[N, T+1, A], reward
f32[N, T+1], is_first / is_last / is_terminal bool[N, T+1], task i32[N]
(what `wmx.datasets.readers.load_in_memory` returns).

`sample(data, key, spec)` is the one entry point the trainers use: it draws
a batch of an agent's `wmx.agents.api.BatchSpec`. Its streaming
counterpart is `wmx.datasets.readers.stream` with the same spec; the two
give the same batch distribution for every spec both accept (uniform over
episodes, then over starts within the episode; deviation DS-S1 for the
streaming reader's epochs). Windows that cross episode ends
(``cross_episodes``) exist only in memory.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from wmx.agents.api import BatchSpec

SLICE_KEYS = ("obs", "action", "reward", "task")
WINDOW_KEYS = ("obs", "action", "reward", "is_first", "is_last", "is_terminal", "task")
"""Dataset arrays the samplers read: slices need SLICE_KEYS, windows WINDOW_KEYS."""


def spec_keys(spec: BatchSpec) -> tuple[str, ...]:
    """The dataset arrays a batch of ``spec`` reads (to keep device memory to them)."""
    return SLICE_KEYS if spec.kind == "slices" else WINDOW_KEYS


def batch_axes(spec: BatchSpec) -> dict[str, int]:
    """The batch axis of each array of a batch of ``spec`` (what a data-parallel
    program shards): slices are time-major, obs/action/reward [H+1|H, B, ...]
    (axis 1) and task [B] (axis 0); windows are batch-major [B, L, ...] (axis 0)."""
    check_spec(spec)
    if spec.kind == "slices":
        return {"obs": 1, "action": 1, "reward": 1, "task": 0}
    return {k: 0 for k in WINDOW_KEYS}


def check_spec(spec: BatchSpec) -> None:
    """Raise ValueError for a spec no sampler draws (unknown kind, crossing slices)."""
    if spec.kind not in ("slices", "windows"):
        raise ValueError(f"unknown batch kind {spec.kind!r}; expected 'slices' or 'windows'")
    if spec.kind == "slices" and spec.cross_episodes:
        raise ValueError("TD-MPC2 slices never cross episode ends (tdmpc2_spec 4.8)")
    if spec.length < 2 or spec.batch < 1:
        raise ValueError(f"batch spec needs length >= 2 and batch >= 1, got {spec}")


def sample(data, key: jax.Array, spec: BatchSpec) -> dict[str, jax.Array]:
    """A batch of ``spec`` from the device-resident dataset (jittable; spec static).

    slices: `sample_slices` with H = length - 1; windows: `sample_windows`.
    Raises ValueError for a spec `check_spec` refuses.
    """
    check_spec(spec)
    if spec.kind == "slices":
        return sample_slices(data, key, spec.batch, spec.length - 1)
    return sample_windows(data, key, spec.batch, spec.length, spec.cross_episodes)


def sample_slices(data, key: jax.Array, batch: int, H: int) -> dict[str, jax.Array]:
    """B TD-MPC2 slices of H+1 rows, uniform over episodes then over starts.

    Source: tdmpc2_spec 4.8 (ep = randint(n_eps), s = randint(0, T+1-(H+1)+1),
    slices never cross episodes) and 4.19 (uniform over all pooled episodes, so
    task frequency follows the per-task episode counts). `batch` and `H` are
    static. Returns obs f32[H+1, B, O] (rows s..s+H), action f32[H, B, A]
    (rows s..s+H-1), reward f32[H, B] (rows s+1..s+H), task i32[B].
    """
    n, rows = data["obs"].shape[0], data["obs"].shape[1]
    if H + 1 > rows:
        raise ValueError(f"slice length H+1={H + 1} exceeds the episode length {rows} rows")
    k_ep, k_s = jax.random.split(key)
    ep = jax.random.randint(k_ep, (batch,), 0, n)
    start = jax.random.randint(k_s, (batch,), 0, rows - (H + 1) + 1)
    idx = start[None, :] + jnp.arange(H + 1)[:, None]            # [H+1, B]
    obs = data["obs"][ep[None, :], idx]                           # [H+1, B, O]
    action = data["action"][ep[None, :], idx[:-1]]                # [H, B, A]
    reward = data["reward"][ep[None, :], idx[1:]]                 # [H, B]
    return {"obs": obs, "action": action, "reward": reward,
            "task": data["task"][ep].astype(jnp.int32)}


def sample_windows(data, key: jax.Array, batch: int, length: int = 65,
                   cross_episodes: bool = True) -> dict[str, jax.Array]:
    """B DreamerV3 windows of `length` (65 = 64 + 1 replay context) rows.

    Source: dreamerv3_spec 5.1-5.3. With `cross_episodes` (the reference's
    behaviour, 5.2) the dataset is one stream of its episodes in stored order and
    a window starts uniformly at any of the N*(T+1)-length+1 positions, crossing
    episode boundaries; otherwise the start is uniform within one episode
    (deviation: see report, id DS-W1). Annotation as in 5.3: is_first[:, 0] =
    True; is_last |= roll(is_first, -1) with the last column False.
    Returns batch-major arrays: obs f32[B, L, O], action f32[B, L, A],
    reward/f32, is_first/is_last/is_terminal bool[B, L], task i32[B, L].
    """
    n, rows = data["obs"].shape[0], data["obs"].shape[1]
    if cross_episodes:
        total = n * rows
        if length > total:
            raise ValueError(f"window length {length} exceeds the dataset's {total} rows")
        g = jax.random.randint(key, (batch,), 0, total - length + 1)
        flat = g[:, None] + jnp.arange(length)[None, :]
        ep, row = flat // rows, flat % rows
    else:
        if length > rows:
            raise ValueError(f"window length {length} exceeds the episode length {rows} rows")
        k_ep, k_s = jax.random.split(key)
        e = jax.random.randint(k_ep, (batch,), 0, n)
        s = jax.random.randint(k_s, (batch,), 0, rows - length + 1)
        ep = jnp.broadcast_to(e[:, None], (batch, length))
        row = s[:, None] + jnp.arange(length)[None, :]
    out = {k: data[k][ep, row] for k in
           ("obs", "action", "reward", "is_first", "is_last", "is_terminal")}
    out["task"] = data["task"][ep].astype(jnp.int32)
    return annotate_windows(out)


def annotate_windows(win: dict) -> dict:
    """dreamerv3_spec 5.3 annotation of [B, L] windows (works on numpy or jax arrays):
    is_first[:, 0] = True; is_last = is_last | next-step is_first (last column False)."""
    xp = jnp if isinstance(win["is_first"], jax.Array) else __import__("numpy")
    first = win["is_first"]
    nxt = xp.concatenate([first[:, 1:], xp.zeros_like(first[:, :1])], axis=1)
    first = xp.concatenate([xp.ones_like(first[:, :1]), first[:, 1:]], axis=1)
    return {**win, "is_first": first, "is_last": win["is_last"] | nxt}
