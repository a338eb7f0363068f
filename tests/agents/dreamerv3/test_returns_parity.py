"""λ-returns against components.npz (f) `lambda_return/*`, `replay_return/*` (29eb964).

Jitted, XLA contracts the recursion's multiply-adds (about 1 float32 ulp of
the return); op by op the operations are the reference's, bit for bit.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3 import returns

TOL = dict(rtol=1e-5, atol=1e-6)
DISCOUNTS = [(1.0, "return"), (1 - 1 / 333, "return_discount_0.997")]


@pytest.fixture(scope="module")
def imag(components):
    return tuple(components["lambda_return/in/" + k] for k in ("reward", "cont", "value"))


@pytest.fixture(scope="module")
def replay(components):
    return tuple(components["replay_return/in/" + k]
                 for k in ("reward", "is_last", "is_terminal", "boot"))


@pytest.mark.parametrize("disc,key", DISCOUNTS)
def test_imagination_return_matches_reference(components, imag, disc, key):
    assert float(components["lambda_return/in/lam"]) == np.float32(0.95)
    want = components["lambda_return/out/" + key]
    got = jax.jit(lambda r, c, v: returns.imagination_return(r, c, v, disc=disc))(*imag)
    assert got.shape == want.shape == (18, 7)
    np.testing.assert_allclose(got, want, **TOL)
    with jax.disable_jit():
        np.testing.assert_array_equal(returns.imagination_return(*imag, disc=disc), want)


def test_replay_return_matches_reference(components, replay):
    want = components["replay_return/out/return"]
    reward, is_last, is_terminal, boot = replay
    assert is_last.any() and is_terminal.any() and (is_last & ~is_terminal).any()
    got = jax.jit(returns.replay_return)(*replay)
    assert got.shape == want.shape == (9, 5)
    np.testing.assert_allclose(got, want, **TOL)
    with jax.disable_jit():
        np.testing.assert_array_equal(returns.replay_return(*replay), want)


def test_replay_return_stops_lambda_at_episode_ends():
    # one step before an is_last: R_t = r_{t+1} + γ (1 - term_{t+1}) boot_{t+1}
    reward = jnp.array([[0.0, 1.0, 2.0, 3.0]])
    boot = jnp.array([[10.0, 20.0, 30.0, 40.0]])
    is_last = jnp.array([[False, False, True, False]])
    is_term = jnp.array([[False, False, False, False]])
    g, lam = 0.9, 0.5
    got = np.asarray(returns.replay_return(reward, is_last, is_term, boot, disc=g, lam=lam))
    r2 = 3.0 + g * 40.0
    r1 = 2.0 + g * 30.0                          # no λ continuation into R_2
    r0 = 1.0 + g * ((1 - lam) * 20.0 + lam * r1)
    np.testing.assert_allclose(got[0], [r0, r1, r2], rtol=1e-6)
    is_term = is_last
    got = np.asarray(returns.replay_return(reward, is_last, is_term, boot, disc=g, lam=lam))
    np.testing.assert_allclose(got[0, 1], 2.0, rtol=1e-6)   # terminal: no bootstrap
