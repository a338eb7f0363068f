"""Plan a pooled build from the episode sets in the store, and run it.

`make_plan` finds the episode sets (`<home>/episodes/<task>/<set-id>/manifest.json`),
picks the sources (all sets of each task by default, or the named ones),
checks them against the TaskSet and returns a BuildPlan; `run_build` runs the
Beam pipeline and leaves either the finished dataset or nothing.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, Sequence

from wmx import temporaries
from wmx.pipelines.plan import BuildPlan, SourceSet
from wmx.sizes import counted, noun_for


class BuildInputError(ValueError):
    """The requested build's inputs are missing or inconsistent."""


def code_version() -> str:
    """git commit of the wmx checkout, else the package version."""
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                             capture_output=True, text=True, timeout=10)
        if out.returncode == 0:
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("wmx")
    except PackageNotFoundError:
        return "unknown"


def find_episode_sets(home) -> list[tuple[Path, object]]:
    """All episode sets in the store as (directory, EpisodeSetManifest), sorted
    by task then set id. Directories whose name starts with '.' (staging) are
    skipped; an unreadable manifest raises BuildInputError naming it."""
    from wmx.schemas.manifest import EpisodeSetManifest
    root = Path(home) / "episodes"
    out = []
    for man_path in sorted(root.glob("*/*/manifest.json")):
        d = man_path.parent
        if d.name.startswith(".") or d.parent.name.startswith("."):
            continue
        try:
            m = EpisodeSetManifest.load(d)
        except ValueError as e:
            raise BuildInputError(f"episode set {d}: {e}") from None
        if m.content_hash != d.name or m.task.name != d.parent.name:
            raise BuildInputError(
                f"episode set {d} was changed after it was exported: its manifest names "
                f"{m.task.name}@{m.content_hash[:16]}..., not the {d.parent.name}@{d.name[:16]}... "
                "it is stored under; export it again from its run (or move it out of the store "
                "and build without it)")
        out.append((d, m))
    return out


def _match(ref: str, d: Path, man) -> bool:
    ref = ref.rstrip("/")
    task, sep, rest = ref.partition("/")
    return (ref == d.name or ref == d.parent.name or ref == f"{d.parent.name}/{d.name}"
            or (len(ref) >= 8 and man.content_hash.startswith(ref))
            or (sep != "" and task == d.parent.name and len(rest) >= 8   # as dataset sources
                and man.content_hash.startswith(rest))                   # lists them
            or Path(ref).expanduser().resolve() == d.resolve())


def check_custom_taskset_name(name: str) -> str:
    """The name of a TaskSet built by pipelines/build_taskset.py, checked before the build.

    Args:
      name: the TaskSet's name, e.g. "probes", "check-mt19-3fa2c1d0-T100-100".

    Returns:
      ``name`` unchanged.

    Raises:
      BuildInputError: not a valid dataset name (`wmx.datasets.names.check_dataset_name`);
        ending in "-synth" (synthetic datasets', `wmx dataset synth`); or a name of
        build_mt19.py's datasets, ``mt19`` and ``mt19-*`` (`is_mt19_name`; validation
        holds such a dataset to mt19's tasks and T). Such a name would be shared, with
        ``name@latest``, by datasets of other TaskSets.
    """
    from wmx.datasets.names import check_dataset_name
    from wmx.datasets.synth import SYNTH_SUFFIX
    from wmx.schemas.taskset import is_mt19_name
    try:
        check_dataset_name(name, example="my-taskset")
    except ValueError as e:
        raise BuildInputError(f"TaskSet name: {e}") from None
    if name.endswith(SYNTH_SUFFIX):
        raise BuildInputError(f"TaskSet name {name!r}: names ending in {SYNTH_SUFFIX!r} are "
                              "synthetic datasets' (wmx dataset synth); rename the TaskSet")
    if is_mt19_name(name):
        raise BuildInputError(f"TaskSet name {name!r}: mt19 and mt19-* are the names of "
                              "pipelines/build_mt19.py's datasets (mt19 tasks: build with "
                              "build_mt19.py --tasks); rename the TaskSet")
    return name


def _add_task_hint(task: str, taskset) -> str:
    """How to build with a source of ``task``, a task ``taskset`` lacks: build_mt19's --tasks
    for an mt19 task of an mt19 build, else a TaskSet file that holds it (build_taskset.py)."""
    from wmx.schemas.taskset import is_mt19_name, mt19
    if not is_mt19_name(taskset.name):
        return "add it to the TaskSet file (--taskset)"
    if task in mt19().names:
        return "add it with --tasks"
    return (f"{task!r} is not an mt19 task: build with pipelines/build_taskset.py --taskset "
            "FILE, a TaskSet JSON that holds it (docs/datasets.md)")


def select_sources(home, taskset, sources: Sequence[str] | None = None) -> list[tuple[Path, object]]:
    """The episode sets a build of `taskset` uses.

    sources None: every set of each task of the TaskSet. Otherwise each entry
    names one set: its set id, `<task>/<set-id>` (the id or a prefix of 8+ hex digits, as
    `wmx dataset sources` lists it), a content-hash prefix of 8+ hex digits, its path, or
    a task name that has exactly one set. Raises BuildInputError naming: an unknown or
    ambiguous source, a source whose task is not in the TaskSet, a task with no
    episode set, a set whose dims / T / action repeat differ from the TaskSet's,
    the same set named twice."""
    found = find_episode_sets(home)
    if sources is None:
        chosen = [(d, m) for d, m in found if m.task.name in taskset.names]
    else:
        chosen = []
        for ref in sources:
            hits = [(d, m) for d, m in found if _match(ref, d, m)]
            if not hits and Path(ref).expanduser().is_dir():
                from wmx.schemas.manifest import EpisodeSetManifest
                d = Path(ref).expanduser().resolve()
                try:
                    hits = [(d, EpisodeSetManifest.load(d))]
                except (ValueError, FileNotFoundError) as e:
                    raise BuildInputError(f"source {ref!r}: {e}") from None
            if not hits:
                raise BuildInputError(
                    f"source {ref!r} names no episode set under {Path(home) / 'episodes'}; "
                    "give a set id, <task>/<set-id or 8+ hex of it>, a content-hash prefix "
                    "(8+ hex) or a path (`wmx dataset sources` lists them)")
            if len(hits) > 1:
                raise BuildInputError(
                    f"source {ref!r} is ambiguous: it matches {[str(d) for d, _ in hits]}; "
                    "give <task>/<set-id> or a longer hash prefix")
            d, m = hits[0]
            if m.task.name not in taskset.names:
                raise BuildInputError(
                    f"source {ref!r} holds task {m.task.name!r}, which is not in TaskSet "
                    f"{taskset.name} ({list(taskset.names)}); "
                    f"{_add_task_hint(m.task.name, taskset)}")
            chosen.append(hits[0])
    hashes = [m.content_hash for _, m in chosen]
    dup = sorted({h for h in hashes if hashes.count(h) > 1})
    if dup:
        raise BuildInputError(f"episode sets with content hashes {[h[:10] for h in dup]} "
                              "are named more than once; name each set once")
    have = {m.task.name for _, m in chosen}
    missing = [t for t in taskset.names if t not in have]
    if missing:
        raise BuildInputError(
            f"no episode sets for {noun_for(len(missing), 'task')} {missing} of TaskSet "
            f"{taskset.name}; export "
            f"them with train_online, or build a subset with --tasks "
            f"{','.join(t for t in taskset.names if t in have) or '<tasks>'}")
    for t in taskset.tasks:
        sets = [(d, m) for d, m in chosen if m.task.name == t.name]
        dims = {(m.task.obs_dim, m.task.action_dim) for _, m in sets}
        if len(dims) > 1:
            raise BuildInputError(
                f"task {t.name}: episode sets disagree on (obs dim, action dim): "
                + ", ".join(f"{d} has {(m.task.obs_dim, m.task.action_dim)}" for d, m in sets)
                + "; they come from different env versions, build from one of them")
        for d, m in sets:
            got = (m.task.obs_dim, m.task.action_dim, m.task.episode_length, m.task.action_repeat)
            want = (t.obs_dim, t.action_dim, t.episode_length, t.action_repeat)
            if got != want:
                raise BuildInputError(
                    f"episode set {d} (task {t.name}) has (obs dim, action dim, T, action "
                    f"repeat) {got}, TaskSet {taskset.name} says {want}")
    return chosen


def make_plan(home, taskset, sources: Sequence[str] | None = None,
              num_shards: int | None = None, runner: str = "DirectRunner") -> BuildPlan:
    """BuildPlan for pooling `taskset`'s episode sets from store `home`.

    An episode held by more than one source of a task is pooled once for it, and
    one held by sources of several tasks under each (`find_duplicates`; the plan
    and the manifest's builder list both). num_shards default:
    ceil(episodes / 512), at least 1. The dataset is named after the TaskSet (a
    `--tasks` subset is its own TaskSet with its own name). The staging
    directory is `<home>/datasets/.staging/<name>~<host>~<pid>~<hex>` (owned by
    this process, `wmx.temporaries`; not created here). Raises BuildInputError
    (see select_sources) and ValueError for num_shards < 1."""
    home = Path(home)
    chosen = select_sources(home, taskset, sources)
    skips, duplicates, shared = find_duplicates(chosen)
    n_eps = sum(m.episode_count for _, m in chosen) - sum(len(v) for v in skips.values())
    if num_shards is None:
        num_shards = max(1, math.ceil(n_eps / 512))
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    srcs = tuple(SourceSet(
        path=str(d), task=m.task.name, set_id=d.name, content_hash=m.content_hash,
        obs_dim=m.task.obs_dim, action_dim=m.task.action_dim, T=m.task.episode_length,
        num_episodes=m.episode_count, returns=tuple(m.episode_returns),
        skip=tuple(skips.get(m.content_hash, ()))) for d, m in chosen)
    root = home / "datasets"
    return BuildPlan(
        name=taskset.name, tasks=taskset.names,
        obs_dims=tuple(t.obs_dim for t in taskset.tasks),
        action_dims=tuple(t.action_dim for t in taskset.tasks),
        Ts=tuple(t.episode_length for t in taskset.tasks), taskset=taskset.to_dict(),
        sources=srcs, num_shards=int(num_shards),
        staging_dir=str(root / ".staging" / temporaries.owned_name(taskset.name, prefix="")),
        datasets_root=str(root), code_version=code_version(), runner=runner,
        duplicates=duplicates, shared=shared)


def find_duplicates(chosen) -> tuple[dict[str, list[int]], tuple[dict, ...], tuple[dict, ...]]:
    """The episodes found more than once among the chosen sets (by episode digest, from
    their manifests): ``({set content hash: [indices to skip]}, duplicates, shared)``.

    Within a task, the first record in (task, content hash, index) order is kept;
    duplicates lists each episode repeated within a task once per such task (sorted by
    digest, then task) as {"digest", "task", "kept", "dropped"} with
    ``<task>/<set id>#<index>`` references of that task's sets, and is logged. An
    episode held by sets of two or more tasks is pooled under each of them: tasks of one
    embodiment record the same episode when their rewards agree on it (reacher-easy and
    reacher-hard, seeded alike, in a seed phase that never reached the small target);
    shared lists each such episode once as {"digest", "tasks": [<task>/<set id>#<index>,
    one per task]}, logged."""
    seen: dict[tuple[str, str], str] = {}
    holders: dict[str, dict[str, str]] = {}
    skips: dict[str, list[int]] = {}
    dups: dict[tuple[str, str], dict] = {}       # (digest, task): one entry per task
    for d, m in sorted(chosen, key=lambda dm: (dm[1].task.name, dm[1].content_hash)):
        for i, dg in enumerate(m.episode_digests):
            ref = f"{m.task.name}/{d.name}#{i}"
            if (m.task.name, dg) not in seen:
                seen[m.task.name, dg] = ref
                holders.setdefault(dg, {})[m.task.name] = ref
                continue
            skips.setdefault(m.content_hash, []).append(i)
            dups.setdefault((dg, m.task.name), {"digest": dg, "task": m.task.name,
                                                "kept": seen[m.task.name, dg], "dropped": []}
                            )["dropped"].append(ref)
    out = tuple(dups[k] for k in sorted(dups))
    log = logging.getLogger("wmx.pipelines")
    if out:
        n = sum(len(x["dropped"]) for x in out)
        log.warning(
            "%s in the sources %s pooled once: %s", counted(n, "duplicate episode"),
            noun_for(n, "is", "are"),
            "; ".join(f"{x['kept']} also as {', '.join(x['dropped'])}" for x in out[:5])
            + (" ..." if len(out) > 5 else ""))
    shared = tuple({"digest": dg, "tasks": list(holders[dg].values())}
                   for dg in sorted(holders) if len(holders[dg]) > 1)
    if shared:
        log.info("%s held by the sets of several tasks, pooled under each: %s",
                 counted(len(shared), "episode"),
                 "; ".join(" and ".join(x["tasks"]) for x in shared[:5])
                 + (" ..." if len(shared) > 5 else ""))
    return skips, out, shared


def build_failure(err: BaseException) -> str | None:
    """One line for an expected build failure (a source that changed or broke during the
    build, found inside Beam's wrapping; the disk; memory), None otherwise."""
    from wmx.failures import describe
    from wmx.pipelines.transforms import EpisodeCheckError
    from wmx.schemas.manifest import ManifestError
    e: BaseException | None = err
    while e is not None:
        if isinstance(e, (EpisodeCheckError, ManifestError)):
            return (f"a source episode set failed its check during the build: {e}; export "
                    "it again or leave it out with --sources (nothing was written)")
        line = describe(e)
        if line is not None:
            return line + " (nothing was written)"
        e = e.__cause__ or e.__context__
    text = str(err)
    for name in ("EpisodeCheckError", "ManifestError"):
        if name in text:
            msg = text.split(name + ":", 1)[-1].strip().splitlines()[0]
            return (f"a source episode set failed its check during the build: {msg}; export "
                    "it again or leave it out with --sources (nothing was written)")
    return None


@dataclasses.dataclass(frozen=True)
class BuildResult:
    """What `run_build_result` did. path: the dataset directory; runner: the
    runner's name ("DirectRunner", "DaskRunner", ...); seconds: wall time of the
    pipeline (cluster start included); writers: `<host>:<pid>` of each process that
    wrote shards; late_signal: the number of a SIGINT / SIGTERM that came while the
    finished dataset was renamed into place (it is complete and kept), else None."""
    path: Path
    runner: str
    seconds: float
    writers: tuple[str, ...]
    late_signal: int | None = None


def run_build(plan: BuildPlan, beam_args: Iterable[str] = (),
              dask_workers: int | None = None) -> Path:
    """`run_build_result(plan, beam_args, dask_workers).path` (see there)."""
    return run_build_result(plan, beam_args, dask_workers).path


def check_writable_root(plan: BuildPlan) -> None:
    """Raise BuildInputError (one line: bad input) when the plan's datasets folder cannot be
    written (a read-only filesystem, missing permissions), before the build writes anything.
    A probe file owned by this process is written there and removed."""
    root = Path(plan.datasets_root)
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = root / temporaries.owned_name("probe")
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise BuildInputError(f"cannot write to the data root {root.parent} (--home / "
                              f"WMX_HOME): {e.strerror or e}; give a writable "
                              "directory") from None


def run_build_result(plan: BuildPlan, beam_args: Iterable[str] = (),
                     dask_workers: int | None = None) -> BuildResult:
    """Run the Beam build of `plan` with Beam pipeline options `beam_args`.

    Runners (wmx.pipelines.runners): the DirectRunner by default, Beam's
    FnApiRunner without the Prism attempt (`wmx.pipelines.direct_runner`; in
    memory, or ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]);
    "--runner=dask" on a local cluster of `dask_workers` processes started for
    the build (default: the CPU count), or with "--dask_client_address=HOST:PORT"
    on an existing cluster; "--runner=flink|spark|dataflow ..." (untested). With
    a cluster, the store must be on a filesystem every worker sees.
    The manifest's builder records the runner's name and the dotted path of the runner
    class that ran (``runner``, ``runner_class``). The pipeline leaves the complete
    dataset in the staging folder; this process renames it into the store
    (`place_dataset`). Returns a BuildResult.

    First the data root is checked writable and the staging folders and temporaries
    that dead builds of this host left are removed. Raises BuildInputError (a
    ValueError) for a data root that cannot be written and RunnerError (a ValueError)
    for an unknown runner, bad Dask options, or a cluster that cannot be used, before
    anything is written; on any failure of the pipeline itself the staging directory
    is removed, so no partial dataset is left, and the error re-raised. A SIGINT or
    SIGTERM (`wmx.pipelines.interrupt`) stops the build: the staging directory is
    removed and `BuildInterrupted` (a KeyboardInterrupt) raised, also where Beam
    turned the signal into another error or finished anyway."""
    import time

    from wmx.pipelines.interrupt import BuildInterrupted, guard_build, signal_name
    from wmx.pipelines.runners import parse_runner_args, runner_session
    ra = parse_runner_args(list(beam_args), dask_workers)
    plan = dataclasses.replace(plan, runner=ra.name, runner_class=ra.path)
    check_writable_root(plan)
    # what the workers must see: the episode-set roots and the data root
    shared = sorted({str(Path(s.path).parent.parent) for s in plan.sources}
                    | {os.path.dirname(plan.datasets_root)})
    root = Path(plan.datasets_root)   # what dead builds of this host left: gone
    temporaries.sweep(root / ".staging", hidden_only=False)
    temporaries.sweep(root)
    temporaries.sweep(root / plan.name)
    t0 = time.perf_counter()
    result = Path(plan.staging_dir + ".result")
    with guard_build(plan.staging_dir, result) as guard:
        try:
            with _beam_tempdir(root / ".staging") as tmp, \
                    runner_session(ra, shared, default_partitions=len(plan.sources)) as args:
                guard.paths.append(str(tmp))
                os.makedirs(plan.staging_dir, exist_ok=False)
                _run_pipeline(plan, args)
                guard.armed = False          # from here a signal is only recorded
            guard.check()
            seconds = time.perf_counter() - t0
            info = json.loads(result.read_text())
            path = place_dataset(plan, info["path"])
        except BaseException:
            guard.armed = False
            # after runner_session's exit: a local cluster's workers are stopped
            shutil.rmtree(plan.staging_dir, ignore_errors=True)
            _remove(str(result))
            if guard.signum is not None:   # whatever Beam made of it: the signal's error
                raise BuildInterrupted(f"interrupted by {signal_name(guard.signum)}",
                                       guard.signum) from None
            raise
    result.unlink()
    return BuildResult(path, ra.name, seconds, tuple(info["writers"]), guard.signum)


def place_dataset(plan: BuildPlan, dest: str) -> Path:
    """Rename the finished dataset in the plan's staging folder to ``dest``
    (``<datasets_root>/<name>/<content hash>``, from the pipeline's ``.result``); when that
    dataset exists already (the same content hash), the staging folder is removed and the
    existing one kept. Returns ``dest``.

    The content hash covers the TaskSet and the episodes' digests, not which task holds
    each episode: two builds that put the same episodes under different tasks of equal
    dims share it. So an existing dataset whose per-task counts or return statistics
    differ from the new build's is refused with BuildInputError (the caller removes the
    staging folder): keeping it would hand the new build's user the other assignment."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if os.path.exists(dest):
        _check_same_tasks(Path(plan.staging_dir), Path(dest))
        shutil.rmtree(plan.staging_dir)
    else:
        os.rename(plan.staging_dir, dest)
    return Path(dest)


def _check_same_tasks(staged: Path, stored: Path) -> None:
    """Raise BuildInputError when the staged and the stored manifests of one content hash
    differ in ``per_task`` (episode counts exactly, return statistics beyond 1e-9), naming
    the first task that differs; an unreadable stored manifest is left to `wmx dataset
    validate`."""
    try:
        old = json.loads((stored / "manifest.json").read_text())["per_task"]
    except (OSError, ValueError, KeyError, TypeError):
        return
    new = json.loads((staged / "manifest.json").read_text())["per_task"]

    def close(x, y) -> bool:                         # None (no episodes) only to None
        return x == y or (x is not None and y is not None
                          and math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9))

    def same(a: dict | None, b: dict) -> bool:       # counts exactly, returns to 1e-9
        return a is not None and a.get("episodes") == b.get("episodes") and all(
            close(a.get(k), b.get(k))
            for k in ("return_mean", "return_std", "return_min", "return_max"))
    task = next((t for t in new if not same(old.get(t), new[t])), None)
    if task is None:
        return
    raise BuildInputError(
        f"the data root holds {stored.parent.name}@{stored.name[:10]} with the same episodes "
        f"but others under task {task} ({(old.get(task) or {}).get('episodes')} episodes "
        f"there, {new[task].get('episodes')} in this build): a content hash does not say "
        "which task holds an episode, so one of the two builds took sets exported under "
        "the wrong task; check the sources' tasks, then remove the stored dataset or build "
        "under another TaskSet name")


@contextlib.contextmanager
def _beam_tempdir(parent: Path):
    """Point the process's temporary directory (``tempfile.tempdir`` and
    ``TMPDIR``) at an owned folder under ``parent`` for the build, and remove
    the folder afterwards, so that a build leaves nothing in the system
    temporary directory; a killed build's folder is swept by the next build.

    Why process globals: no Beam option or argument places these temporaries.
    wmx's pipeline has no file sink (``--temp_location`` only serves those; the
    shards are written by `wmx.pipelines.transforms` into the plan's staging
    directory). A runner that tries Prism (Beam's own switching DirectRunner, given
    by its dotted path; wmx's `direct` never does) calls ``tempfile.mkdtemp()``
    without a directory (the SDK dependency staging of
    ``environments.python_sdk_dependencies``, the job server's ``beam-temp*``
    root) and creates ``beam-requirements-cache`` in ``tempfile.gettempdir()``;
    where Prism cannot start (no binary, no network) they are left behind. The
    processes a build starts inherit ``TMPDIR`` (the DirectRunner's SDK workers in
    multi_processing mode; a local Dask cluster's workers, which put their scratch
    space in the temporary directory).

    Both values are set inside the ``try`` and restored exactly in its
    ``finally`` (``TMPDIR`` unset again when it was unset), on success, on an
    exception and on an interrupt. They are process-wide: one build at a time
    per process (as the ``beam run`` jobs do), and other threads of the process
    see the folder while the build runs."""
    import tempfile
    path = temporaries.make_dir(parent, "beam-tmp", prefix="")
    old_dir, old_env = tempfile.tempdir, os.environ.get("TMPDIR")
    try:
        tempfile.tempdir = str(path)
        os.environ["TMPDIR"] = str(path)
        yield path
    finally:
        tempfile.tempdir = old_dir
        if old_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = old_env
        shutil.rmtree(path, ignore_errors=True)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _run_pipeline(plan: BuildPlan, args: list[str]) -> None:
    """Build and run the pipeline; waits for it. A Dask run's client is
    closed afterwards, and its outstanding tasks cancelled on a failure."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from wmx.pipelines.transforms import BuildPooled
    p = beam.Pipeline(options=PipelineOptions(args))
    _ = p | "Build" >> BuildPooled(plan)
    result = p.run()
    client = getattr(result, "client", None)  # DaskRunnerResult
    try:
        result.wait_until_finish()
    except BaseException:
        if client is not None:
            with contextlib.suppress(Exception):
                result.cancel()
        raise
    finally:
        if client is not None:
            client.close()
