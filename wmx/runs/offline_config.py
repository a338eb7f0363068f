"""Configuration of an offline run (`train_offline`), for any agent of the registry that
trains offline."""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from wmx.agents.registry import get_agent
from wmx.runs import pins
from wmx.runs.seeds import check_seeds
from wmx.schemas.taskset import TaskSet


@dataclass(frozen=True)
class OfflineRunConfig:
    """Everything that defines an offline run; saved as the run's config.json.

    dataset: the resolved dataset, ``name@<64 hex content hash>``; taskset: the
    dataset's TaskSet as a dict (``TaskSet.to_dict``), so a run is
    self-contained. ``train_tasks``: the tasks the model trains on (None = every
    task of the TaskSet): the run's TaskSet is that subset (`train_task_set`),
    the agent's config is made for it (`Agent.make_config(taskset=...)`: for
    several tasks a multi-task model over their padded widths; for one task the
    agent may give its single-task config, DreamerV3 does) and the feeds read
    only its episodes at the config's widths (`wmx.datasets.task_view`).
    ``batch_size``: items per update (None: the agent preset's). Units:
    ``updates``, ``log_every``, ``eval_every`` and
    ``checkpoint_every`` count gradient updates (spec 4.19: the offline x axis
    is the iteration). A metrics row per seed every ``log_every`` updates; an
    evaluation of every task of ``eval_tasks`` every ``eval_every`` updates
    and at the end (T16: the first after ``eval_every`` updates, not after
    the first update); both must be multiples of ``log_every``, the jitted
    chunk length. ``tasks``: the evaluated subset of the run's tasks (None =
    all of them; ``--eval-tasks``); ``episode_length``: override of T for the evaluation envs only
    (short smoke runs); ``stream``: force the streaming Grain feed;
    ``stream_chunk``: updates per device call when streaming (bounds the host
    batch memory). ``devices``: the devices the run was created on (data
    parallel past one: the batch is sharded over them, `wmx.train_offline.program`);
    not part of `training_hash` (the updates equal one device's up to float32
    reordering, docs/datasets.md), so a run may continue on another count.

    Raises ValueError (naming the flag) for an unknown agent or preset, a
    non-positive count, a log/eval/checkpoint period that is not a multiple
    of ``log_every``, an empty/duplicated seed list or a seed outside [0,
    2**32), a task in ``train_tasks`` that is not in the TaskSet or in
    ``tasks`` that is not trained (listing the choices), or a batch that does
    not split evenly over ``devices``.
    """

    dataset: str
    taskset: dict[str, Any]
    agent: str = "tdmpc2"
    seeds: tuple[int, ...] = (0,)
    updates: int = 100_000
    batch_size: int | None = None
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
    train_tasks: tuple[str, ...] | None = None

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
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')} must be > 0, got "
                                 f"{getattr(self, name)}")
        for name in ("eval_every", "checkpoint_every"):
            if getattr(self, name) % self.log_every:
                raise ValueError(f"--{name.replace('_', '-')} {getattr(self, name)} must be a "
                                 f"multiple of --log-every {self.log_every} (chunks end there)")
        if self.episode_length is not None and self.episode_length < 1:
            raise ValueError(f"--episode-length must be >= 1 agent step, got "
                             f"{self.episode_length}")
        if self.train_tasks is not None:
            _check_names("--tasks", self.train_tasks, ts.names,
                         f"the dataset's TaskSet {ts.name}", "omit it to train on all")
        if self.tasks is not None:
            _check_names("--eval-tasks", self.tasks, self.train_task_set.names,
                         "the run's tasks", "omit it to evaluate all")
        batch = self.agent_module.batch_spec(self.agent_config).batch  # raises: bad overrides
        if batch % self.devices:
            raise ValueError(f"--batch-size {batch} is not divisible by --devices "
                             f"{self.devices}: each device takes an equal share of the batch")

    # ---- derived ---------------------------------------------------------
    @property
    def task_set(self) -> TaskSet:
        """The dataset's TaskSet."""
        return TaskSet.from_dict(self.taskset)

    @property
    def train_task_set(self) -> TaskSet:
        """The run's TaskSet: ``train_tasks`` of the dataset's, in its order (run task
        id = position here), or the whole TaskSet."""
        ts = self.task_set
        return ts if self.train_tasks is None else ts.subset(self.train_tasks)

    @property
    def multitask(self) -> bool:
        """Whether the agent's config is a multi-task model (``num_tasks`` > 0)."""
        return int(getattr(self.agent_config, "num_tasks", 0) or 0) > 0

    def model_task_id(self, name: str) -> int | None:
        """The id the model knows task ``name`` by: its position in `train_task_set` for a
        multi-task config, None for a single-task one (what `wmx.acting` takes)."""
        return self.train_task_set.task_id(name) if self.multitask else None

    def task_view(self):
        """The feeds' `wmx.datasets.task_view.TaskView`: the run's tasks at the config's
        widths."""
        from wmx.datasets.task_view import make_view
        cfg = self.agent_config
        return make_view(self.task_set, self.train_task_set.names, cfg.obs_dim,
                         cfg.action_dim)

    @property
    def dataset_name(self) -> str:
        return self.dataset.split("@")[0]

    @property
    def dataset_hash(self) -> str:
        return self.dataset.split("@")[1]

    @property
    def eval_tasks(self) -> tuple[str, ...]:
        """Evaluated task names, in TaskSet order (of the run's tasks)."""
        names = self.train_task_set.names
        return names if self.tasks is None else tuple(t for t in names if t in self.tasks)

    @property
    def agent_module(self):
        """The agent module (`wmx.agents.api.Agent`) of ``agent``."""
        return get_agent(self.agent, "offline")

    @property
    def agent_config(self) -> Any:
        """The agent's resolved config for the run's TaskSet: `Agent.make_config(preset,
        {batch_size (when given), **agent_overrides}, taskset=train_task_set)`."""
        batch = {} if self.batch_size is None else {"batch_size": self.batch_size}
        return self.agent_module.make_config(
            self.preset, {**batch, **self.agent_overrides}, taskset=self.train_task_set)

    @property
    def batch(self) -> int:
        """Items per update (the agent's `batch_spec`)."""
        return self.agent_module.batch_spec(self.agent_config).batch

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["seeds"] = list(self.seeds)
        d["tasks"] = None if self.tasks is None else list(self.tasks)
        d["train_tasks"] = None if self.train_tasks is None else list(self.train_tasks)
        d["resolved_agent_config"] = dataclasses.asdict(self.agent_config)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "OfflineRunConfig":
        """The run config of a saved config.json ``d``. Its agent config has the values
        the run resolved its machine-dependent fields to (`wmx.runs.pins`: e.g.
        DreamerV3's compute_dtype), on any machine."""
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        kw["seeds"] = tuple(kw["seeds"])
        for k in ("tasks", "train_tasks"):
            if kw.get(k) is not None:
                kw[k] = tuple(kw[k])
        rc = cls(**kw)
        over = pins.restore_overrides(
            rc.agent_module, d, rc.agent_overrides,
            lambda o: dataclasses.replace(rc, agent_overrides=o).agent_config)
        return rc if over == rc.agent_overrides else dataclasses.replace(rc, agent_overrides=over)

    def training_hash(self) -> str:
        """sha256 (hex, 16) of what determines the trained state: dataset, TaskSet,
        agent config, seeds, feed. A checkpoint is accepted only by a run with the
        same training hash (evaluation settings and the device count may differ). The
        machine-dependent agent fields enter as `wmx.runs.pins.hash_view`."""
        d = pins.hash_view(self.agent_module, self.to_json())
        keep = {k: d[k] for k in ("dataset", "taskset", "agent", "seeds", "stream",
                                  "stream_chunk", "resolved_agent_config")}
        if self.train_tasks is not None:       # runs on every task keep their old hash
            keep["train_tasks"] = d["train_tasks"]
        return hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:16]


def _check_names(flag: str, names, known, where: str, fix: str) -> None:
    """Raise ValueError for an empty, duplicated or unknown task list of ``flag``."""
    if not names:
        raise ValueError(f"{flag} needs at least one task ({fix})")
    if len(set(names)) != len(names):
        raise ValueError(f"{flag} has duplicates: {list(names)}")
    unknown = [t for t in names if t not in known]
    if unknown:
        raise ValueError(f"{flag} {unknown} not in {where}; its tasks are {list(known)}")
