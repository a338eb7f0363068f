"""The stream replay against a NumPy model of the reference replay (spec 5.1-5.9).

The model keeps, per env, the whole stream of rows as Python lists and the
reference's bookkeeping (29eb964 embodied/replay/replay.py, as the spec
describes it): an item inserted when a worker's stream holds `length` rows,
FIFO eviction at a capacity in items, an online queue pushed when the
worker's previous-add count is a multiple of `length` and popped (skipping
evicted items) before uniform draws into the FIFO-ordered items, batch
annotation, and a sequential latent write-back. wmx's ring of C rows per env
is compared with the model at the item capacity n_envs·(C − L + 1) (D27).
"""
from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3 import replay as R

N_ENVS, L, O, A, D, S, K = 3, 5, 2, 2, 3, 2, 3
FIELDS = R.Rows._fields

B = 4
_select = jax.jit(R.select, static_argnums=(2,))
_gather = jax.jit(R.gather, static_argnums=(2,))
_write_back = jax.jit(R.write_back)


@jax.jit
def _add(rep, rows):
    """add, then (num_items, oldest_row) of the new state."""
    rep = R.add(rep, rows)
    return rep, R.num_items(rep, L), R.oldest_row(rep)


@jax.jit
def _sample(rep, key):
    """R.sample, and the same batch through its parts (draws exposed for the model)."""
    draws = R.draw_sample_indices(key, B, R.num_items(rep, L))
    rep2, pos = R.select(rep, draws, L)
    return R.sample(rep, key, B, L), (rep2, R.gather(rep2, pos, L), pos), draws
_draw = jax.jit(R.draw_sample_indices, static_argnums=(1,))
# two ring sizes for every test, so each function compiles twice per module
SMALL, BIG = 12, 40


class ModelReplay:
    """NumPy model of the reference replay for lockstep envs."""

    def __init__(self, n_envs, length, capacity_items):
        self.length, self.capacity = length, capacity_items
        self.streams = [[] for _ in range(n_envs)]
        self.lengths = [0] * n_envs
        self.items = deque()
        self.queue = deque()

    def add(self, worker, row):
        self.streams[worker].append({k: np.array(v) for k, v in row.items()})
        if len(self.streams[worker]) >= self.length:
            start = len(self.streams[worker]) - self.length
            while len(self.items) >= self.capacity:
                self.items.popleft()
            self.items.append((worker, start))
            if self.lengths[worker] % self.length == 0:
                self.queue.append((worker, start))
        self.lengths[worker] += 1

    def sample(self, draws):
        out = []
        for b in range(len(draws)):
            while True:
                if self.queue:
                    item = self.queue.popleft()
                    if item not in self.items:      # evicted: the reference retries
                        continue
                    out.append((*item, True))
                else:
                    out.append((*self.items[int(draws[b])], False))
                break
        return out

    def batch(self, positions):
        data = {k: np.stack([np.stack([self.streams[w][s + t][k] for t in range(self.length)])
                             for w, s, _ in positions]) for k in FIELDS}
        is_first = data["is_first"].copy()
        is_first[:, 0] = True
        nxt = np.roll(is_first, -1, axis=1)
        nxt[:, -1] = False
        data["is_first"], data["is_last"] = is_first, data["is_last"] | nxt
        return data

    def update(self, positions, deter, stoch):
        for i, (w, s, _) in enumerate(positions):      # later rows overwrite earlier ones
            for t in range(deter.shape[1]):
                self.streams[w][s + 1 + t]["deter"] = deter[i, t]
                self.streams[w][s + 1 + t]["stoch"] = stoch[i, t]


def _one_hot(rng, shape):
    return np.eye(K, dtype=np.float32)[rng.integers(0, K, shape)]


def _episodes(rng, n_rows):
    """Flags of one env's stream: episodes of random lengths, some terminating."""
    is_first, is_last, is_term = (np.zeros(n_rows, bool) for _ in range(3))
    r = 0
    while r < n_rows:
        n = int(rng.integers(2, 9))
        is_first[r] = True
        end = min(r + n - 1, n_rows - 1)
        if r + n - 1 < n_rows:
            is_last[end] = True
            is_term[end] = rng.random() < 0.5
        r += n
    return is_first, is_last, is_term


def _stream_rows(rng, ticks):
    flags = [_episodes(rng, ticks) for _ in range(N_ENVS)]
    for i in range(ticks):
        is_first = np.array([f[0][i] for f in flags])
        is_last = np.array([f[1][i] for f in flags])
        is_term = np.array([f[2][i] for f in flags])
        action = rng.normal(size=(N_ENVS, A)).astype(np.float32) * 2   # unclipped
        yield R.Rows(
            obs=rng.normal(size=(N_ENVS, O)).astype(np.float32),
            action=np.where(is_last[:, None], 0, action).astype(np.float32),
            reward=np.where(is_first, 0, rng.normal(size=N_ENVS)).astype(np.float32),
            is_first=is_first, is_last=is_last, is_terminal=is_term,
            deter=rng.normal(size=(N_ENVS, D)).astype(np.float32),
            stoch=_one_hot(rng, (N_ENVS, S)))


def _check_batch(batch, want):
    for k in FIELDS:
        np.testing.assert_array_equal(getattr(batch, k), want[k], err_msg=k)


@pytest.mark.parametrize("capacity", [SMALL, BIG])
def test_replay_matches_reference_model(capacity):
    """Windows across episode ends, queue order, uniform items, eviction, write-back."""
    rng = np.random.default_rng(capacity)
    ticks = 90
    rep = R.init_replay(N_ENVS, capacity, O, A, D, S, K)
    model = ModelReplay(N_ENVS, L, N_ENVS * (capacity - L + 1))
    keys = jax.random.split(jax.random.key(0), ticks)
    n_online = n_crossing = 0
    for tick, rows in enumerate(_stream_rows(rng, ticks)):
        rep, n_items, _ = _add(rep, rows)
        for w in range(N_ENVS):
            model.add(w, {k: getattr(rows, k)[w] for k in FIELDS})
        assert int(n_items) == len(model.items)
        # dense sampling first (queue drains), then sparse (backlog, evicted queue items)
        if not model.items or (tick > 45 and tick % 12):
            continue
        whole, (rep, batch, pos), draws = _sample(rep, keys[tick])
        jax.tree.map(np.testing.assert_array_equal, whole, (rep, batch, pos))
        want = model.sample(np.asarray(draws))
        got = list(zip(np.asarray(pos.env).tolist(), np.asarray(pos.start).tolist(),
                       np.asarray(pos.online).tolist()))
        assert got == want, tick
        _check_batch(batch, model.batch(want))
        n_online += int(np.sum(pos.online))
        n_crossing += int(np.sum(np.asarray(batch.is_first)[:, 1:]))
        deter = rng.normal(size=(B, L - 1, D)).astype(np.float32)
        stoch = _one_hot(rng, (B, L - 1, S))
        rep = _write_back(rep, pos, deter, stoch)
        model.update(want, deter, stoch)
    assert n_online > 10 and n_crossing > 10
    if capacity == SMALL:   # the sparse phase left queue items behind to be evicted
        assert int(rep.popped) > n_online


def test_online_queue_order_and_uniform_rest():
    rep = R.init_replay(N_ENVS, BIG, O, A, D, S, K)
    rng = np.random.default_rng(1)
    for rows in _stream_rows(rng, 3 * L + 1):   # rows 0..15: pushes at n = 5, 10, 15
        rep, _, _ = _add(rep, rows)
    first, end = R.queue_bounds(rep, L)
    assert (int(first), int(end)) == (0, 3 * N_ENVS)
    draws = jnp.arange(8, dtype=jnp.int32)
    rep, pos = _select(rep, draws, L)
    np.testing.assert_array_equal(pos.online, [True] * 8)
    np.testing.assert_array_equal(pos.env, [0, 1, 2, 0, 1, 2, 0, 1])
    np.testing.assert_array_equal(pos.start, [1, 1, 1, 6, 6, 6, 11, 11])
    rep, pos = _select(rep, draws, L)          # one item left, then draws 1..7
    np.testing.assert_array_equal(pos.online, [True] + [False] * 7)
    np.testing.assert_array_equal(pos.env[1:], np.arange(1, 8) % N_ENVS)
    np.testing.assert_array_equal(pos.start[1:], np.arange(1, 8) // N_ENVS)
    assert int(rep.popped) == 9
    rep, pos = _select(rep, draws, L)          # queue empty: all uniform
    assert not np.any(pos.online) and int(rep.popped) == 9


def test_annotation():
    is_first = jnp.array([[False, False, True, False], [True, False, False, True]])
    is_last = jnp.array([[False, False, False, True], [False, True, False, False]])
    f, last = R.annotate(is_first, is_last)
    np.testing.assert_array_equal(f, [[True, False, True, False], [True, False, False, True]])
    np.testing.assert_array_equal(last, [[False, True, False, True], [False, True, True, False]])


@pytest.mark.parametrize("capacity", [SMALL, BIG])
def test_write_back_with_forced_overlaps_matches_sequential_loop(capacity):
    rng = np.random.default_rng(capacity)
    rep = R.init_replay(N_ENVS, capacity, O, A, D, S, K)
    for rows in _stream_rows(rng, 2 * capacity + 8):   # wrapped; SMALL: windows cross slot 0
        rep, _, _ = _add(rep, rows)
    old = int(R.oldest_row(rep))
    env = np.array([0, 0, 1, 0, 0, 2, 1, 0])
    start = old + np.array([0, 2, 1, 0, 3, 4, 1, 1])   # duplicates and partial overlaps
    pos = R.Positions(jnp.asarray(env, jnp.int32), jnp.asarray(start, jnp.int32),
                      jnp.zeros(8, bool))
    deter = rng.normal(size=(8, L - 1, D)).astype(np.float32)
    stoch = _one_hot(rng, (8, L - 1, S))
    want_d, want_s = np.array(rep.deter), np.array(rep.stoch)
    for i in range(8):
        for t in range(L - 1):
            slot = (start[i] + 1 + t) % capacity
            want_d[env[i], slot], want_s[env[i], slot] = deter[i, t], stoch[i, t] > 0
    out = _write_back(rep, pos, deter, stoch)
    np.testing.assert_array_equal(out.deter, want_d)
    np.testing.assert_array_equal(out.stoch, want_s)
    # the context rows themselves are untouched unless a later window covers them
    assert np.array_equal(out.deter[2, start[5] % capacity], rep.deter[2, start[5] % capacity])
    batch = _gather(out, pos, L)
    np.testing.assert_array_equal(batch.deter[7, 1:], deter[7])   # the last row wins


def test_capacity_and_wrap_around():
    assert R.ring_rows(10, N_ENVS, 1000, 4, L) == L - 1 + 2   # never below the first batch
    cap = R.ring_rows(3 * SMALL - 2, N_ENVS, 1000, 4, L)
    assert cap == SMALL
    assert R.ring_rows(3 * SMALL - 2, N_ENVS, SMALL - 3, 4, L) == SMALL - 3   # the run's rows
    assert R.ring_rows(5_000_000, 16, 15_626, 16, 65) == 15_626   # DMC: the whole run
    assert R.ring_rows(100, 4, 1000, 16, 65) == 64 + 4
    assert R.ring_rows(1000, 4, 1000, 16, 65) == 250
    with pytest.raises(ValueError):
        R.ring_rows(0, 4, 10, 16, 65)
    rep = R.init_replay(N_ENVS, cap, O, A, D, S, K)
    rng = np.random.default_rng(3)
    stream = list(_stream_rows(rng, 20))
    for i, rows in enumerate(stream):
        rep, n_items, oldest = _add(rep, rows)
        held = min(i + 1, cap)
        assert int(n_items) == N_ENVS * max(0, held - L + 1)
        assert int(oldest) == max(0, i + 1 - cap)
    # the oldest held window (start 20 - cap) reads rows across the ring's end
    pos = R.Positions(jnp.arange(N_ENVS, dtype=jnp.int32),
                      jnp.full(N_ENVS, 20 - cap, jnp.int32), jnp.zeros(N_ENVS, bool))
    batch = _gather(rep, pos, L)
    np.testing.assert_array_equal(
        batch.obs, np.stack([np.stack([stream[20 - cap + t].obs[w] for t in range(L)])
                             for w in range(N_ENVS)]))


def test_replay_context_follows_algorithm_j():
    rng = np.random.default_rng(4)
    rep = R.init_replay(N_ENVS, BIG, O, A, D, S, K)
    for rows in _stream_rows(rng, 12):
        rep, _, _ = _add(rep, rows)
    (rep, batch, pos), _, _ = _sample(rep, jax.random.key(1))
    seq = R.replay_context(batch)
    np.testing.assert_array_equal(seq.deter0, batch.deter[:, 0])
    np.testing.assert_array_equal(seq.stoch0, batch.stoch[:, 0])
    np.testing.assert_array_equal(seq.prevact, batch.action[:, 0:L - 1])   # 29eb964
    np.testing.assert_array_equal(seq.obs, batch.obs[:, 1:])
    np.testing.assert_array_equal(seq.is_last, batch.is_last[:, 1:])
    assert seq.obs.shape == (B, L - 1, O) and seq.stoch0.shape == (B, S, K)
    assert seq.stoch0.dtype == jnp.float32


def _run(rep, stream, key, deter, stoch):
    """Add a stacked stream [ticks, n_envs, ...], sample once, write back."""
    rep = jax.lax.scan(lambda r, rows: (R.add(r, rows), None), rep, stream)[0]
    rep, batch, pos = R.sample(rep, key, B, L)
    return R.write_back(rep, pos, deter, stoch), batch, pos


def test_vmapped_seeds_match_separate_runs():
    streams = [jax.tree.map(lambda *x: np.stack(x),
                            *_stream_rows(np.random.default_rng(10 + s), 14)) for s in range(2)]
    keys = jax.random.split(jax.random.key(5), 2)
    init = R.init_replay(N_ENVS, SMALL, O, A, D, S, K)
    deter = np.random.default_rng(7).normal(size=(2, B, L - 1, D)).astype(np.float32)
    stoch = _one_hot(np.random.default_rng(8), (2, B, L - 1, S))
    stack = lambda *x: jnp.stack(x)  # noqa: E731
    # counters shared across seeds (SEED_AXES)
    vinit = R.Replay(*(jnp.stack([x, x]) for x in init[:len(R.Rows._fields)]),
                     rows=init.rows, popped=init.popped)
    vrun = jax.jit(jax.vmap(_run, in_axes=(R.SEED_AXES, 0, 0, 0, 0),
                            out_axes=(R.SEED_AXES, 0, 0)))
    vout = vrun(vinit, jax.tree.map(stack, *streams), keys, deter, stoch)
    assert vout[0].rows.shape == ()
    for s in range(2):                   # the module's compiled single-seed functions
        rep = init
        for t in range(14):
            rep = _add(rep, jax.tree.map(lambda x: x[t], streams[s]))[0]
        (rep, batch, pos), _, _ = _sample(rep, keys[s])
        out = (_write_back(rep, pos, deter[s], stoch[s]), batch, pos)
        got = (vout[0]._replace(**{f: getattr(vout[0], f)[s] for f in R.Rows._fields}),
               *jax.tree.map(lambda x: x[s], vout[1:]))
        jax.tree.map(np.testing.assert_array_equal, got, out)
    assert not np.array_equal(vout[1].obs[0], vout[1].obs[1])


def test_grow_pads_an_unwrapped_ring_exactly():
    rng = np.random.default_rng(6)
    stream = list(_stream_rows(rng, 16))
    small, big = (R.init_replay(N_ENVS, c, O, A, D, S, K) for c in (SMALL, BIG))
    for rows in stream[:SMALL]:
        small, big = _add(small, rows)[0], _add(big, rows)[0]
    grown = R.grow(small, BIG)
    for rows in stream[SMALL:]:
        grown, big = _add(grown, rows)[0], _add(big, rows)[0]
    jax.tree.map(np.testing.assert_array_equal, grown, big)
    with pytest.raises(ValueError):
        R.grow(_add(small, stream[SMALL])[0], BIG)
