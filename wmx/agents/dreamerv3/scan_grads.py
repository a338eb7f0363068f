"""A `lax.scan` over `nets` layers whose kernels' gradients are summed after the loop.

Differentiating `lax.scan(body)` through loop-invariant kernels adds each step's
weight gradient x_tᵀ g_t (a contraction over one step's rows, e.g. B = 16) into an
accumulator of the kernel's shape inside the transposed loop (JAX 0.10.2 keeps it
there). `scan` computes the same sum as one contraction over all T·B rows after
the loop: its forward pass runs the body with every kernel replaced by a
`nets.Tap` (the product plus a per-step zero input, the layer's inputs recorded
and stacked), its backward pass is JAX's own transpose of that scan with the
kernels held constant (differentiated with respect to the carry, the scanned
inputs, the layers' other parameters and the taps: the taps' cotangents are the
stacked product cotangents g_t), and each kernel's gradient is then
einsum(stacked inputs, stacked g) with float32 accumulation
(`preferred_element_type`).

The same values as the plain scan's gradients up to float summation order in
float32 compute; in bfloat16 compute the plain scan rounds each step's product
x_tᵀ g_t to bfloat16 before the float32 sum, this one accumulates the whole sum in
float32 (`DreamerV3Config.scan_weight_grads`). Biases and norm scales keep their
sums in the loop. Reverse mode only (a custom VJP: `jax.jvp` and `jax.linearize`
through it raise).
Source: docs/performance.md "Where the time goes" (the RSSM observe scan); W-D12.
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

from wmx.agents.dreamerv3 import nets

Layers = dict   # name -> nets.Layer
Body = Callable[[Layers, Any, Any], tuple[Any, Any]]


def _with_kernels(rest: Layers, kernels: dict) -> Layers:
    return {n: {**layer, "kernel": kernels[n]} for n, layer in rest.items()}


def scan(body: Body, layers: Layers, init: Any, xs: Any) -> tuple[Any, Any]:
    """`lax.scan(lambda c, x: body(layers, c, x), init, xs)`, with each kernel's
    gradient one contraction over every step's rows after the loop.

    Args:
      body: (layers, carry, x) -> (carry, y), applying the layers with `nets`
        functions (each layer at most once per step); must not close over traced
        values (pass them in ``init`` or ``xs``).
      layers: {name: nets.Layer} with float32 kernels; layers the body does not
        use get zero gradients.
      init: the initial carry; xs: the scanned inputs (leading axis T, T >= 1).
    Returns:
      (final carry, stacked ys), as `lax.scan`.
    """
    static: dict = {}

    @jax.custom_vjp
    def run(layers, init, xs):
        return jax.lax.scan(lambda c, x: body(layers, c, x), init, xs)

    def fwd(layers, init, xs):
        kernels = {n: layer["kernel"] for n, layer in layers.items()}
        rest = {n: {k: v for k, v in layer.items() if k != "kernel"}
                for n, layer in layers.items()}
        # shape pass: which kernels one step uses, their products' shapes
        probes = {n: nets.Tap(k, None) for n, k in kernels.items()}
        x0 = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), xs)
        jax.eval_shape(lambda c, x: body(_with_kernels(rest, probes), c, x), init, x0)
        used = {n: t for n, t in probes.items() if t.out is not None}
        static["grads"] = {n: t.grads for n, t in used.items()}
        length = jax.tree.leaves(xs)[0].shape[0]
        taps = {n: jnp.zeros((length, *t.out.shape), t.out.dtype) for n, t in used.items()}

        def tapped(rest, init, xs, taps):
            def step(c, x_tap):
                x, tap = x_tap
                ks = {n: nets.Tap(k, tap[n]) if n in tap else k for n, k in kernels.items()}
                c, y = body(_with_kernels(rest, ks), c, x)
                return c, (y, {n: ks[n].inputs for n in tap})
            c, (ys, inputs) = jax.lax.scan(step, init, (xs, taps))
            return (c, ys), inputs

        out, pullback, inputs = jax.vjp(tapped, rest, init, xs, taps, has_aux=True)
        return out, (pullback, inputs, kernels)

    def bwd(res, ct):
        pullback, inputs, kernels = res
        d_rest, d_init, d_xs, d_taps = pullback(ct)
        d_layers = {}
        for n, k in kernels.items():
            if n in d_taps:
                parts = [jnp.einsum(eq, u, d_taps[n], preferred_element_type=jnp.float32)
                         for u, eq in zip(inputs[n], static["grads"][n])]
                dk = parts[0] if len(parts) == 1 else jnp.concatenate(parts, -2)
            else:
                dk = jnp.zeros_like(k)
            d_layers[n] = {**d_rest[n], "kernel": dk.astype(k.dtype)}
        return d_layers, d_init, d_xs

    run.defvjp(fwd, bwd)
    return run(layers, init, xs)
