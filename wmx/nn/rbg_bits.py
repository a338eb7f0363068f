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

The interleave (word j of counter i to position 4 i + j) is a move of the word
axis to the minor end: an array whose minor dimension is 4. A TPU tiles the two
minor dimensions of every array by (8, 128), so there that array is padded 32x
and its copies took about half the TD-MPC2 update's device time. `rbg_bernoulli` therefore
has a second layout for masks whose last dimension D is a multiple of 4,
"planar_matmul": counter i = r (D/4) + q holds the entries (r, 4 q + j), so the
loop runs on counters shaped [rows, D/4], the four words' compares are laid side
by side ("planar", column j (D/4) + q, in blocks of at most 512 columns) and a
0/1 permutation matrix moves them to column 4 q + j on the matrix unit (exact:
one nonzero term per output). Same mask, bit for bit; no minor dimension of 4.
"auto" takes it on a TPU and the interleave elsewhere (on the CPU it costs a
matmul the interleave does not need).
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


def _philox(kd: jax.Array, counters: tuple[int, ...]) -> jax.Array:
    """u32[4, m, *counters]: the four Philox-4x32-10 output words of each key kd u32[m, 4]
    at the counters i = 0 .. nc - 1 laid out as `counters`: (nc,) in order, or
    (blocks, rows, cols) with i = r (blocks cols) + b cols + q at [b, r, q] (the
    counters of row r's columns split into blocks of cols)."""
    m = kd.shape[0]
    k = [kd[:, j:j + 1] for j in range(4)]              # u32[m, 1] each
    if len(counters) == 1:
        i = lax.iota(_U, counters[0])[None]
    else:
        nb, _, cols = counters
        k = [kj.reshape(m, 1, 1, 1) for kj in k]
        i = (lax.broadcasted_iota(_U, counters, 1) * _U(nb * cols)
             + lax.broadcasted_iota(_U, counters, 0) * _U(cols)
             + lax.broadcasted_iota(_U, counters, 2))[None]
    lo = k[2] + i
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
    return x


def rbg_bits(key_data: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """u32[*lead, *shape]: `jax.random.bits(wrap_key_data(k, impl="rbg"), shape, uint32)`
    for every key k of `key_data` u32[*lead, 4] (u32[4]: one key, no leading axes).

    Bit-identical to that call key by key. The keys share one ten-round loop on
    a u32[4, m, n/4] state (m keys): the loop's per-round overhead is paid
    once for all of them (two [512, 384] masks: ~2x faster than two loops).
    The words are interleaved (the module docstring): on a TPU prefer
    `rbg_bernoulli`'s "planar_matmul" layout where only a mask is needed.

    Raises:
      ValueError: key_data's last axis is not 4.
    """
    key_data = _key_data(key_data)
    lead = key_data.shape[:-1]
    kd = key_data.reshape(-1, 4)
    n = math.prod(shape)
    nc = -(-n // 4)                                     # counters, 4 words each
    x = _philox(kd, (nc,))
    words = jnp.moveaxis(x, 0, -1).reshape(kd.shape[0], 4 * nc)[:, :n]
    return words.reshape(*lead, *shape)


LAYOUTS = ("auto", "interleave", "planar_matmul")
"""`rbg_bernoulli` layouts: how the four words of a counter reach their mask columns."""


def _auto_layout() -> str:
    """The layout "auto" stands for, read at trace time: "planar_matmul" when JAX's
    default backend is a TPU, else "interleave"."""
    return "planar_matmul" if jax.default_backend() == "tpu" else "interleave"


def _planar_block(d: int) -> int:
    """Columns permuted by one matmul: d itself up to 512, else the first of 512, 256,
    128 that divides d (else d), so that the matmul's 2 rows d block FLOPs stay linear in d."""
    if d <= 512:
        return d
    return next((b for b in (512, 256, 128) if d % b == 0), d)


def _bernoulli_planar(kd: jax.Array, threshold: int, rows: int, d: int) -> jax.Array:
    """bool[m, rows, d]: bits < threshold for keys kd u32[m, 4], the "planar_matmul"
    layout (d % 4 == 0; the module docstring).

    Per block of b = `_planar_block(d)` columns (c = b / 4 counters a row): the loop
    runs on u32[4, m, blocks, rows, c] (minor dimension c, 128 at b = 512), the words'
    compares are concatenated along the minor axis (column j c + q: whole tiles on a
    TPU) and a bfloat16 0/1 matrix moves column j c + q to 4 q + j.
    """
    m, b = kd.shape[0], _planar_block(d)
    nb, c = d // b, b // 4
    keep = _philox(kd, (nb, rows, c)) < _U(threshold)  # bool[4, m, nb, rows, c]
    planar = jnp.concatenate([keep[j] for j in range(4)], axis=-1).astype(jnp.bfloat16)
    src = lax.broadcasted_iota(jnp.int32, (b, b), 0)
    dst = lax.broadcasted_iota(jnp.int32, (b, b), 1)
    perm = (dst == 4 * lax.rem(src, c) + lax.div(src, c)).astype(jnp.bfloat16)  # jc+q -> 4q+j
    # one nonzero term per output: exact in any precision
    mask = jnp.dot(planar, perm, preferred_element_type=jnp.float32) > 0.5
    if nb > 1:                                          # [m, nb, rows, b] -> [m, rows, nb, b]
        mask = jnp.moveaxis(mask, 1, 2)
    return mask.reshape(m, rows, d)


def rbg_bernoulli(key_data: jax.Array, p: float, shape: tuple[int, ...],
                  layout: str = "auto") -> jax.Array:
    """bool[*lead, *shape]: `jax.random.bernoulli(wrap_key_data(k, impl="rbg"), p, shape)`
    for every key k of `key_data` u32[*lead, 4] (as `rbg_bits`).

    p a Python float (rounded to float32 as bernoulli does). bernoulli keeps
    u < p with u = (bits >> 9) * 2^-23 exactly, i.e. bits < ceil(p 2^23) * 2^9:
    one integer compare, the same mask.

    `layout` (one of `LAYOUTS`) says how the words reach their columns; every layout
    gives the same mask. "interleave": `rbg_bits`' interleave, then the compare.
    "planar_matmul": the compares in the planar layout, moved to their columns by a
    0/1 permutation matmul (bfloat16 operands, float32 sums; the module docstring),
    taken when shape's last dimension is a multiple of 4, else "interleave". "auto":
    "planar_matmul" when `jax.default_backend()` at trace time is "tpu" (where the
    interleave's minor dimension of 4 is padded 32x), else "interleave" (fastest on
    the CPU, and the program unchanged there); a program jitted for another backend
    than the default one still gets the same mask.

    Raises:
      ValueError: key_data's last axis is not 4 (also when p is 0 or 1); `layout` is
        not one of `LAYOUTS`.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"rbg_bernoulli layout must be one of {LAYOUTS}, got {layout!r}")
    m = math.ceil(float(np.float32(p)) * 2.0 ** 23)    # exact: p32 * 2^23 is a float64
    key_data = _key_data(key_data)
    full = tuple(key_data.shape[:-1]) + tuple(shape)
    if m >= 2 ** 23:
        return jnp.ones(full, bool)
    if m <= 0:
        return jnp.zeros(full, bool)
    if layout == "auto":
        layout = _auto_layout()
    n = math.prod(shape)
    if layout == "planar_matmul" and len(shape) > 0 and n > 0 and shape[-1] % 4 == 0:
        kd = key_data.reshape(-1, 4)
        return _bernoulli_planar(kd, m << 9, n // shape[-1], shape[-1]).reshape(full)
    return rbg_bits(key_data, shape) < _U(m << 9)
