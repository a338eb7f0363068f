"""Where an evaluated run's data came from: dataset, source episode sets, their agents.

An offline run names its dataset (``name@hash`` in config.json); the
dataset's manifest lists the content hashes of its source episode sets; each
episode set's manifest names its producer (run id, seed, agent, code
version) and lists its episode returns. The *final return* of a source is
read, in this order of preference:

1. ``run``: the producing run's ``metrics.csv`` under ``<home>/runs/<run id>``
   when that run directory exists: the producer seed's ``eval`` row at the env
   step where the set's episodes end (episodes x T x action repeat: a prefix of
   the run's set, an offline check's ``RUN_DIR@N``, gets the run as it stood
   then), else its last one (return and env steps; the mean of the last eval
   rows of every seed when the producer seed has none);
2. ``episode_set``: otherwise the mean of the episode set's last 10 episode
   returns (training episodes, not eval_mode ones), at env steps =
   episodes x T x action repeat (an episode set holds a seed's whole history
   from step 0).

The report says which was used for every source (``basis``).
"""
from __future__ import annotations

import csv
import dataclasses
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from wmx.datasets.store import Store
from wmx.schemas.hashing import is_sha256_hex
from wmx.schemas.manifest import DatasetManifest, EpisodeSetManifest, ManifestError

log = logging.getLogger("wmx.evaluate")

LAST_EPISODES = 10
"""Episodes averaged for a source's final return when its run directory is gone."""

BASIS_RUN = "run"
BASIS_EPISODE_SET = "episode_set"
BASIS_TEXT = {BASIS_RUN: "last eval row of the producing run's metrics.csv",
              BASIS_EPISODE_SET: f"mean of the episode set's last {LAST_EPISODES} "
                                 "training-episode returns"}

__all__ = ["SourceSet", "LAST_EPISODES", "BASIS_RUN", "BASIS_EPISODE_SET", "BASIS_TEXT",
           "find_episode_set", "last_eval_return", "resolve_source", "resolve_sources",
           "dataset_sources"]


@dataclasses.dataclass(frozen=True)
class SourceSet:
    """One source episode set of a dataset, with its agent's final return.

    content_hash: the episode set's 64-hex hash; task: its task name; seed,
    run_id, agent, code_version: its producer; episodes: episode count;
    path: its directory ("" when it is not in the store); final_return:
    undiscounted return (None when nothing is known); env_steps: simulator
    steps at which final_return holds (None when unknown); basis: BASIS_RUN,
    BASIS_EPISODE_SET or "missing".
    """
    content_hash: str
    task: str
    seed: int | None
    run_id: str
    agent: str
    code_version: str
    episodes: int
    path: str
    final_return: float | None
    env_steps: int | None
    basis: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def find_episode_set(store: Store, content_hash: str) -> Path | None:
    """Directory ``<home>/episodes/<task>/<content_hash>`` holding a manifest, or None."""
    if not store.episodes_dir.is_dir():
        return None
    for task_dir in sorted(store.episodes_dir.iterdir()):
        if task_dir.name.startswith(".") or not task_dir.is_dir():
            continue
        p = task_dir / content_hash
        if (p / "manifest.json").is_file():
            return p
    return None


def _read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def last_eval_return(metrics_csv: Path, seed: int | None, at: int | None = None
                     ) -> tuple[float, int] | None:
    """(return, env steps) of the last ``eval`` row of ``seed`` in an online metrics.csv.

    Args:
        metrics_csv: the run's metrics.csv.
        seed: the producer seed (None: every seed's).
        at: env steps; when ``seed`` has an eval row there, that row is taken
            instead of its last one (the run as it stood then).

    Returns:
        (return, env steps); when ``seed`` has no eval row (or is None), the
        mean return of every seed's last eval row at the largest env steps.
        None when the file is missing, has no ``env_steps``/``return`` columns
        or no eval rows.
    """
    metrics_csv = Path(metrics_csv)
    if not metrics_csv.is_file():
        return None
    rows = [r for r in _read_rows(metrics_csv) if r.get("kind") == "eval"
            and r.get("return") not in (None, "") and r.get("env_steps") not in (None, "")]
    if not rows:
        return None
    mine = [r for r in rows if seed is not None and r.get("seed") == str(seed)]
    if mine:
        there = [r for r in mine if at is not None and int(float(r["env_steps"])) == at]
        last = there[-1] if there else max(mine, key=lambda r: int(float(r["env_steps"])))
        return float(last["return"]), int(float(last["env_steps"]))
    steps = max(int(float(r["env_steps"])) for r in rows)
    last_returns = [float(r["return"]) for r in rows if int(float(r["env_steps"])) == steps]
    return float(np.mean(last_returns)), steps


def resolve_source(store: Store, content_hash: str) -> SourceSet:
    """The `SourceSet` of one episode-set hash (see the module doc for the final return).

    A hash whose episode set is not in the store gives a SourceSet with
    basis "missing" (task "?", no return) rather than an error, so a report
    can still be written; a malformed manifest raises ManifestError.
    """
    path = find_episode_set(store, content_hash)
    if path is None:
        return SourceSet(content_hash, "?", None, "?", "?", "?", 0, "", None, None, "missing")
    m = EpisodeSetManifest.load(path)
    p = m.producer
    final, steps, basis = None, None, "missing"
    run_dir = None
    try:
        run_dir = store.run_path(p.run_id)
    except ValueError:
        pass
    ends = m.episode_count * m.task.env_steps_per_episode   # where the set's episodes end
    got = last_eval_return(run_dir / "metrics.csv", p.seed, ends) if run_dir is not None \
        and run_dir.is_dir() else None
    if got is not None:
        (final, steps), basis = got, BASIS_RUN
    elif m.episode_returns:
        final = float(np.mean(m.episode_returns[-LAST_EPISODES:]))
        steps, basis = ends, BASIS_EPISODE_SET
    return SourceSet(content_hash, m.task.name, p.seed, p.run_id, p.agent, p.code_version,
                     m.episode_count, str(path), final, steps, basis)


def resolve_sources(store: Store, hashes: Sequence[str]) -> list[SourceSet]:
    """`resolve_source` for every hash, sorted by (task, seed, hash)."""
    out = [resolve_source(store, h) for h in hashes]
    return sorted(out, key=lambda s: (s.task, -1 if s.seed is None else s.seed,
                                      s.content_hash))


def dataset_sources(store: Store, dataset_ref: str) -> tuple[DatasetManifest | None, Path | None,
                                                             list[SourceSet]]:
    """The dataset manifest, its directory and its resolved sources, from ``name@hash``.

    Returns (None, None, []) with a logged warning when the dataset is no
    longer in the store (the report then says so); never raises for a
    missing dataset.
    """
    name, _, digest = str(dataset_ref).partition("@")
    path = None
    if is_sha256_hex(digest):
        try:
            p = store.dataset_path(name, digest)
            path = p if (p / "manifest.json").is_file() else None
        except ValueError:
            path = None
    if path is None:
        try:
            path = store.resolve_dataset(dataset_ref)
        except (ValueError, FileNotFoundError):
            log.warning("dataset %s is not in the store %s: no source lineage", dataset_ref,
                        store.home)
            return None, None, []
    try:
        manifest = DatasetManifest.load(path)
    except (ManifestError, FileNotFoundError) as err:
        log.warning("dataset manifest %s unreadable (%s): no source lineage", path, err)
        return None, Path(path), []
    return manifest, Path(path), resolve_sources(store, manifest.sources)
