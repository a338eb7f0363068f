"""`wmx dataset ...`: ls, info, validate (pooled datasets in the store), sources (the
episode sets a build pools), synth."""
from __future__ import annotations

import argparse
import collections

from wmx.cli.table import print_table
from wmx.runs.cli_common import at_least, count
from wmx.sizes import counted, human_size, noun_for


def add_parser(sub) -> None:
    """Register `dataset` and its subcommands on an argparse subparsers object."""
    p = sub.add_parser("dataset", help="list, inspect and validate pooled datasets")
    add_home(p)
    ds = p.add_subparsers(dest="dataset_cmd", required=True)
    ls = ds.add_parser("ls", help="list datasets: name, hash, tasks, episodes, size, date")
    ls.add_argument("name", nargs="?", default=None, metavar="NAME",
                    help="only the datasets named NAME, every build of it (e.g. mt19)")
    src = ds.add_parser("sources", help="list the episode sets a build can pool (the ids "
                                        "--sources takes): task, set, episodes, return, "
                                        "producer, date")
    src.add_argument("task", nargs="?", default=None, help="only this task's sets")
    info = ds.add_parser("info", help="TaskSet, per-task counts, returns, lineage")
    info.add_argument("ref", help="NAME@HASH, NAME@latest or a path")
    val = ds.add_parser("validate", help="run every check; exit 0 only if all pass")
    val.add_argument("ref", help="NAME@HASH, NAME@latest or a path")
    syn = ds.add_parser("synth", help="write a synthetic mt80-shaped pooled dataset of "
                                      "--rows rows (scale tests of the readers)")
    syn.add_argument("--rows", type=count, required=True,
                     help="rows on disk, e.g. 1e7 (episodes = ceil(rows / (T+1)))")
    syn.add_argument("--name", default="mt80-synth",
                     help="dataset name ending in -synth (default mt80-synth)")
    syn.add_argument("--tasks", type=at_least(1), default=80, help="synthetic tasks (default 80)")
    syn.add_argument("--episode-length", type=at_least(1), default=500, help="T (default 500)")
    syn.add_argument("--seed", type=at_least(0), default=0)
    syn.add_argument("--num-shards", type=at_least(1), default=None,
                     help="default ceil(episodes / 512), as the Beam build")
    for q in (ls, src, info, val, syn):
        add_home(q)
    p.set_defaults(func=run)


def add_home(p: argparse.ArgumentParser) -> None:
    """``--home`` on a (sub)command; typed at any level it reaches ``args.home`` (the
    default None is set once, by `wmx.cli.main`)."""
    p.add_argument("--home", default=argparse.SUPPRESS,
                   help="wmx data root (default $WMX_HOME or ~/.wmx)")


def _named(name: str | None, word: str = "named") -> str:
    """`` named NAME`` (`` of TASK``) for a listing narrowed to one name, else ""."""
    return f" {word} {name}" if name else ""


def _size(path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.is_file())


def cmd_ls(args) -> int:
    from wmx.datasets.store import Store
    from wmx.paths import looked_in
    from wmx.schemas.manifest import DatasetManifest
    store = Store(args.home)
    rows = []
    for e in store.list_datasets(args.name):
        try:
            m = DatasetManifest.load(e.path)
            tasks, eps = str(len(m.taskset)), str(m.episode_count)
            if m.content_hash != e.content_hash:
                eps += " (changed after the build: validate it)"
        except ValueError:
            tasks, eps = "?", "? (bad manifest)"
        rows.append((e.name, e.content_hash[:10], tasks, eps, human_size(_size(e.path)),
                     e.created[:19].replace("T", " ")))
    if not rows:
        print(f"no datasets{_named(args.name)} in {store.datasets_dir} "
              f"({looked_in(args.home)}); {_build_hint(store, args.home)}")
    else:
        print_table(("NAME", "HASH", "TASKS", "EPISODES", "SIZE", "CREATED"), rows)
    _say_strays(store.datasets_dir, args.name, ("a dataset", "datasets"))
    return 0


def _build_hint(store, home: str | None = None) -> str:
    """How to build a dataset from what the store holds: the plain build needs episode sets
    of all mt19 tasks, so name the tasks that have sets for a ``--tasks`` build.

    Args:
        store: the `Store` listed.
        home: ``--home`` as the user gave it (None: not given), repeated in the command.

    Returns:
        The hint, one line.
    """
    import shlex

    from wmx.schemas.taskset import mt19
    names = [t.name for t in mt19().tasks]
    have = {e.name for e in store.list_episode_sets()}
    ready = [n for n in names if n in have]
    at = "" if home is None else f" --home {shlex.quote(str(home))}"
    if len(ready) == len(names):
        return f"build one with: beam run pipelines/build_mt19.py{at}"
    if not ready:
        return ("no mt19 task has episode sets yet (train_online exports them); "
                "beam run pipelines/build_mt19.py needs sets of all 19 tasks")
    return (f"{len(ready)} of the 19 mt19 tasks have episode sets; build them with: "
            f"beam run pipelines/build_mt19.py{at} --tasks {','.join(ready)}")


def _say_strays(root, name: str | None, what: tuple[str, str]) -> None:
    """One line naming the folders under ``root/<name>/`` that the listing left out: not
    named by a content hash, or without a manifest.json (renamed or damaged by hand; the
    store does not see them). Hidden folders (a build's staging) are not counted.
    ``what``: what the store would see, for one folder and for several ("a dataset",
    "datasets")."""
    from wmx.schemas.hashing import is_sha256_hex
    from wmx.schemas.manifest import MANIFEST_FILENAME
    if not root.is_dir():
        return
    groups = [root / name] if name else [d for d in sorted(root.iterdir())
                                         if d.is_dir() and not d.name.startswith(".")]
    strays = [v for g in groups if g.is_dir() for v in sorted(g.iterdir())
              if v.is_dir() and not v.name.startswith(".")
              and not (is_sha256_hex(v.name) and (v / MANIFEST_FILENAME).is_file())]
    if strays:
        shown = ", ".join(str(v.relative_to(root)) for v in strays[:5])
        more = f" and {len(strays) - 5} more" if len(strays) > 5 else ""
        n = len(strays)
        print(f"note: {counted(n, 'folder')} under {root} {noun_for(n, 'is', 'are')} not "
              f"{noun_for(n, *what)} the store sees "
              f"({noun_for(n, 'its name is not its', 'a name that is not their')} content "
              f"hash, or no manifest.json): {shown}{more}")


def cmd_sources(args) -> int:
    """The store's episode sets (of one task): what ``--sources`` of the build names."""
    from wmx.datasets.store import Store
    from wmx.envs.registry import get_task
    from wmx.paths import looked_in
    from wmx.schemas.manifest import EpisodeSetManifest
    if args.task is not None:
        get_task(args.task)              # ValueError (exit 2) naming the known tasks
    store = Store(args.home)
    rows = []
    for e in store.list_episode_sets(args.task):
        try:
            m = EpisodeSetManifest.load(e.path)
            rets = m.episode_returns
            eps, ret = str(len(rets)), (f"{sum(rets) / len(rets):.1f}" if rets else "-")
            who = f"{m.producer.agent} {m.producer.run_id} seed {m.producer.seed}"
            if m.content_hash != e.content_hash or m.task.name != e.name:
                eps += " (not the set its folder names: the build refuses it)"
        except ValueError:
            eps, ret, who = "?", "?", "? (bad manifest)"
        rows.append((e.name, e.content_hash[:10], eps, ret, who, e.created[:19].replace("T", " ")))
    if not rows:
        print(f"no episode sets{_named(args.task, 'of')} in {store.episodes_dir} "
              f"({looked_in(args.home)}); train_online exports every run's episodes")
    else:
        print_table(("TASK", "SET", "EPISODES", "MEAN RETURN", "PRODUCER", "CREATED"), rows)
        print("pool some of them with: beam run pipelines/build_mt19.py --tasks TASK,... "
              "--sources TASK/SET ...")
    _say_strays(store.episodes_dir, args.task, ("an episode set", "episode sets"))
    return 0


def cmd_info(args) -> int:
    from wmx.datasets.readers import open_dataset
    ds = open_dataset(args.ref, home=args.home)
    m = ds.manifest
    print(f"{m.name}@{m.content_hash}\n  path: {ds.path}\n  created: {m.created}")
    print(f"  episodes: {m.episode_count} in {counted(len(m.shards), 'shard')}, "
          f"{human_size(sum(s.size_bytes for s in m.shards))}")
    print(f"  TaskSet {m.taskset.name}: {counted(len(m.taskset), 'task')}, max obs dim "
          f"{m.taskset.max_obs_dim}, max action dim {m.taskset.max_action_dim}")
    print(f"  {'id':>3} {'task':<26}{'obs':>4}{'act':>4}{'T':>5}{'episodes':>9}"
          f"{'ret mean':>10}{'ret std':>9}{'ret min':>9}{'ret max':>9}")
    for i, t in enumerate(m.taskset.tasks):
        s = m.per_task[t.name]
        f = (lambda v: f"{v:9.2f}" if v is not None else f"{'-':>9}")
        print(f"  {i:>3} {t.name:<26}{t.obs_dim:>4}{t.action_dim:>4}{t.episode_length:>5}"
              f"{s.episodes:>9} {f(s.return_mean)}{f(s.return_std)}{f(s.return_min)}"
              f"{f(s.return_max)}")
    print("  lineage: source episode sets (content hashes):")
    for h in m.sources:
        print(f"    {h}")
    b = dict(m.builder)
    ran = f" ({b['runner_class']})" if b.get("runner_class") else ""
    print(f"  builder: {b.get('pipeline')} runner={b.get('runner')}{ran} "
          f"code={b.get('code_version')}")
    dups, shared = ([x for x in b.get(k) or () if isinstance(x, dict)]   # a hand-edited
                    for k in ("duplicates", "shared"))                   # builder: skipped
    if dups:
        n = sum(len(d.get("dropped", ())) for d in dups)
        print(f"  {counted(n, 'duplicate episode')} in the sources pooled once "
              "(builder.duplicates)")
    if shared:
        groups = collections.Counter(" and ".join(str(r).split("/")[0] for r in x.get("tasks", ()))
                                     for x in shared)
        print(f"  {counted(len(shared), 'episode')} held by several tasks' sets, pooled under "
              "each (builder.shared): " + "; ".join(f"{g}: {n}" for g, n in groups.items()))
    return 0


def cmd_validate(args) -> int:
    from wmx.datasets.validate import validate_dataset
    rep = validate_dataset(args.ref, home=args.home)
    print(rep.format())
    return 0 if rep.ok else 1


def cmd_synth(args) -> int:
    from wmx.datasets.synth import write_synthetic_dataset
    r = write_synthetic_dataset(
        args.home, args.rows, name=args.name, num_tasks=args.tasks,
        episode_length=args.episode_length, seed=args.seed, num_shards=args.num_shards,
        progress=lambda msg: print(msg, flush=True))
    print(f"dataset {args.name}@{r.content_hash[:10]} at {r.path}: "
          f"{counted(r.episodes, 'episode')}, {counted(r.rows, 'row')}, {human_size(r.bytes)} "
          f"({r.digest_s + r.write_s:.0f} s)")
    return 0


def run(args) -> int:
    """Dispatch `wmx dataset <cmd>`; a bad name or path prints the error, exit 2; an
    unreadable store (permissions, I/O) one line, exit 1."""
    from wmx.cli.dispatch import dispatch
    return dispatch({"ls": cmd_ls, "sources": cmd_sources, "info": cmd_info,
                     "validate": cmd_validate, "synth": cmd_synth}, args.dataset_cmd, args)
