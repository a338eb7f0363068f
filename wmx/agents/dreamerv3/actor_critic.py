"""Actor and critic networks (dreamerv3_spec 3.13-3.16; 2411f7d MLP + Dist).

Both read feat = concat(deter, stoch.reshape(S*C)) f32[..., D + S*C]
(`heads.feat`) through `actor_layers` / `critic_layers` hidden blocks of
width cfg.units.

- Actor, continuous: {"h0".., "mean", "std"}, two output Linears of action_dim
  with outscale 0.01 -> `policy_dist.bounded_normal`.
- Actor, discrete: {"h0".., "logits"}, one Linear of action_dim classes with
  outscale 0.01 -> 1% unimix (2411f7d 'onehot').
- Critic: {"h0".., "out"}, Linear(units -> bins + 1) with outscale 0 (exactly
  zero logits at init), two-hot over 255 symexp bins. The slow critic is a
  copy of these params held by the training state.

Multi-task (W-D8): both read concat(feat, sg(e)) (`multitask.ac_input`), their
first layer widened by task_dim.

Precision (spec 1.12, 3.13): the hidden blocks and output Linears compute in
cfg.dtype (the slow critic too: 2411f7d's slowcritic `dtype='float32'` names
its parameters' dtype, which is float32 for every module, and its MLP casts
its input to the compute dtype); the outputs are cast to float32 before
tanh / sigmoid / unimix (2411f7d Dist), so the distributions, samples and
values are float32.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from wmx.agents.dreamerv3 import nets
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.heads import head_mlp, head_out
from wmx.agents.dreamerv3.outputs import twohot, twohot_logits, twohot_mean
from wmx.agents.dreamerv3.categorical import draw_uniform
from wmx.agents.dreamerv3.policy_dist import (NormalPolicy, bounded_normal, draw_normal_eps,
                                              normal_sample, onehot_policy_logits,
                                              onehot_policy_sample)

Params = dict


# ---- actor ---------------------------------------------------------------------
def init_actor(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """Actor params; outputs with outscale cfg.actor_outscale (0.01).

    Source: dreamerv3_spec 1.5, 3.13-3.15."""
    c = cfg.resolved()
    p = nets.init_mlp(draw, c.feat_dim + c.task_width, c.units, c.actor_layers)
    if c.discrete_actions:
        p["logits"] = nets.init_linear(draw, c.units, c.action_dim, outscale=c.actor_outscale)
    else:
        p["mean"] = nets.init_linear(draw, c.units, c.action_dim, outscale=c.actor_outscale)
        p["std"] = nets.init_linear(draw, c.units, c.action_dim, outscale=c.actor_outscale)
    return p


def actor_dist(p: Params, cfg: DreamerV3Config, x: jnp.ndarray) -> NormalPolicy | jnp.ndarray:
    """The policy at feat x [..., D + S*C] (any float dtype; cast to cfg.dtype).

    Returns NormalPolicy(mean, std) f32[..., A] for continuous actions
    (std in (minstd, maxstd)), or mixed logits f32[..., K] for discrete ones.
    Source: dreamerv3_spec 3.13, 3.14, 1.12 (2411f7d: tanh, sigmoid and unimix
    after the float32 cast).
    """
    c = cfg.resolved()
    h = head_mlp(p, c, x)
    if c.discrete_actions:
        return onehot_policy_logits(head_out(p["logits"], h), c.actor_unimix)
    return bounded_normal(head_out(p["mean"], h), head_out(p["std"], h), c.minstd, c.maxstd)


def actor_sample(p: Params, cfg: DreamerV3Config, x: jnp.ndarray,
                 noise: jnp.ndarray) -> jnp.ndarray:
    """A policy sample f32[..., A] at feat x.

    Args: noise = eps f32[..., A] ~ N(0, 1) for continuous actions (action =
    mean + std eps, unclipped); for discrete ones class indices int32[...] or
    uniforms f32[...] (a straight-through one-hot f32[..., K] of the mixed
    distribution). `draw_policy_noise` makes the float forms.
    Source: dreamerv3_spec 3.3.
    """
    d = actor_dist(p, cfg, x)
    if cfg.discrete_actions:
        return onehot_policy_sample(d, noise)
    return normal_sample(d, noise)


def draw_policy_noise(key: jax.Array, cfg: DreamerV3Config,
                      batch_shape: tuple[int, ...]) -> jnp.ndarray:
    """The policy's sampling noise: f32[*batch_shape, A] standard normals (continuous)
    or f32[*batch_shape] uniforms (discrete)."""
    if cfg.discrete_actions:
        return draw_uniform(key, batch_shape)
    return draw_normal_eps(key, (*batch_shape, cfg.action_dim))


# ---- critic --------------------------------------------------------------------
def init_critic(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """{"h0".., "out": Linear(units -> bins + 1, outscale cfg.critic_outscale = 0)}.

    Source: dreamerv3_spec 3.15, 3.16."""
    c = cfg.resolved()
    p = nets.init_mlp(draw, c.feat_dim + c.task_width, c.units, c.critic_layers)
    p["out"] = nets.init_linear(draw, c.units, c.twohot_outputs, outscale=c.critic_outscale)
    return p


def critic_logits(p: Params, cfg: DreamerV3Config, x: jnp.ndarray) -> jnp.ndarray:
    """Two-hot value logits f32[..., bins] at feat x [..., D + S*C] (computed in
    cfg.dtype, the output cast to float32).

    Source: dreamerv3_spec 3.16, 1.12."""
    return twohot_logits(head_out(p["out"], head_mlp(p, cfg, x)), cfg.bins)


def critic_value(p: Params, cfg: DreamerV3Config, x: jnp.ndarray) -> jnp.ndarray:
    """The critic's scalar prediction f32[...]: symmetric two-hot expectation (D22)."""
    return twohot_mean(critic_logits(p, cfg, x), twohot(cfg))
