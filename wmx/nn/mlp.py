"""Normed MLPs (shared_blocks B4; tdmpc2_spec 1.1-1.2; dreamerv3_spec 1.1-1.4).

Hidden layer: act(Norm(Dropout_{first layer only}(x W + b))). Two forms:

- functional (TD-MPC2 uses these, params are plain dicts, so a Q ensemble is
  a leading axis on every leaf): `layer_norm`, `normed_mlp_init`,
  `normed_mlp_apply`;
- `NormedMLP`, a flax.linen module with the same semantics for modules that
  prefer flax (norm "layer" or "rms").

LayerNorm: eps 1e-5 for TD-MPC2, biased variance computed as mean((x-mu)^2)
(flax's default eps 1e-6 and fast variance are both wrong here).

The functional form's Linear layers and LayerNorm affine are `wmx.nn.affine`'s
(parameter gradients' sums over rows as dots; reverse-mode autodiff only, scale and
bias of shape [F]).

Mish: `mish` is x * tanh(softplus(x)) in the one-exp rational form (same
function, within 1 float32 ulp-scale rounding of `jax.nn.mish`, ~9x cheaper
on the XLA CPU backend, where exp + log1p + tanh dominated the MLP layers).
"""
from __future__ import annotations

from typing import Callable, Literal, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from wmx.nn import affine
from wmx.nn.init import Initializer, normal_init, zeros_init

Params = dict


def layer_norm(x: jnp.ndarray, scale: jnp.ndarray, bias: jnp.ndarray,
               eps: float = 1e-5) -> jnp.ndarray:
    """LayerNorm over the last axis: (x - mean) / sqrt(var + eps) * scale + bias.

    x f32[..., F]; scale and bias f32[F] (their gradients have that shape,
    `wmx.nn.affine.scale_shift`).
    """
    mu = jnp.mean(x, axis=-1, keepdims=True)
    xc = x - mu
    var = jnp.mean(xc * xc, axis=-1, keepdims=True)
    return affine.scale_shift(xc * jax.lax.rsqrt(var + eps), scale, bias)


def _mish_parts(x):
    e = jnp.exp(jnp.minimum(x, 20.0))
    n = e * (e + 2.0)
    return e, n, n + 2.0


@jax.custom_jvp
def mish(x: jnp.ndarray) -> jnp.ndarray:
    """Mish x * tanh(softplus(x)) as x * n / (n + 2), n = e^x (e^x + 2).

    tanh(log(1 + e^x)) = ((1 + e^x)^2 - 1) / ((1 + e^x)^2 + 1) exactly; one exp
    and one division instead of exp, log1p and tanh. e^x is taken at min(x, 20),
    where n / (n + 2) is already 1 in float32, so large inputs neither overflow
    nor give a NaN gradient. Max error vs a float64 Mish: 2.5e-7 relative
    (jax.nn.mish: 3.5e-7). Derivative (custom JVP, same exp):
    t + x * 4 e^x (e^x + 1) / (n + 2)^2 with t = n / (n + 2); max abs error
    1.6e-7 (autodiff of jax.nn.mish: 3.4e-6).
    """
    _, n, d = _mish_parts(x)
    return x * (n / d)


@mish.defjvp
def _mish_jvp(primals, tangents):
    (x,), (dx,) = primals, tangents
    e, n, d = _mish_parts(x)
    t = n / d
    return x * t, (t + x * (4.0 * e * (e + 1.0) / (d * d))) * dx


def normed_mlp_init(key: jax.Array, dims: Sequence[int], *, last_normed: bool,
                    kernel_init: Initializer = normal_init(0.02),
                    last_kernel_init: Initializer | None = None) -> Params:
    """Params of an MLP dims[0] -> ... -> dims[-1].

    Returns {"layer{i}": {"kernel" (in, out), "bias" (out,), ["ln_scale",
    "ln_bias" (out,)]}}; every hidden layer is normed, the last one only when
    `last_normed`. Biases 0, LN scale 1, LN bias 0; `last_kernel_init`
    (default `kernel_init`) for the last kernel (TD-MPC2 zeroes reward/Q).
    """
    if len(dims) < 2:
        raise ValueError(f"an MLP needs at least input and output dims, got {list(dims)}")
    n = len(dims) - 1
    keys = jax.random.split(key, n)
    params = {}
    for i in range(n):
        init = last_kernel_init if (i == n - 1 and last_kernel_init is not None) else kernel_init
        layer = {"kernel": init(keys[i], (dims[i], dims[i + 1]), jnp.float32),
                 "bias": jnp.zeros((dims[i + 1],), jnp.float32)}
        if i < n - 1 or last_normed:
            layer["ln_scale"] = jnp.ones((dims[i + 1],), jnp.float32)
            layer["ln_bias"] = jnp.zeros((dims[i + 1],), jnp.float32)
        params[f"layer{i}"] = layer
    return params


def normed_mlp_apply(params: Params, x: jnp.ndarray, *,
                     act: Callable = mish, last_act: Callable | None = None,
                     dropout_rate: float = 0.0, dropout_key: jax.Array | None = None,
                     eps: float = 1e-5, dropout_mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """Apply `normed_mlp_init` params to x f32[..., in] -> f32[..., out].

    Hidden layers: Linear -> [Dropout, first layer only, when dropout_rate > 0
    and a key is given; or a precomputed boolean keep-mask `dropout_mask`
    broadcastable to the first layer's output shape (not larger)] -> LayerNorm ->
    act. Last layer: Linear -> LayerNorm -> last_act if it is normed (last_act
    None = identity), else plain Linear.
    The layers run on the rows x.reshape(-1, in) (see `normed_mlp_apply_from`).
    """
    p = params["layer0"]
    rows = x.reshape(-1, x.shape[-1])
    h0 = affine.linear(rows, p["kernel"], p["bias"]).reshape(x.shape[:-1] + p["bias"].shape)
    return normed_mlp_apply_from(params, h0, act=act, last_act=last_act,
                                 dropout_rate=dropout_rate, dropout_key=dropout_key, eps=eps,
                                 dropout_mask=dropout_mask)


def normed_mlp_apply_from(params: Params, h0: jnp.ndarray, *,
                          act: Callable = mish, last_act: Callable | None = None,
                          dropout_rate: float = 0.0, dropout_key: jax.Array | None = None,
                          eps: float = 1e-5, dropout_mask: jnp.ndarray | None = None
                          ) -> jnp.ndarray:
    """`normed_mlp_apply` given the first layer's Linear output h0 = x W0 + b0.

    For callers that compute h0 their own way (one matmul shared by several
    heads, or split as x1 W0[:k] + x2 W0[k:] when x1 is shared by many rows);
    everything after the first Linear is `normed_mlp_apply`'s. The caller's own
    bias add is not `wmx.nn.affine.linear`: if b0 is differentiated there, its sum
    over rows is a reduction (slow in TD-MPC2's programs, which keep reductions
    native); wmx's callers use this only where b0 is a constant (planning; the Q
    pair of the policy loss).

    The layers run on the rows h0.reshape(-1, width) and the result takes h0's
    leading shape back: the same values, but the backward pass's sums over rows of
    the bias and LayerNorm gradients run over one axis (docs/performance.md, "Rows"),
    as dots (`wmx.nn.affine`, "Native row sums"). A dropout key draws its keep-mask
    as jax.random.bernoulli(key, 1 - rate, h0.shape); `dropout_mask` must broadcast
    to h0's shape.
    """
    lead, width = h0.shape[:-1], h0.shape[-1]
    keep = dropout_mask
    if dropout_rate > 0.0 and keep is None and dropout_key is not None:
        keep = jax.random.bernoulli(dropout_key, 1.0 - dropout_rate, h0.shape)
    h = h0.reshape(-1, width)
    if dropout_rate > 0.0 and keep is not None:
        keep = jnp.broadcast_to(keep, h0.shape).reshape(h.shape)
        h = jnp.where(keep, h / (1.0 - dropout_rate), 0.0)
    n = len(params)
    for i in range(n):
        p = params[f"layer{i}"]
        if i > 0:
            h = affine.linear(h, p["kernel"], p["bias"])
        if "ln_scale" in p:
            h = layer_norm(h, p["ln_scale"], p["ln_bias"], eps)
            if i < n - 1:
                h = act(h)
            elif last_act is not None:
                h = last_act(h)
    return h.reshape(lead + h.shape[-1:])


class NormedMLP(nn.Module):
    """flax NormedMLP: hidden layers Dense -> [Dropout first layer] -> Norm -> act,
    then an optional output layer (plain Dense, or Dense -> Norm -> out_norm_act).

    norm "layer" (LayerNorm, learnable scale and bias, biased variance) or
    "rms" (RMSNorm, scale only); `norm_eps` must be set explicitly per paper
    (TD-MPC2 1e-5 layer, DreamerV3 1e-4 rms). `out=None`: no output layer.
    Call with `deterministic=False` and an rng stream "dropout" for dropout.
    """

    hidden: Sequence[int]
    out: int | None = None
    out_norm_act: Callable | None = None
    norm: Literal["layer", "rms"] = "layer"
    norm_eps: float = 1e-5
    act: Callable = mish
    dropout: float = 0.0
    kernel_init: Initializer = normal_init(0.02)
    out_kernel_init: Initializer = normal_init(0.02)

    def _norm(self, name: str):
        if self.norm == "layer":
            return nn.LayerNorm(epsilon=self.norm_eps, use_fast_variance=False, name=name)
        if self.norm == "rms":
            return nn.RMSNorm(epsilon=self.norm_eps, name=name)
        raise ValueError(f"norm must be 'layer' or 'rms', got {self.norm!r}")

    @nn.compact
    def __call__(self, x: jnp.ndarray, deterministic: bool = True) -> jnp.ndarray:
        h = x
        for i, units in enumerate(self.hidden):
            h = nn.Dense(units, kernel_init=self.kernel_init, bias_init=zeros_init,
                         name=f"dense{i}")(h)
            if i == 0 and self.dropout > 0.0:
                h = nn.Dropout(self.dropout)(h, deterministic=deterministic)
            h = self.act(self._norm(f"norm{i}")(h))
        if self.out is not None:
            h = nn.Dense(self.out, kernel_init=self.out_kernel_init, bias_init=zeros_init,
                         name="out")(h)
            if self.out_norm_act is not None:
                h = self.out_norm_act(self._norm("out_norm")(h))
        return h
