"""A trained DreamerV3 model of `model_bias.py` read on given observations and actions: the
filter's heads on rows of data (`read_rows`, `_head_on_data`) and the ``--held-short``
readings (reacher tasks: scripted episodes aimed short of the target, and the policy's
episodes filtered again with other action inputs; `held_short`, `refiltered`).
"""
from __future__ import annotations

import functools

import numpy as np
from model_bias_fields import DISTANCE_DIMS, decoder_fields, reward_head_fields

ROLLOUT_TAG = 0xB1A5
"""fold_in tag of this diagnostic's key stream (not an evaluation's or a trainer's)."""


def _filter_heads(params, c, obs, act, first):
    """(reward head f32[E, K], decoder's raw-space reconstruction f32[E, K, O]) on the
    posteriors of obs-aligned rows filtered from the zero state (this diagnostic's latent
    noise). ``c`` (the resolved config) is static: `read_rows` compiles once per shape."""
    import jax

    from wmx.agents.dreamerv3 import outputs
    from wmx.agents.dreamerv3.heads import decode, encode, feat, reward_logits
    from wmx.agents.dreamerv3.rssm import draw_latent_noise, initial_carry, observe
    from wmx.nn.symlog import symexp
    carry = initial_carry(c, (obs.shape[0],))
    _, post = observe(params["rssm"], c, carry, encode(params["enc"], c, obs), act, first,
                      draw_latent_noise(jax.random.PRNGKey(ROLLOUT_TAG), c, obs.shape[:2]))
    return (outputs.twohot_mean(reward_logits(params["rew"], c, feat(post.deter, post.stoch)),
                                outputs.twohot(c)),
            symexp(decode(params["dec"], c, post.deter, post.stoch)))


@functools.cache
def _filter_heads_jit():
    """`_filter_heads` jitted with its config static, made once (on first use: importing
    this module needs no jax)."""
    import jax
    return jax.jit(_filter_heads, static_argnums=1)


def read_rows(params, c, obs: np.ndarray, act: np.ndarray, first: np.ndarray,
              reward: np.ndarray, task: str) -> dict:
    """The reward head and the decoder on the posteriors of obs-aligned episodes (rows k:
    obs_k f32[E, K, O], the action chosen there f32[E, K, A], is_first bool[E, K], the
    reward of entering obs_k f32[E, K]), filtered from the zero state as the offline
    windows start (`_filter_heads`): `reward_head_fields` and ``decoder``
    (`decoder_fields`) of rows 1.., and the episodes' mean return."""
    import jax
    first = np.array(first, bool)
    first[:, 0] = True
    pred, decoded = (np.asarray(x, np.float64) for x in jax.device_get(_filter_heads_jit()(
        params, c, np.asarray(obs, np.float32), np.asarray(act, np.float32), first)))
    paid = np.asarray(reward, np.float64)[:, 1:]
    return {**reward_head_fields(pred[:, 1:], paid),
            "decoder": decoder_fields(np.asarray(obs, np.float64)[:, 1:], decoded[:, 1:],
                                      pred[:, 1:], paid, DISTANCE_DIMS.get(task)),
            "episodes": int(obs.shape[0]),
            "episode_return_mean": float(np.asarray(reward, np.float64).sum(1).mean())}


def _head_on_data(info, params, c, n: int, O: int, A: int, task: str) -> dict:
    """`read_rows` on ``n`` episodes (drawn with numpy seed 0) of the offline run's
    dataset."""
    from wmx.datasets.readers import load_numpy, open_dataset
    arr = load_numpy(open_dataset(info.config["dataset"], home=info.run_dir.parent.parent))
    idx = np.random.default_rng(0).choice(len(arr["reward"]), min(n, len(arr["reward"])),
                                          replace=False)
    return read_rows(params, c, arr["obs"][idx][..., :O], arr["action"][idx][..., :A],
                     arr["is_first"][idx], arr["reward"][idx], task)


def held_short_action(obs, offset: float, kp: float = 60.0, kd: float = 0.6):
    """The scripted reacher controller (`scripted_reacher.jacobian_policy`) aimed at the
    point ``offset`` short of the target on the finger's side: finger-to-target d becomes
    d·(1 - offset/|d|) (f32[6] obs -> f32[2] action in [-1, 1]). The controller is a
    rough one (its episodes settle 0.01-0.17 from where it aims), so readings of its
    episodes go by the real distances, not by ``offset``."""
    import jax.numpy as jnp
    from scripted_reacher import jacobian_policy
    d = obs[2:4]
    aim = d * (1.0 - offset / jnp.maximum(jnp.linalg.norm(d), 1e-6))
    return jacobian_policy(obs.at[2:4].set(aim), kp, kd)


def obs_aligned_reward(reward_after: np.ndarray) -> np.ndarray:
    """f32[E, T]: the reward of entering obs_t (0 at t = 0) from reward_after f32[E, T] (the
    env's reward for the action at step t), the dataset rows' layout."""
    return np.concatenate([np.zeros_like(reward_after[:, :1]), reward_after[:, :-1]], 1)


def refiltered(params, c, task: str, obs: np.ndarray, actions: np.ndarray,
               reward_after: np.ndarray) -> dict:
    """The policy's own episodes (obs f32[E, T, O] before each step, its actions f32[E, T, A],
    reward_after f32[E, T]) filtered again from the zero state as obs-aligned rows
    (`read_rows`), with the policy's actions, with zero actions and with the scripted
    controller's actions at the same observations (`held_short_action`, offset 0) as the
    RSSM's action input: do the observations or the actions put the latent at the
    target?"""
    import jax
    reward = obs_aligned_reward(reward_after)
    scripted = np.asarray(jax.device_get(jax.jit(jax.vmap(jax.vmap(
        lambda o: held_short_action(o, 0.0))))(obs.astype(np.float32))))
    first = np.zeros(reward.shape, bool)
    return {name: read_rows(params, c, obs, a, first, reward, task)
            for name, a in (("policy_actions", actions), ("zero_actions", np.zeros_like(actions)),
                            ("scripted_actions", scripted))}


def held_short(info, params, c, task: str, offsets: list[float], episodes: int) -> dict:
    """Per offset (m): ``episodes`` scripted episodes aimed that far short of the target
    (`held_short_action`, fresh resets with this diagnostic's key), read by
    `read_rows` as obs-aligned rows (and ``all``: every offset's episodes together): does the
    model place an arm it never saw held short?"""
    import jax
    import jax.numpy as jnp

    from wmx.evaluate.runs import eval_env
    env = eval_env(info, task)
    T = env.T

    def episode(key, offset):
        s0 = env.reset(key)

        def step(s, _):
            a = held_short_action(s.obs, offset)
            s2 = env.step(s, a)
            return s2, (s.obs, a, s2.reward)
        last, (obs, act, rew) = jax.lax.scan(step, s0, None, length=T)
        obs = jnp.concatenate([obs, last.obs[None]])                 # rows 0..T
        act = jnp.concatenate([act, jnp.zeros_like(act[:1])])       # 0 on the last row
        rew = jnp.concatenate([jnp.zeros((1,)), rew])               # 0 on the reset row
        return obs, act, rew

    run = jax.jit(jax.vmap(episode, in_axes=(0, None)))
    keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(0), ROLLOUT_TAG + 1),
                            episodes)
    out, rows = {}, []
    for off in offsets:
        obs, act, rew = (np.asarray(x) for x in jax.device_get(run(keys, off)))
        rows.append((obs, act, rew))
        out[f"{off:g}"] = read_rows(params, c, obs, act, np.zeros(rew.shape, bool), rew, task)
    obs, act, rew = (np.concatenate(x) for x in zip(*rows))
    out["all"] = read_rows(params, c, obs, act, np.zeros(rew.shape, bool), rew, task)
    return out


