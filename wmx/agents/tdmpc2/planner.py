"""TD-MPC2 MPPI planner, paper-era ("PE") semantics (tdmpc2_spec §3, 3.C).

One decision for one environment; callers `jax.vmap` over envs (and seeds)
and run it inside `lax.scan`. All randomness enters through `PlanNoise`
(made by `draw_plan_noise`), laid out in the order the reference draws it, so
the parity tests can inject the recorded draws of the official code; the
draws and their types live in `plan_noise.py` and are importable from here.

Built from small pure pieces that the tests call one by one:

- `init_mean_std`        warm start (spec 3.7)
- `policy_trajectories`  the P prior rollouts (spec 3.5-3.6)
- `sample_candidates`    columns P: of the candidate set (spec 3.8-3.9)
- `trajectory_value`     sum_t gamma^t r_t + gamma^H Q_avg (spec 3.10, 3.13-3.14)
- `select_elites`        nan_to_num + top-k (spec 3.15)
- `mppi_update`          score, weighted mean and std (spec 3.16-3.17, B13)
- `pick_elite`           PE's np.random.choice: inverse CDF of one uniform (spec 3.19)
- `plan_iteration`       one MPPI iteration built from the above
- `plan`                 the whole decision (spec 3.18-3.21); `plan_with_stats`
                         returns every per-iteration statistic (tests, debugging).

Name scopes (op metadata for ``benchmarks/profile_step.py``): "pi_prior",
"candidate_values", "mppi" in a decision, "noise" in `draw_plan_noise`
(plan_noise.py).

Deviations: T-PLAN-QPAIR (only the drawn pair of Q members is evaluated,
reference_design §4.3), T-PLAN-ELITE32 (inverse CDF in float32 instead of
float64, spec §0.5 item 11d; the recorded uniform's rounding is in plan_noise.py).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from wmx.agents.tdmpc2 import world_model as wm
from wmx.agents.tdmpc2.config import TDMPC2Config
from wmx.agents.tdmpc2.plan_noise import (IterNoise, PlanNoise, check_plan_cfg, draw_plan_noise,
                                          iteration_noise, iteration_noises,
                                          noise_from_reference)
from wmx.nn.ensemble import reduce_pair

Array = jax.Array

__all__ = [
    # the draws (plan_noise.py), importable from here as before
    "PlanNoise", "IterNoise", "draw_plan_noise", "noise_from_reference", "iteration_noise",
    # the planner
    "IterStats", "PiRollout", "discount_powers", "discount_powers_f32", "init_mean_std",
    "policy_rollout", "policy_trajectories", "sample_candidates", "trajectory_value",
    "select_elites", "mppi_update", "pick_elite", "plan_iteration", "plan", "plan_with_stats",
]


class IterStats(NamedTuple):
    """Statistics of one MPPI iteration (what the reference's locals hold).

    `candidates` f32[H,N,A], `value_raw` f32[N] (before nan_to_num),
    `value` f32[N], `reward_sum` f32[N] (sum_t gamma^t r_t), `elite_idxs`
    i32[E] (sorted by value, descending), `elite_value` f32[E], `score` f32[E],
    `mean` f32[H,A], `std` f32[H,A] (after this iteration's update).
    """

    candidates: Array
    value_raw: Array
    value: Array
    reward_sum: Array
    elite_idxs: Array
    elite_value: Array
    score: Array
    mean: Array
    std: Array


def discount_powers(gamma: float, horizon: int) -> list[float]:
    """[1, gamma, gamma^2, ..., gamma^H] as Python floats (float64 products).

    The reference multiplies a Python float `discount *= gamma` once per step
    and casts the result to float32 only where it scales a tensor
    (tdmpc2_spec 3.10, §0.5 item 11c). Length H+1.
    """
    out = [1.0]
    d = 1.0
    for _ in range(horizon):
        d *= float(gamma)
        out.append(d)
    return out


def discount_powers_f32(gamma: Array, horizon: int) -> list[Array]:
    """[1, g, g*g, ...] (length H+1) as float32 products of a traced gamma f32[].

    The multi-task reference multiplies float32 tensors, `discount *=
    self.discount[task]` (tdmpc2_spec 3.12, §0.5 item 12d), unlike the
    single-task float64 `discount_powers`.
    """
    g = jnp.asarray(gamma, jnp.float32)
    out = [jnp.float32(1.0)]
    for _ in range(horizon):
        out.append(g if len(out) == 1 else out[-1] * g)
    return out


# ---------------------------------------------------------------------------
# pieces
# ---------------------------------------------------------------------------

def init_mean_std(prev_mean: Array, t0: Array, cfg: TDMPC2Config) -> tuple[Array, Array]:
    """MPPI start (tdmpc2_spec 3.7): mean = shift(prev_mean) or zeros, std = max_std.

    prev_mean f32[H,A]; t0 bool[] (traced; per env). Not t0: mean[:-1] =
    prev_mean[1:], mean[-1] = 0. t0: all zeros. std is never warm-started.
    Returns (mean f32[H,A], std f32[H,A]).
    """
    prev_mean = jnp.asarray(prev_mean, jnp.float32)
    shifted = jnp.concatenate([prev_mean[1:], jnp.zeros_like(prev_mean[:1])], axis=0)
    mean = jnp.where(jnp.asarray(t0, bool), jnp.zeros_like(prev_mean), shifted)
    std = jnp.full(prev_mean.shape, cfg.max_std, jnp.float32)
    return mean, std


class PiRollout(NamedTuple):
    """The P policy-prior trajectories of one decision (fixed across its iterations).

    actions f32[H,P,A] (candidate columns :P); reward_sum f32[P] =
    sum_t gamma^t r_t along them; z_last f32[P,L] = z_H. The candidate
    columns :P are the same in every MPPI iteration, so their rewards and
    final latents are computed once per decision (only the terminal policy
    sample and Q pair, which use per-iteration draws, are recomputed).
    """

    actions: Array
    reward_sum: Array
    z_last: Array


def _discounts(cfg: TDMPC2Config, horizon: int, discount: Array | None) -> list:
    if discount is None:
        return [jnp.float32(d) for d in discount_powers(cfg.discount, horizon)]
    return discount_powers_f32(discount, horizon)


def _shared_rows(l0: wm.DynRewLayer0, task_emb: Array | None) -> Array:
    """bias + e @ W_e f32[2M]: the part of the joint first layer shared by every row."""
    if task_emb is None or l0.kernel_e.shape[0] == 0:
        return l0.bias
    return task_emb @ l0.kernel_e + l0.bias


def policy_rollout(params: Any, z: Array, pi_traj_eps: Array, cfg: TDMPC2Config,
                   action_mask: Array | None = None, task_emb: Array | None = None,
                   discount: Array | None = None, layer0: wm.DynRewLayer0 | None = None
                   ) -> PiRollout:
    """The P policy-prior trajectories with their rewards and final latents (spec 3.5-3.6, 3.10).

    z f32[L]; pi_traj_eps f32[H,P,A]. a_t = pi(z_t, eps_t).action (the
    stochastic squashed sample, also in eval mode), z_{t+1} = d(z_t, a_t),
    r_t = R(z_t, a_t) decoded; reward_sum uses the discounts of
    `trajectory_value` (`discount` as there). Multi-task hooks as in
    `policy_trajectories`. `layer0`: `world_model.dyn_rew_layer0(params, cfg)`
    if already built.
    """
    H, P = pi_traj_eps.shape[0], pi_traj_eps.shape[1]
    l0 = wm.dyn_rew_layer0(params, cfg) if layer0 is None else layer0
    shared = _shared_rows(l0, task_emb)
    disc = _discounts(cfg, H, discount)
    th = wm.twohot(cfg)
    _z = jnp.broadcast_to(z, (P, z.shape[-1]))
    acts, G = [], None
    for t in range(H):
        a = wm.pi_forward(params, _z, pi_traj_eps[t], cfg, e=task_emb, mask=action_mask).action
        acts.append(a)
        if t == 0:
            h0 = (a @ l0.kernel_a + shared) + z @ l0.kernel_z
        else:
            h0 = jnp.concatenate([_z, a], axis=-1) @ l0.kernel_za + shared
        _z, r_logits = wm.dyn_rew_from_layer0(params, h0, cfg)
        term = th.decode(r_logits) * disc[t]
        G = term if G is None else G + term
    return PiRollout(jnp.stack(acts, axis=0), G, _z)


def policy_trajectories(params: Any, z: Array, pi_traj_eps: Array, cfg: TDMPC2Config,
                        action_mask: Array | None = None, task_emb: Array | None = None
                        ) -> Array:
    """The P policy-prior trajectories (tdmpc2_spec 3.5-3.6).

    z f32[L] (encoded obs); pi_traj_eps f32[H,P,A]. a_t = pi(z_t, eps_t).action
    (the stochastic squashed sample, also in eval mode), z_{t+1} = d(z_t, a_t).
    Returns f32[H,P,A]. `action_mask` f32[A] and `task_emb` f32[task_dim]
    (multi-task) go to the world model (masked dims of the action are 0).
    """
    return policy_rollout(params, z, pi_traj_eps, cfg, action_mask, task_emb).actions


def sample_candidates(pi_actions: Array, mean: Array, std: Array, noise: Array,
                      action_mask: Array | None = None) -> Array:
    """All N candidates of one iteration (tdmpc2_spec 3.8-3.9).

    pi_actions f32[H,P,A] (columns :P, fixed), mean/std f32[H,A],
    noise f32[H,N-P,A]. Columns P: = clip(mean + std*noise, -1, 1).
    With `action_mask` f32[A] every column is multiplied by it.
    Returns f32[H,N,A].
    """
    gauss = jnp.clip(mean[:, None, :] + std[:, None, :] * noise, -1.0, 1.0)
    cand = jnp.concatenate([pi_actions.astype(jnp.float32), gauss], axis=1)
    if action_mask is not None:
        cand = cand * action_mask
    return cand


def _rollout(params: Any, l0: wm.DynRewLayer0, z: Array, actions: Array, cfg: TDMPC2Config,
             task_emb: Array | None, disc: list) -> tuple[Array, Array]:
    """(sum_t disc[t] r_t f32[n], z_H f32[n,L]) of n action sequences f32[H,n,A] from
    one latent z f32[L]. The first layers of dynamics and reward are one matmul
    (`DynRewLayer0`); at step 0 the shared start latent is applied once
    (z @ W_z, not per row) and only the action rows per sample."""
    H = actions.shape[0]
    th = wm.twohot(cfg)
    shared = _shared_rows(l0, task_emb)
    G, _z = None, None
    for t in range(H):
        if t == 0:
            h0 = (actions[0] @ l0.kernel_a + shared) + z @ l0.kernel_z
        else:
            h0 = jnp.concatenate([_z, actions[t]], axis=-1) @ l0.kernel_za + shared
        _z, r_logits = wm.dyn_rew_from_layer0(params, h0, cfg)
        term = th.decode(r_logits) * disc[t]
        G = term if G is None else G + term
    return G, _z


def _terminal_q(params: Any, z_last: Array, terminal_pi_eps: Array, q_pair: Array,
                q_dropout_key: Array | None, cfg: TDMPC2Config, action_mask: Array | None,
                task_emb: Array | None) -> Array:
    """(Q_i + Q_j)/2 f32[n] at (z_H, pi(z_H).action) (spec 3.13-3.14)."""
    a_H = wm.pi_forward(params, z_last, terminal_pi_eps, cfg, e=task_emb,
                        mask=action_mask).action
    key = q_dropout_key if cfg.dropout > 0 else None
    q = wm.q_pair_values(params["qs"], q_pair, z_last, a_H, cfg, dropout_key=key, e=task_emb)
    return reduce_pair(q, "avg")


def trajectory_value(params: Any, z: Array, actions: Array, terminal_pi_eps: Array,
                     q_pair: Array, q_dropout_key: Array | None, cfg: TDMPC2Config,
                     action_mask: Array | None = None, task_emb: Array | None = None,
                     discount: Array | None = None, *, pi_rollout: PiRollout | None = None,
                     layer0: wm.DynRewLayer0 | None = None) -> tuple[Array, Array]:
    """Value of N action sequences from one latent (tdmpc2_spec 3.10, 3.13-3.14).

    z f32[L]; actions f32[H,N,A]; terminal_pi_eps f32[N,A]; q_pair i32[2].
    V = sum_t gamma^t r_t + gamma^H * (Q_i + Q_j)/2 at (z_H, pi(z_H).action),
    rewards and Qs decoded with the TD-MPC2 two-hot (symexp of the expectation).
    Discount powers are float64 products cast to float32 (spec §0.5 item 11c).
    Only the drawn pair of Q members is evaluated (T-PLAN-QPAIR); their first
    layer uses dropout with `q_dropout_key` when cfg.dropout > 0 (PE, §0.5
    item 10). `action_mask` f32[A] / `task_emb` f32[task_dim]: multi-task hooks
    passed to the world model. `discount` f32[] (multi-task, the task's
    gamma) replaces `cfg.discount` and its powers are float32 products
    (`discount_powers_f32`, spec 3.12); None keeps the single-task float64 powers.
    `pi_rollout` (`policy_rollout` of the same z and discount, whose actions
    are columns :P of `actions`): those columns' rewards and z_H are taken
    from it instead of being recomputed. `layer0`:
    `world_model.dyn_rew_layer0(params, cfg)` if already built.
    Returns (value_raw f32[N], reward_sum f32[N]); no nan_to_num.
    """
    H = actions.shape[0]
    disc = _discounts(cfg, H, discount)
    l0 = wm.dyn_rew_layer0(params, cfg) if layer0 is None else layer0
    if pi_rollout is None:
        G, z_last = _rollout(params, l0, z, actions, cfg, task_emb, disc)
    else:
        P = pi_rollout.actions.shape[1]
        G, z_last = _rollout(params, l0, z, actions[:, P:], cfg, task_emb, disc)
        G = jnp.concatenate([pi_rollout.reward_sum, G], axis=0)
        z_last = jnp.concatenate([pi_rollout.z_last, z_last], axis=0)
    q_avg = _terminal_q(params, z_last, terminal_pi_eps, q_pair, q_dropout_key, cfg,
                        action_mask, task_emb)
    return G + disc[H] * q_avg, G


def select_elites(value: Array, actions: Array, num_elites: int) -> tuple[Array, Array, Array]:
    """Top-E elites of one iteration (tdmpc2_spec 3.15).

    value f32[N] (already nan_to_num'd); actions f32[H,N,A]. lax.top_k:
    sorted by value descending, ties broken towards lower indices.
    Returns (elite_idxs i32[E], elite_value f32[E], elite_actions f32[H,E,A]).
    """
    elite_value, idx = jax.lax.top_k(value, num_elites)
    return idx, elite_value, jnp.take(actions, idx, axis=1)


def mppi_update(elite_value: Array, elite_actions: Array, *, temperature: float = 0.5,
                min_std: float = 0.05, max_std: float = 2.0,
                action_mask: Array | None = None) -> tuple[Array, Array, Array]:
    """Score and the new mean/std from the elites (tdmpc2_spec 3.16-3.17, B13).

    elite_value f32[E]; elite_actions f32[H,E,A].
    score = exp(temperature*(eV - max eV)), normalised to sum 1;
    mean = sum_k s_k eA_k / (sum s + 1e-9); std = sqrt(sum_k s_k (eA_k - mean)^2
    / (sum s + 1e-9)) (biased, around the new mean), clipped to [min_std,
    max_std]; then mean and std multiplied by `action_mask` (f32[A]) if given.
    Returns (score f32[E], mean f32[H,A], std f32[H,A]).
    """
    s = jnp.exp(temperature * (elite_value - jnp.max(elite_value)))
    s = s / jnp.sum(s)
    denom = jnp.sum(s) + 1e-9
    w = s[None, :, None]
    mean = jnp.sum(w * elite_actions, axis=1) / denom
    std = jnp.sqrt(jnp.sum(w * (elite_actions - mean[:, None, :]) ** 2, axis=1) / denom)
    std = jnp.clip(std, min_std, max_std)
    if action_mask is not None:
        mean = mean * action_mask
        std = std * action_mask
    return s, mean, std


def pick_elite(score: Array, u: Array) -> Array:
    """PE's `np.random.choice(E, p=score)` from one uniform u (tdmpc2_spec 3.19).

    numpy's legacy algorithm: cdf = cumsum(score) / cdf[-1];
    k = searchsorted(cdf, u, side='right'). Here in float32 (T-PLAN-ELITE32),
    k clipped to E-1. score f32[E], u f32[] in [0, 1). Returns i32[].
    """
    score = jnp.asarray(score, jnp.float32)
    cdf = jnp.cumsum(score)
    cdf = cdf / cdf[-1]
    k = jnp.searchsorted(cdf, jnp.asarray(u, jnp.float32), side="right")
    return jnp.minimum(k, score.shape[0] - 1).astype(jnp.int32)


def plan_iteration(params: Any, z: Array, pi_actions: Array, mean: Array, std: Array,
                   noise: IterNoise, cfg: TDMPC2Config, *,
                   action_mask: Array | None = None, task_emb: Array | None = None,
                   elite_idxs: Array | None = None, discount: Array | None = None,
                   pi_rollout: PiRollout | None = None,
                   layer0: wm.DynRewLayer0 | None = None) -> tuple[Array, Array, IterStats]:
    """One MPPI iteration (tdmpc2_spec 3.18): sample, value, top-k, update.

    z f32[L]; pi_actions f32[H,P,A]; mean/std f32[H,A]; noise one `IterNoise`.
    `elite_idxs` i32[E], if given, replaces the top-k choice (teacher forcing
    for parity tests whose top-k margins are below float32 error).
    `action_mask`, `task_emb`, `discount`: multi-task hooks (see `plan`).
    `pi_rollout` / `layer0`: per-decision caches for `trajectory_value` (the
    `policy_rollout` whose actions are `pi_actions`, and the joint first layer).
    Returns (new_mean f32[H,A], new_std f32[H,A], IterStats); the stats'
    `elite_value` and `score` refer to the elites used.
    """
    with jax.named_scope("candidate_values"):
        cand = sample_candidates(pi_actions, mean, std, noise.candidate_noise, action_mask)
        v_raw, rsum = trajectory_value(params, z, cand, noise.terminal_pi_eps, noise.q_pair,
                                       noise.q_dropout_key, cfg, action_mask, task_emb,
                                       discount, pi_rollout=pi_rollout, layer0=layer0)
        value = jnp.nan_to_num(v_raw, nan=0.0)
    with jax.named_scope("mppi"):
        if elite_idxs is None:
            idx, e_val, e_act = select_elites(value, cand, cfg.num_elites)
        else:
            idx = jnp.asarray(elite_idxs, jnp.int32)
            e_val, e_act = value[idx], jnp.take(cand, idx, axis=1)
        score, new_mean, new_std = mppi_update(
            e_val, e_act, temperature=cfg.temperature, min_std=cfg.min_std,
            max_std=cfg.max_std, action_mask=action_mask)
    return new_mean, new_std, IterStats(cand, v_raw, value, rsum, idx, e_val, score,
                                        new_mean, new_std)


def _check_inputs(obs: Array, prev_mean: Array, noise: PlanNoise, cfg: TDMPC2Config) -> None:
    H, A = cfg.horizon, cfg.action_dim
    if jnp.ndim(obs) != 1:
        raise ValueError(f"plan takes one env's obs f32[O], got shape {jnp.shape(obs)}; "
                         "jax.vmap over envs for a batch")
    if tuple(jnp.shape(prev_mean)) != (H, A):
        raise ValueError(f"prev_mean must be f32[H={H}, A={A}], got {jnp.shape(prev_mean)}")
    I, P, N = cfg.planning_iterations, cfg.num_pi_trajs, cfg.num_samples
    want = {"pi_traj_eps": (H, P, A), "candidate_noise": (I, H, N - P, A),
            "terminal_pi_eps": (I, N, A), "q_pair": (I, 2), "explore_noise": (A,)}
    for name, shape in want.items():
        got = tuple(jnp.shape(getattr(noise, name)))
        if got != shape:
            raise ValueError(f"PlanNoise.{name} has shape {got}, config needs {shape}; "
                             "draw it with draw_plan_noise(key, cfg)")


def _plan(params, obs, prev_mean, t0, noise, cfg, eval_mode, task_emb, action_mask,
          discount, record: bool):
    cfg = check_plan_cfg(cfg)
    _check_inputs(obs, prev_mean, noise, cfg)
    with jax.named_scope("pi_prior"):
        z = wm.encode(params, jnp.asarray(obs, jnp.float32), cfg, e=task_emb)
        l0 = wm.dyn_rew_layer0(params, cfg)      # built once, outside the MPPI loop
        if cfg.num_pi_trajs > 0:
            pi_roll = policy_rollout(params, z, noise.pi_traj_eps, cfg, action_mask,
                                     task_emb, discount, layer0=l0)
            pi_actions = pi_roll.actions
        else:
            pi_roll = None
            pi_actions = jnp.zeros((cfg.horizon, 0, cfg.action_dim), jnp.float32)
    mean0, std0 = init_mean_std(prev_mean, t0, cfg)
    E, H, A = cfg.num_elites, cfg.horizon, cfg.action_dim

    def body(carry, it_noise):
        mean, std, _, _ = carry
        new_mean, new_std, st = plan_iteration(params, z, pi_actions, mean, std, it_noise,
                                               cfg, action_mask=action_mask,
                                               task_emb=task_emb, discount=discount,
                                               pi_rollout=pi_roll, layer0=l0)
        e_act = jnp.take(st.candidates, st.elite_idxs, axis=1)
        carry = (new_mean, new_std, st.score, e_act)
        return carry, (st if record else None)

    carry0 = (mean0, std0, jnp.zeros((E,), jnp.float32), jnp.zeros((H, E, A), jnp.float32))
    (mean, std, score, e_act), stats = jax.lax.scan(body, carry0, iteration_noises(noise))
    with jax.named_scope("mppi"):
        k = pick_elite(score, noise.elite_uniform)
        selected = e_act[:, k]
        explore = jnp.where(jnp.asarray(eval_mode, bool), 0.0,
                            std[0] * jnp.asarray(noise.explore_noise, jnp.float32))
        action = jnp.clip(selected[0] + explore, -1.0, 1.0)
    if record:
        info = {"z": z, "pi_actions": pi_actions, "init_mean": mean0, "init_std": std0,
                "iters": stats, "final_score": score, "elite_choice_index": k,
                "selected_sequence": selected, "final_std": std,
                "terminal_discount": _discounts(cfg, cfg.horizon, discount)[cfg.horizon]}
    else:
        info = {"elite_index": k}
    return action, mean, info


def plan(params: Any, obs: Array, prev_mean: Array, t0: Array, noise: PlanNoise,
         cfg: TDMPC2Config, *, eval_mode: bool, task_emb: Array | None = None,
         action_mask: Array | None = None, discount: Array | None = None
         ) -> tuple[Array, Array, dict]:
    """One MPPI decision for one env, paper-era TD-MPC2 (tdmpc2_spec 3.C).

    params: world-model `Params` (world_model.py); obs f32[O]; prev_mean
    f32[H,A] (the last mean of the previous decision); t0 bool[] (traced, per
    env: True at an episode's first step, mean starts at 0); noise: `PlanNoise`
    for `cfg`; eval_mode (bool, Python or traced) removes only the final
    exploration noise (spec 3.20). Multi-task hooks (spec 3.9): `action_mask`
    f32[A] masks the policy, candidates, mean and std; `task_emb`
    f32[task_dim] is passed to every network (the caller renorms it, spec
    1.22); `discount` f32[] is the task's gamma, whose powers are float32
    products as in the reference (spec 3.12); None uses `cfg.discount` with
    float64 powers (single task). The iteration count reads cfg.action_dim,
    the padded A_max in multi-task (spec 3.1). `multitask.plan_task` applies
    all three from a `TaskContext`.

    Returns (action f32[A] in [-1, 1], new_prev_mean f32[H,A] = the last
    iteration's mean (spec 3.21), info {"elite_index": i32[]}).
    Raises ValueError for wrong shapes. jit-able; vmap over envs.
    """
    return _plan(params, obs, prev_mean, t0, noise, cfg, eval_mode, task_emb, action_mask,
                 discount, record=False)


def plan_with_stats(params: Any, obs: Array, prev_mean: Array, t0: Array, noise: PlanNoise,
                    cfg: TDMPC2Config, *, eval_mode: bool, task_emb: Array | None = None,
                    action_mask: Array | None = None, discount: Array | None = None
                    ) -> tuple[Array, Array, dict]:
    """`plan` that also returns every intermediate (tests and debugging).

    Same arguments and first two outputs as `plan`. info holds `z` f32[L],
    `pi_actions` f32[H,P,A], `init_mean`/`init_std` f32[H,A], `iters`
    (`IterStats` stacked on a leading I axis), `final_score` f32[E],
    `elite_choice_index` i32[], `selected_sequence` f32[H,A], `final_std`
    f32[H,A], `terminal_discount` f32[] (the gamma^H that scales the terminal
    Q in `trajectory_value`). Slower than `plan` (keeps all candidates of every iteration).
    """
    return _plan(params, obs, prev_mean, t0, noise, cfg, eval_mode, task_emb, action_mask,
                 discount, record=True)
