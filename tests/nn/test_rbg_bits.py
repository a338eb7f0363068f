"""`wmx.nn.rbg_bits` gives the same bits and masks as jax.random on "rbg" keys."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.nn.rbg_bits import rbg_bernoulli, rbg_bits


def _keys():
    ks = [jax.random.bits(jax.random.key(i), (4,), jnp.uint32) for i in range(6)]
    # counters that carry out of word 0 (and words 0-1) within the array
    ks.append(ks[0].at[2].set(np.uint32(0xFFFFFFFF - 100)))
    ks.append(ks[1].at[2].set(np.uint32(0xFFFFFFFF - 100)).at[3].set(np.uint32(0xFFFFFFFF)))
    ks.append(jnp.full((4,), 0xFFFFFFFF, jnp.uint32))
    return ks


@pytest.mark.parametrize("shape", [(512, 512), (3, 7, 384), (5,), (1,), (2, 3)])
def test_bits_match_jax_random(shape):
    f = jax.jit(lambda k: rbg_bits(k, shape))
    g = jax.jit(lambda k: jax.random.bits(jax.random.wrap_key_data(k, impl="rbg"), shape,
                                          jnp.uint32))
    for k in _keys():
        np.testing.assert_array_equal(np.asarray(f(k)), np.asarray(g(k)))


@pytest.mark.parametrize("p", [0.99, 0.9, 0.5, 0.01, 1.0, 0.0, 1.0 - 2.0 ** -25])
def test_bernoulli_matches_jax_random(p):
    shape = (4, 300)
    for k in _keys():
        want = jax.random.bernoulli(jax.random.wrap_key_data(k, impl="rbg"), p, shape)
        np.testing.assert_array_equal(np.asarray(jax.jit(
            lambda k: rbg_bernoulli(k, p, shape))(k)), np.asarray(want))


def test_bernoulli_threshold_is_exact():
    """bits at and next to the threshold fall on the same side as uniform < p."""
    p = 0.99
    p32 = np.float32(p)
    m = int(np.ceil(np.float64(p32) * 2 ** 23))
    for bits in (m << 9, (m << 9) - 1, ((m - 1) << 9) + 511, 0, 2 ** 32 - 1):
        u = np.float32((np.uint32(bits) >> np.uint32(9)) * 2.0 ** -23)
        assert (u < p32) == (bits < (m << 9))


@pytest.mark.parametrize("shape", [(512, 384), (3, 5), (1,)])
def test_batched_keys_match_one_key_at_a_time(shape):
    """Keys u32[2, 3, 4] share one loop; each slice equals the single-key bits."""
    ks = jnp.stack(_keys()[:6]).reshape(2, 3, 4)
    got = np.asarray(jax.jit(lambda k: rbg_bits(k, shape))(ks))
    assert got.shape == (2, 3, *shape)
    for i in range(2):
        for j in range(3):
            want = jax.random.bits(jax.random.wrap_key_data(ks[i, j], impl="rbg"), shape,
                                   jnp.uint32)
            np.testing.assert_array_equal(got[i, j], np.asarray(want))
    masks = np.asarray(rbg_bernoulli(ks, 0.99, shape))
    assert masks.shape == (2, 3, *shape)
    np.testing.assert_array_equal(masks[1, 2], np.asarray(jax.random.bernoulli(
        jax.random.wrap_key_data(ks[1, 2], impl="rbg"), 0.99, shape)))
    assert rbg_bernoulli(ks, 1.0, shape).shape == (2, 3, *shape)


@pytest.mark.parametrize("p", [0.5, 1.0, 0.0])
def test_bad_key_shape_is_refused(p):
    with pytest.raises(ValueError, match=r"u32\[\.\.\., 4\]"):
        rbg_bits(jnp.zeros((3,), jnp.uint32), (2,))
    with pytest.raises(ValueError, match=r"u32\[\.\.\., 4\]"):
        rbg_bernoulli(jnp.zeros((2, 3), jnp.uint32), p, (2,))
