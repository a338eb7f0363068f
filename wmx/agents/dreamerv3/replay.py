"""DreamerV3's on-device stream replay with the replay context and latent write-back.

Storage: one ring of C rows per env, ``[n_envs, C, ...]``, written in lockstep
(one obs-aligned row per env per tick, reference_design §5.2): obs, the raw
(unclipped) action chosen at that obs (the collector zeroes it on is_last
rows), the reward received on entering it, is_first / is_last / is_terminal,
and the posterior latents the policy produced there (``deter`` f32[D];
``stoch`` [S, C] kept as a bool one-hot of its argmax and read back as f32:
lossless, the stored latent is a one-hot sample, spec 5.7).

Absolute row a of an env (0 = its first row) lives in slot a mod C. After
``rows`` adds the ring holds rows max(0, rows − C) .. rows − 1.

Items (spec 5.1-5.2): every window of L = batch_length + replay_context = 65
consecutive rows of one env's stream, stride 1, crossing episode ends; row a
becomes the start of an item once rows a .. a + L − 1 are written. The items
are the windows inside the held rows (capacity in rows per env, deviation D27:
the reference counts 5e6 items FIFO over all envs; the same items whenever
the ring holds the run). Item j (0 <= j < n_items, in insertion order) is env
j mod n_envs, start oldest + j div n_envs.

Online queue (spec 5.4): each env pushes the item completed by its row n
whenever n > 0 and n % L == 0, i.e. starts 1, 1 + L, 1 + 2L, ...; pushes of
one tick go in env order. Queue item q is env q mod n_envs, start
1 + L·(q div n_envs); ``popped`` counts the items consumed. Sampling pops up to
B pending items first (oldest first, in the batch's first rows); items whose
rows were overwritten are skipped, as the reference retries evicted items
(spec 5.6). The rest of the batch is uniform over all current items, with
replacement (spec 5.3).

Batch (spec 5.3): [B, L, ...] with is_first[:, 0] = True and
is_last |= next is_first (last column excluded). ``replay_context`` splits it
into the carry of the stored latents at row 0, the 29eb964 previous actions
(action[:, 0:L−1]) and the trained rows 1..L−1 (spec 5.8, Algorithm J).

Write-back (spec 5.9): after the update, the training pass's posteriors of
rows 1..L−1 of every window are written back at their rows; row i of the
batch is written after rows 0..i−1 (the reference's sequential loop), so
where windows overlap the later batch row wins. Never the context row of the
window itself.

Everything is a pure function over fixed-shape arrays: jittable and
vmappable over seeds, with the two counters batched or, with ``SEED_AXES``,
shared (they are identical across seeds). Synchronous: the write-back follows its update before the next sample
(deviation D1).

Source: dreamerv3_spec 5.1-5.9; reference_design §5.2, §6.3; deviations D1
(synchronous write-back), D2 (sampler seeded from the run key), D3 (a tick's
samples follow all of its adds), D27 (capacity in rows per env), W-D4 (the
uniform draw).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp


class Rows(NamedTuple):
    """Obs-aligned rows; leading dims ``[n_envs]`` (add) or ``[B, L]`` (batch).

    obs f32[..., O]; action f32[..., A] (raw sample, 0 on is_last rows);
    reward f32[...]; is_first, is_last, is_terminal bool[...]; deter f32[..., D];
    stoch f32[..., S, C] one-hot (exactly one 1 per latent).
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    is_first: jax.Array
    is_last: jax.Array
    is_terminal: jax.Array
    deter: jax.Array
    stoch: jax.Array


class Replay(NamedTuple):
    """Per-env rings ``[n_envs, C, ...]`` plus two counters (int32 scalars).

    Fields as in ``Rows`` except ``stoch`` bool[n, C, S, classes];
    ``rows``: rows added per env so far; ``popped``: online-queue items
    consumed so far (including skipped overwritten ones).
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    is_first: jax.Array
    is_last: jax.Array
    is_terminal: jax.Array
    deter: jax.Array
    stoch: jax.Array
    rows: jax.Array
    popped: jax.Array


# vmap axes of a Replay over seeds with its two counters unbatched (they are
# equal across seeds: lockstep rows, the same schedule), so the write slot,
# item counts and queue bounds stay unbatched scalars. Use as in_axes/out_axes.
SEED_AXES = Replay(*([0] * len(Rows._fields)), rows=None, popped=None)


class Positions(NamedTuple):
    """Where a batch came from: env i32[B], start i32[B] (absolute row of the
    context row), online bool[B] (popped from the queue)."""

    env: jax.Array
    start: jax.Array
    online: jax.Array


class TrainSequence(NamedTuple):
    """A batch split by the replay context (spec 5.8, Algorithm J), T = L − 1.

    deter0 f32[B, D], stoch0 f32[B, S, C]: the stored latents of row 0 (the
    carry; constants, no gradient). prevact f32[B, T, A]: action[:, 0:T], the
    previous action of each trained obs (29eb964). obs f32[B, T, O], action
    f32[B, T, A], reward f32[B, T], is_first / is_last / is_terminal
    bool[B, T]: rows 1..T (annotated). task i32[B, T]: the rows' task ids in a
    multi-task batch (deviation W-D8), None otherwise.
    """

    deter0: jax.Array
    stoch0: jax.Array
    prevact: jax.Array
    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    is_first: jax.Array
    is_last: jax.Array
    is_terminal: jax.Array
    task: jax.Array | None = None


# ---------------------------------------------------------------------------
# sizes


def ring_rows(replay_capacity: int, n_envs: int, run_rows_per_env: int,
              batch_size: int, window: int) -> int:
    """Rows per env ring (deviation D27).

    C = min(ceil(replay_capacity / n_envs), run_rows_per_env), never below the
    window − 1 + ceil(batch_size / n_envs) rows that hold the first batch's
    items. When the run has more rows than C, every env drops its oldest row
    together and holds C − (window − 1) items, window − 1 fewer than rows.

    Args:
        replay_capacity: the reference's capacity in items (5e6).
        n_envs: lockstep envs; run_rows_per_env: rows each env adds in the
            whole run (a resumed run: its total, so far plus this call).
        batch_size: B; window: L = batch_length + replay_context.

    Returns:
        int C.

    Raises:
        ValueError: on non-positive sizes.

    Source: reference_design §5.6, §6.3; deviation D27.
    """
    if min(replay_capacity, n_envs, run_rows_per_env, batch_size, window) < 1:
        raise ValueError(
            "replay_capacity, n_envs, run_rows_per_env, batch_size and window must "
            f"be >= 1, got {replay_capacity}, {n_envs}, {run_rows_per_env}, "
            f"{batch_size}, {window}")
    cap = min(-(-replay_capacity // n_envs), run_rows_per_env)
    return max(cap, window - 1 + -(-batch_size // n_envs))


def _one_hot(stoch: jax.Array) -> jax.Array:
    """bool one-hot of the argmax class (exact for a sampled or straight-through value)."""
    return jax.nn.one_hot(jnp.argmax(stoch, -1), stoch.shape[-1], dtype=bool)


def init_replay(n_envs: int, capacity: int, obs_dim: int, action_dim: int,
                deter: int, stoch: int, classes: int) -> Replay:
    """Zero rings of ``capacity`` rows per env (see ``ring_rows``).

    Args:
        n_envs, capacity: ring shape [n_envs, C].
        obs_dim, action_dim: O and A of a row; deter: D; stoch, classes: S, C
            of the categorical latent.

    Returns:
        Replay with rows = popped = 0. Memory per seed:
        n_envs · C · (4·(O + A + 1 + D) + 3 + S·classes) bytes, about 2.2 GB
        for the 12M model (D = 2048, 32 × 16 classes) at 16 × 15,625 rows.

    Source: dreamerv3_spec 5.1, 5.7; reference_design §6.3.
    """
    nc = (n_envs, capacity)
    zeros = lambda *s: jnp.zeros(nc + s, jnp.float32)  # noqa: E731
    false = jnp.zeros(nc, bool)
    return Replay(
        obs=zeros(obs_dim), action=zeros(action_dim), reward=zeros(),
        is_first=false, is_last=false, is_terminal=false,
        deter=zeros(deter), stoch=jnp.zeros(nc + (stoch, classes), bool),
        rows=jnp.zeros((), jnp.int32), popped=jnp.zeros((), jnp.int32))


def _capacity(replay: Replay) -> int:
    return replay.reward.shape[1]


def _n_envs(replay: Replay) -> int:
    return replay.reward.shape[0]


def grow(replay: Replay, capacity: int) -> Replay:
    """Zero-pad every ring to ``capacity`` rows (a resumed run's larger ring).

    Exact only while nothing has been overwritten (rows <= the old capacity):
    row a then sits at slot a in both rings. Host-side helper.

    Raises:
        ValueError: capacity smaller than the current one, or rows already
            wrapped around the old ring.
    """
    old = _capacity(replay)
    if capacity < old or int(replay.rows) > old:
        raise ValueError(f"cannot grow a ring of {old} rows holding {int(replay.rows)} "
                         f"rows to {capacity}")

    def pad(x):
        return jnp.pad(x, [(0, 0), (0, capacity - old)] + [(0, 0)] * (x.ndim - 2))

    return replay._replace(**{f: pad(getattr(replay, f)) for f in Rows._fields})


# ---------------------------------------------------------------------------
# adding


def add(replay: Replay, rows: Rows) -> Replay:
    """Append one row per env at absolute row ``replay.rows``.

    Args:
        replay: the state.
        rows: Rows with fields [n_envs, ...] (stoch f32[n, S, C] one-hot; the
            action the raw sample, zeroed by the collector on is_last rows).

    Returns:
        The state with the row in slot rows mod C (the oldest row of every
        env overwritten once the rings are full, D27) and rows + 1.

    Source: dreamerv3_spec 5.1, 5.7.
    """
    slot = replay.rows % _capacity(replay)
    rows = rows._replace(stoch=_one_hot(rows.stoch))
    new = {f: jax.lax.dynamic_update_index_in_dim(getattr(replay, f), getattr(rows, f), slot, 1)
           for f in Rows._fields}
    return replay._replace(**new, rows=replay.rows + 1)


# ---------------------------------------------------------------------------
# items and the online queue


def oldest_row(replay: Replay) -> jax.Array:
    """i32[] absolute index of the oldest row still held."""
    return jnp.maximum(replay.rows - _capacity(replay), 0)


def num_items(replay: Replay, window: int) -> jax.Array:
    """i32[] current items over all envs: n_envs · max(0, held rows − window + 1).

    Source: dreamerv3_spec 5.1; deviation D27.
    """
    held = jnp.minimum(replay.rows, _capacity(replay))
    return _n_envs(replay) * jnp.maximum(held - window + 1, 0)


def queue_bounds(replay: Replay, window: int) -> tuple[jax.Array, jax.Array]:
    """(first, end) i32[]: pending online items are q in [first, end).

    end = n_envs · floor((rows − 1) / L) items pushed so far; first skips the
    consumed ones and those whose start row was overwritten.

    Source: dreamerv3_spec 5.4, 5.6.
    """
    n = _n_envs(replay)
    end = n * (jnp.maximum(replay.rows - 1, 0) // window)
    old = oldest_row(replay)
    first_valid = n * ((jnp.maximum(old - 1, 0) + window - 1) // window)
    first = jnp.minimum(jnp.maximum(replay.popped, first_valid), end)
    return first, end


def draw_sample_indices(key: jax.Array, batch_size: int, n_items) -> jax.Array:
    """i32[B] uniform item indices in [0, n_items), independent (with replacement).

    The sampler's only random draw, the seam where a test injects indices.
    jax.random.randint reduces a 64-bit draw modulo n_items: uniform up to
    n_items / 2^64 (deviation W-D4; the reference uses numpy's exact
    integers(0, len(items)) seeded with 0, D2).

    Args:
        key: PRNG key; batch_size: B (static); n_items: i32[] current items.

    Returns:
        i32[B].

    Source: dreamerv3_spec 5.3; deviations D2, W-D4.
    """
    return jax.random.randint(key, (batch_size,), 0, jnp.maximum(n_items, 1), jnp.int32)


def select(replay: Replay, draws: jax.Array, window: int) -> tuple[Replay, Positions]:
    """Positions of a batch: pending queue items first, then ``draws``.

    Args:
        replay: the replay state (items must exist: num_items >= 1).
        draws: i32[B] item indices from ``draw_sample_indices``; row b uses
            draws[b] unless it takes a queue item.
        window: L.

    Returns:
        (replay with ``popped`` advanced past the popped items, Positions).

    Source: dreamerv3_spec 5.3-5.4.
    """
    n = _n_envs(replay)
    batch = draws.shape[0]
    first, end = queue_bounds(replay, window)
    k = jnp.minimum(end - first, batch)
    b = jnp.arange(batch, dtype=jnp.int32)
    online = b < k
    q = first + b
    j = draws.astype(jnp.int32)
    env = jnp.where(online, q % n, j % n)
    start = jnp.where(online, 1 + window * (q // n), oldest_row(replay) + j // n)
    return replay._replace(popped=first + k), Positions(env, start, online)


# ---------------------------------------------------------------------------
# reading


def annotate(is_first: jax.Array, is_last: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Batch annotation of spec 5.3 on bool[B, L] flags.

    is_first[:, 0] = True; is_last |= roll(is_first, −1) with its last column
    False (the row before any mid-window is_first ends an episode).

    Source: dreamerv3_spec 5.3.
    """
    is_first = is_first.at[:, 0].set(True)
    nxt = jnp.concatenate([is_first[:, 1:], jnp.zeros_like(is_first[:, :1])], 1)
    return is_first, is_last | nxt


def gather(replay: Replay, positions: Positions, window: int) -> Rows:
    """Read windows.

    Args:
        replay: the state; positions: B windows (env, start).
        window: L.

    Returns:
        Rows with fields [B, L, ...], annotated (``annotate``), stoch as f32
        one-hot [B, L, S, C]; rows are read at slots (start + k) mod C.

    Source: dreamerv3_spec 5.3.
    """
    slots = (positions.start[:, None] + jnp.arange(window)) % _capacity(replay)
    env = positions.env[:, None]
    out = {f: getattr(replay, f)[env, slots] for f in Rows._fields}
    out["is_first"], out["is_last"] = annotate(out["is_first"], out["is_last"])
    out["stoch"] = out["stoch"].astype(jnp.float32)
    return Rows(**out)


def sample(replay: Replay, key: jax.Array, batch_size: int,
           window: int) -> tuple[Replay, Rows, Positions]:
    """Draw a training batch: queue pops first, then uniform with replacement.

    Args:
        replay: the state (at least one item: the schedule's gate guarantees B).
        key: the sampler's key (e.g. the run key folded with the update count).
        batch_size: B; window: L (static).

    Returns:
        (replay with the queue advanced, batch Rows [B, L, ...], Positions).

    Source: dreamerv3_spec 5.3-5.4; deviations D2, W-D4.
    """
    draws = draw_sample_indices(key, batch_size, num_items(replay, window))
    replay, positions = select(replay, draws, window)
    return replay, gather(replay, positions, window), positions


def replay_context(batch: Rows) -> TrainSequence:
    """Split a batch into the replay-context carry and the trained rows.

    Args:
        batch: Rows [B, L, ...] from ``sample`` / ``gather``.

    Returns:
        TrainSequence: carry (deter0, stoch0) = the stored latents of row 0,
        prevact = action[:, 0:L−1] (the 29eb964 fix: the first trained obs
        consumes the context row's action), rows 1..L−1 of everything else.

    Source: dreamerv3_spec 5.8, Algorithm J.
    """
    return TrainSequence(
        deter0=batch.deter[:, 0], stoch0=batch.stoch[:, 0], prevact=batch.action[:, :-1],
        obs=batch.obs[:, 1:], action=batch.action[:, 1:], reward=batch.reward[:, 1:],
        is_first=batch.is_first[:, 1:], is_last=batch.is_last[:, 1:],
        is_terminal=batch.is_terminal[:, 1:])


# ---------------------------------------------------------------------------
# latent write-back


def write_back(replay: Replay, positions: Positions, deter: jax.Array,
               stoch: jax.Array) -> Replay:
    """Write the training posteriors of rows 1..L−1 of every window back.

    Args:
        replay: the state the batch was sampled from (no add in between).
        positions: from ``select`` / ``sample``.
        deter: f32[B, L−1, D]; stoch: f32[B, L−1, S, C] (one-hot, or any array
            whose argmax is the class).

    Returns:
        The replay with those rows' latents replaced. Where windows overlap,
        batch row i is overwritten by every later row j > i covering the same
        row (the reference's sequential loop); a row no longer held is skipped.
        The result is one scatter with unique indices (deterministic).

    Source: dreamerv3_spec 5.9; reference_design §6.3; deviation D1.
    """
    batch, t = deter.shape[:2]
    cap = _capacity(replay)
    env, start = positions.env, positions.start
    a = start[:, None] + 1 + jnp.arange(t)                          # [B, T] absolute rows
    later = jnp.arange(batch)[None, :] > jnp.arange(batch)[:, None]  # [i, j]: j > i
    same = (env[:, None] == env[None, :]) & later                   # [i, j]
    covered = ((a[:, :, None] >= start[None, None, :] + 1)
               & (a[:, :, None] <= start[None, None, :] + t)
               & same[:, None, :]).any(-1)                          # [B, T]
    win = ~covered & (a >= oldest_row(replay))
    slot = jnp.where(win, a % cap, cap)                             # cap: dropped
    e = jnp.broadcast_to(env[:, None], slot.shape)
    return replay._replace(
        deter=replay.deter.at[e, slot].set(deter, mode="drop"),
        stoch=replay.stoch.at[e, slot].set(_one_hot(stoch), mode="drop"))
