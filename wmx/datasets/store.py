"""The wmx store: one data root with episodes/, datasets/ and runs/ (DESIGN.md §1).

Layout under ``home`` (``--home``, else ``WMX_HOME``, else ``~/.wmx``;
wmx.paths.wmx_home)::

    episodes/<task>/<content hash>/   episode sets (ArrayRecord + manifest.json)
    datasets/<name>/<content hash>/   pooled datasets (shards + manifest.json)
    runs/<run id>/                    training runs

An artifact directory is complete when it holds ``manifest.json``; every write
goes through ``atomic_dir`` (a temporary sibling directory renamed into place),
so a directory without a manifest, or one whose name starts with ".", is never
listed. Names: ``name@<hex prefix>`` (any unique prefix of 8+ hex digits of the
content hash), ``name@latest`` (newest manifest ``created`` time), or a path.
A name is bound to the content: resolving a stored artifact checks that its
manifest's content hash and name are the ones its directory is named after
(ArtifactIntegrityError otherwise). Temporaries are owned by their process
(`wmx.temporaries`); `Store.sweep_temporaries` removes dead processes' ones.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
from pathlib import Path
from typing import Iterator

from wmx import temporaries
from wmx.datasets.names import (ArtifactRef, NameResolutionError, looks_like_ref,
                                parse_ref)
from wmx.paths import HomeError, wmx_home
from wmx.schemas.hashing import is_sha256_hex
from wmx.schemas.manifest import MANIFEST_FILENAME

__all__ = ["Store", "StoreEntry", "atomic_dir", "make_staging_dir",
           "commit_dir", "resolve_dataset",
           "resolve_episode_set", "NameResolutionError", "HomeError",
           "ArtifactIntegrityError"]


class ArtifactIntegrityError(ValueError):
    """A stored artifact's manifest disagrees with the name@hash it is stored under:
    it was changed after it was written."""


@dataclasses.dataclass(frozen=True)
class StoreEntry:
    """One complete artifact in the store: kind ("episode_set" or
    "pooled_dataset"), name (task or dataset name), full content hash, path,
    and the manifest's ``created`` time ("" when unreadable)."""
    kind: str
    name: str
    content_hash: str
    path: Path
    created: str

    @property
    def ref(self) -> str:
        """``name@<first 10 hex digits>``."""
        return f"{self.name}@{self.content_hash[:10]}"


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    for dirpath, _, filenames in os.walk(root):
        for fn in filenames:
            _fsync_path(Path(dirpath) / fn)
        _fsync_path(Path(dirpath))


def make_staging_dir(parent: str | os.PathLike, hint: str = "staging") -> Path:
    """Create and return an empty hidden temporary directory
    ``<parent>/.tmp-<hint>~<host>~<pid>~<hex>`` (parents created; owned by this
    process, `wmx.temporaries`). Listings ignore it, and a stage started after
    this process died removes it (`Store.sweep_temporaries`); pair it with
    ``commit_dir`` (or use ``atomic_dir`` when the final name is known)."""
    return temporaries.make_dir(parent, hint)


def commit_dir(staging: str | os.PathLike, final_path: str | os.PathLike) -> Path:
    """fsync every file of ``staging`` and rename it to ``final_path`` (same
    filesystem). Raises FileExistsError, leaving ``staging`` in place, when
    ``final_path`` exists: a stored artifact is never overwritten."""
    staging, final = Path(staging), Path(final_path)
    if final.exists():
        raise FileExistsError(
            f"{final} already exists; wmx never overwrites a stored artifact "
            "(remove it first or write under another name)")
    final.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(staging, 0o755)
    _fsync_tree(staging)
    os.rename(staging, final)
    _fsync_path(final.parent)
    return final


@contextlib.contextmanager
def atomic_dir(final_path: str | os.PathLike) -> Iterator[Path]:
    """Write a directory atomically: yields an empty temporary directory next
    to ``final_path`` (same filesystem, hidden name ``.tmp-<name>-*``); on a
    clean exit its files are fsynced and it is renamed to ``final_path``; on
    an exception it is removed and the exception propagates.

    Refuses to overwrite: raises FileExistsError if ``final_path`` exists on
    entry or appears before the rename (DESIGN.md §1: nothing is written in
    place). Parent directories are created.
    """
    final = Path(final_path)
    if final.exists():
        raise FileExistsError(
            f"{final} already exists; wmx never overwrites a stored artifact "
            "(remove it first or write under another name)")
    tmp = make_staging_dir(final.parent, final.name)
    try:
        yield tmp
        commit_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _read_created(path: Path) -> str:
    try:
        d = json.loads((path / MANIFEST_FILENAME).read_text(encoding="ascii"))
        created = d.get("created", "")
        return created if isinstance(created, str) else ""
    except (OSError, ValueError, AttributeError):
        return ""


class Store:
    """The data root. ``Store(home=None)``: home resolved by wmx.paths.wmx_home
    (argument, then WMX_HOME, then ~/.wmx). Nothing is created until
    ``ensure_layout`` or a write. Raises HomeError when the home is a file (`wmx_home`)."""

    def __init__(self, home: str | os.PathLike | None = None):
        self.home = wmx_home(home)

    def __repr__(self) -> str:
        return f"Store({str(self.home)!r})"

    @property
    def episodes_dir(self) -> Path:
        return self.home / "episodes"

    @property
    def datasets_dir(self) -> Path:
        return self.home / "datasets"

    @property
    def runs_dir(self) -> Path:
        return self.home / "runs"

    def ensure_layout(self) -> "Store":
        """Create home/{episodes,datasets,runs} and check that home is writable;
        returns self. Raises HomeError naming the data root and the reason (read-only
        filesystem, permissions, a file in the way, no space)."""
        try:
            for d in (self.episodes_dir, self.datasets_dir, self.runs_dir):
                d.mkdir(parents=True, exist_ok=True)
            probe = self.home / temporaries.owned_name("probe")
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as e:
            raise HomeError(f"cannot write to the data root {self.home} (--home / WMX_HOME): "
                            f"{e.strerror or e}; give a writable directory") from None
        return self

    def sweep_temporaries(self) -> list[Path]:
        """Remove the temporaries that dead processes of this host left in the store
        (`wmx.temporaries.sweep`): runs/.tmp-*, episodes/<task>/.tmp-*,
        datasets/<name>/.tmp-* and datasets/.staging/*. Every stage calls it when
        it starts. Returns what was removed."""
        out = []
        for root in (self.runs_dir, self.episodes_dir, self.datasets_dir):
            out += temporaries.sweep(root)
            if root is not self.runs_dir and root.is_dir():
                for d in root.iterdir():
                    if d.is_dir() and not d.name.startswith("."):
                        out += temporaries.sweep(d)
        out += temporaries.sweep(self.datasets_dir / ".staging", hidden_only=False)
        return out

    # ---- paths -------------------------------------------------------------
    def episode_set_path(self, task: str, content_hash: str) -> Path:
        """episodes/<task>/<content hash>; ValueError on a bad hash or name."""
        return self._artifact_path(self.episodes_dir, task, content_hash)

    def dataset_path(self, name: str, content_hash: str) -> Path:
        """datasets/<name>/<content hash>; ValueError on a bad hash or name."""
        return self._artifact_path(self.datasets_dir, name, content_hash)

    def run_path(self, run_id: str) -> Path:
        """runs/<run id>; ValueError on an id with '/' or a leading '.'."""
        _check_name(run_id, "run id")
        return self.runs_dir / run_id

    @staticmethod
    def _artifact_path(root: Path, name: str, content_hash: str) -> Path:
        _check_name(name, "name")
        if not is_sha256_hex(content_hash):
            raise ValueError(f"content hash {content_hash!r} is not 64 lowercase "
                             "hex digits")
        return root / name / content_hash

    # ---- listing -----------------------------------------------------------
    def list_episode_sets(self, task: str | None = None) -> list[StoreEntry]:
        """Complete episode sets (of ``task`` if given), sorted by task, then
        created time, then hash."""
        return self._list(self.episodes_dir, "episode_set", task)

    def list_datasets(self, name: str | None = None) -> list[StoreEntry]:
        """Complete pooled datasets (named ``name`` if given), sorted by name,
        then created time, then hash."""
        return self._list(self.datasets_dir, "pooled_dataset", name)

    @staticmethod
    def _list(root: Path, kind: str, name: str | None) -> list[StoreEntry]:
        if not root.is_dir():
            return []
        names = [name] if name is not None else sorted(
            p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        out = []
        for n in names:
            d = root / n
            if not d.is_dir():
                continue
            for v in sorted(d.iterdir()):
                if v.name.startswith(".") or not is_sha256_hex(v.name) \
                        or not (v / MANIFEST_FILENAME).is_file():
                    continue
                out.append(StoreEntry(kind, n, v.name, v, _read_created(v)))
        return sorted(out, key=lambda e: (e.name, e.created, e.content_hash))

    # ---- resolution --------------------------------------------------------
    def resolve_dataset(self, ref: str | os.PathLike, check_content: bool = True) -> Path:
        """Directory of a pooled dataset given ``name@<hex>``, ``name@latest``
        or a path to a directory holding manifest.json.

        The name is bound to the content: a directory named after a content
        hash (every stored artifact) must hold a manifest with that content
        hash and name, else ArtifactIntegrityError (a ValueError) says it was
        changed after it was written (a cheap check of manifest.json;
        ``check_content=False`` skips it, for `wmx.datasets.validate`, which
        recomputes the hash and reports it). Raises NameResolutionError (a
        ValueError) for an unknown name or version (listing the stored
        candidates), an ambiguous prefix (listing the matches) or a malformed
        name; FileNotFoundError for a path without a manifest.
        """
        return self._resolve(ref, self.datasets_dir, "pooled_dataset", "dataset",
                             check_content)

    def resolve_episode_set(self, ref: str | os.PathLike, check_content: bool = True) -> Path:
        """Directory of an episode set given ``<task>@<hex>``,
        ``<task>@latest`` or a path; checks and errors as in resolve_dataset."""
        return self._resolve(ref, self.episodes_dir, "episode_set", "episode set",
                             check_content)

    def _resolve(self, ref, root: Path, kind: str, what: str, check_content: bool = True
                 ) -> Path:
        bound = (self._check_bound if check_content
                 else (lambda path, kind, what, text: path))
        text = os.fspath(ref)
        as_path = Path(text).expanduser()
        if isinstance(ref, os.PathLike) or not looks_like_ref(text) or as_path.exists():
            if as_path.is_dir() and (as_path / MANIFEST_FILENAME).is_file():
                return bound(as_path.resolve(), kind, what, text)
            if as_path.exists():
                raise FileNotFoundError(
                    f"{as_path} has no {MANIFEST_FILENAME}: not a complete {what}")
            known = [e.ref for e in self._list(root, kind, None)]
            raise NameResolutionError(
                f"{text!r} is neither a {what} directory nor a name like "
                f"<name>@<8+ hex digits> or <name>@latest; stored {what}s: "
                f"{_fmt(known)}", known)
        return bound(self._find(text, root, kind, what), kind, what, text)

    def _find(self, text: str, root: Path, kind: str, what: str) -> Path:
        parsed: ArtifactRef = parse_ref(text)
        entries = self._list(root, kind, parsed.name)
        if not entries:
            names = sorted({e.name for e in self._list(root, kind, None)})
            raise NameResolutionError(
                f"no {what} named {parsed.name!r} under {root}; stored names: "
                f"{_fmt(names)}", names)
        if parsed.is_latest:
            return entries[-1].path  # sorted by created, then hash
        matches = [e for e in entries if e.content_hash.startswith(parsed.version)]
        if len(matches) == 1:
            return matches[0].path
        if not matches:
            cands = [f"{e.ref} (created {e.created or '?'})" for e in entries]
            raise NameResolutionError(
                f"no {what} {parsed.name}@{parsed.version}: no stored version's "
                f"content hash starts with {parsed.version}; stored versions: "
                f"{_fmt(cands)}", [e.ref for e in entries])
        full = [f"{e.name}@{e.content_hash}" for e in matches]
        raise NameResolutionError(
            f"{text!r} is ambiguous: it matches {len(matches)} {what}s "
            f"{_fmt(full)}; give more hex digits", full)

    @staticmethod
    def _check_bound(path: Path, kind: str, what: str, ref: str) -> Path:
        """``path`` when its manifest's content hash (and name) are the ones its
        directory is named after (checked when the directory name is a content hash,
        i.e. inside a store); ArtifactIntegrityError otherwise. Cheap: reads
        manifest.json only (`wmx.datasets.validate` recomputes the hash)."""
        if not is_sha256_hex(path.name):
            return path
        try:
            d = json.loads((path / MANIFEST_FILENAME).read_text(encoding="ascii"))
        except (OSError, ValueError):
            return path           # an unreadable manifest is the readers' error
        if not isinstance(d, dict):
            return path
        if kind == "pooled_dataset":
            name = d.get("name")
        else:
            name = d["task"].get("name") if isinstance(d.get("task"), dict) else None
        h = d.get("content_hash")
        fix = ("rebuild it (beam run pipelines/build_mt19.py, or build_taskset.py) and remove "
               "the changed copy" if kind == "pooled_dataset" else
               "export it again from its run (or build without it) and remove the changed copy")
        if isinstance(h, str) and h != path.name:   # no hash at all: the readers' error
            raise ArtifactIntegrityError(
                f"{what} {ref!r} is stored under {path.parent.name}@{path.name[:16]}... but its "
                f"manifest's content hash is {str(h)[:16]}...: it was changed after it was "
                f"written, so the name no longer names its content; {fix} ({path})")
        if name is not None and name != path.parent.name:
            raise ArtifactIntegrityError(
                f"{what} {ref!r} is stored under the name {path.parent.name!r} but its manifest "
                f"names it {name!r}: it was moved or changed after it was written; {fix} "
                f"({path})")
        return path


def _fmt(items: list[str]) -> str:
    return ", ".join(items) if items else "(none)"


def _check_name(name: str, what: str) -> None:
    if not isinstance(name, str) or not name or "/" in name or "\\" in name \
            or "@" in name or name.startswith("."):
        raise ValueError(f"{what} {name!r} must be non-empty, without '/', '@' "
                         "or a leading '.'")


def resolve_dataset(ref: str | os.PathLike, home: str | os.PathLike | None = None
                    ) -> Path:
    """``Store(home).resolve_dataset(ref)`` (see there)."""
    return Store(home).resolve_dataset(ref)


def resolve_episode_set(ref: str | os.PathLike,
                        home: str | os.PathLike | None = None) -> Path:
    """``Store(home).resolve_episode_set(ref)`` (see there)."""
    return Store(home).resolve_episode_set(ref)
