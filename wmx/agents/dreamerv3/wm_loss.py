"""The world-model part of DreamerV3's loss on a replayed sequence
(dreamerv3_spec 2.11-2.15, Algorithm E; 2411f7d agent.py `Agent.loss`, first half).

Per element of the trained rows [B, T], unscaled (the scales are applied by
`loss.total_loss`):

- ``vector``: symlog MSE of the decoder, summed over the observation features
  (one key: deviation D5);
- ``reward``: two-hot NLL of the raw reward that entered obs t;
- ``cont``: soft-label Bernoulli NLL of cont_target_scale · (1 − is_terminal)
  (0.997 with contdisc);
- ``dyn`` / ``rep``: free-bits KL(post ‖ prior) with the stop-gradient on the
  posterior / prior (`rssm.rssm_loss`).

The heads read feat = concat(deter, stoch) of the posterior, not
stop-gradiented (reward_grad True), so every term trains the encoder and the
RSSM through the straight-through posterior samples.

Multi-task (W-D8, `multitask`): with ``task`` the encoder and the dynamics get
the task embedding and masks, the vector loss sums over the task's obs dims
and the continue target is γ_i (1 − is_terminal).

Source: dreamerv3_spec 2.11-2.15, Algorithm E, 1.12; deviations D4 (compute dtype), D5, W-D8.
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from wmx.agents.dreamerv3 import outputs
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.heads import continue_logit, decode, encode, feat, reward_logits
from wmx.agents.dreamerv3.multitask import TaskInputs
from wmx.agents.dreamerv3.rssm import Carry, Feat, observe, rssm_loss

Params = dict
WM_TERMS = ("vector", "reward", "cont", "dyn", "rep")
"""Names of the world-model loss terms (the reference's loss keys)."""


class WorldModelOut(NamedTuple):
    """Everything the world-model forward pass gives the rest of the step.

    losses: {WM_TERMS: f32[B, T]} unscaled per-element losses.
    embed: f32[B, T, units] encoder outputs.
    post: `rssm.Feat` [B, T, ...] posterior deter, straight-through stoch and
      mixed logits (the imagination starts and the replay write-back).
    carry: `rssm.Carry` after the last step (deter, stoch of step T−1,
      prevact = action[:, −1]).
    post_ent, prior_ent: f32[B, T] entropies (summed over latents).
    reward_mean: f32[B, T] the reward head's expectation on the posterior.
    cont_logit: f32[B, T] the continue head's logit on the posterior.
    """

    losses: dict
    embed: jnp.ndarray
    post: Feat
    carry: Carry
    post_ent: jnp.ndarray
    prior_ent: jnp.ndarray
    reward_mean: jnp.ndarray
    cont_logit: jnp.ndarray


def world_model_loss(params: Params, cfg: DreamerV3Config, carry: Carry, obs: jnp.ndarray,
                     action: jnp.ndarray, reward: jnp.ndarray, is_first: jnp.ndarray,
                     is_terminal: jnp.ndarray, post_noise: jnp.ndarray,
                     task: TaskInputs | None = None) -> WorldModelOut:
    """Filter the replayed rows and score the heads (Algorithm E).

    Args:
      params: the full params tree (enc, rssm, dec, rew, con are read).
      carry: `rssm.Carry` [B, ...] before the first trained row (the replay
        context's stored latents, or zeros), carry.prevact the action taken
        before obs[:, 0].
      obs: f32[B, T, O]; action: f32[B, T, A] (action[:, t] chosen at obs t);
      reward: f32[B, T] (entering obs t); is_first, is_terminal: bool[B, T].
      post_noise: int32[B, T, S] injected class indices or f32[B, T, S] uniforms.
      task: multi-task inputs of the rows (leaves [B, T, ...]) or None (W-D8).
    Returns:
      WorldModelOut (losses unscaled).
    Source: dreamerv3_spec Algorithm E, 2.11-2.14; deviations D5, W-D8.
    """
    c = cfg.resolved()
    embed = encode(params["enc"], c, obs, task)
    carry_out, post = observe(params["rssm"], c, carry, embed, action, is_first, post_noise,
                              task)
    kl = rssm_loss(params["rssm"], c, post.deter, post.logit)
    x = feat(post.deter, post.stoch)
    rew_logits = reward_logits(params["rew"], c, x)
    con_logit = continue_logit(params["con"], c, x)
    scale = c.cont_target_scale
    if task is not None and c.contdisc:
        scale = task.discount
    cont_target = (1.0 - is_terminal.astype(jnp.float32)) * scale
    losses = {
        "vector": outputs.symlog_mse_loss(decode(params["dec"], c, post.deter, post.stoch),
                                          obs, c.mse_tol,
                                          None if task is None else task.obs_mask),
        "reward": outputs.twohot_loss(rew_logits, reward, outputs.twohot(c)),
        "cont": outputs.binary_loss(con_logit, cont_target),
        "dyn": kl.dyn,
        "rep": kl.rep,
    }
    return WorldModelOut(losses, embed, post, carry_out, kl.post_ent, kl.prior_ent,
                         outputs.twohot_mean(rew_logits, outputs.twohot(c)), con_logit)
