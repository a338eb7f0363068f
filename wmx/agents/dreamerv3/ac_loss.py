"""Actor-critic losses of DreamerV3: imagination from every posterior state, the
REINFORCE actor loss, the critic loss with the slow-critic regulariser, and the
replay critic loss (dreamerv3_spec 3.1-3.20, Algorithms F, G, H; 2411f7d
agent.py imag_loss / repl_loss).

Layout: N = B·T imagination starts, flattened batch-major (index b·T + t) so
that ``ret[:, 0].reshape(B, T)`` lines up with the replay rows (3.1, 3.19).
Trajectories have H + 1 states: index 0 is the posterior start, 1..H the
imagined prior states (3.2). Every imagined quantity is stop-gradiented
(ac_grads none, 3.4): the actor and the imagination critic train only their
own parameters; the replay critic reads the posterior features unstopped and
also trains the encoder and the RSSM (3.19).

2411f7d choices (reference_design 6.2): the start state's reward and
continuation come from the data (reward_t, hard 1 − is_terminal_t, no 0.997);
targets and advantages bootstrap from the online critic (slowtar False); the
retnorm EMAs are updated with this batch's returns before they are read (3.8);
the offset is not subtracted from the advantage (3.10).

Multi-task (W-D8): each function takes an optional ``task``
(`multitask.TaskInputs` per start [N] or per row [B, T]): the actor and critic
read concat(feat, sg(e)), the log-probability and entropy sum over the task's
action dims, imagination masks the padded action dims, and γ_i replaces the
fixed γ (replay return; the imagination's explicit disc without contdisc).
``task=None`` is the reference's computation.

Offline penalty (W-D11, `offline`; off by default): with offline_penalty_weight
λ > 0 every imagined reward r̂_1..r̂_H is lowered by λ · std of the reward
ensemble's predictions before the returns are computed.

Precision (spec 1.12): imagined states and actions are in the compute dtype
cfg.dtype (2411f7d casts each sampled action to it); every head output,
distribution, return, weight, normaliser statistic and loss is float32.

Source: dreamerv3_spec 3.1-3.20, Algorithms F-H, 1.12; deviations D4, D22, W-D8, W-D11.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from wmx.agents.dreamerv3 import nets, outputs, policy_dist
from wmx.agents.dreamerv3.actor_critic import actor_dist, actor_sample, critic_logits
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.heads import continue_logit, feat, reward_logits
from wmx.agents.dreamerv3.multitask import TaskInputs, ac_input, broadcast_to_steps
from wmx.agents.dreamerv3.offline import disagreement_penalty, ensemble_rewards
from wmx.agents.dreamerv3.returns import imagination_return, replay_return
from wmx.agents.dreamerv3.rssm import Feat, imagine_with_policy
from wmx.nn.return_normalizer import ReturnNormalizer, ReturnNormState

sg = jax.lax.stop_gradient
Params = dict


class Imagination(NamedTuple):
    """Imagined trajectories from N start states, all stop-gradiented, in the
    compute dtype (cfg.dtype; spec 1.12).

    feat: [N, H+1, D + S·C] features (index 0 the posterior start);
    action: [N, H+1, A] (one-hots [N, H+1, K] for discrete actions)
    sampled at each state, the last one never used (3.2).
    """

    feat: jnp.ndarray
    action: jnp.ndarray


class ImagOut(NamedTuple):
    """`imagination_loss` outputs; [N, H+1] unless said.

    actor, critic: f32[N, H] unscaled per-element losses.
    reward, cont: the r̂ and ĉ used (index 0 from the data; r̂ after the offline
    penalty when it is on); value, slowvalue:
    the online and slow critics' expectations; weight: cumulative continuation.
    ret, ret_normed, adv: f32[N, H]; entropy, logp: f32[N, H] of the policy.
    retnorm: the updated normaliser state; offset, scale: f32[] read after it.
    penalty: f32[N, H] the offline disagreement penalty subtracted from r̂_1..r̂_H
    (W-D11), or None when it is off.
    """

    actor: jnp.ndarray
    critic: jnp.ndarray
    reward: jnp.ndarray
    cont: jnp.ndarray
    value: jnp.ndarray
    slowvalue: jnp.ndarray
    weight: jnp.ndarray
    ret: jnp.ndarray
    ret_normed: jnp.ndarray
    adv: jnp.ndarray
    entropy: jnp.ndarray
    logp: jnp.ndarray
    retnorm: ReturnNormState
    offset: jnp.ndarray
    scale: jnp.ndarray
    penalty: jnp.ndarray | None = None


def retnorm(cfg: DreamerV3Config) -> ReturnNormalizer:
    """The return normaliser of a config (perc 5/95, rate 0.01, limit 1; spec 3.8)."""
    return ReturnNormalizer(cfg.retnorm_rate, cfg.retnorm_lo, cfg.retnorm_hi, cfg.retnorm_limit)


# ---- policy distribution helpers ---------------------------------------------------
def policy_log_prob(cfg: DreamerV3Config, dist, action: jnp.ndarray,
                    mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """log π(action) f32[...], summed over action dims (Normal, no tanh Jacobian) or
    of the one-hot under the mixed categorical (spec 3.11, 3.13-3.14); ``mask``
    f32[..., A]: only the task's dims (multi-task, continuous, W-D8)."""
    if cfg.discrete_actions:
        return policy_dist.onehot_log_prob(dist, action)
    return policy_dist.normal_log_prob(dist, action, mask)


def policy_entropy(cfg: DreamerV3Config, dist, mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """Entropy f32[...] of the policy (unsquashed Normal summed over dims, or the
    mixed categorical; spec 3.12); ``mask`` as `policy_log_prob`."""
    if cfg.discrete_actions:
        return policy_dist.onehot_entropy(dist)
    return policy_dist.normal_entropy(dist, mask)


def entropy_bounds(cfg: DreamerV3Config, action_dim=None):
    """(minent, maxent) of the policy's distribution family (the 'rand' metric): floats,
    or arrays like ``action_dim`` (f32[...] valid dims per start, multi-task W-D8)."""
    if cfg.discrete_actions:
        return policy_dist.onehot_entropy_bounds(cfg.action_dim)
    if action_dim is None:
        return policy_dist.normal_entropy_bounds(cfg.action_dim, cfg.minstd, cfg.maxstd)
    lo, hi = policy_dist.normal_entropy_bounds(1, cfg.minstd, cfg.maxstd)
    return action_dim * lo, action_dim * hi


# ---- imagination -------------------------------------------------------------------
def imagine(params: Params, cfg: DreamerV3Config, post: Feat, start_noise: jnp.ndarray,
            prior_noise: jnp.ndarray, policy_noise: jnp.ndarray,
            task: TaskInputs | None = None) -> Imagination:
    """H policy-driven imagination steps from every posterior state (3.1-3.3).

    Args:
      post: posterior `Feat` with leaves [B, T, ...] (only deter and stoch are read).
      start_noise: the policy noise at the N = B·T starts, f32[N, A] (continuous)
        or f32[N] / int32[N] (discrete); the fixtures' ``start_eps``.
      prior_noise: int32[N, H, S] indices or f32[N, H, S] uniforms (``imag_prior_idx``).
      policy_noise: f32[N, H, A] (continuous) or [N, H] (discrete) (``imag_eps``).
      task: multi-task inputs of the N starts (leaves [N, ...]) or None.
    Returns:
      Imagination (stop-gradiented features and actions, [N, H+1, ...], in cfg.dtype).
    Source: dreamerv3_spec 3.1-3.4, Algorithm C, 1.12 (2411f7d: start latent and
    action sg'd, the action cast to the compute dtype).
    """
    c = cfg.resolved()
    params = sg({"rssm": params["rssm"], "actor": params["actor"]})   # no gradient (3.4)
    n = post.deter.shape[0] * post.deter.shape[1]
    deter = sg(post.deter.reshape(n, -1))
    stoch = sg(post.stoch.reshape(n, *post.stoch.shape[2:]))
    task = sg(task)
    x0 = feat(deter, stoch)
    a0 = sg(nets.cast(actor_sample(params["actor"], c, ac_input(x0, task), start_noise),
                      c.dtype))
    policy = lambda d, s, e: actor_sample(params["actor"], c,  # noqa: E731
                                          ac_input(feat(d, s), task), e)
    traj, acts = imagine_with_policy(params["rssm"], c, deter, stoch, a0, policy,
                                     prior_noise, policy_noise, task)
    allfeat = jnp.concatenate([x0[:, None], feat(traj.deter, traj.stoch)], 1)
    return Imagination(sg(allfeat), jnp.concatenate([a0[:, None], acts], 1))


def imagination_loss(params: Params, slow_critic: Params, cfg: DreamerV3Config,
                     imag: Imagination, reward0: jnp.ndarray, cont0: jnp.ndarray,
                     norm_state: ReturnNormState, task: TaskInputs | None = None) -> ImagOut:
    """Actor and critic losses on imagined trajectories (Algorithm F).

    Args:
      params: the full params tree (rew, con, actor, critic are read).
      slow_critic: the slow critic's params (critic layout).
      imag: from `imagine`.
      reward0: f32[N] the data reward of each start row; cont0: f32[N] its hard
        1 − is_terminal (2411f7d start values, reference_design 6.2).
      norm_state: the return normaliser before this step.
      task: multi-task inputs of the N starts (leaves [N, ...]) or None (W-D8).
    Returns:
      ImagOut (losses f32[N, H] unscaled; the normaliser state after its update).
    Source: dreamerv3_spec 3.5-3.12, 3.17, Algorithms F and H; W-D8, W-D11.
    """
    c = cfg.resolved()
    spec = outputs.twohot(c)
    x = imag.feat
    heads = sg({"rew": params["rew"], "con": params["con"]})   # only in sg'd quantities
    rew_hat = outputs.twohot_mean(reward_logits(heads["rew"], c, x[:, 1:]), spec)
    con_hat = outputs.binary_prob(continue_logit(heads["con"], c, x[:, 1:]))
    penalty = None
    if c.offline_penalty:        # W-D11: r̂ − λ std_k r̂^k on the imagined states
        penalty = disagreement_penalty(ensemble_rewards(sg(params["rew_ens"]), c, x[:, 1:]),
                                       c.offline_penalty_weight)
        rew_hat = rew_hat - penalty
    reward = sg(jnp.concatenate([reward0[:, None], rew_hat], 1))
    cont = sg(jnp.concatenate([cont0[:, None], con_hat], 1))
    xa = ac_input(x, task)
    with jax.named_scope("critic"):
        logits = critic_logits(params["critic"], c, xa)
        value = outputs.twohot_mean(logits, spec)
        slowvalue = sg(outputs.twohot_mean(critic_logits(slow_critic, c, xa), spec))
    disc = c.imag_discount if task is None or c.contdisc else task.discount[:, None]
    weight = sg(jnp.cumprod(disc * cont, 1) / disc)
    ret = sg(imagination_return(reward, cont, value, disc=disc, lam=c.lam))
    norm = retnorm(c)
    new_norm = norm.update(norm_state, ret)
    offset, scale = new_norm.lo, norm.scale(new_norm)
    adv = sg((ret - value[:, :-1]) / scale)
    with jax.named_scope("actor"):
        dist = actor_dist(params["actor"], c, xa)
        mask = None if task is None else broadcast_to_steps(task.action_mask, imag.action)
        logp = policy_log_prob(c, dist, sg(nets.f32(imag.action)), mask)[:, :-1]
        ent = policy_entropy(c, dist, mask)[:, :-1]
        actor = weight[:, :-1] * -(logp * adv + c.actent * ent)
    with jax.named_scope("critic"):
        target = jnp.concatenate([ret, jnp.zeros_like(ret[:, -1:])], 1)
        critic = weight[:, :-1] * (outputs.twohot_loss(logits, target, spec)
                                   + c.slowreg * outputs.twohot_loss(logits, slowvalue, spec)
                                   )[:, :-1]
    return ImagOut(actor, critic, reward, cont, sg(value), slowvalue, weight, ret,
                   (ret - offset) / scale, adv, sg(ent), sg(logp), new_norm, offset, scale,
                   penalty)


def replay_critic_loss(params: Params, slow_critic: Params, cfg: DreamerV3Config,
                       post: Feat, reward: jnp.ndarray, is_last: jnp.ndarray,
                       is_terminal: jnp.ndarray, boot: jnp.ndarray,
                       task: TaskInputs | None = None) -> tuple[jnp.ndarray, jnp.ndarray]:
    """The replay critic loss ("repval", Algorithm G), not stop-gradiented.

    Args:
      post: posterior `Feat` [B, T, ...] of the world-model pass (the gradient
        reaches the encoder and the RSSM through it).
      reward: f32[B, T]; is_last, is_terminal: bool[B, T] (annotated).
      boot: f32[B, T] the imagination return R_0 started at each row.
      task: multi-task inputs of the rows (leaves [B, T, ...]) or None: the critic
        reads concat(feat, sg(e)) and the return discounts with the arrival row's
        γ_i (W-D8).
    Returns:
      (loss f32[B, T−1] unscaled, masked by 1 − is_last_t; replay returns
      f32[B, T−1]).
    Source: dreamerv3_spec 3.19, Algorithms G and H (γ = 1 − 1/333 fixed, λ 0.95); W-D8.
    """
    c = cfg.resolved()
    spec = outputs.twohot(c)
    x = ac_input(feat(post.deter, post.stoch), task)
    disc = c.gamma if task is None else task.discount[:, 1:]
    ret = sg(replay_return(reward, is_last, is_terminal, sg(boot), disc=disc,
                           lam=c.repval_lam))
    logits = critic_logits(params["critic"], c, x)
    slowvalue = sg(outputs.twohot_mean(critic_logits(slow_critic, c, x), spec))
    target = jnp.concatenate([ret, jnp.zeros_like(ret[:, -1:])], 1)
    mask = (~is_last).astype(jnp.float32)[:, :-1]
    loss = mask * (outputs.twohot_loss(logits, target, spec)
                   + c.slowreg * outputs.twohot_loss(logits, slowvalue, spec))[:, :-1]
    return loss, ret
