"""mt19_offline unpack (there): the carried parts of a dataset gathered in a staging folder
across device calls, joined, extracted, validated and renamed into the store; and the parts
format that `pack` (mt19_offline.py) writes and this side checks.

A dataset travels as an uncompressed tar stream of its folder cut into parts,
``<name>@<hash12>.tar.part00``, ``.part01``, ..., beside ``<name>@<hash12>.parts.json``
(schema `SCHEMA`: the dataset's name and content hash, every part's size and sha256, the
total). `stage_files` copies the carried ones into the stage; `unpack_one` stores a
dataset once every part is there with its sha256 (joined into an owned temporary under
``H/datasets/<name>/``, extracted, validated with `wmx.datasets.validate` and renamed to
``H/datasets/<name>/<hash>``), reports the parts still to come, and removes a damaged
part from the stage (`CarryError`, nothing stored). `cmd_unpack` is the ``unpack``
subcommand of mt19_offline.py, whose module doc tells the whole workflow.
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tarfile
from pathlib import Path
from typing import Any

import _mt19_bundle as bundle_lib

# ---- the parts format (both sides) -------------------------------------------------------
SCHEMA = "wmx.mt19_offline_parts/1"
MIB = 2 ** 20
PARTS_SUFFIX = ".parts.json"
_PART = re.compile(r"\.tar\.part\d{2,}$")


class CarryError(ValueError):
    """A dataset that cannot be packed or unpacked; the message is one line naming the
    problem and the fix."""


def base_name(name: str, content_hash: str) -> str:
    """The parts' common stem: ``<name>@<first 12 hex digits of the content hash>``."""
    return f"{name}@{content_hash[:12]}"


def part_name(base: str, i: int) -> str:
    """The ``i``-th part's file name."""
    return f"{base}.tar.part{i:02d}"


def is_carried_file(name: str) -> bool:
    """Whether a file name is a part or a parts.json (what `unpack` stages)."""
    return name.endswith(PARTS_SUFFIX) or bool(_PART.search(name))


# ---- unpack (there) ----------------------------------------------------------------------
def stage_files(src: Path, stage: Path) -> list[str]:
    """Copy the parts and parts.json files in ``src`` into ``stage`` (each through an
    owned temporary and a rename, so the stage never holds a partial copy).

    Returns:
        The names copied.
    """
    from wmx import temporaries
    stage.mkdir(parents=True, exist_ok=True)
    temporaries.sweep(stage)
    copied = []
    for p in sorted(src.iterdir()):
        if not (p.is_file() and is_carried_file(p.name)):
            continue
        tmp = stage / temporaries.owned_name(p.name)
        try:
            shutil.copyfile(p, tmp)
            os.replace(tmp, stage / p.name)
        finally:
            temporaries.remove(tmp)
        copied.append(p.name)
    return copied


def read_parts_doc(path: Path) -> dict[str, Any]:
    """A parts.json, checked: its schema, name, content hash and parts.

    Raises:
        CarryError naming the file.
    """
    from wmx.schemas.hashing import is_sha256_hex
    doc = bundle_lib.read_json(path)
    ok = (doc.get("schema") == SCHEMA and isinstance(doc.get("name"), str)
          and is_sha256_hex(doc.get("content_hash", ""))
          and path.name == base_name(doc["name"], doc["content_hash"]) + PARTS_SUFFIX
          and isinstance(doc.get("parts"), list) and doc["parts"]
          and all(isinstance(p, dict) and p.get("name") == part_name(path.name.removesuffix(
              PARTS_SUFFIX), i) and isinstance(p.get("size_bytes"), int)
              and is_sha256_hex(p.get("sha256", "")) for i, p in enumerate(doc["parts"])))
    if not ok:
        raise CarryError(f"{path.name}: not a parts.json of {SCHEMA} as `pack` writes it; "
                         "carry the one `pack` wrote")
    return doc


class _Joined:
    """The parts read in order as one stream (for tarfile's stream mode)."""

    def __init__(self, paths: list[Path]):
        self._paths, self._f = list(paths), None

    def read(self, n: int = -1) -> bytes:
        out = b""
        while n < 0 or len(out) < n:
            if self._f is None:
                if not self._paths:
                    break
                self._f = self._paths.pop(0).open("rb")
            got = self._f.read(-1 if n < 0 else n - len(out))
            if not got:
                self._f.close()
                self._f = None
            out += got
        return out

    def close(self) -> None:
        if self._f is not None:
            self._f.close()


def _extract(doc: dict[str, Any], parts: list[Path], into: Path) -> Path:
    """Extract the joined parts into ``into/<name>/<hash>/``: regular files of that
    folder only. Returns the folder."""
    name, h = doc["name"], doc["content_hash"]
    base = base_name(name, h)
    dest = into / name / h
    dest.mkdir(parents=True)
    joined = _Joined(parts)
    try:
        with tarfile.open(fileobj=joined, mode="r|") as tf:
            for m in tf:
                head, _, file = m.name.rpartition("/")
                if not m.isfile() or head != f"{name}/{h}" or file in ("", ".", ".."):
                    raise CarryError(f"{base}: member {m.name!r} is not a file of the "
                                     "dataset; it was not written by `pack`")
                bundle_lib.extract_member(tf, m, dest.parent.parent)
    except (tarfile.TarError, EOFError, OSError) as e:
        raise CarryError(f"{base}: the joined parts are not a whole tar stream "
                         f"({type(e).__name__}); pack and carry them again") from None
    finally:
        joined.close()
    return dest


def _validated(path: Path) -> tuple[Any, str | None]:
    """(`wmx.datasets.validate.validate_dataset`'s report of the dataset at ``path``, its
    first failure in one line or None when it validates)."""
    from wmx.datasets.validate import validate_dataset
    rep = validate_dataset(path)
    return rep, (None if rep.ok else str(rep.failures[0]).splitlines()[0])


def unpack_one(store, stage: Path, doc_path: Path) -> str:
    """Store one staged dataset when complete (see the module doc).

    Args:
        store: the `wmx.datasets.store.Store` stored into.
        stage: the staging folder holding the parts.
        doc_path: the dataset's parts.json in ``stage``.

    Returns:
        The summary line.

    Raises:
        CarryError: a damaged part (removed from the stage), a stream that is no tar of
            the dataset, a dataset that fails validation, or a different dataset in the
            way; nothing stored.
    """
    from wmx.datasets.store import commit_dir, make_staging_dir
    from wmx.schemas.hashing import file_digest
    from wmx import temporaries
    doc = read_parts_doc(doc_path)
    name, h = doc["name"], doc["content_hash"]
    base = base_name(name, h)
    final = store.dataset_path(name, h)
    parts = [stage / p["name"] for p in doc["parts"]]

    def clear_stage() -> None:
        for p in parts + [doc_path]:
            p.unlink(missing_ok=True)

    if final.exists():
        _, bad = _validated(final)
        if bad is not None:
            raise CarryError(f"{base}: {final} is stored but fails validation ({bad}); "
                             "remove it and unpack again")
        clear_stage()
        return f"{base}: kept: already stored in {final} and valid"
    # every part in the stage is checked in each call, so a damaged one is found in the
    # call that carried it, not after the last part came
    damaged = [p for p, want in zip(parts, doc["parts"]) if p.is_file() and (
        p.stat().st_size != want["size_bytes"] or file_digest(p) != want["sha256"])]
    for p in damaged:
        p.unlink()
    if damaged:
        names = ", ".join(p.name for p in damaged)
        raise CarryError(f"{base}: part(s) {names} damaged (size or sha256 not the "
                         "parts.json's); removed from the stage: carry it again")
    missing = [p.name for p in parts if not p.is_file()]
    if missing:
        return (f"{base}: waiting for {len(missing)} of {len(parts)} part(s): "
                f"{', '.join(m.rsplit('.', 1)[1] for m in missing)}; carry them and unpack "
                "again")
    tmp = make_staging_dir(final.parent, h)
    try:
        dest = _extract(doc, parts, tmp)
        rep, bad = _validated(dest)
        if bad is not None:
            raise CarryError(f"{base}: fails validation: {bad}; pack it again from a stored "
                             "copy that validates")
        commit_dir(dest, final)
    finally:
        temporaries.remove(tmp)
        with contextlib.suppress(OSError):
            final.parent.rmdir()                # the name's folder, when it holds nothing
    clear_stage()
    return (f"{base}: stored in {final} ({rep.episodes_checked} episodes validated, "
            f"{len(parts)} part(s), {doc['total_bytes'] / MIB:.2f} MiB)")


def cmd_unpack(args) -> int:
    """Stage the carried parts, store every complete dataset, report each."""
    from wmx.datasets.store import Store
    src = Path(args.dir)
    if not src.is_dir():
        raise CarryError(f"{src}: no such folder; give the folder the call carried")
    store = Store(args.home).ensure_layout()
    store.sweep_temporaries()
    stage = Path(args.stage) if args.stage else store.home / ".carry"
    copied = stage_files(src, stage)
    docs = sorted(stage.glob("*" + PARTS_SUFFIX))
    if not docs:
        raise CarryError(f"no parts.json in {src} or the stage {stage} ({len(copied)} part(s) "
                         "copied); carry the <name>@<hash>.parts.json `pack` wrote")
    failed = 0
    for d in docs:
        try:
            print(unpack_one(store, stage, d))
        except (CarryError, FileExistsError) as e:
            print(f"mt19_offline.py unpack: error: {str(e).splitlines()[0]}", file=sys.stderr)
            failed += 1
    return 2 if failed else 0
