"""The randomness of one TD-MPC2 MPPI decision (tdmpc2_spec §3.A, 3.C).

Every random draw of a planning decision is made up front and handed to
`planner.plan` as one `PlanNoise`, laid out in the order the reference draws
it, so the parity tests can inject the recorded draws of the official code:

- `PlanNoise`             all draws of one decision (leading I axis per iteration)
- `IterNoise`             the draws of one MPPI iteration
- `draw_plan_noise`       a `PlanNoise` from a PRNG key (name scope "noise")
- `noise_from_reference`  a `PlanNoise` from a fixture's recorded draws
- `iteration_noises` / `iteration_noise`  all iterations' / one iteration's draws
- `check_plan_cfg`        the config, resolved and checked for the planner's sizes

Deviations: T-PLAN-ELITE32 (the reference's float64 elite uniform is rounded
to float32 in `noise_from_reference`, spec §0.5 item 11d).

Source: tdmpc2_spec 3.C / §3.A (key splitting), fixtures README "Planner draws".
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from wmx.agents.tdmpc2.config import TDMPC2Config
from wmx.nn.ensemble import random_pair

Array = jax.Array


class PlanNoise(NamedTuple):
    """Every random draw of one planning decision, in the reference's order.

    Shapes (H horizon, P num_pi_trajs, N num_samples, I planning_iterations,
    A action_dim); all float32 unless stated:

    - `pi_traj_eps` f32[H,P,A]: policy eps for the prior trajectories, row t
      for step t (fixture `plan_pitraj_eps_t{t}`).
    - `candidate_noise` f32[I,H,N-P,A]: standard normals of the Gaussian
      candidates (fixture `plan_iter{I}_candidate_noise`).
    - `terminal_pi_eps` f32[I,N,A]: policy eps at z_H in the value estimate.
    - `q_pair` i32[I,2]: two distinct indices into the online Q ensemble.
    - `elite_uniform` f32[]: the uniform in [0, 1) of the final elite pick.
    - `explore_noise` f32[A]: exploration noise (scaled by std[0]; unused in
      eval mode).
    - `q_dropout_keys` [I] PRNG keys (or u32[I,2] raw keys): dropout masks of
      the terminal Q pass; PE keeps Q dropout on while planning (spec §0.5
      item 10). Unused when `cfg.dropout == 0`.

    Source: tdmpc2_spec 3.C / §3.A, fixtures README "Planner draws".
    """

    pi_traj_eps: Array
    candidate_noise: Array
    terminal_pi_eps: Array
    q_pair: Array
    elite_uniform: Array
    explore_noise: Array
    q_dropout_keys: Array


class IterNoise(NamedTuple):
    """The draws of one MPPI iteration (one slice of `PlanNoise` along I)."""

    candidate_noise: Array  # f32[H,N-P,A]
    terminal_pi_eps: Array  # f32[N,A]
    q_pair: Array           # i32[2]
    q_dropout_key: Array    # PRNG key


def check_plan_cfg(cfg: TDMPC2Config) -> TDMPC2Config:
    """The planner's config, resolved and checked.

    Args:
        cfg: the agent's config.

    Returns:
        `cfg.resolved()`.

    Raises:
        ValueError: num_pi_trajs or num_elites above num_samples.
    """
    cfg = cfg.resolved()
    if cfg.num_pi_trajs > cfg.num_samples or cfg.num_elites > cfg.num_samples:
        raise ValueError(
            f"planner needs num_pi_trajs ({cfg.num_pi_trajs}) and num_elites "
            f"({cfg.num_elites}) <= num_samples ({cfg.num_samples})")
    return cfg


def draw_plan_noise(key: Array, cfg: TDMPC2Config, eval_mode: bool = False) -> PlanNoise:
    """Draw the `PlanNoise` of one decision from `key`.

    Shapes as in `PlanNoise` (iterations = `cfg.planning_iterations`). The
    Q pair is a uniformly random ordered pair of distinct members, like the
    reference's `np.random.choice(num_q, 2, replace=False)`. With
    `eval_mode=True` the exploration noise is zeros (the reference draws
    none). Source: tdmpc2_spec §3.A (key splitting).
    """
    cfg = check_plan_cfg(cfg)
    H, P, N, A = cfg.horizon, cfg.num_pi_trajs, cfg.num_samples, cfg.action_dim
    I = cfg.planning_iterations
    with jax.named_scope("noise"):
        k_pi, k_cand, k_term, k_pair, k_u, k_x, k_drop = jax.random.split(key, 7)
        pair = jax.vmap(lambda k: random_pair(k, cfg.num_q))(jax.random.split(k_pair, I))
        explore = jax.random.normal(k_x, (A,), jnp.float32)
        if eval_mode:
            explore = jnp.zeros_like(explore)
        return PlanNoise(
            pi_traj_eps=jax.random.normal(k_pi, (H, P, A), jnp.float32),
            candidate_noise=jax.random.normal(k_cand, (I, H, N - P, A), jnp.float32),
            terminal_pi_eps=jax.random.normal(k_term, (I, N, A), jnp.float32),
            q_pair=pair.astype(jnp.int32),
            elite_uniform=jax.random.uniform(k_u, (), jnp.float32),
            explore_noise=explore,
            q_dropout_keys=jax.random.split(k_drop, I),
        )


def iteration_noises(noise: PlanNoise) -> IterNoise:
    """Every MPPI iteration's draws of `noise` as one `IterNoise` with a leading I axis
    (what the planner's `lax.scan` over iterations takes); q_pair cast to i32."""
    return IterNoise(noise.candidate_noise, noise.terminal_pi_eps,
                     noise.q_pair.astype(jnp.int32), noise.q_dropout_keys)


def iteration_noise(noise: PlanNoise, i: int) -> IterNoise:
    """The draws of MPPI iteration `i` (0-based) of `noise`, for `plan_iteration`."""
    return jax.tree_util.tree_map(lambda x: x[i], iteration_noises(noise))


def noise_from_reference(draws: dict[str, np.ndarray], cfg: TDMPC2Config,
                         eval_mode: bool, dropout_key: Array | None = None) -> PlanNoise:
    """`PlanNoise` from a fixture's recorded draws of one decision.

    `draws` maps the fixture labels without their "NN_" prefix
    (`plan_pitraj_eps_t{t}`, `plan_iter{I}_candidate_noise`,
    `plan_iter{I}_terminal_pi_eps`, `plan_iter{I}_q_pair`, `plan_elite_uniform`,
    `plan_explore_noise` (absent in eval mode)) to arrays. The float64 uniform
    is rounded to float32 (T-PLAN-ELITE32). Raises KeyError for a missing draw.
    """
    cfg = check_plan_cfg(cfg)
    H, I, A = cfg.horizon, cfg.planning_iterations, cfg.action_dim
    if dropout_key is None:
        dropout_key = jax.random.key(0)
    explore = (np.zeros((A,), np.float32) if eval_mode
               else np.asarray(draws["plan_explore_noise"], np.float32))
    return PlanNoise(
        pi_traj_eps=jnp.asarray(np.stack([draws[f"plan_pitraj_eps_t{t}"] for t in range(H)]),
                                jnp.float32),
        candidate_noise=jnp.asarray(
            np.stack([draws[f"plan_iter{i}_candidate_noise"] for i in range(I)]), jnp.float32),
        terminal_pi_eps=jnp.asarray(
            np.stack([draws[f"plan_iter{i}_terminal_pi_eps"] for i in range(I)]), jnp.float32),
        q_pair=jnp.asarray(np.stack([draws[f"plan_iter{i}_q_pair"] for i in range(I)]),
                           jnp.int32),
        elite_uniform=jnp.asarray(np.float32(draws["plan_elite_uniform"])),
        explore_noise=jnp.asarray(explore),
        q_dropout_keys=jax.random.split(dropout_key, I),
    )
