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
    """concat(deter f32[..., D], stoch f32[..., S, C] flattened), f32[..., D + S*C].

    Source: dreamerv3_spec 2.1 (feat2tensor; 2411f7d Input(('deter', 'stoch')))."""
    return jnp.concatenate([deter, stoch.reshape(*stoch.shape[:-2], -1)], -1)


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
    """Embedding f32[..., units] of observations f32[..., obs_dim]: symlog, then the
    hidden blocks. Multi-task (``task`` with leaves [...]): the input is
    concat(symlog(obs) * obs_mask, e), so padded obs dims do not enter.
    Source: dreamerv3_spec 2.9 (symlog of continuous inputs); W-D8."""
    x = symlog(obs.astype(jnp.float32))
    if task is not None:
        x = jnp.concatenate([x * task.obs_mask, task.emb], -1)
    return nets.mlp(p, x, cfg.rms_eps)


# ---- decoder -----------------------------------------------------------------
def init_decoder(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """{"h0".., "out": Linear(units -> obs_dim, outscale cfg.dec_outscale = 0.1)}.

    Source: dreamerv3_spec 1.5 version note (2411f7d Dist default outscale 0.1), 2.11."""
    c = cfg.resolved()
    return _mlp_head(draw, c.feat_dim, c.units, c.dec_layers, c.obs_dim, c.dec_outscale)


def decode(p: Params, cfg: DreamerV3Config, deter: jnp.ndarray,
           stoch: jnp.ndarray) -> jnp.ndarray:
    """Symlog-space reconstruction f32[..., obs_dim] (loss: `outputs.symlog_mse_loss`).

    Args: deter f32[..., D], stoch f32[..., S, C]. Source: dreamerv3_spec 2.11."""
    x = nets.mlp(p, feat(deter, stoch), cfg.rms_eps)
    return nets.linear(p["out"], x)


# ---- reward ------------------------------------------------------------------
def init_reward(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """{"h0".., "out": Linear(units -> bins + 1, outscale 0)}: zero output layer.

    Source: dreamerv3_spec 2.12, 1.9 (256 outputs for 255 bins, 2411f7d)."""
    c = cfg.resolved()
    return _mlp_head(draw, c.feat_dim, c.units, c.rew_layers, c.twohot_outputs, c.rew_outscale)


def reward_logits(p: Params, cfg: DreamerV3Config, x: jnp.ndarray) -> jnp.ndarray:
    """Two-hot logits f32[..., bins] of the reward from feat x f32[..., D + S*C]
    (prediction: `outputs.twohot_mean`, loss: `outputs.twohot_loss`).
    Source: dreamerv3_spec 2.12."""
    h = nets.mlp(p, x, cfg.rms_eps)
    return twohot_logits(nets.linear(p["out"], h), cfg.bins)


# ---- continue ----------------------------------------------------------------
def init_continue(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """{"h0".., "out": Linear(units -> 1, outscale 1)}. Source: dreamerv3_spec 2.13."""
    c = cfg.resolved()
    return _mlp_head(draw, c.feat_dim, c.units, c.con_layers, 1, c.con_outscale)


def continue_logit(p: Params, cfg: DreamerV3Config, x: jnp.ndarray) -> jnp.ndarray:
    """Bernoulli logit f32[...] of continuing, from feat x f32[..., D + S*C]
    (target cfg.cont_target_scale * (1 - is_terminal); loss `outputs.binary_loss`).
    Source: dreamerv3_spec 2.13."""
    h = nets.mlp(p, x, cfg.rms_eps)
    return nets.linear(p["out"], h)[..., 0]
