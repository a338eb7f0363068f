"""The bundle of a finished mt19 source run: what leaves the device, and its way into a store.

A bundle is one gzip-compressed tarball per finished run, named after its task
(``<task>.tar.gz``), holding the store's own layout::

    runs/<run>/config.json, metrics.csv, summary.json[, report/...]   the run, less checkpoints
    episodes/<task>/<content hash>/manifest.json, *.array_record       its episode sets, as stored
    campaign/<run>.json                                                how it was produced

A bundle larger than one file that may come back from the device (``part_bytes``,
16 MiB there) is cut into ``<task>.tar.gz.part00``, ``.part01``, ... (byte ranges of
the one tarball, joined in order by `read_bundles`), since a single episode set of a
long run can outgrow the limit by itself.

`ingest` puts bundles into a store all or nothing: every bundle is joined, unpacked
into an owned temporary under ``<home>/runs/`` and verified first (the manifests'
content hashes, the file digests and every record's digest, by the store's own
`wmx.episode_sets.episode_set` checks; the run finished; its producers and seeds
agree), and only then are the episode sets renamed into ``episodes/`` (content
addressed: a set already stored is kept) and the run into ``runs/``. A bad bundle
raises `BundleError` (one line) with nothing written.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import tarfile
from pathlib import Path
from typing import Any, Iterator

PART_BYTES = 16 * 2 ** 20 - 2 ** 16
"""Largest bundle file: under the device's 16 MiB per file brought back (a margin of 64 KiB)."""

RUN_FILES = ("config.json", "metrics.csv", "summary.json")
"""The run's files a bundle carries (beside ``report/``, when the run has one)."""

_PART = re.compile(r"^(?P<base>[A-Za-z0-9_.-]+\.tar\.gz)\.part(?P<i>\d{2})$")


class BundleError(ValueError):
    """A bundle that cannot be packed or ingested; the message is one line naming the
    file and the fix."""


# ---- packing (on the device) -------------------------------------------------------------
def bundle_members(home: Path, run_dir: Path) -> list[tuple[str, Path]]:
    """(name in the tarball, file) of everything a finished run's bundle holds but its
    campaign record: the run's `RUN_FILES` and report, and its episode sets.

    Args:
        home: the data root the run trains in (``run_dir`` is ``home/runs/<run>``).
        run_dir: the finished run.

    Returns:
        Sorted pairs, names relative to the data root.

    Raises:
        BundleError: the run has no summary.json saying it finished, or an episode set
            it names is not under ``home/episodes``.
    """
    home, run_dir = Path(home).resolve(), Path(run_dir).resolve()
    summary = read_json(run_dir / "summary.json")
    if not summary.get("finished") or not isinstance(summary.get("episode_sets"), dict):
        raise BundleError(f"{run_dir}: not a finished run with exported episode sets "
                          "(summary.json); finish it (mt19_campaign.py next) before packing")
    out = [(f"runs/{run_dir.name}/{f}", run_dir / f) for f in RUN_FILES]
    report = run_dir / "report"
    if report.is_dir():
        out += [(f"runs/{run_dir.name}/{p.relative_to(run_dir)}", p)
                for p in sorted(report.rglob("*")) if p.is_file()]
    for seed, path in sorted(summary["episode_sets"].items()):
        s = Path(path).resolve()
        if s.parent.parent != home / "episodes" or not (s / "manifest.json").is_file():
            raise BundleError(f"{run_dir}: the episode set of seed {seed} ({path}) is not in "
                              f"the store {home}; pack the run in its own data root")
        out += [(str(p.relative_to(home)), p) for p in sorted(s.iterdir()) if p.is_file()]
    return out


def pack(home: Path, run_dir: Path, record: dict[str, Any], out_dir: Path, task: str,
         part_bytes: int = PART_BYTES) -> list[Path]:
    """Write the bundle of a finished run into ``out_dir``.

    Args:
        home: the run's data root.
        run_dir: the finished run (``home/runs/<run>``).
        record: its campaign record (commands, chip, code version, calls), stored as
            ``campaign/<run>.json``.
        out_dir: where the bundle goes (created).
        task: the run's task: the bundle is ``<task>.tar.gz``.
        part_bytes: the largest file written; a larger tarball is cut into parts.

    Returns:
        The files written: ``[<task>.tar.gz]`` or its parts in order. The tarball is
        written under a ``.partial`` name and renamed when complete, so a killed call
        leaves no bundle that looks whole.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = f"{task}.tar.gz"
    for old in out_dir.glob(f"{name}*"):          # a bundle of the task packed before
        old.unlink()
    partial = out_dir / f"{name}.partial"
    with tarfile.open(partial, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tf:
        for arc, path in bundle_members(home, run_dir):
            tf.add(path, arcname=arc, recursive=False)
        blob = json.dumps(record, indent=1, sort_keys=True).encode()
        info = tarfile.TarInfo(f"campaign/{Path(run_dir).name}.json")
        info.size, info.mode = len(blob), 0o644
        tf.addfile(info, io.BytesIO(blob))
    size = partial.stat().st_size
    if size <= part_bytes:
        final = out_dir / name
        os.replace(partial, final)
        return [final]
    parts = []
    with partial.open("rb") as f:
        for i in range(-(-size // part_bytes)):
            p = out_dir / f"{name}.part{i:02d}"
            p.write_bytes(f.read(part_bytes))
            parts.append(p)
    partial.unlink()
    return parts


# ---- reading bundles (on this machine) ---------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Bundle:
    """One bundle as found on disk: its name (``<task>.tar.gz``) and its files in order
    (one, or the parts)."""
    name: str
    files: tuple[Path, ...]


def read_bundles(paths: list[Path]) -> list[Bundle]:
    """The bundles among ``paths``.

    Args:
        paths: bundle files (``<task>.tar.gz``, ``<task>.tar.gz.partNN``) or folders
            whose such files are taken (a ``.partial`` file, a killed call's, is not).

    Returns:
        The bundles, sorted by name, their parts in order; a bundle is its name in one
        folder, so that folders of two calls that each brought back a run of the same task
        (a regeneration and the recorded run, say) give two bundles, in the order given
        (a file given twice counts once).

    Raises:
        BundleError: a path is missing, a folder holds no bundle, a bundle's parts are
            not numbered 00, 01, ... without a gap, or a file is not a bundle.
    """
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.is_file() and (
                q.name.endswith(".tar.gz") or _PART.match(q.name)))
            if not found:
                raise BundleError(f"{p}: no bundle in this folder (<task>.tar.gz or "
                                  "<task>.tar.gz.partNN, as `next` writes them)")
            files += found
        elif p.is_file():
            if not (p.name.endswith(".tar.gz") or _PART.match(p.name)):
                raise BundleError(f"{p}: not a bundle (<task>.tar.gz or "
                                  "<task>.tar.gz.partNN); give the files `next` wrote")
            files.append(p)
        else:
            raise BundleError(f"{p}: no such file or folder; give the folder the device "
                              "call's files were copied to")
    whole: dict[tuple[Path, str], Path] = {}        # (folder, name): one bundle per folder
    parts: dict[tuple[Path, str], dict[int, Path]] = {}
    for f in dict.fromkeys(files):
        m = _PART.match(f.name)
        where = f.resolve().parent
        if m:
            parts.setdefault((where, m["base"]), {})[int(m["i"])] = f
        else:
            whole[(where, f.name)] = f
    found = []                                       # (first file's place in `files`, bundle)
    for key, got in parts.items():
        base = key[1]
        if key in whole:
            raise BundleError(f"{whole[key]}: given both whole and in parts; give one")
        if sorted(got) != list(range(len(got))):
            raise BundleError(f"{base}: parts {sorted(got)} are not 00..{len(got) - 1:02d} "
                              "without a gap; copy every part the device call wrote")
        found.append((files.index(got[min(got)]), Bundle(base, tuple(got[i] for i in sorted(got)))))
    found += [(files.index(f), Bundle(key[1], (f,))) for key, f in whole.items()]
    return [b for _, b in sorted(found, key=lambda x: (x[1].name, x[0]))]


@dataclasses.dataclass
class Unpacked:
    """A bundle unpacked and verified in a temporary folder (``root``, the data-root
    layout): its run (name, config, summary, metrics rows), its campaign record and its
    episode sets ({seed: (task, content hash)})."""
    bundle: Bundle
    root: Path
    run: str
    config: dict[str, Any]
    summary: dict[str, Any]
    record: dict[str, Any]
    sets: dict[int, tuple[str, str]]


def read_json(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; BundleError (one line) when unreadable or not an
    object."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise BundleError(f"{path}: unreadable ({type(e).__name__})") from None
    if not isinstance(data, dict):
        raise BundleError(f"{path}: holds no JSON object")
    return data


def extract_member(tf: tarfile.TarFile, member: tarfile.TarInfo, into: Path) -> None:
    """Extract one member under ``into``, through tarfile's "data" filter where Python has
    it (3.11.4+: no links, no special modes, nothing outside ``into``)."""
    if hasattr(tarfile, "data_filter"):
        tf.extract(member, into, filter="data")
    else:
        tf.extract(member, into)


def _extract(bundle: Bundle, into: Path) -> None:
    """Join the bundle's files and unpack them into ``into``: regular files and folders
    only, under runs/, episodes/ or campaign/ (tarfile's "data" filter besides)."""
    joined = into / ".joined.tar.gz"
    with joined.open("wb") as out:
        for f in bundle.files:
            with f.open("rb") as src:
                shutil.copyfileobj(src, out)
    try:
        with tarfile.open(joined, "r:gz") as tf:
            members = tf.getmembers()
            for m in members:
                top = m.name.split("/", 1)[0]
                if not (m.isfile() or m.isdir()) or top not in ("runs", "episodes", "campaign") \
                        or ".." in m.name.split("/") or m.name.startswith("/"):
                    raise BundleError(f"{bundle.name}: member {m.name!r} is not a file of a "
                                      "bundle; it was not written by `next`")
            for m in members:
                extract_member(tf, m, into / "root")
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        if isinstance(e, BundleError):
            raise
        raise BundleError(f"{bundle.name}: the tarball is damaged ({type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else 'truncated'}); copy it "
                          "again from the device call's files") from None
    finally:
        joined.unlink(missing_ok=True)


def verify_episode_set(path: Path) -> tuple[str, int, str]:
    """Check a stored-layout episode set against its manifest: the manifest itself (its
    content hash recomputed from the listed episodes), the folder named after that
    hash and task, the files' sizes and sha256 (`wmx.episode_sets.episode_set.
    verify_episode_set`) and every record's digest (`EpisodeSetReader` with verify).

    Args:
        path: the set's folder, ``.../episodes/<task>/<content hash>``.

    Returns:
        (task, content hash, producer run id); the producer seed is the manifest's.

    Raises:
        BundleError naming the set and the first problem.
    """
    from wmx.episode_sets.episode_set import EpisodeSetReader
    from wmx.episode_sets.episode_set import verify_episode_set as file_problems
    from wmx.schemas.manifest import EpisodeSetManifest
    try:
        m = EpisodeSetManifest.load(path)
        if m.content_hash != path.name or m.task.name != path.parent.name:
            raise BundleError(f"episode set {path.parent.name}/{path.name[:12]}: its manifest "
                              f"names {m.task.name}/{m.content_hash[:12]}")
        problems = file_problems(path)
        if problems:
            raise BundleError(f"episode set {m.task.name}/{m.content_hash[:12]}: "
                              f"{problems[0]}")
        with EpisodeSetReader(path, verify=True) as r:
            for i in range(len(r)):
                r.record(i)
    except BundleError:
        raise
    except (ValueError, OSError) as e:
        raise BundleError(f"episode set {path.parent.name}/{path.name[:12]}: "
                          f"{str(e).splitlines()[0]}") from None
    return m.task.name, m.content_hash, m.producer.run_id


def unpack(bundle: Bundle, tmp: Path) -> Unpacked:
    """Unpack a bundle and verify it (see the module doc).

    Args:
        bundle: the bundle (`read_bundles`).
        tmp: an empty folder on the store's filesystem (`staging`).

    Returns:
        The verified `Unpacked` bundle, its files under ``tmp/root``.

    Raises:
        BundleError naming the bundle and the problem.
    """
    try:
        return _unpack(bundle, tmp)
    except BundleError as e:
        if str(e).startswith(bundle.name):
            raise
        raise BundleError(f"{bundle.name}: {e}") from None


def _unpack(bundle: Bundle, tmp: Path) -> Unpacked:
    from wmx.schemas.manifest import EpisodeSetManifest
    _extract(bundle, tmp)
    root = tmp / "root"
    runs = sorted(p for p in (root / "runs").iterdir()) if (root / "runs").is_dir() else []
    if len(runs) != 1:
        raise BundleError(f"{bundle.name}: holds {len(runs)} runs, a bundle holds one")
    run_dir = runs[0]
    for f in RUN_FILES:
        if not (run_dir / f).is_file():
            raise BundleError(f"{bundle.name}: the run {run_dir.name} has no {f}")
    config, summary = read_json(run_dir / "config.json"), read_json(run_dir / "summary.json")
    record = read_json(root / "campaign" / f"{run_dir.name}.json") \
        if (root / "campaign" / f"{run_dir.name}.json").is_file() else None
    if record is None:
        raise BundleError(f"{bundle.name}: no campaign/{run_dir.name}.json (the record of how "
                          "the run was produced)")
    if not summary.get("finished"):
        raise BundleError(f"{bundle.name}: the run {run_dir.name} did not finish")
    task = config.get("task")
    if bundle.name != f"{task}.tar.gz":
        raise BundleError(f"{bundle.name}: holds a run of {task!r}; bundles are named after "
                          "their task")
    sets: dict[int, tuple[str, str]] = {}
    set_dirs = sorted((root / "episodes").glob("*/*")) if (root / "episodes").is_dir() else []
    for d in set_dirs:
        t, h, run_id = verify_episode_set(d)
        seed = EpisodeSetManifest.load(d).producer.seed
        if t != task or run_id != run_dir.name:
            raise BundleError(f"{bundle.name}: episode set {t}/{h[:12]} was produced by run "
                              f"{run_id!r}, not the bundle's run {run_dir.name!r}")
        if seed in sets:
            raise BundleError(f"{bundle.name}: two episode sets of seed {seed}")
        sets[seed] = (t, h)
    seeds = [int(s) for s in config.get("seeds", [])]
    named = {int(s): Path(p).name for s, p in (summary.get("episode_sets") or {}).items()}
    if sorted(sets) != sorted(seeds) or {s: h for s, (_, h) in sets.items()} != named:
        raise BundleError(f"{bundle.name}: its episode sets (seeds {sorted(sets)}) are not the "
                          f"ones its run exported (seeds {seeds}, summary.json)")
    return Unpacked(bundle, root, run_dir.name, config, summary, record, sets)


@contextlib.contextmanager
def staging(home: Path) -> Iterator[Path]:
    """An owned temporary folder under ``<home>/runs/`` (same filesystem as the store, so
    its contents rename into place), removed when the block ends; first, as every stage
    does, the store's temporaries of dead processes (a killed ingest's or restore's
    staging folder among them) are removed (`Store.sweep_temporaries`).

    Args:
        home: the data root.

    Yields:
        The folder.
    """
    from wmx import temporaries
    from wmx.datasets.store import Store
    Store(home).sweep_temporaries()
    tmp = temporaries.make_dir(Path(home) / "runs", "mt19-ingest")
    try:
        yield tmp
    finally:
        temporaries.remove(tmp)


def check_install(store, u: Unpacked) -> None:
    """Refuse a bundle whose run would replace another in ``store``: a run of the same
    name whose config.json differs (the same config is the same run, ingested before).

    Args:
        store: the `wmx.datasets.store.Store` ingested into.
        u: the verified bundle.

    Raises:
        BundleError: naming the run and the fix.
    """
    run_dst = store.runs_dir / u.run
    if run_dst.exists() and (not (run_dst / "config.json").is_file()
                             or read_json(run_dst / "config.json") != u.config):
        raise BundleError(f"{u.bundle.name}: a different run {u.run} is in {store.runs_dir}; "
                          "move it aside (or ingest into another --home)")


def install(store, u: Unpacked) -> dict[str, Any]:
    """Rename a verified bundle's episode sets and run into the store. A set already
    stored (same content hash: same episodes) is kept as it is; a run already there with
    the same config.json is taken as ingested before. The summary's paths are rewritten
    to this store's, the device's kept under ``ingested_from``.

    Args:
        store: the `wmx.datasets.store.Store` ingested into (same filesystem as ``u``).
        u: the verified bundle (`unpack`).

    Returns:
        {"run": run dir, "sets": {seed: path}, "new_sets": count, "run_new": bool}.

    Raises:
        BundleError: a different run of the same name is in the store.
    """
    from wmx.datasets.store import commit_dir
    from wmx.runs.host import write_json_atomic
    run_src = u.root / "runs" / u.run
    run_dst = store.runs_dir / u.run
    check_install(store, u)
    run_new = not run_dst.exists()
    paths, new_sets = {}, 0
    for seed, (task, h) in sorted(u.sets.items()):
        dst = store.episode_set_path(task, h)
        if not (dst / "manifest.json").is_file():
            commit_dir(u.root / "episodes" / task / h, dst)
            new_sets += 1
        paths[str(seed)] = str(dst)
    if run_new:
        summary = dict(u.summary, run_dir=str(run_dst), episode_sets=paths,
                       ingested_from={"run_dir": u.summary.get("run_dir"),
                                      "episode_sets": u.summary.get("episode_sets")})
        write_json_atomic(run_src / "summary.json", summary)
        store.runs_dir.mkdir(parents=True, exist_ok=True)
        os.rename(run_src, run_dst)
    return {"run": run_dst, "sets": paths, "new_sets": new_sets, "run_new": run_new}
