"""The rollouts of `model_bias.py` on a trained DreamerV3 run: the policy's real episodes
and the imagined rollout from every posterior state (`measure`).
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from model_bias_fields import (DISTANCE_DIMS, aligned, bias_summary, decoder_fields,
                               ensemble_fields)
from model_bias_readings import ROLLOUT_TAG, _head_on_data, held_short, refiltered

def measure(run_dir: Path, episodes: int, H: int, seed_index: int,
            dump: Path | None = None, data_episodes: int = 0,
            held_offsets: list[float] | None = None, held_episodes: int = 8) -> dict:
    """Roll out, imagine and compare for one run (see the module doc); returns its entries.
    ``data_episodes``: for an offline run, also the reward head on the posteriors of that
    many of its dataset's episodes (filtered from the zero state at their first row, as
    the offline trainer's windows start), ``reward_head_on_data``: the same reading of
    states, on the data it was trained on. ``dump``: also save the arrays (obs f32[E, T, O]
    seen at each step, the action taken there, the decoder's reconstruction of it,
    reward_after, the imagined
    rewards f32[E, T, H], the reward head on the posteriors) as an .npz there,
    for task-specific analysis (e.g. the distance to the target where the model is wrong)."""
    import jax
    import jax.numpy as jnp

    from wmx.acting import policy_step
    from wmx.agents.dreamerv3 import outputs
    from wmx.agents.dreamerv3.ac_loss import imagine
    from wmx.agents.dreamerv3.actor_critic import draw_policy_noise
    from wmx.agents.dreamerv3.heads import decode, feat, reward_logits
    from wmx.agents.dreamerv3.offline import ensemble_rewards
    from wmx.agents.dreamerv3.rssm import Feat, draw_latent_noise
    from wmx.evaluate.runs import eval_env, open_run, restore_policy
    from wmx.nn.symlog import symexp
    info = open_run(run_dir)
    if info.rc.agent != "dreamerv3":
        raise SystemExit(f"--run {run_dir}: a {info.rc.agent} run; this measures DreamerV3's "
                         "world model")
    agent, cfg = info.rc.agent_module, info.rc.agent_config
    c = cfg.resolved()
    if c.multitask:
        raise SystemExit(f"--run {run_dir}: a multi-task model; give a single-task run (online, "
                         "or offline on a one-task dataset)")
    if not 0 <= seed_index < len(info.seeds):
        raise SystemExit(f"--seed-index {seed_index}: the run has seeds {list(info.seeds)}")
    task = info.tasks[0]
    env = eval_env(info, task)
    if held_offsets and task not in DISTANCE_DIMS:
        raise SystemExit(f"--held-short: {task} has no finger-to-target distance (the reacher "
                         "tasks have); drop the flag")
    if H > env.T:
        raise SystemExit(f"--horizon {H} is longer than {task}'s episodes (T = {env.T}); "
                         "give at most T")
    params_all, _ = restore_policy(info)
    params = jax.tree_util.tree_map(lambda x: x[seed_index], params_all)
    E, T, A = episodes, env.T, env.action_dim
    key = jax.random.fold_in(jax.random.PRNGKey(info.seeds[seed_index]), ROLLOUT_TAG)
    k_reset, k_act, k_imag = jax.random.split(key, 3)
    spec = outputs.twohot(c)

    @jax.jit
    def rollout(params):
        states = jax.vmap(env.reset)(jax.random.split(k_reset, E))
        carry = agent.init_policy(cfg, E)

        def step(cs, t):
            states, carry = cs
            obs = states.obs
            carry, action, _ = policy_step(agent, params, cfg, carry, states.obs,
                                           jnp.full((E,), t == 0), jax.random.fold_in(k_act, t),
                                           A, eval_mode=True)
            states = jax.vmap(env.step)(states, action)
            return (states, carry), (obs, carry.deter, carry.stoch, states.reward, action)

        _, outs = jax.lax.scan(step, (states, carry), jnp.arange(T))
        return tuple(jnp.moveaxis(x, 0, 1) for x in outs)

    @jax.jit
    def predict(params, deter, stoch):        # [E, T, ...] posteriors
        n = E * T
        kk = jax.random.split(k_imag, 3)
        post = Feat(deter, stoch, jnp.zeros_like(stoch))
        imag = imagine(params, c, post, draw_policy_noise(kk[0], c, (n,)),
                       draw_latent_noise(kk[1], c, (n, H)), draw_policy_noise(kk[2], c, (n, H)))
        r_img = outputs.twohot_mean(reward_logits(params["rew"], c, imag.feat[:, 1:]), spec)
        r_now = outputs.twohot_mean(reward_logits(params["rew"], c, feat(deter, stoch)), spec)
        decoded = symexp(decode(params["dec"], c, deter, stoch))
        ens = None
        if c.offline_ensemble:                 # the run's reward ensemble (W-D11)
            ens = (jnp.std(ensemble_rewards(params["rew_ens"], c, imag.feat[:, 1:]),
                           0).reshape(E, T, H),
                   jnp.std(ensemble_rewards(params["rew_ens"], c, feat(deter, stoch)), 0))
        return r_img.reshape(E, T, H), r_now, decoded, ens

    t0 = time.perf_counter()
    obs, deter, stoch, rew, actions = rollout(params)
    r_img, r_now, decoded, ens = jax.device_get(predict(params, deter, stoch))
    rew = np.asarray(jax.device_get(rew), np.float64)
    obs = np.asarray(jax.device_get(obs), np.float64)
    pred, real, counts, head, paid = aligned(np.asarray(r_img, np.float64), rew,
                                             np.asarray(r_now, np.float64))
    out = bias_summary(pred, real, counts, head, paid, H)
    out["decoder_on_policy"] = decoder_fields(obs[:, 1:], np.asarray(decoded, np.float64)[:, 1:],
                                              head, paid, DISTANCE_DIMS.get(task))
    if ens is not None:
        out["ensemble"] = ensemble_fields(np.asarray(ens[0], np.float64),
                                          np.asarray(ens[1], np.float64),
                                          np.asarray(r_img, np.float64), rew,
                                          np.asarray(r_now, np.float64), c.offline_ensemble,
                                          c.offline_penalty_weight)
    if data_episodes and info.kind == "offline":
        out["reward_head_on_data"] = _head_on_data(info, params, c, data_episodes,
                                                   env.obs_dim, A, task)
    if held_offsets:
        out["held_short"] = held_short(info, params, c, task, held_offsets, held_episodes)
        out["refiltered"] = refiltered(params, c, task, obs, np.asarray(jax.device_get(actions)),
                                       rew)
    if dump is not None:
        np.savez_compressed(dump, obs=obs, action=np.asarray(jax.device_get(actions)),
                            reward_after=rew, decoded_obs=np.asarray(decoded),
                            imagined_reward=np.asarray(r_img), reward_head=np.asarray(r_now))
    out.update({"run_dir": str(info.run_dir), "kind": info.kind, "task": task,
                "checkpoint_step": info.step, "updates": info.updates,
                "seed": info.seeds[seed_index], "episodes": E, "episode_length": T,
                "episode_return_mean": float(rew.sum(1).mean()),
                "episode_returns": rew.sum(1).round(2).tolist(),
                "widths": {k: getattr(c, k) for k in ("units", "hidden", "deter", "classes")},
                "offline_terms": {k: getattr(c, k) for k in ("offline_bc_weight",
                                                             "offline_ensemble",
                                                             "offline_penalty_weight")},
                "params": int(agent.param_counts(cfg)["total"]),
                "wall_s": round(time.perf_counter() - t0, 1)})
    return out


