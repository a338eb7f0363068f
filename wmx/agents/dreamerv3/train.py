"""One DreamerV3 training step: the joint gradient, LaProp + AGC, the slow critic
(dreamerv3_spec 3.18, 3.20, 4.1-4.8, Algorithms I and J; 2411f7d agent.py
`Agent.train`, jaxutils Optimizer and SlowUpdater).

    (L, aux), g = value_and_grad(loss.total_loss)(params)    # one forward, one gradient
    params     += laprop(g)                                   # over all 7 modules
    slow        = mix · critic + (1 − mix) · slow             # mix = 1 at updater count 0,
    updates    += 1                                           #       else slow_rate (0.02)

The return normaliser is updated inside the forward (update, then read).
The optimizer step and the slow critic run under the name scope "optimizer_step",
the metrics under "metrics" (op metadata only, read by
``benchmarks/profile_step.py``).
The step returns the posterior latents of the trained rows for the replay
write-back (computed with the pre-update parameters, spec 5.9) and the
carry after the last row.

`TrainState` (the checkpoint item "agent"): params, slow_critic, opt_state
(the `optim.laprop` chain: AGC, RMS (count, nu), momentum (count, mu),
warmup (count = the reference's opt/step)), retnorm (lo, hi), updates (the
slow updater's count). All float32 whatever cfg.compute_dtype (spec 1.12):
the forward computes in cfg.dtype, the loss and the gradients (w.r.t. the
float32 parameters, through the casts) are float32, and so is every
optimizer step. The latents a step returns are upcast to float32 (exact:
deter was cdt, stoch is a one-hot), as the reference stores them in replay.

A multi-task step (W-D8) passes the `multitask.TaskContext` to the loss; the
optimizer covers the task embedding with the other parameters.

Source: dreamerv3_spec 3.18, 3.20, 4.1-4.8, Algorithms I, J; deviations D4, D22, W-D8.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from wmx.agents.dreamerv3 import nets, optim
from wmx.agents.dreamerv3.ac_loss import retnorm
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.loss import LossAux, TrainNoise, total_loss
from wmx.agents.dreamerv3.multitask import TaskContext
from wmx.agents.dreamerv3.params import init_params
from wmx.agents.dreamerv3.replay import TrainSequence
from wmx.agents.dreamerv3.rssm import Carry
from wmx.agents.dreamerv3.train_metrics import train_metrics
from wmx.nn.return_normalizer import ReturnNormState

Params = dict


class TrainState(NamedTuple):
    """Everything a training step reads and writes (a pytree of arrays).

    params: {enc, rssm, dec, rew, con, actor, critic} (`params.init_params`).
    slow_critic: critic-layout params (not trained; the regulariser's target).
    opt_state: `optim.laprop` state over params.
    retnorm: `ReturnNormState` (lo, hi f32[]).
    updates: i32[] slow-critic updates so far (the reference's updater count).
    """

    params: Params
    slow_critic: Params
    opt_state: Any
    retnorm: ReturnNormState
    updates: jnp.ndarray


class StepOuts(NamedTuple):
    """What a step gives back besides the state and metrics.

    deter f32[B, T, D], stoch f32[B, T, S, C] (one-hot): the posterior latents
    of the trained rows (`replay.write_back`); carry: `rssm.Carry` after the
    last row (deter, stoch, prevact = action[:, −1]); loss: f32[] total. All
    float32 (the latents upcast from the compute dtype, spec 1.12).
    """

    deter: jnp.ndarray
    stoch: jnp.ndarray
    carry: Carry
    loss: jnp.ndarray


def optimizer(cfg: DreamerV3Config) -> optax.GradientTransformation:
    """`optim.laprop` with the config's lr, AGC, betas, eps and warmup (4.3-4.7)."""
    return optim.laprop(cfg.lr, agc=cfg.agc, pmin=cfg.agc_pmin, beta1=cfg.beta1,
                        beta2=cfg.beta2, eps=cfg.eps, warmup=cfg.warmup)


def init_train_state(key: jax.Array, cfg: DreamerV3Config) -> TrainState:
    """Fresh parameters (`init_params(key, cfg)`), a slow critic equal to the critic
    (overwritten by the hard copy after the first step anyway, 3.18), zero
    optimizer and normaliser state, updater count 0. Pure; jit with cfg static."""
    c = cfg.resolved()
    params = init_params(key, c)
    return TrainState(params, jax.tree.map(jnp.copy, params["critic"]),
                      optimizer(c).init(params), retnorm(c).init(), jnp.zeros((), jnp.int32))


def slow_update(slow: Params, critic: Params, updates: jnp.ndarray,
                cfg: DreamerV3Config) -> Params:
    """The slow critic after a step: mix · critic + (1 − mix) · slow with
    mix = clip([updates == 0] + slow_rate · [updates % slow_every == 0], 0, 1):
    a hard copy on the first update, then an EMA at rate 0.02 (2411f7d
    SlowUpdater; spec 3.18). `critic` is the critic after the optimizer step."""
    first = (updates == 0).astype(jnp.float32)
    due = (updates % cfg.slow_every == 0).astype(jnp.float32)
    mix = jnp.clip(first + cfg.slow_rate * due, 0.0, 1.0)
    return jax.tree.map(lambda s, d: mix * s + (1 - mix) * d, critic, slow)


def train_step_full(state: TrainState, seq: TrainSequence, noise: TrainNoise,
                    cfg: DreamerV3Config, tasks: TaskContext | None = None):
    """`train_step` plus the raw gradients (before AGC, params layout) and the
    `loss.LossAux`: (state, metrics, StepOuts, grads, aux). For tests and
    diagnostics; under jit the extra outputs cost nothing when unused."""
    c = cfg.resolved()

    def loss_fn(params):
        return total_loss(params, state.slow_critic, state.retnorm, seq, noise, c, tasks)

    (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
    aux: LossAux
    with jax.named_scope("optimizer_step"):
        updates, opt_state = optimizer(c).update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        slow = slow_update(state.slow_critic, params["critic"], state.updates, c)
    new = TrainState(params, slow, opt_state, aux.ac.retnorm, state.updates + 1)
    with jax.named_scope("metrics"):
        metrics = train_metrics(aux, seq, c)
        metrics.update(optim.opt_metrics(loss, grads, updates, params, opt_state))
    post, carry = aux.wm.post, aux.wm.carry
    carry = Carry(nets.f32(carry.deter), nets.f32(carry.stoch), carry.prevact)
    outs = StepOuts(nets.f32(post.deter), nets.f32(post.stoch), carry, loss)
    return new, metrics, outs, grads, aux


def train_step(state: TrainState, seq: TrainSequence, noise: TrainNoise,
               cfg: DreamerV3Config, tasks: TaskContext | None = None
               ) -> tuple[TrainState, dict, StepOuts]:
    """One update (Algorithm J without the replay I/O).

    Args:
      state: the TrainState.
      seq: `replay.TrainSequence`: the context carry (deter0 f32[B, D], stoch0
        f32[B, S, C], prevact f32[B, T, A]) and the trained rows [B, T].
      noise: `loss.TrainNoise` (`loss.draw_train_noise(key, cfg, B, T)` or
        injected draws).
      cfg: static.
      tasks: the multi-task `TaskContext` (seq.task holds the rows' task ids) or
        None: the reference's single-task step.
    Returns:
      (new state, metrics {reference name: f32[] / i32[] / f32[n] for
      ``/dist``} (`train_metrics` + `optim.opt_metrics`), StepOuts).
    Source: dreamerv3_spec 3.20, Algorithms I, J; W-D8.
    """
    return train_step_full(state, seq, noise, cfg, tasks)[:3]
