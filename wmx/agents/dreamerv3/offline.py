"""Offline terms against model exploitation: DreamerV3 trained from a fixed dataset
(wmx extensions, not in the reference: deviations W-D10 and W-D11, docs/deviations.md).

Trained on a dataset, the actor can find actions the world model was never shown
and reads well: the reward head, fitted to an expert's data, predicts arrival where
the env would pay nothing (docs/validation.md, "DreamerV3 offline"). Two terms,
each off by default and chosen by config fields (`--set offline_...`):

- Behaviour cloning at the dataset's states (W-D10; TD3+BC, Fujimoto & Gu 2021,
  carried to the actor's imagination starts): every replayed row t is an
  imagination start s_t, and the dataset holds the action a_t taken there, so

      L_bc = offline_bc_weight · mean_{b,t} [(1 − is_last_t) · −log π(a_t | sg(s_t))]

  is added to the total loss. It trains the actor only (the start features are
  stop-gradiented, as every imagination input, spec 3.4). No extra
  normaliser: TD3+BC divides its Q term by mean |Q| so that the weight between
  the two terms does not depend on the reward scale; DreamerV3's actor already
  divides its advantages by the return normaliser's scale (spec 3.8-3.10), so
  the REINFORCE term and −log π are both in nats per start and
  offline_bc_weight is that relative weight directly. The last row of an
  episode stores action 0 (obs-aligned rows), which no policy chose: it is
  masked out (its elements still count in the mean, as every masked term of
  the reference's loss). Multi-task: the log-probability sums over the task's
  action dims (W-D8).

- Reward-ensemble disagreement penalty (W-D11; MOPO, Yu et al. 2020; LOMPO,
  Rafailov et al. 2021, for a latent model): `offline_ensemble` K extra reward
  heads {"e0".."e{K−1}"}, each the reward head's architecture and initialiser
  (`heads.init_reward`, its own draws), fitted to the same data rewards by the
  same two-hot loss on the stop-gradiented posterior features (they probe the
  world model's representation and do not train it: the world model and the
  actor-critic are those of K = 0 until the penalty is on). In imagination
  every imagined reward that enters the λ-return becomes

      r̂_t − offline_penalty_weight · std_k(r̂^k_t)      (t = 1..H; r_0 is the data's)

  with std the population standard deviation over the K heads' two-hot means.
  Where the heads agree (the dataset's states) the reward is the reward head's;
  where they extrapolate apart it is lowered in proportion.

Everything here is built only when its field is nonzero (a static branch on the
config), so with the fields at 0 the training step's program is the reference's.

Source: deviations W-D10, W-D11 (Fujimoto & Gu 2021, "A Minimalist Approach to
Offline Reinforcement Learning"; Yu et al. 2020, "MOPO: Model-based Offline Policy
Optimization"; Rafailov et al. 2021, "Offline Reinforcement Learning from Images
with Latent Space Models"); dreamerv3_spec 2.12, 3.4, 3.5, 3.8-3.11.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from wmx.agents.dreamerv3 import nets, outputs, policy_dist
from wmx.agents.dreamerv3.actor_critic import actor_dist
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.heads import init_reward, reward_logits

sg = jax.lax.stop_gradient
Params = dict


# ---- W-D10: behaviour cloning at the imagination starts -----------------------------------
def bc_nll(actor: Params, cfg: DreamerV3Config, x: jnp.ndarray, action: jnp.ndarray,
           valid: jnp.ndarray, mask: jnp.ndarray | None = None) -> jnp.ndarray:
    """−log π(action | x) at the imagination starts, zero where not ``valid``.

    Args:
      actor: the actor's params (the gradient reaches them only).
      cfg: the config (continuous: bounded-normal log-density summed over the
        action dims, no tanh Jacobian, spec 3.11, 3.13; discrete: the one-hot's
        log-probability under the mixed categorical).
      x: start features [N, F] (feat, or concat(feat, sg(e)) multi-task) in any
        float dtype; stop-gradiented here.
      action: the dataset's action at each start, f32[N, A] (one-hot f32[N, K]
        for discrete actions).
      valid: f32[N] or bool[N], 1 where the row's action was chosen by a policy
        (0 on is_last rows).
      mask: f32[N, A], 1 on the task's action dims (multi-task, W-D8), or None.
    Returns:
      f32[N] the per-start loss, unscaled.
    Source: deviation W-D10 (TD3+BC's behaviour-cloning term as a log-likelihood).
    """
    c = cfg.resolved()
    dist = actor_dist(actor, c, sg(x))
    a = sg(action.astype(jnp.float32))
    if c.discrete_actions:
        logp = policy_dist.onehot_log_prob(dist, a)
    else:
        logp = policy_dist.normal_log_prob(dist, a, mask)
    return valid.astype(jnp.float32) * -logp


# ---- W-D11: reward ensemble and its disagreement -----------------------------------------
def init_reward_ensemble(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """{"e0".."e{K−1}"}: K = cfg.offline_ensemble reward heads (`heads.init_reward`
    each, drawn in order). Source: deviation W-D11."""
    c = cfg.resolved()
    return {f"e{k}": init_reward(draw, c) for k in range(c.offline_ensemble)}


def ensemble_logits(ens: Params, cfg: DreamerV3Config, x: jnp.ndarray) -> list[jnp.ndarray]:
    """The K heads' two-hot logits f32[..., bins] at feat x [..., D + S*C], in head order."""
    return [reward_logits(ens[f"e{k}"], cfg, x) for k in range(len(ens))]


def ensemble_loss(ens: Params, cfg: DreamerV3Config, x: jnp.ndarray,
                  reward: jnp.ndarray) -> jnp.ndarray:
    """Σ_k two-hot NLL of the data reward under head k, on sg(x): f32[...].

    Args: x: posterior feat [..., D + S*C] (stop-gradiented here: the heads do not
    train the world model); reward: f32[...] the reward that entered each row.
    The sum gives every head the gradient the reward head gets from its own loss.
    Source: deviation W-D11; dreamerv3_spec 2.12."""
    spec = outputs.twohot(cfg)
    return sum(outputs.twohot_loss(lg, reward, spec)
               for lg in ensemble_logits(ens, cfg, sg(x)))


def ensemble_rewards(ens: Params, cfg: DreamerV3Config, x: jnp.ndarray) -> jnp.ndarray:
    """The K heads' predicted rewards (two-hot means), f32[K, ...] at feat x [...]."""
    spec = outputs.twohot(cfg)
    return jnp.stack([outputs.twohot_mean(lg, spec) for lg in ensemble_logits(ens, cfg, x)])


def disagreement_penalty(rewards: jnp.ndarray, weight: float) -> jnp.ndarray:
    """weight · std over axis 0 (population std, ddof 0) of rewards f32[K, ...]: f32[...].

    Source: deviation W-D11 (MOPO's uncertainty-penalised reward r̂ − λ u)."""
    return weight * jnp.std(rewards, axis=0)
