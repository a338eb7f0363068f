"""DreamerV3's total loss: world model, imagination actor-critic and replay critic
in one forward pass, with every random draw as an explicit array
(dreamerv3_spec 3.20, 4.1; 2411f7d agent.py `Agent.loss`).

Randomness (the three draw sites of a reference training call, fixtures
README "Injected draws"): `TrainNoise` holds the posterior samples of the
observe scan, the policy noise at the imagination starts, and the prior
samples and policy noise of every imagined step. `draw_train_noise` makes
them from one key (uniforms for the categoricals, inverse-CDF sampling;
standard normals for the continuous policy); a test injects the reference's
recorded class indices and normals instead.

Total: L = Σ_k mean(scale_k · loss_k) over the terms vector, reward, cont,
dyn, rep [B, T], actor, critic [B·T, H] and replay_critic [B, T−1], each
element scaled before its mean (2411f7d; masked and weighted-out elements
count in the denominator).

Multi-task (W-D8): with a `multitask.TaskContext` the rows' task ids
(``seq.task`` i32[B, T]) select each row's embedding, masks and γ_i, passed to
every part of the loss (`multitask.task_inputs`); without one (``tasks=None``)
the loss is the reference's.

Offline terms (`offline`, off by default): ``offline_bc`` [B, T] (W-D10, scale
offline_bc_weight) and ``offline_ensemble`` [B, T] (W-D11, the reward ensemble's
fit, scale rew_scale) join the terms only when their config field is nonzero
(`loss_terms`); the ensemble's penalty acts inside `imagination_loss`.

The parts run under name scopes (op metadata only, read by
``benchmarks/profile_step.py``): "world_model", "imagination", "actor_critic" (with
"actor" and "critic" inside, `ac_loss.imagination_loss`), "replay_critic",
"offline"; `draw_train_noise` under "noise".

Source: dreamerv3_spec 3.20, 4.1, Algorithms E-G; deviations D4, D5, W-D6 (the draws),
W-D8, W-D10, W-D11.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from wmx.agents.dreamerv3.ac_loss import (Imagination, ImagOut, imagination_loss, imagine,
                                          replay_critic_loss)
from wmx.agents.dreamerv3.actor_critic import draw_policy_noise
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.heads import feat
from wmx.agents.dreamerv3.multitask import (TaskContext, TaskInputs, ac_input, flatten,
                                            task_inputs)
from wmx.agents.dreamerv3.offline import bc_nll, ensemble_loss
from wmx.agents.dreamerv3.replay import TrainSequence
from wmx.agents.dreamerv3.rssm import Carry, draw_latent_noise
from wmx.agents.dreamerv3.wm_loss import WorldModelOut, world_model_loss
from wmx.nn.return_normalizer import ReturnNormState

Params = dict
TERMS = ("vector", "reward", "cont", "dyn", "rep", "actor", "critic", "replay_critic")
"""Loss terms in the reference's names (metrics ``<term>_loss``)."""
OFFLINE_TERMS = ("offline_bc", "offline_ensemble")
"""The offline extensions' loss terms (W-D10, W-D11), present when switched on."""


def loss_terms(cfg: DreamerV3Config) -> tuple[str, ...]:
    """The terms of the total loss: TERMS, then "offline_bc" when offline_bc_weight > 0
    (W-D10) and "offline_ensemble" when offline_ensemble > 0 (W-D11)."""
    return TERMS + (("offline_bc",) if cfg.offline_bc else ()) + \
        (("offline_ensemble",) if cfg.offline_ensemble else ())


class TrainNoise(NamedTuple):
    """Every random draw of one training step (N = B·T imagination starts).

    post: posterior samples, int32[B, T, S] class indices or f32[B, T, S]
      uniforms (fixture ``post_idx``).
    start: policy noise at the starts, f32[N, A] normals (continuous) or
      f32[N] uniforms / int32[N] indices (discrete) (``start_eps``).
    imag_prior: prior samples of imagined steps 1..H, int32[N, H, S] or
      f32[N, H, S] (``imag_prior_idx``).
    imag_policy: policy noise at imagined states 1..H, f32[N, H, A] or [N, H]
      (``imag_eps``).
    """

    post: jnp.ndarray
    start: jnp.ndarray
    imag_prior: jnp.ndarray
    imag_policy: jnp.ndarray


class LossAux(NamedTuple):
    """What the loss forward pass returns besides the total.

    losses: {`loss_terms`: per-element losses, unscaled}; wm: `wm_loss.WorldModelOut`;
    imag: `ac_loss.Imagination`; ac: `ac_loss.ImagOut` (incl. the updated
    return normaliser); replay_ret: f32[B, T−1] replay λ-returns; task: the
    rows' `multitask.TaskInputs` [B, T] (multi-task) or None.
    """

    losses: dict
    wm: WorldModelOut
    imag: Imagination
    ac: ImagOut
    replay_ret: jnp.ndarray
    task: TaskInputs | None = None


def draw_train_noise(key: jax.Array, cfg: DreamerV3Config, batch: int,
                     length: int) -> TrainNoise:
    """The draws of one training step on `batch` sequences of `length` trained rows.

    Four draws from ``split(key, 4)`` in TrainNoise order (uniforms for the
    latents, the policy's `actor_critic.draw_policy_noise` forms).
    """
    c = cfg.resolved()
    n, h = batch * length, c.imag_horizon
    with jax.named_scope("noise"):
        k = jax.random.split(key, 4)
        return TrainNoise(draw_latent_noise(k[0], c, (batch, length)),
                          draw_policy_noise(k[1], c, (n,)),
                          draw_latent_noise(k[2], c, (n, h)),
                          draw_policy_noise(k[3], c, (n, h)))


def loss_scales(cfg: DreamerV3Config) -> dict[str, float]:
    """{`loss_terms(cfg)`: scale} (rec 1, rew 1, con 1, dyn 1, rep 0.1, actor 1, critic 1,
    replay critic 0.3, spec 4.1; when on, offline_bc: offline_bc_weight, W-D10, and
    offline_ensemble: rew_scale, as the reward head's, W-D11)."""
    scales = {"vector": cfg.rec_scale, "reward": cfg.rew_scale, "cont": cfg.con_scale,
              "dyn": cfg.dyn_scale, "rep": cfg.rep_scale, "actor": cfg.policy_scale,
              "critic": cfg.value_scale, "replay_critic": cfg.repval_scale,
              "offline_bc": cfg.offline_bc_weight, "offline_ensemble": cfg.rew_scale}
    return {k: scales[k] for k in loss_terms(cfg)}


def sequence_carry(seq: TrainSequence) -> Carry:
    """The filter carry before the first trained row: the context latents and the
    previous action seq.prevact[:, 0] (29eb964)."""
    return Carry(seq.deter0.astype(jnp.float32), seq.stoch0.astype(jnp.float32),
                 seq.prevact[:, 0].astype(jnp.float32))


def total_loss(params: Params, slow_critic: Params, norm_state: ReturnNormState,
               seq: TrainSequence, noise: TrainNoise, cfg: DreamerV3Config,
               tasks: TaskContext | None = None) -> tuple[jnp.ndarray, LossAux]:
    """The scalar loss of one step and its auxiliary outputs (spec 3.20 steps 1-6).

    Args:
      params: trained params {enc, rssm, dec, rew, con, actor, critic}.
      slow_critic: slow critic params (a constant here).
      norm_state: the return normaliser before the step (updated inside, 3.8).
      seq: `replay.TrainSequence` with [B, T] rows and the context carry.
      noise: `TrainNoise` for these B, T.
      tasks: the multi-task `TaskContext` (then seq.task holds the rows' task ids
        i32[B, T]) or None (single task).
    Returns:
      (f32[] Σ_k mean(scale_k · loss_k) over `loss_terms(cfg)`, LossAux).
    Source: dreamerv3_spec 3.20, 4.1; W-D8, W-D10, W-D11.
    """
    c = cfg.resolved()
    B, T = seq.reward.shape
    task = None if tasks is None else task_inputs(params, tasks, seq.task)
    with jax.named_scope("world_model"):
        wm = world_model_loss(params, c, sequence_carry(seq), seq.obs, seq.action,
                              seq.reward, seq.is_first, seq.is_terminal, noise.post, task)
    starts = flatten(task)
    with jax.named_scope("imagination"):
        imag = imagine(params, c, wm.post, noise.start, noise.imag_prior, noise.imag_policy,
                       starts)
    reward0 = seq.reward.reshape(B * T).astype(jnp.float32)
    cont0 = 1.0 - seq.is_terminal.reshape(B * T).astype(jnp.float32)
    with jax.named_scope("actor_critic"):
        ac = imagination_loss(params, slow_critic, c, imag, reward0, cont0, norm_state,
                              starts)
    with jax.named_scope("replay_critic"):
        repval, replay_ret = replay_critic_loss(params, slow_critic, c, wm.post, seq.reward,
                                                seq.is_last, seq.is_terminal,
                                                ac.ret[:, 0].reshape(B, T), task)
    losses = {**wm.losses, "actor": ac.actor, "critic": ac.critic, "replay_critic": repval}
    if c.offline_bc:                     # W-D10: the starts' features and the data's actions
        valid = 1.0 - seq.is_last.reshape(B * T).astype(jnp.float32)
        mask = None if starts is None else starts.action_mask
        with jax.named_scope("offline"):
            losses["offline_bc"] = bc_nll(params["actor"], c,
                                          ac_input(imag.feat[:, 0], starts),
                                          seq.action.reshape(B * T, -1), valid,
                                          mask).reshape(B, T)
    if c.offline_ensemble:               # W-D11: the heads fit the data rewards
        with jax.named_scope("offline"):
            losses["offline_ensemble"] = ensemble_loss(
                params["rew_ens"], c, feat(wm.post.deter, wm.post.stoch), seq.reward)
    total = sum(jnp.mean(scale * losses[k]) for k, scale in loss_scales(c).items())
    return total, LossAux(losses, wm, imag, ac, replay_ret, task)
