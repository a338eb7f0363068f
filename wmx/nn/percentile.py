"""Linear-interpolated percentile (shared_blocks B3; tdmpc2_spec 2.13; T25)."""
from __future__ import annotations

import jax
import jax.numpy as jnp


def percentile(x: jnp.ndarray, q) -> jnp.ndarray:
    """Percentile(s) q (in [0, 100]) over all elements of sg(f32(x)).

    jnp.percentile(method="linear"): pos = q/100 * (n-1), linear between the
    floor and ceil order statistics, the same formula as TD-MPC2's
    sort-and-interpolate _percentile and DreamerV3's retnorm.
    """
    x = jax.lax.stop_gradient(jnp.asarray(x, jnp.float32)).ravel()
    return jnp.percentile(x, jnp.asarray(q, jnp.float32), method="linear")
