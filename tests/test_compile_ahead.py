"""wmx.compile_ahead: programs compiled in the background are the plain call's, traced
once, and any mismatch or failure falls back to the plain call with one log line."""
from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np

from wmx.compile_ahead import CompileAhead, abstract


def _counted():
    traces = []

    @jax.jit
    def f(x, k, scale):
        traces.append(1)
        return jnp.tanh(x * scale) @ x.T + k.astype(jnp.float32).sum()

    return f, traces


def test_the_ahead_executable_is_used_and_equals_the_plain_call(caplog):
    f, traces = _counted()
    x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 5)), jnp.float32)
    k = jax.random.PRNGKey(3)
    specs = abstract((x, k, 2))
    assert isinstance(specs[0], jax.ShapeDtypeStruct) and specs[2] == 2
    ahead = CompileAhead(workers=2)
    ahead.submit("f", f, (x, k, 2))
    other, other_traces = _counted()
    ahead.submit("f", other, (x, k, 2))          # a key is built once: ignored
    assert ahead.submitted("f") and not ahead.submitted("g")
    with caplog.at_level(logging.INFO, logger="wmx.compile_ahead"):
        got = ahead.call("f", f, x, k, 2)
        again = ahead.call("f", f, x, k, 2)
    assert caplog.records == []
    assert len(traces) == 1 and other_traces == []   # traced once, in the background
    want = f(x, k, 2)                        # the plain call traces again (its own cache)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(again), np.asarray(want))
    ahead.close()


def test_mismatch_failure_and_unknown_keys_fall_back_to_the_plain_call(caplog):
    f, _ = _counted()
    x = jnp.ones((4, 3), jnp.float32)
    k = jax.random.PRNGKey(0)
    ahead = CompileAhead()
    ahead.submit("f", f, (x, k, 2))

    @jax.jit
    def broken(x, k, scale):
        raise RuntimeError("no env here")
    ahead.submit("broken", broken, (x, k, 2))
    with caplog.at_level(logging.INFO, logger="wmx.compile_ahead"):
        wider = jnp.ones((4, 6), jnp.float32)                      # another shape
        np.testing.assert_array_equal(np.asarray(ahead.call("f", f, wider, k, 2)),
                                      np.asarray(f(wider, k, 2)))
        assert "does not fit" in caplog.records[-1].getMessage()
        assert not ahead.submitted("f")     # dropped: later calls are plain ones
        np.testing.assert_array_equal(np.asarray(ahead.call("broken", f, x, k, 2)),
                                      np.asarray(f(x, k, 2)))
        msg = caplog.records[-1].getMessage()
        assert "failed" in msg and "RuntimeError: no env here" in msg
        n = len(caplog.records)
        np.testing.assert_array_equal(np.asarray(ahead.call("never", f, x, k, 2)),
                                      np.asarray(f(x, k, 2)))
        g, _ = _counted()                   # built for another function: not used for g
        ahead.submit("h", f, (x, k, 2))
        np.testing.assert_array_equal(np.asarray(ahead.call("h", g, x, k, 2)),
                                      np.asarray(f(x, k, 2)))
        assert len(caplog.records) == n + 1 and "another function" in \
            caplog.records[-1].getMessage()
    ahead.close()


def test_a_weak_type_change_falls_back_to_the_plain_call(caplog):
    """A compiled executable takes a strong np.int32 for its weak ~int32[] and computes the
    weak program (int16 here, the plain call int32): the call checks weak types itself."""
    f = jax.jit(lambda x, i: x * i)
    x = jnp.asarray([30000, 2], jnp.int16)
    ahead = CompileAhead(workers=1)
    ahead.submit("f", f, (x, 3))
    with caplog.at_level(logging.INFO, logger="wmx.compile_ahead"):
        got = ahead.call("f", f, x, np.int32(3))
    want = f(x, np.int32(3))
    assert got.dtype == want.dtype == jnp.int32
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert "does not fit" in caplog.records[-1].getMessage()
    ahead.close()
