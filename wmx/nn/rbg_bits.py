"""The bits of jax's "rbg" keys, computed without XLA's RngBitGenerator expansion.

`jax.random.bits(wrap_key_data(k, impl="rbg"), shape, uint32)` is
`lax.rng_bit_generator` with the default algorithm, which XLA (CPU and GPU)
expands to Philox-4x32-10: counter c = (state[1] + i, state[0] + carry) for
i = 0, 1, ... as four 32-bit words, key (k[0], k[1]), output word j of
counter i at flat position 4 i + j. On the CPU that expansion lands in one
loop fusion whose final interleave evaluates the whole ten-round chain once
per output word (and unrolled jnp code is worse: each round's fusion
re-evaluates its inputs). Here the rounds run in a `fori_loop`, two rounds a
step, so the four words are materialised every other round, and several keys
share the loop: the same bits at a third to a half of the CPU time
(`tests/nn/test_rbg_bits.py` checks them against `jax.random.bits` on the CPU
and the GPU, and against digests pinned on the CPU on every backend: the TPU's
RngBitGenerator is another algorithm, so there these bits are the CPU's, not
jax.random's; docs/performance.md "Rows").
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_U = jnp.uint32
_M0, _M1 = 0xD2511F53, 0xCD9E8D57          # Philox-4x32 multipliers
_W0, _W1 = 0x9E3779B9, 0xBB67AE85          # key schedule increments


def _mulhilo(a: int, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(high, low) 32-bit halves of the 64-bit product a * b; a a constant, b u32[...]."""
    al, ah = _U(a & 0xFFFF), _U(a >> 16)
    bl, bh = b & _U(0xFFFF), b >> _U(16)
    ll, lh, hl, hh = al * bl, al * bh, ah * bl, ah * bh
    mid = (ll >> _U(16)) + (lh & _U(0xFFFF)) + (hl & _U(0xFFFF))
    hi = hh + (lh >> _U(16)) + (hl >> _U(16)) + (mid >> _U(16))
    return hi, _U(a) * b


def _key_data(key_data) -> jax.Array:
    key_data = jnp.asarray(key_data, _U)
    if key_data.shape[-1:] != (4,):
        raise ValueError(f"rbg key data must be u32[..., 4] (one key per row of 4 words), "
                         f"got shape {key_data.shape}")
    return key_data


def rbg_bits(key_data: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """u32[*lead, *shape]: `jax.random.bits(wrap_key_data(k, impl="rbg"), shape, uint32)`
    for every key k of `key_data` u32[*lead, 4] (u32[4]: one key, no leading axes).

    Bit-identical to that call key by key. The keys share one ten-round loop on
    a u32[4, m, n/4] state (m keys): the loop's per-round overhead is paid
    once for all of them (two [512, 384] masks: ~2x faster than two loops).

    Raises:
      ValueError: key_data's last axis is not 4.
    """
    key_data = _key_data(key_data)
    lead = key_data.shape[:-1]
    kd = key_data.reshape(-1, 4)
    n = math.prod(shape)
    nc = -(-n // 4)                                     # counters, 4 words each
    k = [kd[:, j:j + 1] for j in range(4)]              # u32[m, 1] each
    lo = k[2] + lax.iota(_U, nc)[None]
    c1 = (lo < k[2]).astype(_U)                         # carry out of word 0
    x1 = k[3] + c1
    c2 = ((c1 == 1) & (x1 == 0)).astype(_U)
    x2 = k[0] + c2
    x3 = k[1] + ((c2 == 1) & (x2 == 0)).astype(_U)

    def round_(_, carry):
        x, k0, k1 = carry
        hi0, lo0 = _mulhilo(_M0, x[0])
        hi1, lo1 = _mulhilo(_M1, x[2])
        return jnp.stack([hi1 ^ x[1] ^ k0, lo1, hi0 ^ x[3] ^ k1, lo0]), k0 + _U(_W0), k1 + _U(_W1)

    # two rounds per loop step: half the loop-state copies, and XLA still materialises
    # every second round (more unrolling re-evaluates the chain: 7x slower at 5 or 10)
    x, _, _ = lax.fori_loop(0, 10, round_, (jnp.stack([lo, x1, x2, x3]), k[0], k[1]),
                            unroll=2)
    words = jnp.moveaxis(x, 0, -1).reshape(kd.shape[0], 4 * nc)[:, :n]
    return words.reshape(*lead, *shape)


def rbg_bernoulli(key_data: jax.Array, p: float, shape: tuple[int, ...]) -> jax.Array:
    """bool[*lead, *shape]: `jax.random.bernoulli(wrap_key_data(k, impl="rbg"), p, shape)`
    for every key k of `key_data` u32[*lead, 4] (as `rbg_bits`).

    p a Python float (rounded to float32 as bernoulli does). bernoulli keeps
    u < p with u = (bits >> 9) * 2^-23 exactly, i.e. bits < ceil(p 2^23) * 2^9:
    one integer compare, the same mask.

    Raises:
      ValueError: key_data's last axis is not 4 (also when p is 0 or 1).
    """
    m = math.ceil(float(np.float32(p)) * 2.0 ** 23)    # exact: p32 * 2^23 is a float64
    key_data = _key_data(key_data)
    full = tuple(key_data.shape[:-1]) + tuple(shape)
    if m >= 2 ** 23:
        return jnp.ones(full, bool)
    if m <= 0:
        return jnp.zeros(full, bool)
    return rbg_bits(key_data, shape) < _U(m << 9)
