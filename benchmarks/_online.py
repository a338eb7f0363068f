"""wmx's jitted online training chunk (`wmx.train_online.program`) as a timed call, shared
by the speed benchmarks' online throughput (`tdmpc2_speed.bench_online`,
`dreamerv3_speed.WmxWorker.setup_online`) and `profile_step.py --program online`.

`start_online` builds the program of a real run (`OnlineRunConfig`, the Playground task,
every seed's initial carries, the chunk function), runs it past its first update (the
warm-up, whose first chunk compiles) and returns an `OnlineChunk`: each call runs the next
chunk of ticks on the carries the previous call left (the chunk donates its carries, so
the state moves on as in the trainer: no call replays another's buffers).
"""
from __future__ import annotations

import time

import jax
import numpy as np


class OnlineChunk:
    """The online program of one run, warmed up; ``chunk()`` runs its next chunk.

    Attributes:
      rc: the run's `OnlineRunConfig`; env: its Playground env; chunk: the jitted
        ``chunk(carries, ticks i32[L]) -> (carries, rows)`` (`program.make_chunk_fn`);
      carries: every seed's `OnlineCarry` (seeds on axis 0) after the last call;
      ticks: ticks per call (L); next_tick: the first tick of the next call;
      first_update_tick: the first tick whose schedule runs updates;
      compile_s: wall seconds of the first chunk (compilation included);
      warmup_chunks: chunks run by `start_online` (the first compiles).
    """

    def __init__(self, rc, env, ticks: int):
        from wmx.train_online import program
        self.rc, self.env, self.ticks = rc, env, ticks
        self.carries = program.init_carries(rc, env)
        self.chunk = program.make_chunk_fn(rc, env)
        self.next_tick = 0
        self.schedule = rc.agent_module.schedule(rc.agent_config, rc.task_spec.T, rc.n_envs)
        self.first_update_tick = self.schedule.first_update_tick()
        self.compile_s = self.warmup_chunks = None

    def _ticks(self) -> np.ndarray:
        return np.arange(self.next_tick, self.next_tick + self.ticks, dtype=np.int32)

    def __call__(self) -> None:
        """Run the next chunk (``ticks`` ticks from ``next_tick``) on the carries and block
        until its carries and rows are ready."""
        self.carries, rows = self.chunk(self.carries, self._ticks())
        jax.block_until_ready((self.carries.n_updates, rows))
        self.next_tick += self.ticks

    def lower(self):
        """The chunk lowered on the next call's arguments (``.compile()`` of it: the
        program the calls run, from jit's cache once called)."""
        return self.chunk.lower(self.carries, self._ticks())

    @property
    def agent_steps_per_call(self) -> int:
        """Agent steps per env and seed of one call: its ticks, less one per whole round
        of T + 1 ticks in it (a round's last tick resets the envs instead of stepping)."""
        return self.ticks - self.ticks // (self.rc.task_spec.T + 1)

    @property
    def env_steps_per_call(self) -> int:
        """Simulator steps of one call, all envs and seeds together: agent steps x n_envs
        x action repeat x seeds."""
        return (self.agent_steps_per_call * self.rc.n_envs * self.env.action_repeat
                * len(self.rc.seeds))

    def updates_next_call(self) -> int:
        """Training steps (each updating every seed) the next call runs, by the agent's
        schedule."""
        return sum(int(self.schedule.n_updates(int(t))) for t in self._ticks())


def start_online(task: str, agent: str, preset: str, n_seeds: int = 1, seed: int = 0,
                 n_envs: int = 1, ticks: int | None = None,
                 episode_length: int | None = None, agent_overrides: dict | None = None,
                 chunks: int = 0) -> OnlineChunk:
    """Build the online program of a real run and warm it up.

    The run: ``OnlineRunConfig(task, agent, seeds, preset, n_envs, agent_overrides,
    episode_length)`` with seeds ``seed`` .. ``seed + n_seeds - 1`` vmapped in one program
    (as ``train_online --seeds`` runs them), sized (and so its replay) to hold the warm-up
    and ``chunks`` more chunks, at least one round. A chunk is ``ticks`` ticks (None: one
    round of T + 1 ticks, the trainer's chunk; a shorter chunk runs the same tick program).
    Warm-up: chunks (the first compiles) until one that starts after the first update tick
    has run, so the next call is in the steady state (TD-MPC2 with ``seed_steps`` T and
    whole rounds: seed phase, burst, a first planning round).

    Args:
      task: Playground task name; agent: "tdmpc2" or "dreamerv3"; preset: the agent's
        preset; n_seeds, seed: the seeds; n_envs: envs per seed; ticks: ticks per call;
      episode_length: T in agent steps (None: the task's own); agent_overrides: config
        overrides on top of the preset; chunks: calls the caller means to make (sizes the
        run; more calls wrap the replay's ring as a longer run would).

    Returns:
      The warmed-up `OnlineChunk`.

    Raises:
      ValueError: an unknown task, agent or preset, a bad seed, or T < 4
        (`OnlineRunConfig`).
    """
    from wmx.envs.playground import cached_env
    from wmx.runs.online_config import OnlineRunConfig
    seeds = tuple(range(seed, seed + n_seeds))
    over = dict(agent_overrides or {})
    probe = OnlineRunConfig(task=task, agent=agent, seeds=seeds, n_envs=n_envs, preset=preset,
                            agent_overrides=over, episode_length=episode_length)
    spec = probe.task_spec
    L = ticks or spec.T + 1
    first = probe.agent_module.schedule(probe.agent_config, spec.T, n_envs).first_update_tick()
    warm = first // L + 2          # the chunk holding the first update, then one more
    rounds = max(1, -(-(warm + chunks) * L // (spec.T + 1)))
    rc = OnlineRunConfig(task=task, agent=agent, seeds=seeds, n_envs=n_envs, preset=preset,
                         agent_overrides=over, episode_length=episode_length,
                         env_steps=rounds * spec.T * n_envs * spec.action_repeat)
    run = OnlineChunk(rc, cached_env(rc.task, rc.episode_length), L)
    t = time.perf_counter()
    run()
    run.compile_s = time.perf_counter() - t
    while run.next_tick <= first + L:
        run()
    run.warmup_chunks = run.next_tick // L
    return run
