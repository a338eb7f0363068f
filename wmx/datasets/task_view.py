"""A run's view of a pooled dataset: some of its tasks, at the model's widths.

A pooled dataset holds every task of its TaskSet, zero-padded at the end to the
TaskSet's widest observation and action, with the task id = position in the
TaskSet (DESIGN.md §4). A run may train on some of its tasks (``train_offline
--tasks``), and a single-task model on the unpadded widths of its one task
(DreamerV3 offline: the online agent's shapes). `TaskView` says which
episodes and widths; both feeds apply it, so they keep drawing from the same
distribution:

- in memory, `select_episodes` keeps the view's episodes once (numpy, before
  the arrays go to the device), and the in-jit samplers draw from those;
- streaming, `record_indices` lists the view's records (one pass over the
  task ids of the shards) for the reader's episode source, and `view_batch`
  cuts each host batch.

Both renumber the task ids to positions in the view (the run's TaskSet) and
cut observations and actions to the view's widths (the cut dims are padding:
zero for every kept task, which `wmx dataset validate` checks). The identity
view (every task, the dataset's widths) changes nothing.

Source: DESIGN.md §4-§5 (pooled layout, feeds); tdmpc2_spec 1.23 (padding at
the end); deviation OF2 / DS-S1 (the streaming reader's epochs).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np


@dataclass(frozen=True)
class TaskView:
    """The episodes and widths a run reads from a pooled dataset.

    ids: the dataset task ids of the run's tasks, in the run's order (run task
    id i = dataset task id ids[i]); obs_dim, action_dim: the widths the model
    reads; dataset_tasks, dataset_obs_dim, dataset_action_dim: the dataset's.
    """

    ids: tuple[int, ...]
    obs_dim: int
    action_dim: int
    dataset_tasks: int
    dataset_obs_dim: int
    dataset_action_dim: int

    @property
    def identity(self) -> bool:
        """True when the view is the whole dataset at its own widths."""
        return (self.ids == tuple(range(self.dataset_tasks))
                and (self.obs_dim, self.action_dim) == (self.dataset_obs_dim,
                                                        self.dataset_action_dim))

    def remap(self) -> np.ndarray:
        """i32[dataset_tasks]: the run's task id of each dataset task id (-1: not read)."""
        out = np.full((self.dataset_tasks,), -1, np.int32)
        out[list(self.ids)] = np.arange(len(self.ids), dtype=np.int32)
        return out


def make_view(taskset: Any, names: Sequence[str], obs_dim: int, action_dim: int) -> TaskView:
    """The view of tasks ``names`` (in that order) of a dataset with TaskSet ``taskset``
    at widths (obs_dim, action_dim).

    Raises ValueError for an unknown or repeated task, or widths narrower than a
    chosen task's dims or wider than the dataset's.
    """
    names = list(names)
    if not names or len(set(names)) != len(names):
        raise ValueError(f"a dataset view needs distinct task names, got {names}")
    ids = tuple(taskset.task_id(n) for n in names)       # raises for an unknown task
    need_o = max(taskset.task(i).obs_dim for i in ids)
    need_a = max(taskset.task(i).action_dim for i in ids)
    if not need_o <= obs_dim <= taskset.max_obs_dim or \
            not need_a <= action_dim <= taskset.max_action_dim:
        raise ValueError(f"widths (obs {obs_dim}, action {action_dim}) do not fit tasks {names}"
                         f" (they need at least ({need_o}, {need_a}); dataset {taskset.name} "
                         f"holds ({taskset.max_obs_dim}, {taskset.max_action_dim}))")
    return TaskView(ids, int(obs_dim), int(action_dim), len(taskset), taskset.max_obs_dim,
                    taskset.max_action_dim)


def select_episodes(arrays: dict[str, np.ndarray], view: TaskView) -> dict[str, np.ndarray]:
    """The view's episodes of `wmx.datasets.readers.load_numpy` arrays (in stored order),
    with task ids renumbered and obs / action cut to the view's widths; the arrays
    themselves for the identity view.

    Raises ValueError when the view keeps no episode.
    """
    if view.identity:
        return arrays
    keep = np.isin(arrays["task"], np.asarray(view.ids))
    if not keep.any():
        raise ValueError(f"the dataset has no episode of the run's tasks (ids {list(view.ids)})")
    out = {k: v[keep] for k, v in arrays.items()}
    out["task"] = view.remap()[out["task"]]
    out["obs"] = np.ascontiguousarray(out["obs"][..., :view.obs_dim])
    out["action"] = np.ascontiguousarray(out["action"][..., :view.action_dim])
    return out


def view_batch(batch: dict[str, np.ndarray], view: TaskView) -> dict[str, np.ndarray]:
    """A streamed host batch (slices or windows) of the view's episodes with task ids
    renumbered and obs / action cut to the view's widths; unchanged for the identity view."""
    if view.identity:
        return batch
    out = dict(batch)
    out["task"] = view.remap()[np.asarray(batch["task"])]
    out["obs"] = np.ascontiguousarray(batch["obs"][..., :view.obs_dim])
    out["action"] = np.ascontiguousarray(batch["action"][..., :view.action_dim])
    return out


def record_indices(ds: Any, view: TaskView) -> np.ndarray | None:
    """i64[n]: the global record indices (shard order, as the streaming reader counts)
    of the view's episodes, from one pass over the shards' task ids; None for the
    identity view (every record). Raises ValueError when the view keeps no episode."""
    if view.identity:
        return None
    from wmx.datasets.readers import record_task_ids
    keep = np.flatnonzero(np.isin(record_task_ids(ds), np.asarray(view.ids)))
    if keep.size == 0:
        raise ValueError(f"the dataset has no episode of the run's tasks (ids {list(view.ids)})")
    return keep
