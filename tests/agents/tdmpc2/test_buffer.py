"""Episode ring buffer: alignment, committed-only sampling, uniformity, wrap-around."""
import jax
import jax.numpy as jnp
import numpy as np

from wmx.agents.tdmpc2 import buffer as B

T, H, O, A = 6, 3, 2, 1


def fill(buf, n_envs, rounds_written):
    """Write rounds with obs = (round, row), action = row, reward = row."""
    for e in range(rounds_written):
        for k in range(T + 1):
            obs = jnp.stack([jnp.full((n_envs,), e, jnp.float32),
                             jnp.full((n_envs,), k, jnp.float32) + 100 * jnp.arange(n_envs)], -1)
            act = jnp.full((n_envs, A), k if k < T else 0, jnp.float32)
            rew = jnp.full((n_envs,), 0 if k == 0 else k, jnp.float32)
            buf = B.write_rows(buf, jnp.int32(e), jnp.int32(k), obs, act, rew)
    return buf


def test_num_rounds_adds_staging_round():
    assert B.num_rounds(1_000_000, 1_000_000, 500, 1) == 2001
    assert B.num_rounds(1_000_000, 20_000, 500, 2) == 21
    assert B.num_rounds(100, 1000, 10, 1) == 11


def test_slices_are_aligned_and_within_committed_episodes():
    n_envs = 2
    buf = B.init_buffer(4, n_envs, T, O, A)
    buf = fill(buf, n_envs, 3)            # rounds 0, 1 committed; round 2 in progress
    batch = B.sample(buf, jax.random.key(0), 512, H, n_envs, jnp.int32(2))
    obs, act, rew = map(np.asarray, batch)
    assert obs.shape == (H + 1, 512, O) and act.shape == (H, 512, A) and rew.shape == (H, 512)
    assert set(np.unique(obs[..., 0])) <= {0.0, 1.0}          # never the in-progress round
    rows = obs[..., 1] % 100
    assert np.all(np.diff(rows, axis=0) == 1)                  # consecutive rows, one episode
    assert np.all(np.diff(obs[..., 0], axis=0) == 0)
    np.testing.assert_array_equal(act[..., 0], rows[:-1])      # action chosen at obs_t
    np.testing.assert_array_equal(rew, rows[1:])               # reward on entering obs_{t+1}
    assert rows.min() == 0 and rows.max() == T


def test_uniform_over_committed_episodes_and_starts():
    n_envs = 1
    buf = fill(B.init_buffer(5, n_envs, T, O, A), n_envs, 4)
    batch = B.sample(buf, jax.random.key(1), 60_000, H, n_envs, jnp.int32(4))
    ep = np.asarray(batch.obs[0, :, 0]).astype(int)
    start = np.asarray(batch.obs[0, :, 1]).astype(int)
    ep_counts = np.bincount(ep, minlength=4)
    start_counts = np.bincount(start, minlength=T - H + 1)
    for counts in (ep_counts, start_counts):
        expected = counts.sum() / len(counts)
        chi2 = ((counts - expected) ** 2 / expected).sum()
        assert chi2 < 25, counts                     # df <= 3: p ~ 1e-5 at 25


def test_wrap_around_excludes_staging_round():
    n_envs = 1
    buf = fill(B.init_buffer(3, n_envs, T, O, A), n_envs, 6)   # rounds 3,4 stored, 5 writing
    batch = B.sample(buf, jax.random.key(2), 4096, H, n_envs, jnp.int32(5))
    assert set(np.unique(np.asarray(batch.obs[..., 0]))) == {3.0, 4.0}
