"""The Playground half of `env_compare.py`: everything measured on MuJoCo Playground's
reacher-easy through wmx's wrapper (`wmx.envs.playground`, imported when it runs).
"""
from __future__ import annotations

import numpy as np
from env_compare_common import REPEAT, _tolerance_line, jacobian_policy, model_summary

def playground_half(req: dict) -> tuple[dict, dict]:
    """Everything measured on Playground's reacher-easy through `wmx.envs.playground`."""
    import jax
    import jax.numpy as jnp
    from mujoco import mjx

    from wmx.envs.playground import make_env
    from wmx.version import env_versions
    env = make_env("reacher-easy", action_repeat=REPEAT)
    pg = env.pg_env
    mid, fid, tid = pg._target_mocap_body_id, pg._finger_geom_id, pg._target_geom_id
    f32 = lambda x: jnp.asarray(x, jnp.float32)  # noqa: E731
    meta = {"versions": env_versions(), "model": model_summary(pg.mj_model),
            "agent": {"control_dt": float(pg.dt), "sim_dt": float(pg.sim_dt),
                      "n_substeps": int(pg.n_substeps),
                      "episode_control_steps": int(pg._config.episode_length),
                      "T_agent_steps": int(env.T), "action_repeat": int(env.action_repeat),
                      "agent_dt": float(env.agent_dt),
                      "action_low": env.action_low.tolist(),
                      "action_high": env.action_high.tolist(),
                      "obs_layout": [["qpos", 2], ["finger_to_target", 2], ["qvel", 2]],
                      "obs_dim": int(env.obs_dim)},
            "reward_source": _tolerance_line(type(pg)._get_reward)}

    def set_state(key, qpos, qvel, target):
        s = env.reset(key)
        d = s.inner.data
        d = d.replace(qpos=f32(qpos), qvel=f32(qvel),
                      mocap_pos=d.mocap_pos.at[mid, :2].set(f32(target)))
        return env.with_data(s, mjx.forward(pg.mjx_model, d))

    def reward_of(s):
        return pg._get_reward(s.inner.data, None, {}, {})

    key = jax.random.PRNGKey(int(req["seed"]))
    k_reset, k_set, k_ep = jax.random.split(key, 3)
    arr = {}

    @jax.jit
    def resets(keys):
        s = jax.vmap(env.reset)(keys)
        raw = jax.vmap(pg.reset)(keys)      # Playground's own reset, before wmx's forward (E21)
        d = s.inner.data
        truth = d.geom_xpos[:, tid, :2] - d.geom_xpos[:, fid, :2]
        return (d.qpos, d.qvel, d.mocap_pos[:, mid, :2], jnp.abs(s.obs[:, 2:4] - truth).max(-1),
                jnp.abs(raw.obs[:, 2:4] - truth).max(-1), d.geom_xpos[:, tid, :2],
                d.geom_xpos[:, fid, :2])

    out = resets(jax.random.split(k_reset, int(req["n_resets"])))
    for name, x in zip(("reset_qpos", "reset_qvel", "reset_target", "reset_obs_err",
                        "reset_obs_err_unwrapped", "reset_target_geom", "reset_finger"), out):
        arr[name] = np.asarray(x, np.float64)

    @jax.jit
    def states(qpos, qvel, target):
        s = jax.vmap(set_state, (None, 0, 0, 0))(k_set, qpos, qvel, target)
        return s.obs, jax.vmap(reward_of)(s)

    arr["state_obs"], arr["state_reward"] = map(np.asarray, states(
        req["state_qpos"], req["state_qvel"], req["state_target"]))

    @jax.jit
    def grid(qpos, dist, angle):
        def one(q, r, a):
            s = set_state(k_set, q, jnp.zeros(2), jnp.zeros(2))
            finger = s.inner.data.geom_xpos[fid, :2]
            s = set_state(k_set, q, jnp.zeros(2),
                          finger + r * jnp.stack([jnp.cos(a), jnp.sin(a)]))
            return reward_of(s), pg._finger_to_target_dist(s.inner.data)
        return jax.vmap(one)(qpos, f32(dist), f32(angle))

    arr["grid_reward"], arr["grid_dist_measured"] = map(np.asarray, grid(
        req["grid_qpos"], req["grid_dist"], req["grid_angle"]))

    @jax.jit
    def dynamics(qpos, qvel, target, actions):
        def one(q, v, t, acts):
            def step(s, a):
                s = env.step(s, a)
                return s, (s.inner.data.qpos, s.inner.data.qvel)
            return jax.lax.scan(step, set_state(k_set, q, v, t), acts)[1]
        return jax.vmap(one)(qpos, qvel, target, f32(actions))

    arr["dyn_qpos"], arr["dyn_qvel"] = map(np.asarray, dynamics(
        req["dyn_qpos"], req["dyn_qvel"], req["dyn_target"], req["dyn_actions"]))

    @jax.jit
    def episodes(keys, scripted, actions):
        def one(k, is_scripted, acts):
            s0 = env.reset(k)
            def step(s, a_random):
                a = jnp.where(is_scripted, jacobian_policy(s.obs, req["kp"], req["kd"], jnp),
                              a_random)
                s = env.step(s, a)
                return s, s.reward
            _, rewards = jax.lax.scan(step, s0, acts)
            d = s0.inner.data
            return rewards, d.qpos, d.qvel, d.mocap_pos[mid, :2]
        return jax.vmap(one)(keys, scripted, f32(actions))

    E = req["episode_actions"].shape[0]
    keys = jax.random.split(k_ep, E)
    rewards, q0, v0, t0 = map(np.asarray, episodes(
        jnp.concatenate([keys, keys]), jnp.arange(2 * E) < E,
        np.concatenate([req["episode_actions"]] * 2)))
    arr["ret_scripted_own"], arr["ret_random_own"] = rewards[:E].sum(1), rewards[E:].sum(1)
    arr["start_qpos"], arr["start_qvel"], arr["start_target"] = q0[:E], v0[:E], t0[:E]
    meta["agent_step_rewards_seen"] = np.unique(rewards).tolist()
    return meta, arr


