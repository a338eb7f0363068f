"""World-model encoder, decoder, reward and continue heads for vector
observations (dreamerv3_spec 2.9, 2.11-2.13; 2411f7d SimpleEncoder,
SimpleDecoder, MLP + Dist).

Params are dicts of `nets` layers: hidden blocks "h0".. (Linear -> RMSNorm ->
SiLU, width cfg.units) plus an output Linear "out" where the module has one.
The heads read feat = concat(deter, stoch.reshape(S*C)) (`feat`); the decoder
too (2411f7d's input order; HEAD puts stoch first, a layout-only difference,
spec 2.17). The decoder has one head for the flat observation vector
(deviation D5). Initialisers take a `nets.Draw` (see `params.init_params`).
A multi-task config (W-D8) widens the encoder's input by the task embedding
and masks the padded observation dims (`multitask`); the heads are unchanged.

Precision (spec 1.12, cfg.dtype): the encoder symlogs in float32 and then
computes in the compute dtype, so the embedding is in it; the heads cast
their input feat to it and their output Linear's values to float32 (2411f7d
`Dist`: `.astype(f32)` before any distribution maths).
"""
from __future__ import annotations

import jax.numpy as jnp

from wmx.agents.dreamerv3 import nets
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.multitask import TaskInputs
from wmx.agents.dreamerv3.outputs import twohot_logits
from wmx.nn.symlog import symlog

Params = dict


def feat(deter: jnp.ndarray, stoch: jnp.ndarray) -> jnp.ndarray:
    """concat(deter [..., D], stoch [..., S, C] flattened), [..., D + S*C], both in
    one dtype (the compute dtype).

    Source: dreamerv3_spec 2.1 (feat2tensor; 2411f7d Input(('deter', 'stoch')))."""
    return jnp.concatenate([deter, stoch.reshape(*stoch.shape[:-2], -1)], -1)


def head_mlp(p: Params, cfg: DreamerV3Config, x: jnp.ndarray) -> jnp.ndarray:
    """The hidden blocks of a head on x [..., F] cast to the compute dtype:
    [..., units] in cfg.dtype (2411f7d MLP: Input(..., COMPUTE_DTYPE)).
    Source: dreamerv3_spec 1.4, 1.12."""
    return nets.mlp(p, nets.cast(x, cfg.dtype), cfg.rms_eps)


def head_out(p: nets.Layer, h: jnp.ndarray) -> jnp.ndarray:
    """A head's output Linear on h [..., units] (compute dtype), cast to float32:
    f32[..., U] (2411f7d Dist: `.astype(f32)`). Source: dreamerv3_spec 1.12."""
    return nets.f32(nets.linear(p, h))


def _mlp_head(draw: nets.Draw, in_dim: int, units: int, layers: int, out_dim: int,
              outscale: float) -> Params:
    p = nets.init_mlp(draw, in_dim, units, layers)
    p["out"] = nets.init_linear(draw, units, out_dim, outscale=outscale)
    return p


# ---- encoder -----------------------------------------------------------------
def init_encoder(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """{"h0".."h{enc_layers-1}"}: obs_dim (+ task_dim multi-task) -> units -> ...
    (no output projection).

    Source: dreamerv3_spec 2.9; W-D8 (the task input)."""
    c = cfg.resolved()
    return nets.init_mlp(draw, c.obs_dim + c.task_width, c.units, c.enc_layers)


def encode(p: Params, cfg: DreamerV3Config, obs: jnp.ndarray,
           task: TaskInputs | None = None) -> jnp.ndarray:
    """Embedding [..., units] in the compute dtype (cfg.dtype) of observations
    f32[..., obs_dim]: symlog in float32, cast, then the hidden blocks.
    Multi-task (``task`` with leaves [...]): the input is
    concat(symlog(obs) * obs_mask, e), so padded obs dims do not enter.
    Source: dreamerv3_spec 2.9 (symlog of continuous inputs), 1.6, 1.12; W-D8."""
    x = symlog(obs.astype(jnp.float32))
    if task is not None:
        x = jnp.concatenate([x * task.obs_mask, task.emb], -1)
    return head_mlp(p, cfg, x)


# ---- decoder -----------------------------------------------------------------
def init_decoder(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """{"h0".., "out": Linear(units -> obs_dim, outscale cfg.dec_outscale = 0.1)}.

    Source: dreamerv3_spec 1.5 version note (2411f7d Dist default outscale 0.1), 2.11."""
    c = cfg.resolved()
    return _mlp_head(draw, c.feat_dim, c.units, c.dec_layers, c.obs_dim, c.dec_outscale)


def decode(p: Params, cfg: DreamerV3Config, deter: jnp.ndarray,
           stoch: jnp.ndarray) -> jnp.ndarray:
    """Symlog-space reconstruction f32[..., obs_dim] (loss: `outputs.symlog_mse_loss`).

    Args: deter [..., D], stoch [..., S, C] (compute dtype).
    Source: dreamerv3_spec 2.11, 1.12."""
    return head_out(p["out"], head_mlp(p, cfg, feat(deter, stoch)))


# ---- reward ------------------------------------------------------------------
def init_reward(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """{"h0".., "out": Linear(units -> bins + 1, outscale 0)}: zero output layer.

    Source: dreamerv3_spec 2.12, 1.9 (256 outputs for 255 bins, 2411f7d)."""
    c = cfg.resolved()
    return _mlp_head(draw, c.feat_dim, c.units, c.rew_layers, c.twohot_outputs, c.rew_outscale)


def reward_logits(p: Params, cfg: DreamerV3Config, x: jnp.ndarray) -> jnp.ndarray:
    """Two-hot logits f32[..., bins] of the reward from feat x [..., D + S*C]
    (prediction: `outputs.twohot_mean`, loss: `outputs.twohot_loss`).
    Source: dreamerv3_spec 2.12, 1.12."""
    return twohot_logits(head_out(p["out"], head_mlp(p, cfg, x)), cfg.bins)


# ---- continue ----------------------------------------------------------------
def init_continue(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """{"h0".., "out": Linear(units -> 1, outscale 1)}. Source: dreamerv3_spec 2.13."""
    c = cfg.resolved()
    return _mlp_head(draw, c.feat_dim, c.units, c.con_layers, 1, c.con_outscale)


def continue_logit(p: Params, cfg: DreamerV3Config, x: jnp.ndarray) -> jnp.ndarray:
    """Bernoulli logit f32[...] of continuing, from feat x [..., D + S*C]
    (target cfg.cont_target_scale * (1 - is_terminal); loss `outputs.binary_loss`).
    Source: dreamerv3_spec 2.13, 1.12."""
    return head_out(p["out"], head_mlp(p, cfg, x))[..., 0]
