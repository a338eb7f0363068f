"""Test helpers: episode sets from synthetic rows and from real Playground rollouts.

Episode sets are written with wmx.collect.episode_set.write_episode_set.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from wmx.schemas import episode as schema
from wmx.schemas.taskset import TaskInfo, TaskSet


def synthetic_episode(rng, T, O, A):
    """A valid episode: random obs, actions in [-1,1] (0 on the last row), reward 0 on row 0."""
    obs = rng.normal(size=(T + 1, O)).astype(np.float32)
    act = rng.uniform(-1, 1, size=(T + 1, A)).astype(np.float32)
    act[-1] = 0
    rew = rng.uniform(0, 1, size=T + 1).astype(np.float32)
    rew[0] = 0
    first = np.zeros(T + 1, bool); first[0] = True
    last = np.zeros(T + 1, bool); last[-1] = True
    return schema.make_episode(obs, act, rew, first, last, np.zeros(T + 1, bool))


def write_set(home, task: TaskInfo, episodes, seed=0) -> Path:
    """Write one episode set of `task` into the store at `home` (helper-4's
    write_episode_set); returns its directory."""
    from wmx.collect.episode_set import write_episode_set
    from wmx.datasets.store import Store
    from wmx.schemas.manifest import Producer
    producer = Producer(run_id=f"test-{seed}", agent="random", config_hash="none",
                        seed=seed, code_version="test")
    return Path(write_episode_set(Store(home), task, list(episodes), producer,
                                  versions={"test": "0"}))


def taskset_of(name, infos) -> TaskSet:
    return TaskSet(name=name, tasks=tuple(infos), reference_scores=(None,) * len(infos),
                   reference_source="test")


def playground_episodes(task_name: str, n: int, T: int, seed: int):
    """n real episodes of T agent steps with uniform random actions, obs-aligned rows."""
    import jax
    import jax.numpy as jnp
    try:
        from wmx.envs.collector import collect_episodes  # helper-3's collector
    except ImportError:
        collect_episodes = None
    from wmx.envs.playground import make_env
    env = make_env(task_name, episode_length=T)
    if collect_episodes is not None:
        try:
            return [schema.make_episode(**{k: np.asarray(e[k]) for k in schema.EPISODE_KEYS})
                    for e in collect_episodes(env, n=n, seed=seed)]
        except TypeError:
            pass
    A = env.action_dim

    def rollout(key):
        k0, k1 = jax.random.split(key)
        s0 = env.reset(k0)
        acts = jax.random.uniform(k1, (T, A), minval=-1, maxval=1)

        def step(s, a):
            s = env.step(s, a)
            return s, (s.obs, s.reward)
        _, (obs, rew) = jax.lax.scan(step, s0, acts)
        return s0.obs, obs, rew, acts
    o0, obs, rew, acts = jax.jit(jax.vmap(rollout))(jax.random.split(jax.random.PRNGKey(seed), n))
    eps = []
    for i in range(n):
        o = np.concatenate([np.asarray(o0[i])[None], np.asarray(obs[i])])
        a = np.concatenate([np.asarray(acts[i]), np.zeros((1, A), np.float32)])
        r = np.concatenate([[0.0], np.asarray(rew[i])])
        first = np.zeros(T + 1, bool); first[0] = True
        last = np.zeros(T + 1, bool); last[-1] = True
        eps.append(schema.make_episode(o, a, r, first, last, np.zeros(T + 1, bool)))
    return eps
