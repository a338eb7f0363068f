"""Configuration of an offline run (`train_offline`), for any multi-task agent of the registry."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from wmx.agents.registry import get_agent
from wmx.runs.seeds import check_seeds
from wmx.schemas.taskset import TaskSet


@dataclass(frozen=True)
class OfflineRunConfig:
    """Everything that defines an offline run; saved as the run's config.json.

    dataset: the resolved dataset, ``name@<64 hex content hash>``; taskset: the
    dataset's TaskSet as a dict (``TaskSet.to_dict``), so a run is
    self-contained. Units: ``updates``, ``log_every``, ``eval_every`` and
    ``checkpoint_every`` count gradient updates (spec 4.19: the offline x axis
    is the iteration). A metrics row per seed every ``log_every`` updates; an
    evaluation of every task of ``eval_tasks`` every ``eval_every`` updates
    and at the end (T16: the first after ``eval_every`` updates, not after
    the first update); both must be multiples of ``log_every``, the jitted
    chunk length. ``tasks``: the evaluated subset (None = every task of the
    TaskSet); ``episode_length``: override of T for the evaluation envs only
    (short smoke runs); ``stream``: force the streaming Grain feed;
    ``stream_chunk``: updates per device call when streaming (bounds the host
    batch memory). ``devices``: the devices the run was created on (data
    parallel past one: the batch is sharded over them, `wmx.train_offline.program`);
    not part of `training_hash` (the updates equal one device's up to float32
    reordering, docs/datasets.md), so a run may continue on another count.

    Raises ValueError (naming the flag) for an unknown agent or preset, a
    non-positive count, a log/eval/checkpoint period that is not a multiple
    of ``log_every``, an empty/duplicated seed list or a seed outside [0,
    2**32), a task in ``tasks`` that is not in the TaskSet (listing its
    tasks), or a batch that does not split evenly over ``devices``.
    """

    dataset: str
    taskset: dict[str, Any]
    agent: str = "tdmpc2"
    seeds: tuple[int, ...] = (0,)
    updates: int = 100_000
    batch_size: int = 1024
    preset: str = "cpu"
    agent_overrides: dict[str, Any] = field(default_factory=dict)
    log_every: int = 1_000
    eval_every: int = 50_000
    checkpoint_every: int = 50_000
    eval_episodes: int = 10
    tasks: tuple[str, ...] | None = None
    episode_length: int | None = None
    stream: bool = False
    stream_chunk: int = 50
    devices: int = 1

    def __post_init__(self) -> None:
        agent = get_agent(self.agent, "offline")   # raises with the known agents
        if self.preset not in agent.PRESETS:
            raise ValueError(f"--preset {self.preset!r} is unknown for {self.agent}; choose one "
                             f"of {list(agent.PRESETS)}")
        if "@" not in self.dataset:
            raise ValueError(f"dataset {self.dataset!r} must be a resolved name@hash")
        ts = self.task_set   # raises for a malformed TaskSet
        check_seeds(self.seeds)
        for name in ("updates", "batch_size", "log_every", "eval_every", "checkpoint_every",
                     "eval_episodes", "stream_chunk", "devices"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be > 0, got "
                                 f"{getattr(self, name)}")
        for name in ("eval_every", "checkpoint_every"):
            if getattr(self, name) % self.log_every:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)} must be a "
                                 f"multiple of --log-every {self.log_every} (chunks end there)")
        if self.episode_length is not None and self.episode_length < 1:
            raise ValueError(f"--episode-length must be >= 1 agent step, got "
                             f"{self.episode_length}")
        if self.tasks is not None:
            if not self.tasks:
                raise ValueError("--tasks needs at least one task (omit it to evaluate all)")
            unknown = [t for t in self.tasks if t not in ts.names]
            if unknown:
                raise ValueError(f"--tasks {unknown} not in the dataset's TaskSet {ts.name}; "
                                 f"its tasks are {list(ts.names)}")
            if len(set(self.tasks)) != len(self.tasks):
                raise ValueError(f"--tasks has duplicates: {list(self.tasks)}")
        batch = self.agent_module.batch_spec(self.agent_config).batch  # raises: bad overrides
        if batch % self.devices:
            raise ValueError(f"--batch-size {batch} is not divisible by --devices "
                             f"{self.devices}: each device takes an equal share of the batch")

    # ---- derived ---------------------------------------------------------
    @property
    def task_set(self) -> TaskSet:
        return TaskSet.from_dict(self.taskset)

    @property
    def dataset_name(self) -> str:
        return self.dataset.split("@")[0]

    @property
    def dataset_hash(self) -> str:
        return self.dataset.split("@")[1]

    @property
    def eval_tasks(self) -> tuple[str, ...]:
        """Evaluated task names, in TaskSet order."""
        names = self.task_set.names
        return names if self.tasks is None else tuple(t for t in names if t in self.tasks)

    @property
    def agent_module(self):
        """The agent module (`wmx.agents.api.Agent`) of ``agent``."""
        return get_agent(self.agent, "offline")

    @property
    def agent_config(self) -> Any:
        """The agent's resolved multi-task config for the TaskSet:
        `Agent.make_config(preset, {batch_size, **agent_overrides}, taskset=...)`."""
        return self.agent_module.make_config(
            self.preset, {"batch_size": self.batch_size, **self.agent_overrides},
            taskset=self.task_set)

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["seeds"] = list(self.seeds)
        d["tasks"] = None if self.tasks is None else list(self.tasks)
        d["resolved_agent_config"] = dataclasses.asdict(self.agent_config)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OfflineRunConfig":
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["seeds"] = tuple(kw["seeds"])
        if kw.get("tasks") is not None:
            kw["tasks"] = tuple(kw["tasks"])
        return cls(**kw)

    def training_hash(self) -> str:
        """sha256 (hex, 16) of what determines the trained state: dataset, TaskSet,
        agent config, seeds, feed. A checkpoint is accepted only by a run with the
        same training hash (evaluation settings and the device count may differ)."""
        d = self.to_json()
        keep = {k: d[k] for k in ("dataset", "taskset", "agent", "seeds", "stream",
                                  "stream_chunk", "resolved_agent_config")}
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]
