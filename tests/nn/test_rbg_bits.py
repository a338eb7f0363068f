"""`wmx.nn.rbg_bits` gives the same bits and masks as jax.random on "rbg" keys (CPU, GPU),
and the same bits on every backend.

XLA documents RngBitGenerator's default algorithm as backend-dependent: the CPU and the GPU
expand it to Philox-4x32-10, which `rbg_bits` computes; the TPU does not, so on a TPU
jax.random's "rbg" bits differ from wmx's, which stay the CPU's (the pinned digests below,
taken on the CPU where the jax.random comparison holds). wmx's TD-MPC2 dropout masks are
therefore the same on every backend; nothing compares them with the TPU's generator.
`rbg_bernoulli`'s layouts (the TPU's "planar_matmul", the interleave elsewhere) give the same
masks: the digests hold for both, and the planar path equals the interleave shape by shape.
"""
import hashlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import wmx.nn.rbg_bits as rbg
from wmx.nn.rbg_bits import LAYOUTS, rbg_bernoulli, rbg_bits


KEYS = (
    (0xF29A4FA7, 0xFA843692, 0x55110E28, 0x77FAA835),
    (0x704A38B7, 0x88A4083E, 0x7227B57A, 0x703ABFF1),
    (0xA40AE269, 0xE68DDB64, 0x3AE385E9, 0xE1B135C9),
    (0x12F51D7E, 0xF02A3AC5, 0xA6220CDE, 0xF9C24C30),
    (0xE16B826B, 0xC5177154, 0x23D96AE9, 0xA1885339),
    (0x7764AC86, 0xEBBEDC64, 0xBC5E0F90, 0x185742C5),
    # counters that carry out of word 0 (and words 0-1) within the array
    (0xF29A4FA7, 0xFA843692, 0xFFFFFF9B, 0x77FAA835),
    (0x704A38B7, 0x88A4083E, 0xFFFFFF9B, 0xFFFFFFFF),
    (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
)
"""rbg key data u32[4]: the bits of jax.random.key(0..5) and three carry cases."""

BITS_SHA256 = {(512, 512): "914a1792a584dd6f", (3, 7, 384): "e61464808eb20400",
               (5,): "1f8375adbcf97541", (1,): "2be7002f9ab9e4f3", (2, 3): "522df9a16862d6d4"}
"""sha256 (first 16 hex digits) of `rbg_bits(k, shape)` over `KEYS`, little-endian u32, on the CPU."""

BERNOULLI_SHA256 = {0.99: "c96710e49bb0a69a", 0.9: "327d2127fc422353",
                    0.5: "39ddf765ae42f27b", 0.01: "3f7c47433431899d", 1.0: "8628b73b72503302",
                    0.0: "89b5774618e6adf6", 1.0 - 2.0 ** -25: "8628b73b72503302"}
"""sha256 (first 16 hex digits) of the packed `rbg_bernoulli(k, p, (4, 300))` masks over `KEYS`."""

ON_TPU = jax.default_backend() == "tpu"
tpu_generator_differs = pytest.mark.skipif(
    ON_TPU, reason="the TPU's RngBitGenerator is not Philox: jax.random's rbg bits differ there "
                   "(wmx's are the CPU's: test_*_pinned)")


def _keys():
    return [jnp.asarray(np.array(k, np.uint32)) for k in KEYS]


@pytest.mark.parametrize("shape", sorted(BITS_SHA256))
def test_bits_pinned(shape):
    h = hashlib.sha256()
    for k in _keys():
        h.update(np.asarray(jax.jit(lambda k: rbg_bits(k, shape))(k)).astype("<u4").tobytes())
    assert h.hexdigest()[:16] == BITS_SHA256[shape]


@pytest.mark.parametrize("layout", ["interleave", "planar_matmul"])
@pytest.mark.parametrize("p", list(BERNOULLI_SHA256))
def test_bernoulli_pinned(p, layout):
    """Both layouts, on every backend (300 % 4 == 0: "planar_matmul" takes its own path)."""
    ks = jnp.stack(_keys())
    masks = np.asarray(jax.jit(lambda k: rbg_bernoulli(k, p, (4, 300), layout=layout))(ks))
    h = hashlib.sha256()
    for mask in masks:
        h.update(np.packbits(mask).tobytes())
    assert h.hexdigest()[:16] == BERNOULLI_SHA256[p]


def test_keys_are_jax_random_key_bits():
    for i, k in enumerate(_keys()[:6]):
        np.testing.assert_array_equal(
            np.asarray(k), np.asarray(jax.random.bits(jax.random.key(i), (4,), jnp.uint32)))


@tpu_generator_differs
@pytest.mark.parametrize("shape", [(512, 512), (3, 7, 384), (5,), (1,), (2, 3)])
def test_bits_match_jax_random(shape):
    f = jax.jit(lambda k: rbg_bits(k, shape))
    g = jax.jit(lambda k: jax.random.bits(jax.random.wrap_key_data(k, impl="rbg"), shape,
                                          jnp.uint32))
    for k in _keys():
        np.testing.assert_array_equal(np.asarray(f(k)), np.asarray(g(k)))


@tpu_generator_differs
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


@tpu_generator_differs
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


INTERLEAVE_WORDS = re.compile(r"u32\[[\d,]*,4\] = transpose")
"""The interleave in a jaxpr: the words moved to a minor dimension of 4."""


def _jaxpr(keys, p, shape, layout):
    return str(jax.make_jaxpr(lambda k: rbg_bernoulli(k, p, shape, layout=layout))(keys))


@pytest.mark.parametrize("lead, shape", [
    ((), (24, 512)),            # one key, D = 512: one 512-column block
    ((2, 3), (3, 5, 384)),      # leading key axes, several row axes, D = 384
    ((2,), (3, 1024)),          # two 512-column blocks
    ((2,), (2, 1792)),          # 256-column blocks (512 does not divide 1792)
    ((2,), (3, 516)),           # D > 512 that no block size divides: one block
    ((3,), (5, 4)),             # D = 4: one counter per row
    ((2,), (12,)),              # a flat mask
])
def test_planar_matmul_equals_interleave(lead, shape):
    """Bit for bit, without the interleave (no u32[..., 4] in its program)."""
    keys = jnp.asarray(np.random.default_rng(len(shape) + shape[-1]).integers(
        0, 2 ** 32, (*lead, 4), dtype=np.uint64).astype(np.uint32))
    for p in (0.99, 0.5):
        want = jax.jit(lambda k: rbg_bernoulli(k, p, shape, layout="interleave"))(keys)
        got = jax.jit(lambda k: rbg_bernoulli(k, p, shape, layout="planar_matmul"))(keys)
        assert got.shape == (*lead, *shape) and got.dtype == jnp.bool_
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    planar = _jaxpr(keys, 0.99, shape, "planar_matmul")
    assert not INTERLEAVE_WORDS.search(planar) and "dot_general" in planar
    assert INTERLEAVE_WORDS.search(_jaxpr(keys, 0.99, shape, "interleave"))


@pytest.mark.parametrize("shape", [(3, 6), (7,), (), (0, 8)])
def test_planar_matmul_falls_back_to_interleave(shape):
    """A last dimension not a multiple of 4 (or no entries): the interleave's program."""
    keys = jnp.stack(_keys()[:2])
    assert (_jaxpr(keys, 0.9, shape, "planar_matmul")
            == _jaxpr(keys, 0.9, shape, "interleave"))


def test_auto_layout_follows_the_backend():
    """"auto" is "planar_matmul" on a TPU, else the interleave, the program unchanged."""
    keys = jnp.stack(_keys()[:2])
    want = "planar_matmul" if jax.default_backend() == "tpu" else "interleave"
    assert rbg._auto_layout() == want
    assert _jaxpr(keys, 0.99, (8, 64), "auto") == _jaxpr(keys, 0.99, (8, 64), want)


def test_bad_layout_is_refused():
    with pytest.raises(ValueError, match="layout must be one of"):
        rbg_bernoulli(jnp.stack(_keys()[:2]), 0.5, (2, 8), layout="planar")
    assert LAYOUTS == ("auto", "interleave", "planar_matmul")
