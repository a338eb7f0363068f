"""DreamerV3 layers as pure functions over explicit parameter dicts
(dreamerv3_spec 1.1-1.5; 2411f7d nets.py Linear / BlockLinear / Norm).

A layer is a dict {"kernel", "bias"[, "norm_scale"]}:

- Linear: kernel f32[I, U], bias f32[U] (zeros); y = x @ W + b.
- BlockLinear (g blocks): kernel f32[g, I/g, U/g], bias f32[U] (zeros);
  output block k depends only on input block k.
- With "norm_scale" f32[U] (ones) the layer is a hidden block
  Linear -> RMSNorm(eps) -> SiLU (spec 1.3: the bias is kept before the norm).

Kernels: outscale * sqrt(1/fan_in) * TruncatedNormal(-2, 2) / 0.87962566
(flax's variance_scaling constant, deviation D23; the reference writes
1.1368); fan_in follows compute_fans, so a BlockLinear gets fan_in = I, the
total input width (spec 1.2). outscale 0 gives a zero kernel. Biases are never
scaled.

Precision (spec 1.12, 2411f7d Linear / BlockLinear / Norm 'rms'): parameters
are float32; a layer computes in the dtype of its input x (the compute dtype,
float32 or bfloat16: `cast` it there first), casting its kernel, bias and
norm scale to it, so its output, the RMSNorm statistics (2411f7d: in the input
dtype, upcast only for float16; spec 1.3) and the SiLU are in that dtype too.
Gradients reach the float32 parameters through the casts. With float32 input
the casts are absent and the layers are exactly the float32 ones.

Initialisation draws: layer initialisers take a `Draw`, a function shape ->
unit-variance truncated normals; `sample_kernels(key, build)` runs a builder
with draws sliced from ONE flat truncated-normal sample (deviation W-D2: XLA's
CPU compile time grows faster than linearly with the number of separate random
draws in a program; 40 draws took ~100 s, one ~2 s).
"""
from __future__ import annotations

import math
from typing import Callable, TypeVar

import jax
import jax.numpy as jnp

Layer = dict
Draw = Callable[[tuple[int, ...]], jnp.ndarray]
T = TypeVar("T")

_TRUNC_STD = 0.87962566103423978  # std of N(0, 1) truncated to [-2, 2] (D23)


def sample_kernels(key: jax.Array, build: Callable[[Draw], T]) -> T:
    """Run `build(draw)` with draws taken in order from one truncated-normal sample (W-D2).

    `build` must be deterministic in the shapes it draws (a first, shape-only
    pass counts them; no compute). Each draw returns f32[shape] with
    TruncatedNormal(-2, 2) / 0.8796 entries (unit variance).
    """
    sizes: list[int] = []

    def count(shape):
        sizes.append(math.prod(shape))
        return jnp.zeros(shape, jnp.float32)

    jax.eval_shape(lambda: build(count))
    flat = jax.random.truncated_normal(key, -2.0, 2.0, (max(sum(sizes), 1),), jnp.float32)
    flat = flat / _TRUNC_STD
    pos = [0]

    def take(shape):
        n = math.prod(shape)
        out = flat[pos[0]:pos[0] + n].reshape(shape)
        pos[0] += n
        return out

    return build(take)


def cast(x: jnp.ndarray, dtype) -> jnp.ndarray:
    """x in ``dtype``: x itself when it already has it (no op in the program, so
    the float32 path is unchanged), else ``x.astype(dtype)`` (2411f7d
    cast_to_compute)."""
    return x if x.dtype == dtype else x.astype(dtype)


def f32(x: jnp.ndarray) -> jnp.ndarray:
    """`cast(x, float32)`: where a head's output leaves the compute dtype (spec 1.12)."""
    return cast(x, jnp.float32)


def _kernel(draw: Draw, shape: tuple[int, ...], fan_in: int, outscale: float) -> jnp.ndarray:
    if outscale == 0.0:
        return jnp.zeros(shape, jnp.float32)
    return draw(shape) * (outscale / math.sqrt(fan_in))


# ---- init --------------------------------------------------------------------
def init_linear(draw: Draw, in_dim: int, out_dim: int, *, outscale: float = 1.0,
                norm: bool = False) -> Layer:
    """Linear params {"kernel" f32[in, out], "bias" f32[out] (0)[, "norm_scale" f32[out] (1)]}.

    Source: dreamerv3_spec 1.1, 1.5 (outscale on the kernel only; D23).
    """
    p = {"kernel": _kernel(draw, (in_dim, out_dim), in_dim, outscale),
         "bias": jnp.zeros((out_dim,), jnp.float32)}
    if norm:
        p["norm_scale"] = jnp.ones((out_dim,), jnp.float32)
    return p


def init_block_linear(draw: Draw, in_dim: int, out_dim: int, groups: int, *,
                      outscale: float = 1.0, norm: bool = False) -> Layer:
    """BlockLinear params {"kernel" f32[g, in/g, out/g], "bias" f32[out][, "norm_scale"]}.

    fan_in = (in/g) * g = in (compute_fans rank >= 3). Raises ValueError when
    g does not divide in_dim and out_dim.
    Source: dreamerv3_spec 1.2, 1.5.
    """
    if in_dim % groups or out_dim % groups:
        raise ValueError(f"BlockLinear: groups={groups} must divide in_dim={in_dim} "
                         f"and out_dim={out_dim}")
    shape = (groups, in_dim // groups, out_dim // groups)
    p = {"kernel": _kernel(draw, shape, in_dim, outscale),
         "bias": jnp.zeros((out_dim,), jnp.float32)}
    if norm:
        p["norm_scale"] = jnp.ones((out_dim,), jnp.float32)
    return p


def init_mlp(draw: Draw, in_dim: int, units: int, layers: int) -> dict[str, Layer]:
    """`layers` hidden blocks {"h0".."h{layers-1}"}: in_dim -> units -> ... -> units.

    Source: dreamerv3_spec 1.4 (hidden layers always use outscale 1).
    """
    return {f"h{i}": init_linear(draw, in_dim if i == 0 else units, units, norm=True)
            for i in range(layers)}


# ---- apply -------------------------------------------------------------------
class Tap:
    """A layer's kernel inside a scan whose weight gradient is taken after the loop
    (`scan_grads`): put in the layer dict in place of the kernel array.

    The layer computes with ``kernel`` as usual, adds ``tap`` (zeros of its product's
    shape and dtype, one step's slice of a scanned input) to the product, so that
    the tap's cotangent is the product's, and records its inputs with the einsum that
    turns stacked inputs and stacked product cotangents into the kernel's gradient
    rows (several inputs: their rows in order along the kernel's input axis, -2).
    With ``tap`` None (a shape pass) it only records the product's shape and dtype.
    A Tap serves one layer call per step: a second call raises ValueError.
    """

    def __init__(self, kernel: jnp.ndarray, tap: jnp.ndarray | None):
        self.kernel, self.tap = kernel, tap
        self.inputs: tuple[jnp.ndarray, ...] = ()
        self.grads: tuple[str, ...] = ()
        self.out: jax.ShapeDtypeStruct | None = None

    def __call__(self, y: jnp.ndarray,
                 parts: tuple[tuple[jnp.ndarray, str], ...]) -> jnp.ndarray:
        if self.out is not None:
            raise ValueError("nets.Tap: a tapped kernel was used twice in one step "
                             "(its gradient would mix the two uses' inputs)")
        self.out = jax.ShapeDtypeStruct(y.shape, y.dtype)
        self.inputs = tuple(u for u, _ in parts)
        self.grads = tuple(eq for _, eq in parts)
        return y if self.tap is None else y + self.tap


_BLOCK_GRAD = "...kri,...kro->kio"   # block-major inputs [g, R, i] and products [g, R, o]


def _weight(p: Layer, dtype) -> jnp.ndarray:
    """The layer's kernel cast to the compute dtype (a `Tap`'s kernel)."""
    k = p["kernel"]
    return cast(k.kernel if isinstance(k, Tap) else k, dtype)


def _tap(p: Layer, y: jnp.ndarray, *parts: tuple[jnp.ndarray, str]) -> jnp.ndarray:
    """y, or the `Tap`'s y + tap (recording ``parts``) when the layer's kernel is one."""
    k = p["kernel"]
    return k(y, parts) if isinstance(k, Tap) else y


def rms_norm(x: jnp.ndarray, scale: jnp.ndarray, eps: float = 1e-4,
             axis: int | tuple[int, ...] = -1) -> jnp.ndarray:
    """RMSNorm over ``axis`` (default the last): x * (rsqrt(mean(x^2) + eps) * scale),
    x [..., F] float32 or bfloat16; scale f32 broadcasts against x (the block-major
    layout passes axis=(0, 2) and scale f32[g, 1, o]).

    Statistics in x's dtype, the scale cast to it (2411f7d: bfloat16 statistics
    under bfloat16 compute; HEAD upcasts to float32, spec 1.3); learned scale,
    no shift. Returns x's dtype.
    Source: dreamerv3_spec 1.3, 1.12 (2411f7d Norm 'rms').
    """
    mult = jax.lax.rsqrt(jnp.mean(x * x, axis=axis, keepdims=True) + eps) * cast(scale, x.dtype)
    return x * mult


def _post(p: Layer, y: jnp.ndarray, eps: float,
          axis: int | tuple[int, ...] = -1) -> jnp.ndarray:
    """y + b, then RMSNorm over ``axis`` -> SiLU if the layer is normed.

    Args:
        p: the layer's "bias" f32[F] (and "norm_scale" f32[F] if normed), F the
            size of the normalised axes together.
        y: the layer's product without bias, in the compute dtype: [..., F] with
            axis -1, or the block-major [g, R, o] with axis (0, 2) (F = g*o, the
            parameters read as [g, 1, o]).
        eps: RMSNorm's epsilon.
        axis: the axes of one row's features.

    Returns:
        y's shape and dtype (the bias cast to it).
    """
    axes = {a % y.ndim for a in ((axis,) if isinstance(axis, int) else axis)}
    shape = tuple(n if a in axes else 1 for a, n in enumerate(y.shape))
    y = y + cast(p["bias"], y.dtype).reshape(shape)
    if "norm_scale" in p:
        return jax.nn.silu(rms_norm(y, p["norm_scale"].reshape(shape), eps, axis))
    return y


def linear(p: Layer, x: jnp.ndarray, eps: float = 1e-4) -> jnp.ndarray:
    """x [..., I] -> [..., U] in x's dtype (float32 or bfloat16): x @ W + b with W
    and b cast to it, then RMSNorm -> SiLU if the layer is normed.

    Source: dreamerv3_spec 1.1, 1.3, 1.12.
    """
    return _post(p, _tap(p, x @ _weight(p, x.dtype), (x, "...i,...o->io")), eps)


def to_groups(x: jnp.ndarray, g: int) -> jnp.ndarray:
    """f32[..., g*i] -> f32[g, R, i] (R = prod(...)): the block-major layout of
    `block_linear`, blocks as the leading (batch) axis."""
    return jnp.swapaxes(x.reshape(-1, g, x.shape[-1] // g), 0, 1)


def from_groups(x: jnp.ndarray, lead: tuple[int, ...]) -> jnp.ndarray:
    """f32[g, R, o] -> f32[*lead, g*o], the inverse of `to_groups`."""
    g, _, o = x.shape
    return jnp.swapaxes(x, 0, 1).reshape(*lead, g * o)


def block_linear(p: Layer, x: jnp.ndarray, eps: float = 1e-4) -> jnp.ndarray:
    """BlockLinear in the block-major layout: x [g, R, i] -> [g, R, o] in x's dtype,
    block k: x[k] @ W[k] + b[k*o:(k+1)*o] (W = kernel f32[g, i, o] cast to x's
    dtype), then RMSNorm over the full g*o vector of each row -> SiLU if normed
    (block_norm False).

    = einsum('...ki,kio->...ko') of the flat layout (`to_groups` / `from_groups`)
    up to float summation order; one dot_general with the blocks as leading batch
    dims, which XLA's CPU backend runs ~2x faster than that einsum (kernel first).
    Source: dreamerv3_spec 1.2, 2.4 (2411f7d BlockLinear).
    """
    y = jax.lax.dot_general(x, _weight(p, x.dtype), (((2,), (1,)), ((0,), (0,))))
    y = _tap(p, y, (x, _BLOCK_GRAD))
    return _post(p, y, eps, axis=(0, 2))   # RMSNorm over each row's g*o


def block_linear_shared(p: Layer, x: jnp.ndarray, shared: jnp.ndarray,
                        eps: float = 1e-4) -> jnp.ndarray:
    """`block_linear` of block k's input concat(x[k], shared) without building it:
    x [g, R, i], shared [R, s] (both in the compute dtype), kernel f32[g, i + s, o]
    -> [g, R, o] in x's dtype.

    = x[k] @ W[k, :i] + shared @ W[k, i:] (the shared part one dot for all blocks,
    the same FLOPs as repeating `shared` to every block). Below float32 the
    concatenated input is built and one dot taken (as `block_linear` of it): the
    reference's single dot rounds its output once, the sum of two bfloat16
    products would round three times. A `Tap` records x and shared apart (the
    kernel's rows :i and i:).
    """
    dims = (((2,), (1,)), ((0,), (0,)))
    if x.dtype != jnp.float32:
        rep = jnp.broadcast_to(shared, (x.shape[0], *shared.shape))
        y = jax.lax.dot_general(jnp.concatenate([x, rep], -1), _weight(p, x.dtype), dims)
    else:
        i = x.shape[-1]
        w = _weight(p, x.dtype)
        y = jax.lax.dot_general(x, w[:, :i], dims)
        ys = jax.lax.dot_general(shared, w[:, i:], (((1,), (1,)), ((), ())))   # [R, g, o]
        y = y + jnp.swapaxes(ys, 0, 1)
    y = _tap(p, y, (x, _BLOCK_GRAD), (shared, "...rs,...kro->kso"))
    return _post(p, y, eps, axis=(0, 2))


def mlp(layers: dict[str, Layer], x: jnp.ndarray, eps: float = 1e-4) -> jnp.ndarray:
    """Apply the hidden blocks "h0", "h1", ... of `layers` in order (other keys,
    e.g. a head's "out", are ignored): [..., I] -> [..., units] in x's dtype.

    Source: dreamerv3_spec 1.4.
    """
    i = 0
    while f"h{i}" in layers:
        x = linear(layers[f"h{i}"], x, eps)
        i += 1
    return x
