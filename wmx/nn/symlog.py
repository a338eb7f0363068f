"""symlog / symexp (shared_blocks B1; tdmpc2_spec 1.14; dreamerv3_spec 1.6).

Elementwise, dtype-preserving, pure. log1p/expm1 forms (equal to TD-MPC2's
log(1+|x|) / exp(|x|)-1 up to rounding). Gradient at exactly 0 is 0 (sign(0) = 0),
as in both references.
"""
from __future__ import annotations

import jax.numpy as jnp


def symlog(x: jnp.ndarray) -> jnp.ndarray:
    """sign(x) * log1p(|x|), any shape and float dtype."""
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


def symexp(x: jnp.ndarray) -> jnp.ndarray:
    """sign(x) * expm1(|x|), the inverse of `symlog`."""
    return jnp.sign(x) * jnp.expm1(jnp.abs(x))
