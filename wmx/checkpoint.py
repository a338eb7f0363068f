"""Run checkpoints: named device-state items (orbax) plus a host-state JSON.

A checkpoint is the folder ``<run>/checkpoints/<step:012d>/`` holding one
orbax StandardCheckpointer folder per item, ``items/<name>/`` (the trainers
save "agent": the agents' training states, "loop": keys, counters,
collector and policy carries, and, online, "replay"), and ``host.json``
(the host loop's counters). Items restore independently, so `evaluate`
reads the agent state without the replay. It is written into a temporary folder and renamed into place
when complete, so a crash never leaves a half-written checkpoint (the
temporary, ``checkpoints/.tmp-<step>~<owner>``, is removed by the next run
of the stage, `wmx.temporaries`); the newest
``keep`` checkpoints are kept. Everything a run needs to continue exactly
is saved: parameters, optimiser and RunningScale state, replay, collector
and planner carries, keys (deviation T12: the reference saves parameters
only).

Past one process (`jax.distributed.initialize`, train_offline on several
hosts): process 0 alone writes checkpoints, from host copies of the items
(the state is replicated, so its copy is the state), into the run directory
on a shared file system; every process restores for itself.
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import shutil
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp

from wmx import failpoints, temporaries


def _ckpt_root(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = _ckpt_root(run_dir)
    if not root.is_dir():
        return []
    done = [p for p in root.iterdir()
            if p.is_dir() and p.name.isdigit() and (p / "host.json").is_file()]
    return sorted(done, key=lambda p: int(p.name))


def _nonempty_leaves(tree: Any) -> dict[str, Any]:
    """The tree's leaves with elements, keyed by their flat index.

    orbax refuses zero-size arrays (e.g. the MJX state's empty actuator
    activations); those carry no data and are rebuilt from the template.
    """
    leaves = jax.tree_util.tree_leaves(tree)
    return {f"{i:05d}": x for i, x in enumerate(leaves) if math.prod(x.shape) > 0}


def _checkpointer(process: int | None = None) -> ocp.StandardCheckpointer:
    """orbax's checkpointer; past one process, one acting alone (``process``, default this
    one), without barriers across the others."""
    if jax.process_count() == 1:
        return ocp.StandardCheckpointer()
    p = jax.process_index() if process is None else process
    return ocp.StandardCheckpointer(multiprocessing_options=ocp.options.MultiprocessingOptions(
        primary_host=p, active_processes={p}))


def save_checkpoint(run_dir: Path, step: int, items: dict[str, Any], host: dict[str, Any],
                    keep: int = 2) -> Path:
    """Save ``items`` ({name: pytree of arrays}) and ``host`` (JSON-able) atomically.

    ``step`` orders checkpoints (the host loop uses the absolute tick).
    Returns the checkpoint folder. Raises FileExistsError if a checkpoint of
    that step exists. Past one process only process 0 writes (host copies of
    replicated or single-device items); the others return the folder it writes.
    """
    root = _ckpt_root(run_dir)
    final = root / f"{step:012d}"
    if jax.process_count() > 1:
        if jax.process_index() != 0:
            return final
        items = jax.tree.map(np.asarray, items)
    root.mkdir(parents=True, exist_ok=True)
    if final.exists():
        raise FileExistsError(f"checkpoint {final} exists already")
    _check_space(root, items)
    tmp = temporaries.make_dir(root, f"{step:012d}")   # swept when its process is dead
    try:
        with _quiet_orbax(), _checkpointer(0) as ckptr:   # closed: no work left
            for name, tree in items.items():
                ckptr.save((tmp / "items" / name).resolve(), _nonempty_leaves(tree))
        (tmp / "host.json").write_text(json.dumps(host, indent=1, sort_keys=True))
        failpoints.hit("checkpoint.written")
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _check_space(root: Path, items: dict[str, Any], margin: float = 1.25) -> None:
    """Raise OSError(ENOSPC) naming ``root`` when its filesystem has less free space than
    the items' bytes (times ``margin``, plus 1 MB): a full disk is then one clear error
    before orbax starts writing (and logging its own failures)."""
    need = int(margin * sum(int(getattr(x, "nbytes", 0)) for x in jax.tree_util.tree_leaves(items))
               ) + (1 << 20)
    free = shutil.disk_usage(root).free
    if free < need:
        raise OSError(errno.ENOSPC, f"No space left on device: a checkpoint needs about "
                                    f"{need / 2**20:.1f} MB, {free / 2**20:.1f} MB are free",
                      str(root))


@contextlib.contextmanager
def _quiet_orbax():
    """Orbax logs each failure of its background threads with a traceback (and many INFO
    lines); the failure itself is raised to the caller, so its logger says nothing here."""
    logger = logging.getLogger("absl")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


class CheckpointDamagedError(ValueError):
    """A checkpoint's files cannot be read (truncated or corrupted on disk)."""


_READ_ERRORS = ("Error reading", "DATA_LOSS", "is not valid for value of size",
                "Unexpected end of", "checksum")


def _is_read_error(err: Exception, text: str) -> bool:
    """Whether a restore failed on reading the files (TensorStore's status texts, or an
    error that is not orbax's structure/shape mismatch) rather than on the layout."""
    return (not isinstance(err, (ValueError, KeyError, TypeError))
            or any(s in text for s in _READ_ERRORS))


def _short(text: str, most: int = 240) -> str:
    return text if len(text) <= most else text[:most] + " ..."


def _damaged_fix(path: Path) -> str:
    """What to do about a damaged checkpoint folder: delete it, naming the one a resume
    then starts from (the newest older complete checkpoint), if any."""
    run_dir = path.parent.parent                       # <run>/checkpoints/<step>
    older = [p for p in list_checkpoints(run_dir) if p.name < path.name]   # zero-padded
    then = (f"--resume then continues from {older[-1].name}" if older
            else "no older checkpoint is left, so start a new run")
    return f"delete {path} ({then})"


def restore_checkpoint(path: Path, like: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore the items named in ``like`` from a checkpoint folder.

    ``like`` maps item names to pytrees with the items' structure, shapes and
    dtypes (concrete arrays or ``jax.ShapeDtypeStruct``, e.g. from
    ``jax.eval_shape``); items not named are not read. Returns ({name:
    pytree}, host dict). Raises ValueError when an item is missing or its
    saved shapes do not match (a checkpoint of another config or layout), and
    CheckpointDamagedError (a ValueError) when its files cannot be read, naming
    the folder to delete and the checkpoint a resume then starts from.
    """
    path = Path(path)
    out = {}
    with _quiet_orbax(), _checkpointer() as ckptr:     # no INFO lines per restored item
        for name, tree in like.items():
            folder = path / "items" / name
            if not folder.is_dir():
                raise ValueError(f"checkpoint {path} has no item {name!r} (written by another "
                                 "version of wmx or another trainer); start a new run")
            abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, _nonempty_leaves(tree))
            try:
                saved = ckptr.restore(folder.resolve(), abstract)
            except Exception as err:  # noqa: BLE001 - classified below, never swallowed
                text = " ".join(str(err).split())
                if _is_read_error(err, text):
                    raise CheckpointDamagedError(
                        f"checkpoint {path} item {name!r} cannot be read "
                        f"({_short(text)}); it is damaged: {_damaged_fix(path)}") from err
                if isinstance(err, (ValueError, KeyError, TypeError)):
                    raise ValueError(f"checkpoint {path} item {name!r} does not match this "
                                     f"run's configuration: {_short(text)}") from err
                raise
            leaves, treedef = jax.tree_util.tree_flatten(tree)
            out[name] = jax.tree_util.tree_unflatten(
                treedef, [saved[f"{i:05d}"] if f"{i:05d}" in saved
                          else jnp.zeros(x.shape, x.dtype) for i, x in enumerate(leaves)])
    host = json.loads((path / "host.json").read_text())
    return out, host
