"""Here, with what the device brought back: ``ingest`` (bundles into the store, the record
and its plot, the bundles kept in git history) and ``restore`` (the archived bundles back
into a data root that lacks their sets). The subcommands of `mt19_campaign`; see its
docstring for the workflow.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import _mt19_archive as archive_lib
import _mt19_bundle as bundle_lib
import _mt19_record as record_lib
from _mt19_tasks import (DEFAULT_TARGET, TARGETS, Campaign, archived_tasks, load_record,
                         read_state)
from wmx.sizes import counted


def cmd_ingest(args, campaign: Campaign) -> int:
    """Verify the bundles, move them into the store, update the record and its plot.

    Every bundle is unpacked and verified before anything moves (`_mt19_bundle.unpack`,
    `check_install`); a task's entry is replaced unless the recorded run trained more env
    steps; an entry of the same run keeps its ingest time; another run of the recorded env
    steps is a regeneration (`_mt19_record.regenerated`: the same episode sets keep the
    entry, other sets replace it, either way listed under its ``regenerations``). Then,
    when the results folder is in a git work tree (and not ``--no-archive``), each
    recorded task's bundle is archived in git history (`archive_ingested`; a results
    folder in no work tree is said not to be). With no bundle the record (created when absent) and its plot are written again.

    Args:
        args: the parsed flags (``dirs``, ``home``, ``results``, ``no_archive``).
        campaign: the campaign (tasks of the plot, aims and floors of the entries).

    Returns:
        0.

    Raises:
        _mt19_bundle.BundleError: a bundle that is damaged or does not fit the store (one
            line; nothing written).
        _mt19_archive.ArchiveError: a detached HEAD, no git identity or a repository git
            refuses (before anything moves: `_mt19_archive.repo_of`, `ready`), or the
            archive failed (the bundles are then in the store, the record not written:
            ingest again).
    """
    from wmx.datasets.store import Store
    from wmx.schemas.manifest import utc_now_iso
    bundles = bundle_lib.read_bundles([Path(p) for p in args.dirs]) if args.dirs else []
    results = Path(args.results)
    repo = None if args.no_archive or not bundles else archive_lib.repo_of(results)
    if bundles and not args.no_archive and repo is None:
        print(f"not archived: {results} is in no git work tree, so restore cannot put these "
              "sets into another data root; keep the bundles, or ingest again with --results "
              "in the repository")
    if repo is not None:
        archive_lib.ready(repo)     # a detached HEAD, no identity: refused before anything moves
    store = Store(args.home).ensure_layout() if bundles else Store(args.home)
    record = load_record(results) or record_lib.empty(
        TARGETS, DEFAULT_TARGET, record_lib.regenerate_commands())
    record.update(targets=dict(TARGETS), default_target_env_steps=DEFAULT_TARGET,
                  regenerate=record_lib.regenerate_commands())
    with bundle_lib.staging(store.home) if bundles else _nothing() as tmp:
        unpacked = []
        for i, b in enumerate(bundles):           # everything verified before anything moves
            (tmp / str(i)).mkdir()
            unpacked.append(bundle_lib.unpack(b, tmp / str(i)))
            bundle_lib.check_install(store, unpacked[-1])
        now = utc_now_iso()
        for u in unpacked:
            got = bundle_lib.install(store, u)
            task = u.config["task"]
            entry = record_lib.entry_of(store.home, u.run, u.record, campaign.aim(task),
                                        campaign.floor(task), now)
            old = record["tasks"].get(task)
            if old is not None and old["run"] != entry["run"] and old["env_steps"] > entry[
                    "env_steps"]:
                print(f"{task}: kept the recorded {old['run']} ({old['env_steps']:,} env "
                      f"steps); {u.run} ({entry['env_steps']:,}) is in the store only")
            else:
                if old is not None and old["run"] == entry["run"]:
                    entry = {**entry, "ingested": old["ingested"],   # the same run again
                             **{k: old[k] for k in ("regenerations", *record_lib.ARCHIVED_KEYS)
                                if k in old}}
                elif old is not None and old["env_steps"] == entry["env_steps"]:
                    entry, said = record_lib.regenerated(old, entry)
                    print(f"{task}: {said}")
                record["tasks"][task] = entry
            print(f"{task}: {_installed(u, got)}")
    if repo is not None:
        archive_ingested(repo, record, unpacked)
    record["tasks"] = dict(sorted(record["tasks"].items()))
    results.mkdir(parents=True, exist_ok=True)
    record_lib.write(results / record_lib.FILE, record)
    record_lib.plot(record, list(campaign.tasks), results / record_lib.PLOT)
    print(f"recorded in {results / record_lib.FILE} and {record_lib.PLOT}; docs/validation.md's "
          "sources and speed tables: python benchmarks/mt19_campaign.py table")
    return 0


@contextlib.contextmanager
def _nothing():
    yield None


def _installed(u: bundle_lib.Unpacked, got: dict[str, Any]) -> str:
    """What `_mt19_bundle.install` did with a bundle, for ingest's and restore's line: the
    run's name here, its sets (how many were new) and each seed's set hash (12 hex)."""
    return (f"{u.run} -> {got['run']}; {counted(len(got['sets']), 'episode set')} "
            f"({got['new_sets']} new): "
            + ", ".join(f"seed {k} {Path(p).name[:12]}" for k, p in got["sets"].items()))


def _set_hashes(sets: dict[int, tuple[str, str]] | list[dict[str, Any]]) -> dict[str, str]:
    """{seed (str): content hash} of a bundle's sets (`Unpacked.sets`) or an entry's."""
    if isinstance(sets, dict):
        return {str(k): h for k, (_, h) in sets.items()}
    return {str(e["seed"]): e["content_hash"] for e in sets}


def archive_ingested(repo: Path, record: dict[str, Any],
                     unpacked: list[bundle_lib.Unpacked]) -> None:
    """Keep the ingested bundles that the record's entries now name in ``repo``'s history
    (`_mt19_archive.archive`, one pair of commits for all), and name them in the entries.

    Per task, the first bundle whose episode sets are those its entry names (its own run,
    or a regeneration of the same sets) is archived, unless the entry's archive is in the
    repository already (then it keeps that one); a bundle whose run is in the store only
    (the entry kept a longer run) is not.

    Args:
        repo: the git work tree that holds the record.
        record: the record, its entries updated by this ingest (changed in place: an
            archived task's entry gets ``archive`` and ``archive_commit``).
        unpacked: the ingested bundles, in the order given.

    Raises:
        _mt19_archive.ArchiveError: the archive failed (one line; the branch is as it was).
    """
    chosen: dict[str, bundle_lib.Unpacked] = {}
    for u in unpacked:
        task = u.config["task"]
        e = record["tasks"].get(task)
        if task in chosen or e is None or _set_hashes(e["episode_sets"]) != _set_hashes(u.sets):
            continue
        if not (e.get("archive") and archive_lib.available(repo, e["archive"])):
            chosen[task] = u
    if not chosen:
        return
    try:
        got = archive_lib.archive(repo, [f for u in chosen.values() for f in u.bundle.files],
                                  ", ".join(chosen))
    except archive_lib.ArchiveError as e:
        raise archive_lib.ArchiveError(f"{e} (the bundles are in the store, the record is not "
                                       "written: ingest again, or with --no-archive)") from None
    by_name = {g["file"]: g for g in got}
    for task, u in chosen.items():
        files = [by_name[f.name] for f in u.bundle.files]
        record["tasks"][task] = {**record["tasks"][task],
                                 "archive": [{k: g[k] for k in record_lib.ARCHIVE_KEYS}
                                             for g in files],
                                 "archive_commit": files[0]["commit"]}
    print(f"archived {', '.join(chosen)}: {counted(len(got), 'file')}, "
          f"{sum(g['bytes'] for g in got) / 2 ** 20:.2f} MiB in git history (commit "
          f"{got[0]['commit'][:12]} and one taking them out of the working tree, on the "
          "current branch); commit the record as usual")


# ---- restore (here) ----------------------------------------------------------------------
def cmd_restore(args, campaign: Campaign) -> int:
    """Put the recorded episode sets that the data root lacks back from their bundles kept
    in git history; the record is not changed.

    Every task to restore (recorded, its sets missing, its ``archive`` available) has its
    bundle files written from the repository (`_mt19_archive.restore`: sizes and sha256),
    unpacked and verified as ``ingest`` does, and its sets checked to be the recorded ones,
    before anything moves into the store (`_mt19_bundle.install`).

    Args:
        args: the parsed flags (``home``, ``results`` and the campaign's: ``--tasks``
            limits the tasks).
        campaign: the campaign.

    Returns:
        0 (also with nothing to restore; a line per task says what it has).

    Raises:
        _mt19_archive.ArchiveError, _mt19_bundle.BundleError: a bad archive (one line;
            nothing moved).
    """
    from wmx.datasets.store import Store
    results = Path(args.results)
    record = load_record(results)
    repo = archive_lib.repo_of(results)
    states = read_state(Store(args.home).home, campaign, record, archived_tasks(results, record))
    todo, lost = [], []
    for s in states:
        if s.recorded is None:
            print(f"{s.task}: not recorded; nothing to restore")
        elif not s.missing_sets:
            print(f"{s.task}: its recorded sets are in the data root")
        elif s.needs_restore:
            todo.append(s)
        else:
            lost.append(s.task)
            why = ("no archive is recorded" if not s.recorded.get("archive") else
                   f"no git work tree holds {results}" if repo is None else
                   "its archived blobs are not in this repository")
            print(f"{s.task}: sets missing and {why}: train them again on the device "
                  f"(next --regenerate {s.task})")
    if lost:
        print(f"to train again: next --regenerate {','.join(lost)} (status prints the command)")
    if not todo:
        print("nothing to restore")
        return 0
    store = Store(args.home).ensure_layout()
    with bundle_lib.staging(store.home) as tmp:
        unpacked = []                              # every task verified before anything moves
        for i, s in enumerate(todo):
            archive_lib.restore(repo, s.recorded["archive"], tmp / f"files-{i}")
            bundles = bundle_lib.read_bundles([tmp / f"files-{i}"])
            if len(bundles) != 1:
                raise archive_lib.ArchiveError(
                    f"{s.task}: its archive holds {len(bundles)} bundles, not one; restore "
                    f"mt19_sources.json from git, or regenerate: next --regenerate {s.task}")
            (tmp / str(i)).mkdir()
            u = bundle_lib.unpack(bundles[0], tmp / str(i))
            if _set_hashes(u.sets) != _set_hashes(s.recorded["episode_sets"]):
                raise archive_lib.ArchiveError(
                    f"{s.task}: its archived bundle holds other episode sets than the record "
                    "names; restore mt19_sources.json from git, or regenerate: next "
                    f"--regenerate {s.task}")
            bundle_lib.check_install(store, u)
            unpacked.append((s, u))
        for s, u in unpacked:
            got = bundle_lib.install(store, u)
            print(f"{s.task}: restored {_installed(u, got)}")
    print(f"restored {counted(len(unpacked), 'task')} into {store.home}; the record is "
          "unchanged")
    return 0
