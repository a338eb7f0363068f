"""Configuration of an online run (`train_online`), for any agent of the registry."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from wmx.agents.registry import get_agent
from wmx.runs import pins
from wmx.runs.seeds import check_seeds
from wmx.envs.registry import TaskSpec, get_task


@dataclass(frozen=True)
class OnlineRunConfig:
    """Everything that defines an online run; saved as the run's config.json.

    Units: ``env_steps`` counts simulator steps (agent steps x action repeat,
    the papers' x axis, summed over the run's vectorised envs);
    ``eval_every`` too. The run covers whole rounds of ``n_envs`` episodes,
    so the number of agent steps is rounded up to a multiple of T * n_envs.

    Raises ValueError (naming the flag) for an unknown agent or preset, a
    non-positive size, or an empty/duplicated seed list or a seed outside
    [0, 2**32) (`wmx.runs.seeds`); unknown tasks raise
    the registry's ValueError listing the known tasks.

    ``chunk_ticks``: when set, the device runs a round in parts of this many
    ticks (agent steps of the n_envs envs) and the host checkpoints after each
    part (`checkpoint_every_chunks` then counts parts), so a long round (many envs, many
    updates per tick) loses little when stopped; results are exactly those of
    whole-round chunks. Left out of config.json when None and out of the config
    hash always.

    ``end_env_steps``: when set, the run ends after the round that reaches these env
    steps per seed, before ``env_steps``, which still sizes everything else (the agent's
    replay and its compiled programs), so a run ended so is the first part of the run of
    ``env_steps``: exactly, when the end is a multiple of ``eval_every`` and of a chunk's
    env steps; else it also has the final evaluation (and the last chunk's training row)
    at its end (set on resume to end a run that cannot train to its total, e.g. within a
    device session). Left out of config.json when None and out of the
    config hash always (the episode sets' producer stays the run's).

    ``init_from``: the checkpoint folder (``<run>/checkpoints/<step>``, resolved
    when the run is created: `wmx.runs.init_from.resolve_source`) whose agent
    states the run starts from (fine-tuning a single-task model trained
    offline or online); everything else starts fresh (empty replay). Left out
    of config.json when None, so other runs' config hashes are unchanged.
    """

    task: str
    agent: str = "tdmpc2"
    seeds: tuple[int, ...] = (0,)
    env_steps: int = 20_000
    n_envs: int = 1
    preset: str = "cpu"
    agent_overrides: dict[str, Any] = field(default_factory=dict)
    eval_every: int = 5_000
    eval_episodes: int = 10
    chunk_episodes: int = 1
    checkpoint_every_chunks: int = 1
    episode_length: int | None = None   # override of T (agent steps), for short smoke runs only
    init_from: str | None = None        # a checkpoint folder: the agents start from its states
    chunk_ticks: int | None = None      # ticks per device chunk within a round (None: whole rounds)
    end_env_steps: int | None = None    # end before env_steps, sized for them (None: at them)

    def __post_init__(self) -> None:
        agent = get_agent(self.agent, "online")   # raises with the known agents
        if self.preset not in agent.PRESETS:
            raise ValueError(f"--preset {self.preset!r} is unknown for {self.agent}; choose one "
                             f"of {list(agent.PRESETS)}")
        get_task(self.task)   # raises with the known names
        check_seeds(self.seeds)
        if self.episode_length is not None and self.episode_length < 4:
            raise ValueError(f"--episode-length must be >= 4 agent steps, got {self.episode_length}")
        for name in ("env_steps", "n_envs", "eval_every", "eval_episodes", "chunk_episodes",
                     "checkpoint_every_chunks", "chunk_ticks", "end_env_steps"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                flag = "--" + name.replace("_", "-")
                raise ValueError(f"{flag} must be > 0, got {getattr(self, name)}")
        if self.end_env_steps is not None and self.end_env_steps > self.env_steps:
            raise ValueError(f"--end-env-steps {self.end_env_steps} is beyond the run's "
                             f"--env-steps {self.env_steps}: give at most that, or raise "
                             "--env-steps (with --resume, an unfinished run's --env-steps may "
                             "grow)")

    # ---- derived ---------------------------------------------------------
    @property
    def task_spec(self) -> TaskSpec:
        spec = get_task(self.task)
        return spec if self.episode_length is None else spec.replace(T=self.episode_length)

    @property
    def agent_module(self):
        """The agent module (`wmx.agents.api.Agent`) of ``agent``."""
        return get_agent(self.agent, "online")

    @property
    def agent_config(self) -> Any:
        """The agent's resolved config for this task: preset, then overrides
        (`Agent.make_config(preset, agent_overrides, task=task_spec)`); a config
        that has an ``n_envs`` field gets the run's."""
        agent = self.agent_module
        over = dict(self.agent_overrides)
        probe = agent.make_config(self.preset, over, task=self.task_spec)
        if hasattr(probe, "n_envs") and probe.n_envs != self.n_envs:
            over["n_envs"] = self.n_envs       # one number of envs, the run's
            return agent.make_config(self.preset, over, task=self.task_spec)
        return probe

    def _rounds_to(self, env_steps: int) -> int:
        """Rounds of n_envs lockstep episodes that reach ``env_steps`` per seed."""
        spec = self.task_spec
        agent_steps = math.ceil(env_steps / spec.action_repeat)
        return math.ceil(agent_steps / (spec.T * self.n_envs))

    @property
    def rounds(self) -> int:
        """Rounds of n_envs lockstep episodes in the run (rounded up)."""
        return self._rounds_to(self.env_steps)

    @property
    def end_rounds(self) -> int:
        """Rounds the run trains: `rounds`, or those that reach ``end_env_steps`` (rounded
        up to a whole round)."""
        if self.end_env_steps is None:
            return self.rounds
        return min(self.rounds, self._rounds_to(self.end_env_steps))

    @property
    def end_total_agent_steps(self) -> int:
        """Agent steps per seed the run trains (`end_rounds` whole rounds)."""
        return self.end_rounds * self.task_spec.T * self.n_envs

    @property
    def end_total_env_steps(self) -> int:
        """Env steps per seed the run trains (`end_rounds` whole rounds): `total_env_steps`
        unless ``end_env_steps`` ends it earlier."""
        return self.end_total_agent_steps * self.task_spec.action_repeat

    @property
    def total_agent_steps(self) -> int:
        return self.rounds * self.task_spec.T * self.n_envs

    @property
    def total_env_steps(self) -> int:
        return self.total_agent_steps * self.task_spec.action_repeat

    @property
    def ticks_per_round(self) -> int:
        return self.task_spec.T + 1

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["seeds"] = list(self.seeds)
        for name in ("init_from", "chunk_ticks", "end_env_steps"):
            if d[name] is None:
                del d[name]
        d["resolved_agent_config"] = dataclasses.asdict(self.agent_config)
        d["derived"] = {"rounds": self.rounds, "total_agent_steps": self.total_agent_steps,
                        "total_env_steps": self.total_env_steps,
                        "episode_length": self.task_spec.T,
                        "action_repeat": self.task_spec.action_repeat}
        if self.end_env_steps is not None:
            d["derived"]["end_total_env_steps"] = self.end_total_env_steps
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OnlineRunConfig":
        """The run config of a saved config.json ``d``. Its agent config has the values
        the run resolved its machine-dependent fields to (`wmx.runs.pins`: e.g.
        DreamerV3's compute_dtype), on any machine."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["seeds"] = tuple(kw["seeds"])
        rc = cls(**kw)
        over = pins.restore_overrides(
            rc.agent_module, d, rc.agent_overrides,
            lambda o: dataclasses.replace(rc, agent_overrides=o).agent_config)
        return rc if over == rc.agent_overrides else dataclasses.replace(rc, agent_overrides=over)

    def config_hash(self) -> str:
        """sha256 (hex, 16 digits) of the agent config and the run protocol (the
        machine-dependent agent fields as `wmx.runs.pins.hash_view`)."""
        d = pins.hash_view(self.agent_module, self.to_json())
        d.pop("chunk_ticks", None)      # how the device splits a round changes no result
        d.pop("end_env_steps", None)    # where it ends changes no result before the end
        d["derived"].pop("end_total_env_steps", None)
        blob = json.dumps(d, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]
