"""Test helpers: episode sets from synthetic rows and from real Playground rollouts.

Episode sets are written with wmx.episode_sets.episode_set.write_episode_set.

Real Playground episodes cost one MJX compile per task (2-4 minutes of CPU on
the 2-core test machine), too slow for the default test run. They are
collected once by this file's ``__main__`` with the real row collector
(``wmx.envs.collector.collect_episodes``, uniform random actions) and stored in
``data/playground_T20.npz``; ``stored_playground_episodes`` reads them back and
a slow test (tests/datasets/test_build_slow.py) re-collects them and checks
they are the stored ones.

    python tests/pipelines/episode_fixtures.py     # rewrite data/playground_T20.npz
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from wmx.schemas import episode as schema
from wmx.schemas.taskset import TaskInfo, TaskSet

DATA_DIR = Path(__file__).resolve().parent / "data"
PLAYGROUND_FILE = DATA_DIR / "playground_T20.npz"
PLAYGROUND_T = 20
"""Agent steps per stored Playground episode (episode_length override)."""
PLAYGROUND_TASKS = {"cartpole-balance": 0, "cheetah-run": 1}
"""Stored tasks -> collection seed (PRNGKey); cartpole O=5 A=1, cheetah O=17 A=6."""
PLAYGROUND_N_ENVS, PLAYGROUND_N_EPISODES = 3, 2  # 6 episodes per task


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
    """Write one episode set of `task` into the store at `home` with the real
    writer (wmx.episode_sets.episode_set.write_episode_set); returns its directory."""
    from wmx.episode_sets.episode_set import write_episode_set
    from wmx.datasets.store import Store
    from wmx.schemas.manifest import Producer
    producer = Producer(run_id=f"test-{seed}", agent="random", config_hash="none",
                        seed=seed, code_version="test")
    return Path(write_episode_set(Store(home), task, list(episodes), producer,
                                  versions={"test": "0"}))


def taskset_of(name, infos) -> TaskSet:
    return TaskSet(name=name, tasks=tuple(infos), reference_scores=(None,) * len(infos),
                   reference_source="test")


def playground_info(task_name: str, T: int = PLAYGROUND_T) -> TaskInfo:
    """TaskInfo of a registry task with T overridden (short test episodes), as a run
    with ``--episode-length T`` exports it: the discount is the registry's γ(T)."""
    from wmx.envs.registry import get_task
    return TaskInfo.from_spec(get_task(task_name).replace(T=T))


def collect_playground_episodes(task_name: str, T: int = PLAYGROUND_T, seed: int = 0,
                                n_envs: int = PLAYGROUND_N_ENVS,
                                n_episodes: int = PLAYGROUND_N_EPISODES) -> list[dict]:
    """n_envs * n_episodes real episodes of T agent steps (uniform random
    actions) from the real row collector; one MJX compile (minutes on CPU)."""
    import jax
    from wmx.envs.collector import collect_episodes, uniform_policy
    from wmx.envs.playground import make_env
    env = make_env(task_name, episode_length=T)
    eps, _ = collect_episodes(env, uniform_policy(env.action_dim), jax.random.PRNGKey(seed),
                              n_envs, n_episodes)
    return [schema.make_episode(**{k: np.asarray(e[k]) for k in schema.EPISODE_KEYS})
            for e in eps]


def stored_playground_episodes(task_name: str) -> list[dict]:
    """The stored real episodes of `task_name` (see the module doc), each a
    schema episode with T = PLAYGROUND_T."""
    with np.load(PLAYGROUND_FILE) as z:
        n = int(z[f"{task_name}/n"])
        return [schema.make_episode(**{k: z[f"{task_name}/{i}/{k}"]
                                       for k in schema.EPISODE_KEYS}) for i in range(n)]


def playground_episodes(task_name: str, n: int, T: int, seed: int):
    """n real episodes of T agent steps (kept for callers of the old helper)."""
    eps = collect_playground_episodes(task_name, T, seed, n_envs=n, n_episodes=1)
    return eps[:n]


def _write_stored():
    arrays = {}
    for task, seed in PLAYGROUND_TASKS.items():
        eps = collect_playground_episodes(task, PLAYGROUND_T, seed)
        arrays[f"{task}/n"] = np.int64(len(eps))
        for i, ep in enumerate(eps):
            for k in schema.EPISODE_KEYS:
                arrays[f"{task}/{i}/{k}"] = ep[k]
        print(task, len(eps), "episodes, returns",
              [round(schema.episode_return(e), 3) for e in eps])
    DATA_DIR.mkdir(exist_ok=True)
    np.savez_compressed(PLAYGROUND_FILE, **arrays)
    print("wrote", PLAYGROUND_FILE)


if __name__ == "__main__":
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    _write_stored()
