"""One TD-MPC2 training update, paper-era semantics (tdmpc2_spec §2, §2.C with PE deltas).

Order and parameter freshness (spec 2.19): TD target from pre-step params
(online encoder at obs[1:], pre-step pi sample, min of a random target-Q pair);
world-model step (losses /H and /(H*Nq), rho^t weights; PE clip norm
sqrt(|g_wm|^2 + |g_pi,prev|^2), spec 2.10); policy step on stop_gradient(zs)
from the pre-step rollout with the POST-step Q params (stop-gradient params),
RunningScale updated on Qp[0] before dividing, PE loss
mean_t[rho^t * mean_b(beta * log_pi - Qp / S)] over H+1 steps; target-Q EMA
after both steps. Q dropout is active in every Q pass (PE, spec §0.5 item 10):
one dropout key per pass in `UpdateNoise`.

Multi-task (spec 1.22-1.23, 2.3, 2.18, 2.20): pass `tasks` (a
`multitask.TaskContext`) with `batch.task`; the task-embedding rows of the
batch are renormed and written back at the two binding look-ups (before the
TD target, and at the policy loss after the world-model step), the embedding
enters the world-model loss with gradient (world-model Adam at the full lr,
inside its clip) and the policy loss stop-gradiented (PE), the policy is
masked by the task's prefix action mask (entropy scaled by the valid count),
and the TD target uses each sample's float32 discount. `tasks=None` is the
single-task update, unchanged.

All functions are pure, jitted once per (static, hashable) config, and
vmappable over seeds. The parts of `update` run under name scopes (op metadata
only, read by ``benchmarks/profile_step.py``): "td_target", "world_model",
"pi_loss", "optimizer_step" (both clips, both Adam steps, the target EMA), and
"q_ensemble" around each pass of the Q ensemble inside the first three;
`draw_update_noise` runs under "noise".
"""
from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from wmx.agents.tdmpc2 import multitask as mt
from wmx.agents.tdmpc2 import world_model as wm
from wmx.agents.tdmpc2.config import TDMPC2Config
from wmx.nn.ema import ema_update
from wmx.nn.ensemble import random_pair, reduce_pair
from wmx.nn.optim import global_norm, grouped_adam, torch_clip_coef
from wmx.nn.running_scale import RunningScale

WM_MODULES = ("encoder", "dynamics", "reward", "qs")
"""Modules trained by the world-model optimiser (spec 2.9); pi has its own."""


class UpdateNoise(NamedTuple):
    """Every random draw of one update (the parity seam; fixtures README order).

    td_target_pi_eps f32[H, B, A]: eps of the pi sample at next_z (TD target).
    td_target_q_pair i32[2]: distinct indices into the TARGET ensemble (min).
    pi_loss_pi_eps f32[H+1, B, A]: eps of the pi sample at zs (policy loss).
    pi_loss_q_pair i32[2]: distinct indices into the post-step ONLINE ensemble (avg).
    td_target_dropout_key, value_dropout_key, pi_loss_dropout_key: PRNG keys of
    the Q dropout masks of the three Q passes (PE: dropout in every pass).
    """

    td_target_pi_eps: jnp.ndarray
    td_target_q_pair: jnp.ndarray
    pi_loss_pi_eps: jnp.ndarray
    pi_loss_q_pair: jnp.ndarray
    td_target_dropout_key: jax.Array
    value_dropout_key: jax.Array
    pi_loss_dropout_key: jax.Array


class Batch(NamedTuple):
    """A time-major batch of (H+1)-row slices (spec 2.1).

    obs f32[H+1, B, S]; action f32[H, B, A]; reward f32[H, B]; task i32[B]
    (multi-task: the task id of each slice; obs zero-padded to S = S_max,
    action zero on padded dims) or None (single task).
    """

    obs: jnp.ndarray
    action: jnp.ndarray
    reward: jnp.ndarray
    task: jnp.ndarray | None = None


class TrainState(NamedTuple):
    """Everything an update reads and writes.

    params: world_model Params (incl. target_qs). wm_opt_state: optax state of
    the grouped world-model Adam over `wm_params(params)`. pi_opt_state: optax
    Adam state over params["pi"]. scale f32[]: RunningScale value (init 1).
    pi_grad_sq f32[]: squared norm of the previous update's post-clip policy
    gradient (PE adds it into the world-model clip norm, spec 2.10; 0 at start).
    step i32[]: number of updates done.
    """

    params: Any
    wm_opt_state: Any
    pi_opt_state: Any
    scale: jnp.ndarray
    pi_grad_sq: jnp.ndarray
    step: jnp.ndarray


# ---- optimisers -------------------------------------------------------------
def wm_params(params: dict) -> dict:
    """The world-model optimiser's sub-tree: {encoder, dynamics, reward, qs}
    plus "task_emb" in multi-task (full lr, inside the global clip; spec 1.22)."""
    return {k: params[k] for k in WM_MODULES + ("task_emb",) if k in params}


def _wm_labels(tree: dict) -> dict:
    return {k: jax.tree.map(lambda _: "encoder" if k == "encoder" else "rest", v)
            for k, v in tree.items()}


def wm_optimizer(cfg: TDMPC2Config) -> optax.GradientTransformation:
    """Adam(eps wm_eps) with groups encoder (lr * enc_lr_scale) and rest (lr), spec 2.9.

    No clip inside: `update` applies the PE global clip itself (spec 2.10).
    """
    return grouped_adam(cfg.lr, _wm_labels, {"encoder": cfg.enc_lr_scale, "rest": 1.0},
                        eps=cfg.wm_eps, clip_norm=None)


def pi_optimizer(cfg: TDMPC2Config) -> optax.GradientTransformation:
    """Adam(lr, eps pi_eps = 1e-5) for the policy (spec 2.14); clip applied in `update`."""
    return optax.adam(cfg.lr, eps=cfg.pi_eps)


# ---- state and noise ------------------------------------------------------------
@functools.partial(jax.jit, static_argnames=("cfg",))
def init_train_state(key: jax.Array, cfg: TDMPC2Config) -> TrainState:
    """Fresh TrainState: `world_model.init_params(key, cfg)`, zero Adam states,
    scale 1, pi_grad_sq 0, step 0."""
    cfg = cfg.resolved()
    params = wm.init_params(key, cfg)
    return TrainState(params=params,
                      wm_opt_state=wm_optimizer(cfg).init(wm_params(params)),
                      pi_opt_state=pi_optimizer(cfg).init(params["pi"]),
                      scale=RunningScale(rate=cfg.tau).init(),
                      pi_grad_sq=jnp.zeros((), jnp.float32),
                      step=jnp.zeros((), jnp.int32))


@functools.partial(jax.jit, static_argnames=("cfg",))
def draw_update_noise(key: jax.Array, cfg: TDMPC2Config) -> UpdateNoise:
    """Draw one update's randomness (shapes from cfg.horizon, batch_size, action_dim).

    Standard-normal eps, random distinct Q pairs (`wmx.nn.ensemble.random_pair`)
    and three dropout keys.
    """
    cfg = cfg.resolved()
    H, B, A = cfg.horizon, cfg.batch_size, cfg.action_dim
    with jax.named_scope("noise"):
        k = jax.random.split(key, 7)
        return UpdateNoise(
            td_target_pi_eps=jax.random.normal(k[0], (H, B, A), jnp.float32),
            td_target_q_pair=random_pair(k[1], cfg.num_q),
            pi_loss_pi_eps=jax.random.normal(k[2], (H + 1, B, A), jnp.float32),
            pi_loss_q_pair=random_pair(k[3], cfg.num_q),
            td_target_dropout_key=k[4], value_dropout_key=k[5], pi_loss_dropout_key=k[6])


# ---- the update -------------------------------------------------------------------
def _rho(cfg: TDMPC2Config, n: int) -> jnp.ndarray:
    return jnp.asarray(np.asarray([cfg.rho ** t for t in range(n)], np.float32))


def _check(batch: Batch, cfg: TDMPC2Config, tasks) -> None:
    H, S, A = cfg.horizon, cfg.obs_dim, cfg.action_dim
    B = batch.obs.shape[1] if batch.obs.ndim == 3 else -1
    want = {"obs": (H + 1, B, S), "action": (H, B, A), "reward": (H, B)}
    for name, shape in want.items():
        got = tuple(getattr(batch, name).shape)
        if got != shape:
            raise ValueError(f"Batch.{name} has shape {got}, expected {shape} "
                             "(time-major [H(+1), B, ...], reward without a trailing 1)")
    if (batch.task is None) != (tasks is None):
        raise ValueError("multi-task updates need both Batch.task (i32[B]) and "
                         "tasks=make_task_context(taskset); single-task ones neither "
                         f"(got task={'set' if batch.task is not None else None}, "
                         f"tasks={'set' if tasks is not None else None})")
    if tasks is None:
        if cfg.multitask:
            raise ValueError("cfg.num_tasks > 0: pass batch.task and tasks=TaskContext")
        return
    mt.check_task_context(tasks, cfg)
    if tuple(batch.task.shape) != (B,) or not jnp.issubdtype(batch.task.dtype, jnp.integer):
        raise ValueError(f"Batch.task must be int[B={B}] task ids, got "
                         f"{batch.task.dtype}{tuple(batch.task.shape)}")


def policy_loss(pi_params: dict, params: dict, zs: jnp.ndarray, q_params: dict,
                prev_scale: jnp.ndarray, eps: jnp.ndarray, q_pair: jnp.ndarray,
                dropout_key: jax.Array, cfg: TDMPC2Config, e: jnp.ndarray | None = None,
                mask: jnp.ndarray | None = None):
    """PE policy loss (spec 2.11-2.13) and its intermediates.

    zs f32[H+1,B,L] (stop-gradiented here); q_params: post-step online Q
    (stop-gradiented); prev_scale f32[]: RunningScale before this update;
    eps f32[H+1,B,A]; q_pair i32[2]. Multi-task: e f32[B,task_dim] is read
    stop-gradiented (PE's track_q_grad(False), spec 2.18: no gradient reaches
    the embedding), mask f32[B,A] masks the policy (entropy scaled by the
    valid count). loss = mean_t[rho^t mean_b(beta log_pi - Q_avg / S)].
    Returns (loss f32[], (scale, PolicyOut, q_pair values [2,H+1,B], q_avg,
    q_scaled)).
    """
    sg = jax.lax.stop_gradient
    zs, q_params = sg(zs), sg(q_params)
    e = None if e is None else sg(e)
    rs = RunningScale(rate=cfg.tau)
    with jax.named_scope("pi_loss"):
        out = wm.pi_forward({**params, "pi": pi_params}, zs, eps, cfg, e=e, mask=mask)
        # split first layer: only the action rows of the Q input gradient are formed
        with jax.named_scope("q_ensemble"):
            qv = wm.q_pair_values(q_params, q_pair, zs, out.action, cfg,
                                  dropout_key=dropout_key, e=e, split_input=True)  # [2,H+1,B]
        q_avg = reduce_pair(qv, "avg")
        scale = rs.update(prev_scale, q_avg[0])
        q_scaled = rs.normalize(scale, q_avg)
        rho = _rho(cfg, zs.shape[0])
        loss = jnp.mean(rho * jnp.mean(cfg.entropy_coef * out.log_pi[..., 0] - q_scaled, -1))
    return loss, (scale, out, qv, q_avg, q_scaled)


def _update(state: TrainState, batch: Batch, noise: UpdateNoise, cfg: TDMPC2Config,
            tasks=None):
    cfg = cfg.resolved()
    _check(batch, cfg, tasks)
    H, nq = cfg.horizon, cfg.num_q
    th = wm.twohot(cfg)
    p = state.params
    obs, action, reward = batch.obs, batch.action, batch.reward
    rho_h = _rho(cfg, H)
    sg = jax.lax.stop_gradient
    task = batch.task
    if tasks is None:
        e, mask, gamma = None, None, np.float32(cfg.discount)
    else:
        # look-up 1 (encode(obs[1:]), pre-step): renorm + write back (spec 1.22)
        p, e = mt.lookup_task_embedding(p, task)                      # e [B,D]
        mask = tasks.action_masks[task]                                # [B,A]
        gamma = tasks.discounts[task].astype(jnp.float32)             # [B] (spec 2.20)
    emb_lookup1 = p.get("task_emb")

    # ---- TD target: pre-step params, no gradient (spec 2.3) ----
    with jax.named_scope("td_target"):
        next_z = sg(wm.encode(p, obs[1:], cfg, e=e))                   # [H,B,L]
        pi_td = wm.pi_forward(p, next_z, noise.td_target_pi_eps, cfg, e=e, mask=mask)
        with jax.named_scope("q_ensemble"):
            q_td = wm.q_pair_values(p["target_qs"], noise.td_target_q_pair, next_z,
                                    pi_td.action, cfg, dropout_key=noise.td_target_dropout_key,
                                    e=e)                               # [2,H,B]
        td_target = sg(reward + gamma * reduce_pair(q_td, "min"))     # [H,B]

    # ---- world model loss (spec 2.4-2.8); the embedding gets gradient ----
    @jax.named_scope("world_model")
    def wm_loss(wp):
        full = {**p, **wp}
        e_w = None if tasks is None else mt.task_embedding(full, task)
        z = wm.encode(full, obs[0], cfg, e=e_w)
        zs, cons = [z], 0.0
        for t in range(H):
            z = wm.next_latent(full, z, action[t], cfg, e=e_w)
            cons = cons + rho_h[t] * jnp.mean((z - next_z[t]) ** 2)
            zs.append(z)
        zs = jnp.stack(zs)                                             # [H+1,B,L]
        with jax.named_scope("q_ensemble"):
            q_logits = wm.q_logits(full["qs"], zs[:-1], action, cfg,
                                   dropout_key=noise.value_dropout_key, e=e_w)  # [Nq,H,B,K]
        r_logits = wm.reward_logits(full, zs[:-1], action, cfg, e=e_w)      # [H,B,K]
        reward_loss = jnp.sum(rho_h * jnp.mean(th.loss(r_logits, reward), -1)) / H
        value_loss = jnp.sum(rho_h * jnp.mean(th.loss(q_logits, td_target[None]), -1)) / (H * nq)
        cons = cons / H
        total = (cfg.consistency_coef * cons + cfg.reward_coef * reward_loss
                 + cfg.value_coef * value_loss)
        return total, (cons, reward_loss, value_loss, zs, q_logits, r_logits)

    wp = wm_params(p)
    (total, (cons, reward_loss, value_loss, zs, q_logits, r_logits)), g_wm = (
        jax.value_and_grad(wm_loss, has_aux=True)(wp))
    with jax.named_scope("optimizer_step"):
        # PE clip: the previous update's clipped policy gradient is still in the norm.
        grad_norm = jnp.sqrt(global_norm(g_wm) ** 2 + state.pi_grad_sq)
        g_wm_c = jax.tree.map(lambda g: g * torch_clip_coef(grad_norm, cfg.grad_clip_norm),
                              g_wm)
        upd, wm_opt_state = wm_optimizer(cfg).update(g_wm_c, state.wm_opt_state, wp)
        new_wp = optax.apply_updates(wp, upd)
    emb_after_step = new_wp.get("task_emb")
    e_pi = None
    if tasks is not None:
        # look-up 2 (pi(zs), first after the world-model step): renorm + write back
        new_wp, e_pi = mt.lookup_task_embedding(new_wp, task)

    # ---- policy loss: pre-step zs, post-step Q params, stop-gradient (spec 2.11-2.13) ----
    pi_loss_fn = functools.partial(
        policy_loss, params=p, zs=zs, q_params=new_wp["qs"], prev_scale=state.scale,
        eps=noise.pi_loss_pi_eps, q_pair=noise.pi_loss_q_pair,
        dropout_key=noise.pi_loss_dropout_key, cfg=cfg, e=e_pi, mask=mask)
    (pi_loss, (scale, pi_out, pi_qv, q_avg, q_scaled)), g_pi = (
        jax.value_and_grad(pi_loss_fn, has_aux=True)(p["pi"]))
    with jax.named_scope("optimizer_step"):
        pi_grad_norm = global_norm(g_pi)
        g_pi_c = jax.tree.map(lambda g: g * torch_clip_coef(pi_grad_norm, cfg.grad_clip_norm),
                              g_pi)
        pi_upd, pi_opt_state = pi_optimizer(cfg).update(g_pi_c, state.pi_opt_state, p["pi"])
        new_pi = optax.apply_updates(p["pi"], pi_upd)

        # ---- target EMA after both steps (spec 2.15) ----
        new_params = {**p, **new_wp, "pi": new_pi,
                      "target_qs": ema_update(p["target_qs"], new_wp["qs"], cfg.tau)}
        pi_grad_sq = global_norm(g_pi_c) ** 2
    new_state = TrainState(params=new_params, wm_opt_state=wm_opt_state,
                           pi_opt_state=pi_opt_state, scale=scale,
                           pi_grad_sq=pi_grad_sq, step=state.step + 1)
    metrics = {"consistency_loss": cons, "reward_loss": reward_loss, "value_loss": value_loss,
               "pi_loss": pi_loss, "total_loss": total, "grad_norm": grad_norm,
               "pi_grad_norm": pi_grad_norm, "pi_scale": scale}
    aux = {"grads_wm": g_wm, "grads_pi": g_pi, "next_z": next_z, "zs": zs,
           "td_pi": pi_td, "td_q_pair": q_td, "td_target": td_target,
           "q_logits": q_logits, "reward_logits": r_logits, "pi": pi_out,
           "pi_q_pair": pi_qv, "pi_q_avg": q_avg, "pi_q_scaled": q_scaled}
    if tasks is not None:
        aux.update(task_emb_lookup1=emb_lookup1, task_emb_after_step=emb_after_step,
                   td_discount=gamma)
    return new_state, metrics, aux


@functools.partial(jax.jit, static_argnames=("cfg",))
def update(state: TrainState, batch: Batch, noise: UpdateNoise, cfg: TDMPC2Config,
           tasks: "mt.TaskContext | None" = None) -> tuple[TrainState, dict[str, jnp.ndarray]]:
    """One TD-MPC2 update (spec §2, PE). Returns (new state, metrics).

    Multi-task: `tasks` is the `multitask.TaskContext` and `batch.task` the
    slices' task ids (see the module docstring); None: single task.

    metrics (f32[] each): consistency_loss, reward_loss, value_loss, pi_loss,
    total_loss, grad_norm (the world-model clip norm, PE: incl. the stale
    policy gradient), pi_grad_norm (pre-clip), pi_scale (RunningScale after
    this update). Raises ValueError on batch shape mismatches or when only one
    of `batch.task` / `tasks` is given.
    """
    new_state, metrics, _ = _update(state, batch, noise, cfg, tasks)
    return new_state, metrics


@functools.partial(jax.jit, static_argnames=("cfg",))
def update_with_aux(state: TrainState, batch: Batch, noise: UpdateNoise, cfg: TDMPC2Config,
                    tasks: "mt.TaskContext | None" = None):
    """`update` plus a dict of intermediates (for parity tests and diagnostics).

    aux: grads_wm (pre-clip, tree of `wm_params`), grads_pi (pre-clip),
    next_z [H,B,L], zs [H+1,B,L], td_pi (PolicyOut at next_z), td_q_pair
    [2,H,B], td_target [H,B], q_logits [Nq,H,B,K], reward_logits [H,B,K],
    pi (PolicyOut at zs), pi_q_pair [2,H+1,B], pi_q_avg, pi_q_scaled [H+1,B].
    Multi-task adds task_emb_lookup1 (table after the first renorm),
    task_emb_after_step (after the world-model Adam step, before the second
    renorm) and td_discount f32[B].
    """
    return _update(state, batch, noise, cfg, tasks)
