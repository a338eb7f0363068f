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
``keep`` checkpoints are kept.

Integrity: a completed checkpoint holds ``digests.json``, the sha256 of every other
file in it (written last, before the rename). `restore_checkpoint` checks host.json and
the files of the items it reads against it first (orbax itself restores a flipped byte
without a word), and `newest_intact` picks the newest checkpoint that passes, saying in
one line which newer one is damaged and why; `save_checkpoint` replaces a damaged
checkpoint of its step, which a run resumed from an older one writes again. A
checkpoint without ``digests.json`` (written before it was added) is checked for a
readable host.json only, and orbax's read errors name it as damaged. Hashing costs a
read of the checkpoint's bytes at save and at restore (about 0.7 GB/s on the 2-core
development machine). Everything a run needs to continue exactly
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


DIGESTS = "digests.json"
"""The file of a checkpoint listing the sha256 of each of its other files."""


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run (numbered folders with a host.json), oldest first;
    `newest_intact` checks that one can be read."""
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

    ``step`` orders checkpoints (the host loop uses the absolute tick). The checkpoint's
    files get their digests (``digests.json``). Returns the checkpoint folder. Raises
    FileExistsError if an intact checkpoint of that step exists (a damaged one,
    `verify_checkpoint`, is replaced). Past one process only process 0 writes (host copies of
    replicated or single-device items); the others return the folder it writes.
    """
    root = _ckpt_root(run_dir)
    final = root / f"{step:012d}"
    if jax.process_count() > 1:
        if jax.process_index() != 0:
            return final
        items = jax.tree.map(np.asarray, items)
    root.mkdir(parents=True, exist_ok=True)
    damaged = None
    if final.exists():
        try:
            verify_checkpoint(final)
        except CheckpointDamagedError:
            damaged = final          # written again: replaced below, once the new one is
        else:
            raise FileExistsError(f"checkpoint {final} exists already")
    _check_space(root, items)
    tmp = temporaries.make_dir(root, f"{step:012d}")   # swept when its process is dead
    try:
        with _quiet_orbax(), _checkpointer(0) as ckptr:   # closed: no work left
            for name, tree in items.items():
                ckptr.save((tmp / "items" / name).resolve(), _nonempty_leaves(tree))
        (tmp / "host.json").write_text(json.dumps(host, indent=1, sort_keys=True))
        _write_digests(tmp)
        failpoints.hit("checkpoint.written")
        if damaged is not None:       # moved aside (an owned temporary), then replaced
            aside = temporaries.make_dir(root, f"{step:012d}-damaged")
            os.replace(damaged, aside / "old")
            shutil.rmtree(aside, ignore_errors=True)
        os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in list_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _check_space(root: Path, items: dict[str, Any], margin: float = 1.25) -> None:
    """Raise OSError(ENOSPC) naming ``root`` when its filesystem has less free space than
    the items' bytes (times ``margin``, plus 1 MiB): a full disk is then one clear error
    before orbax starts writing (and logging its own failures)."""
    need = int(margin * sum(int(getattr(x, "nbytes", 0)) for x in jax.tree_util.tree_leaves(items))
               ) + (1 << 20)
    free = shutil.disk_usage(root).free
    if free < need:
        raise OSError(errno.ENOSPC, f"No space left on device: a checkpoint needs about "
                                    f"{need / 2**20:.1f} MiB, {free / 2**20:.1f} MiB are free",
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


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != DIGESTS)


def _write_digests(folder: Path) -> None:
    """Write ``folder/digests.json``: {"sha256": {relative path: hex digest}} of every file."""
    from wmx.schemas.hashing import file_digest
    digests = {str(p.relative_to(folder)): file_digest(p) for p in _files(folder)}
    (folder / DIGESTS).write_text(json.dumps({"sha256": digests}, indent=1, sort_keys=True))


def read_host(path: Path) -> dict[str, Any]:
    """The host.json of checkpoint folder ``path``. Raises CheckpointDamagedError naming the
    file when it is missing, not JSON or not a JSON object."""
    file = Path(path) / "host.json"
    try:
        host = json.loads(file.read_text())
    except (OSError, ValueError) as err:
        why = (f"is not valid JSON ({err})" if isinstance(err, ValueError)
               else f"cannot be read ({err.strerror or err})")
        raise CheckpointDamagedError(f"{file} {why}; the checkpoint is damaged: "
                                     f"{_damaged_fix(Path(path))}") from None
    if not isinstance(host, dict):
        raise CheckpointDamagedError(f"{file} is not a JSON object; the checkpoint is "
                                     f"damaged: {_damaged_fix(Path(path))}")
    return host


def verify_checkpoint(path: Path, items: Any = None) -> dict[str, Any]:
    """Check checkpoint folder ``path``: its host.json is a JSON object and, where the
    checkpoint has ``digests.json``, host.json and the files of ``items`` (item names;
    None: every item) have the sha256 written with them. Returns host.json's dict.

    Raises CheckpointDamagedError (one line naming the file, what is wrong, the folder to
    delete and the checkpoint a resume then starts from) otherwise."""
    from wmx.schemas.hashing import file_digest
    path = Path(path)
    host = read_host(path)
    listing = path / DIGESTS
    if not listing.is_file():
        return host                   # written before digests: host.json is all there is
    try:
        digests = json.loads(listing.read_text())["sha256"]
        if not isinstance(digests, dict):
            raise TypeError
    except (OSError, ValueError, KeyError, TypeError):
        raise CheckpointDamagedError(f"{listing} cannot be read; the checkpoint is damaged: "
                                     f"{_damaged_fix(path)}") from None
    wanted = None if items is None else [f"items/{n}/" for n in items]
    for rel, want in sorted(digests.items()):
        if wanted is not None and rel != "host.json" and not rel.startswith(tuple(wanted)):
            continue
        f = path / rel
        if not f.is_file():
            problem = "is missing"
        elif file_digest(f) != want:
            problem = "does not match the digest written with it (changed or cut on disk)"
        else:
            continue
        raise CheckpointDamagedError(f"checkpoint file {f} {problem}; the checkpoint is "
                                     f"damaged: {_damaged_fix(path)}")
    return host


def newest_intact(run_dir: Path, items: Any = None,
                  log: logging.Logger | None = None) -> tuple[Path, dict[str, Any]] | None:
    """(folder, host.json dict) of the run's newest checkpoint that `verify_checkpoint`
    passes (for ``items``, None: all), None when the run has no complete checkpoint.

    Each newer damaged checkpoint is one WARNING line on ``log`` (default: this module's)
    naming the damaged file and the checkpoint used instead. Raises
    CheckpointDamagedError (the newest one's message) when none is intact."""
    log = log or logging.getLogger("wmx.checkpoint")
    ckpts = list_checkpoints(run_dir)
    first: CheckpointDamagedError | None = None
    for i in range(len(ckpts) - 1, -1, -1):
        try:
            host = verify_checkpoint(ckpts[i], items)
        except CheckpointDamagedError as err:
            first = first or err
            older = ckpts[i - 1].name if i else None
            log.warning("%s", _detail(err) + (f": using the older checkpoint {older}" if older
                                              else ""))
            continue
        return ckpts[i], host
    if first is not None:
        raise first
    return None


def _detail(err: CheckpointDamagedError) -> str:
    """The message of ``err`` without its fix (what is damaged, and why)."""
    return str(err).split("; the checkpoint is damaged", 1)[0]


def restore_checkpoint(path: Path, like: dict[str, Any],
                       verify: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore the items named in ``like`` from a checkpoint folder.

    ``like`` maps item names to pytrees with the items' structure, shapes and
    dtypes (concrete arrays or ``jax.ShapeDtypeStruct``, e.g. from
    ``jax.eval_shape``); items not named are not read. ``verify`` False skips
    `verify_checkpoint` (the caller has just run it, e.g. `newest_intact`). Returns ({name:
    pytree}, host dict). Raises ValueError when an item is missing or its
    saved shapes do not match (a checkpoint of another config or layout), and
    CheckpointDamagedError (a ValueError) when host.json or the items' files fail
    `verify_checkpoint` or cannot be read, naming the file or item, the folder to
    delete and the checkpoint a resume then starts from.
    """
    path = Path(path)
    host = verify_checkpoint(path, list(like)) if verify else read_host(path)
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
    return out, host
