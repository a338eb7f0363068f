"""The training metrics of a DreamerV3 step, under the names the reference's
`train` returns (29eb964; fixtures README "metrics/<metric>").

- ``<term>_loss`` / ``<term>_loss_std``: mean and std of each unscaled loss term.
- ``tensorstats`` groups ``<name>/mean|std|mag|min|max|dist`` (mag = mean |x|,
  dist = the flattened tensor): act/action (the H+1 imagined actions),
  ent/action and rand/action (policy entropy and its position in
  [minent, maxent], states 0..H−1), adv, ret, ret_normed, rew, val, weight
  (imagination), replay_ret, post_ent, prior_ent.
- ``rewstats`` / ``constats``: balance statistics of the reward head
  (threshold 0.1, target the data reward) and the continue head (threshold
  0.5, target the hard 1 − is_terminal): pos/neg losses and accuracies, rate,
  avg, pred. They are NaN when a batch has no positive (or no negative)
  element, as in the reference (which aggregates with nanmean).
- data_rew (data rewards) and pred_rew (the imagined rewards, as the
  reference) max/mean/std; activation/embed = mean |embed|; td_error = mean
  |R − v|; ret_rate = mean(|R| >= 1) (inferred from the fixtures: all 378
  hot returns have |R| >= 1.27 and rate 1, all init ones |R| <= 0.21 and rate 0).
- opt_*: `optim.opt_metrics`.
- Offline terms, only when on (wmx extensions): ``offline_bc_loss`` (W-D10),
  ``offline_ensemble_loss`` (W-D11) and the tensorstats of ``offline_penalty``
  (W-D11).

Source: 29eb964 / 2411f7d agent.py and jaxutils tensorstats / balance_stats
(reconstructed from the fixtures' values; spec 3.20).
"""
from __future__ import annotations

import jax.numpy as jnp

from wmx.agents.dreamerv3 import nets, outputs
from wmx.agents.dreamerv3.ac_loss import entropy_bounds
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.loss import LossAux, loss_terms
from wmx.agents.dreamerv3.replay import TrainSequence


def tensorstats(x: jnp.ndarray, name: str) -> dict[str, jnp.ndarray]:
    """{name/mean, /std, /mag, /min, /max} f32[] and {name/dist} f32[x.size]."""
    x = x.astype(jnp.float32)
    return {f"{name}/mean": jnp.mean(x), f"{name}/std": jnp.std(x),
            f"{name}/mag": jnp.mean(jnp.abs(x)), f"{name}/min": jnp.min(x),
            f"{name}/max": jnp.max(x), f"{name}/dist": x.reshape(-1)}


def balance_stats(pred: jnp.ndarray, loss: jnp.ndarray, target: jnp.ndarray,
                  thres: float) -> dict[str, jnp.ndarray]:
    """Balance statistics of a scalar prediction (f32[] each; NaN without positives
    or negatives).

    Args: pred f32[...] the head's mean; loss f32[...] its -log p(target);
    target f32[...]; thres: the positive/negative threshold.
    """
    target = target.astype(jnp.float32)
    pos = (target > thres).astype(jnp.float32)
    neg = (target <= thres).astype(jnp.float32)
    hit = (pred > thres).astype(jnp.float32)
    return {"pos_loss": jnp.sum(loss * pos) / jnp.sum(pos),
            "neg_loss": jnp.sum(loss * neg) / jnp.sum(neg),
            "pos_acc": jnp.sum(hit * pos) / jnp.sum(pos),
            "neg_acc": jnp.sum((1.0 - hit) * neg) / jnp.sum(neg),
            "rate": jnp.mean(pos), "avg": jnp.mean(target), "pred": jnp.mean(pred)}


def train_metrics(aux: LossAux, seq: TrainSequence, cfg: DreamerV3Config) -> dict:
    """The reference's metrics of one step (without opt_*; see `optim.opt_metrics`).

    Args: aux from `loss.total_loss`; seq: the step's `replay.TrainSequence`.
    Returns: {name: f32[] or f32[n] for the ``/dist`` entries}.
    """
    c = cfg.resolved()
    m: dict = {}
    for k in loss_terms(c):
        m[f"{k}_loss"] = jnp.mean(aux.losses[k])
        m[f"{k}_loss_std"] = jnp.std(aux.losses[k])
    ac = aux.ac
    if aux.task is None:
        lo, hi = entropy_bounds(c)
    else:   # multi-task: each start's own action dims (W-D8)
        lo, hi = entropy_bounds(c, aux.task.action_dim.reshape(-1, 1))
    m.update(tensorstats(aux.imag.action, "act/action"))
    m.update(tensorstats(ac.entropy, "ent/action"))
    m.update(tensorstats((ac.entropy - lo) / (hi - lo), "rand/action"))
    for name, x in (("adv", ac.adv), ("ret", ac.ret), ("ret_normed", ac.ret_normed),
                    ("rew", ac.reward), ("val", ac.value), ("weight", ac.weight),
                    ("replay_ret", aux.replay_ret), ("post_ent", aux.wm.post_ent),
                    ("prior_ent", aux.wm.prior_ent)):
        m.update(tensorstats(x, name))
    for name, x in (("data_rew", seq.reward), ("pred_rew", ac.reward)):
        x = x.astype(jnp.float32)
        m.update({f"{name}/max": jnp.max(x), f"{name}/mean": jnp.mean(x),
                  f"{name}/std": jnp.std(x)})
    if ac.penalty is not None:       # W-D11
        m.update(tensorstats(ac.penalty, "offline_penalty"))
    m["activation/embed"] = jnp.mean(jnp.abs(nets.f32(aux.wm.embed)))
    m["td_error"] = jnp.mean(jnp.abs(ac.ret - ac.value[:, :-1]))
    m["ret_rate"] = jnp.mean((jnp.abs(ac.ret) >= 1.0).astype(jnp.float32))
    rew = balance_stats(aux.wm.reward_mean, aux.losses["reward"], seq.reward, 0.1)
    cont = 1.0 - seq.is_terminal.astype(jnp.float32)
    con = balance_stats(outputs.binary_prob(aux.wm.cont_logit),
                        outputs.binary_loss(aux.wm.cont_logit, cont), cont, 0.5)
    m.update({f"rewstats/{k}": v for k, v in rew.items()})
    m.update({f"constats/{k}": v for k, v in con.items()})
    return m
