"""λ-returns of DreamerV3: imagination returns and the replay critic's returns.

One recursion (dreamerv3_spec Algorithm H) over a trajectory of L states,
with per-step factors for the transition t -> t+1 (t = 0..L-2):

    live_t = γ · (continuation of state t+1)      # γ-discounted survival
    cont_t = λ · (1 − is_last_{t+1})              # λ unless the episode ended
    R_{L-1} = boot_{L-1}
    R_t = r_{t+1} + (1 − cont_t)·live_t·boot_{t+1} + live_t·cont_t·R_{t+1}

returning R_0 .. R_{L-2}. Rewards, continuations and bootstrap values belong
to the arrival state (spec 3.7: the code's index convention). The products are
formed in the reference's order, ((1 − cont)·live)·boot and (live·cont)·R, so
float32 results follow it operation for operation.

Source: dreamerv3_spec 3.7, 3.19, Algorithm H (2411f7d agent.py imag and
replay returns).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def lambda_return(reward: jax.Array, boot: jax.Array, live: jax.Array,
                  cont) -> jax.Array:
    """The λ-return recursion of Algorithm H on precomputed factors.

    Args:
        reward: f32[N, L] rewards of each state (index 0 unused).
        boot: f32[N, L] bootstrap values of each state (index 0 unused).
        live: f32[N, L-1] γ times the continuation of state t+1.
        cont: f32[N, L-1] (or a float) λ times (1 − is_last_{t+1}).

    Returns:
        f32[N, L-1]: R_0 .. R_{L-2}.

    Source: dreamerv3_spec Algorithm H.
    """
    # a Python float λ keeps (1 − λ) in double before the float32 product, as
    # the reference's imagination return does
    interm = reward[:, 1:] + (1 - cont) * live * boot[:, 1:]
    cont = jnp.broadcast_to(jnp.asarray(cont, jnp.float32), live.shape)

    def step(nxt, xs):
        i, lv, c = xs
        ret = i + lv * c * nxt
        return ret, ret

    _, rets = jax.lax.scan(step, boot[:, -1], (interm.T, live.T, cont.T), reverse=True)
    return rets.T


def imagination_return(reward: jax.Array, cont: jax.Array, value: jax.Array, *,
                       disc: float = 1.0, lam: float = 0.95) -> jax.Array:
    """λ-return of imagined trajectories (spec 3.7; Algorithm F).

    Algorithm H with last = 0, term = 1 − ĉ and boot = v: live = ĉ_{t+1}·disc,
    cont = λ. ĉ enters directly (1 − (1 − ĉ) is not ĉ in float32).

    Args:
        reward: f32[N, H+1] predicted rewards r̂ (index 0 unused).
        cont: f32[N, H+1] predicted continuation ĉ (the continue head's
            probability; with contdisc it already carries γ).
        value: f32[N, H+1] online critic expectation v (the bootstrap).
        disc: explicit discount, 1 with contdisc (the default), else 1 − 1/333.
        lam: λ (0.95).

    Returns:
        f32[N, H] R_0 .. R_{H-1}.

    Source: dreamerv3_spec 3.6-3.7; 2411f7d agent.py imag_loss.
    """
    return lambda_return(reward, value, cont[:, 1:] * disc, lam)


def replay_return(reward: jax.Array, is_last: jax.Array, is_terminal: jax.Array,
                  boot: jax.Array, *, disc: float = 1 - 1 / 333,
                  lam: float = 0.95) -> jax.Array:
    """λ-return over replayed steps for the replay critic (spec 3.19; Algorithm G).

    live = (1 − is_terminal_{t+1})·γ with the fixed γ = 1 − 1/horizon (not
    contdisc), cont = λ·(1 − is_last_{t+1}): at an episode end there is no λ
    continuation, R_t = r_{t+1} + γ(1 − term_{t+1}) boot_{t+1}.

    Args:
        reward: f32[B, T] replayed rewards (reward[t] belongs to obs t).
        is_last, is_terminal: bool[B, T] annotated flags of the batch.
        boot: f32[B, T] the imagination return R_0 of the rollout started at
            each replay state.
        disc: γ (1 − 1/333); lam: λ (0.95).

    Returns:
        f32[B, T-1] R_0 .. R_{T-2}.

    Source: dreamerv3_spec 3.19, Algorithm G; 2411f7d agent.py repl_loss.
    """
    live = (~is_terminal).astype(jnp.float32)[:, 1:] * disc
    cont = (~is_last).astype(jnp.float32)[:, 1:] * lam
    return lambda_return(reward, boot, live, cont)
