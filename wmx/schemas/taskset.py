"""TaskSet: the ordered tasks of a multi-task dataset (DESIGN.md §4).

A TaskSet fixes the task ids (position in ``tasks``), each task's obs dim,
action dim, agent episode length T, action repeat and discount, and the
reference scores used to normalise returns, with their source. ``MT19`` is the
19 original mt30 DMC tasks in mt30 order, built from ``wmx.envs.registry``
(the dims are not duplicated here) plus the reference scores below.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from functools import lru_cache
from typing import Any, Iterable, Mapping

MT19_NAME = "mt19"


def is_mt19_name(name: str) -> bool:
    """True for the names of real mt19 builds: ``mt19`` and ``mt19-<tag>`` (a --tasks
    subset is ``mt19-<8 hex>``, `TaskSet.subset`); validation holds them to mt19()."""
    return name == MT19_NAME or name.startswith(MT19_NAME + "-")


TDMPC2_REFERENCE_SOURCE = (
    "TD-MPC2 published single-task results, github.com/nicklashansen/tdmpc2 "
    "results/tdmpc2/*.csv at e9f59321933cbc8e11a002b842adc7d4ffae8ff1 "
    "(shared/reference/tdmpc2_dmc_curves.json): mean episode return over 3 "
    "seeds at the final evaluation point, 4M env steps")
"""Source string recorded with MT19's reference scores."""

TDMPC2_FINAL_RETURNS = {
    "walker-stand": 992.7, "walker-walk": 981.133, "walker-run": 877.2,
    "cheetah-run": 895.833, "reacher-easy": 987.167, "reacher-hard": 981.8,
    "acrobot-swingup": 662.867, "pendulum-swingup": 838.033,
    "cartpole-balance": 998.333, "cartpole-balance-sparse": 977.0,
    "cartpole-swingup": 877.233, "cartpole-swingup-sparse": 850.4,
    "cup-catch": 983.767, "finger-spin": 990.533, "finger-turn-easy": 982.467,
    "finger-turn-hard": 977.133, "fish-swim": 760.967, "hopper-stand": 954.8,
    "hopper-hop": 449.167,
}
"""Final (4M env steps) mean return of TD-MPC2 per mt19 task, transcribed from
shared/reference/tdmpc2_dmc_curves.json ("mean", last entry; a test checks the
transcription). cartpole-swingup-sparse's last point is the mean of 2 seeds."""


@dataclasses.dataclass(frozen=True)
class TaskInfo:
    """One task of a TaskSet or an episode set.

    name: mt30 task name ("walker-walk"); obs_dim, action_dim: ints > 0;
    episode_length: T agent steps (> 0); action_repeat: env steps per agent
    step (>= 1); discount: in (0, 1]. Raises ValueError on bad values.
    """
    name: str
    obs_dim: int
    action_dim: int
    episode_length: int
    action_repeat: int
    discount: float

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or "@" in self.name \
                or "/" in self.name:
            raise ValueError(
                f"task name {self.name!r} must be a non-empty string without "
                "'@' or '/'")
        for field in ("obs_dim", "action_dim", "episode_length", "action_repeat"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"task {self.name}: {field} must be an int >= 1, "
                                 f"got {v!r}")
        d = self.discount
        if isinstance(d, bool) or not isinstance(d, (int, float)) or \
                not 0 < float(d) <= 1:
            raise ValueError(f"task {self.name}: discount must be in (0, 1], "
                             f"got {d!r}")
        object.__setattr__(self, "discount", float(d))

    @property
    def env_steps_per_episode(self) -> int:
        """Env steps of one episode: T agent steps x action repeat (the papers' x axis)."""
        return self.episode_length * self.action_repeat

    @classmethod
    def from_spec(cls, spec: Any) -> "TaskInfo":
        """From any object with the attributes name, obs_dim, action_dim,
        episode_length (or T), action_repeat, discount (e.g.
        wmx.envs.registry.TaskSpec).
        Raises ValueError naming a missing attribute."""
        if isinstance(spec, TaskInfo):
            return spec
        kw = {}
        for f in dataclasses.fields(cls):
            if f.name == "episode_length" and not hasattr(spec, f.name) \
                    and hasattr(spec, "T"):
                kw[f.name] = getattr(spec, "T")
                continue
            if not hasattr(spec, f.name):
                raise ValueError(
                    f"{type(spec).__name__} has no attribute {f.name!r}; a task "
                    "needs name, obs_dim, action_dim, episode_length, "
                    "action_repeat, discount")
            kw[f.name] = getattr(spec, f.name)
        kw["name"] = str(kw["name"])
        for k in ("obs_dim", "action_dim", "episode_length", "action_repeat"):
            kw[k] = int(kw[k])
        kw["discount"] = float(kw["discount"])
        return cls(**kw)

    def to_dict(self) -> dict:
        """JSON-able dict with the field names as keys."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TaskInfo":
        """Inverse of to_dict; raises ValueError on missing/unknown keys."""
        _check_keys(d, [f.name for f in dataclasses.fields(cls)], "task")
        return cls(**dict(d))


def _check_keys(d: Mapping[str, Any], expected: Iterable[str], what: str) -> None:
    if not isinstance(d, Mapping):
        raise ValueError(f"{what} must be a JSON object, got {type(d).__name__}")
    expected = list(expected)
    missing = [k for k in expected if k not in d]
    extra = sorted(set(d) - set(expected))
    if missing or extra:
        raise ValueError(f"{what}: missing keys {missing}, unexpected keys "
                         f"{extra}; expected exactly {expected}")


@dataclasses.dataclass(frozen=True)
class TaskSet:
    """Ordered tasks of a multi-task dataset; task id = position in ``tasks``.

    name: TaskSet name (a dataset name, "mt19"); tasks: tuple of TaskInfo with
    unique names; reference_scores: tuple aligned with tasks (float, or None
    when no reference exists); reference_source: where the scores come from.
    Raises ValueError on duplicates, misaligned scores or an empty set.
    """
    name: str
    tasks: tuple[TaskInfo, ...]
    reference_scores: tuple[float | None, ...]
    reference_source: str

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name or "@" in self.name \
                or "/" in self.name:
            raise ValueError(f"TaskSet name {self.name!r} must be non-empty, "
                             "without '@' or '/'")
        tasks = tuple(self.tasks)
        if not tasks or not all(isinstance(t, TaskInfo) for t in tasks):
            raise ValueError("TaskSet.tasks must be a non-empty tuple of TaskInfo")
        names = [t.name for t in tasks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"TaskSet {self.name}: duplicate tasks {dup}")
        scores = tuple(None if s is None else float(s)
                       for s in self.reference_scores)
        if len(scores) != len(tasks):
            raise ValueError(
                f"TaskSet {self.name}: {len(scores)} reference scores for "
                f"{len(tasks)} tasks; give one per task (None when unknown)")
        if any(s is not None and not math.isfinite(s) for s in scores):
            raise ValueError(f"TaskSet {self.name}: reference scores must be finite")
        object.__setattr__(self, "tasks", tasks)
        object.__setattr__(self, "reference_scores", scores)

    @property
    def names(self) -> tuple[str, ...]:
        """Task names in task-id order."""
        return tuple(t.name for t in self.tasks)

    @property
    def num_tasks(self) -> int:
        return len(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def max_obs_dim(self) -> int:
        """Padded obs width of pooled records."""
        return max(t.obs_dim for t in self.tasks)

    @property
    def max_action_dim(self) -> int:
        """Padded action width of pooled records."""
        return max(t.action_dim for t in self.tasks)

    def task_id(self, name: str) -> int:
        """Position of task ``name``; ValueError listing the tasks if absent."""
        try:
            return self.names.index(name)
        except ValueError:
            raise ValueError(f"task {name!r} is not in TaskSet {self.name}; its "
                             f"tasks are {list(self.names)}") from None

    def task(self, name_or_id: str | int) -> TaskInfo:
        """TaskInfo by name or id."""
        if isinstance(name_or_id, str):
            return self.tasks[self.task_id(name_or_id)]
        if not 0 <= int(name_or_id) < len(self.tasks):
            raise ValueError(f"task id {name_or_id} out of range "
                             f"[0, {len(self.tasks)}) for TaskSet {self.name}")
        return self.tasks[int(name_or_id)]

    def reference_score(self, name: str) -> float | None:
        """Reference score of task ``name`` (None when the source has none)."""
        return self.reference_scores[self.task_id(name)]

    def subset(self, names: Iterable[str], name: str | None = None) -> "TaskSet":
        """A TaskSet of the given tasks, kept in this set's order.

        Its name is ``name`` or ``"<self.name>-<first 8 hex of sha256 of the
        comma-joined task names>"``, so a different task list never shares a
        name with the full set. Returns self when ``names`` is all the tasks.
        Raises ValueError on unknown or duplicate names, or an empty list.
        """
        wanted = list(names)
        for n in wanted:
            self.task_id(n)
        if len(set(wanted)) != len(wanted) or not wanted:
            raise ValueError(f"subset needs distinct task names, got {wanted}")
        ordered = [t for t in self.tasks if t.name in set(wanted)]
        if len(ordered) == len(self.tasks) and name is None:
            return self
        joined = ",".join(t.name for t in ordered)
        if name is None:
            name = f"{self.name}-{hashlib.sha256(joined.encode()).hexdigest()[:8]}"
        if name == self.name:
            raise ValueError(f"a subset of TaskSet {self.name} needs another name")
        return TaskSet(name=name, tasks=tuple(ordered),
                       reference_scores=tuple(self.reference_score(t.name)
                                              for t in ordered),
                       reference_source=self.reference_source)

    def to_dict(self) -> dict:
        """JSON-able dict: name, tasks (list of task dicts, each with its
        reference_score), reference_source."""
        return {"name": self.name,
                "reference_source": self.reference_source,
                "tasks": [dict(t.to_dict(), reference_score=s)
                          for t, s in zip(self.tasks, self.reference_scores)]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "TaskSet":
        """Inverse of to_dict; ValueError naming bad or missing keys."""
        _check_keys(d, ["name", "reference_source", "tasks"], "taskset")
        if not isinstance(d["tasks"], list):
            raise ValueError("taskset.tasks must be a list")
        tasks, scores = [], []
        for i, td in enumerate(d["tasks"]):
            if not isinstance(td, Mapping) or "reference_score" not in td:
                raise ValueError(f"taskset.tasks[{i}] needs a reference_score key")
            td = dict(td)
            scores.append(td.pop("reference_score"))
            tasks.append(TaskInfo.from_dict(td))
        return cls(name=d["name"], tasks=tuple(tasks),
                   reference_scores=tuple(scores),
                   reference_source=d["reference_source"])

    def to_json(self) -> str:
        """Canonical JSON text (sorted keys, no spaces)."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "TaskSet":
        """Inverse of to_json; ValueError on malformed JSON or content."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"TaskSet JSON is malformed: {e}") from e
        return cls.from_dict(d)


@lru_cache(maxsize=1)
def mt19() -> TaskSet:
    """MT19: the 19 original mt30 DMC tasks in mt30 order (DESIGN.md §4), dims
    from ``wmx.envs.registry``, reference scores TDMPC2_FINAL_RETURNS."""
    from wmx.envs import registry  # imported lazily: envs may pull heavy deps

    table = getattr(registry, "MT19_TASKS", None)
    if table is None:
        table = registry.MT19
    specs = [registry.get_task(x) if isinstance(x, str) else x for x in table]
    tasks = tuple(TaskInfo.from_spec(s) for s in specs)
    return TaskSet(name=MT19_NAME, tasks=tasks,
                   reference_scores=tuple(TDMPC2_FINAL_RETURNS.get(t.name)
                                          for t in tasks),
                   reference_source=TDMPC2_REFERENCE_SOURCE)


def __getattr__(name: str):  # module attribute MT19, built on first access
    if name == "MT19":
        return mt19()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
