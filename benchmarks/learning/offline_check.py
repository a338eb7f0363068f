"""The offline learning check of any agent: does it learn from the online agents' data?

What ``tdmpc2_offline.py`` and ``dreamerv3_offline.py`` share: the source runs
(finished single-task ``train_online`` runs, `offline_sources`) and their final returns,
the dataset pooling their full training histories (every exported episode set; a source
``RUN_DIR@N``, the run as it stood at N env steps, adds the episodes collected by then;
the Beam build, ``pipelines/build_mt19.py --tasks ... --sources ...``, so the
same sources give the same dataset hash), the check's offline run directory
with its ``benchmark.json``, ``--resume``, the common flags, the training call,
the per-task eval curves (`offline_eval`) and result fields, the per-task plot,
and the writing and printing of the results (`offline_report`; ``--pack``:
`offline_pack`). Each entry point adds its criterion (``judge``) and its own flags.

A source agent's final return is the mean over its seeds of the last eval row
of each seed in its metrics.csv (``RUN_DIR@N``: each seed's eval row at env step N).
The offline run's final return is that of its final evaluation (`final_evaluation`:
``--final-episodes`` episodes per task and seed of its last checkpoint, the run's
``report/``), or, without one, its last periodic evaluation. Beside it the check records
each task's uniform-random policy return: the floor a source must clear before its
return says it learned anything (`wmx.evaluate.random_policy`: the committed table's
at the task's own T, else measured with `random_policy_return`).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from check_run import read_json, resume_command, trained_where, training, training_call
# the evaluations, the results and the pack live in their own modules; the entry points,
# device_check.py and the tests import them from here
from offline_eval import (FINAL_EPISODES, eval_curves, eval_rows,  # noqa: F401
                          eval_stderr, final_evaluation, judged_final, last_updates,
                          metrics_rows, reusable_report, with_stderr)
from offline_pack import check_pack, pack_home
from offline_report import (RATIO, reaches_ratio, task_result,  # noqa: F401
                            write_results)
from offline_sources import (home_relative, pooled_sources, source_entry, source_run,
                             split_source)

from wmx.evaluate.random_policy import RANDOM_EPISODES, random_policy_return, random_returns

REPO = Path(__file__).resolve().parents[2]
DEFAULT_UPDATES = 20_000
"""--updates of a new check run."""
# ---- the random policy's return ----------------------------------------------------------
def with_random_returns(tasks: dict[str, dict], bench: dict, episode_length: int | None
                        ) -> bool:
    """Add each task's ``"random"`` entry (`random_policy_return`) to ``tasks``, from
    ``bench["random_returns"]`` when recorded there, else from the committed table
    (`random_policy.random_returns`, when ``episode_length`` is None or the task's own T)
    or measured, and recorded in ``bench``. Returns whether ``bench`` changed (the caller
    writes it back)."""
    from wmx.envs.registry import TASKS
    have = bench.setdefault("random_returns", {})
    table = random_returns()
    changed = False
    for name, t in tasks.items():
        if name not in have:
            own_T = name in TASKS and episode_length in (None, TASKS[name].T)
            if own_T and name in table:
                have[name] = dict(table[name])
            else:
                print(f"{name}: measuring the uniform-random policy's return "
                      f"({RANDOM_EPISODES} episodes)")
                have[name] = random_policy_return(name, episode_length)
            changed = True
        t["random"] = have[name]
    return changed


# ---- dataset ------------------------------------------------------------------------------
def taskset_for(tasks: dict[str, dict]):
    """The TaskSet to build: the mt19 subset of the tasks, or, when a source run overrode
    T, that subset with each task's T, action repeat and discount taken from its episode
    sets, named ``check-<subset name>-T<T>-<T>...`` (mt19 names are held to mt19's T by
    validation and reserved for build_mt19.py)."""
    from wmx.schemas.manifest import EpisodeSetManifest
    from wmx.schemas.taskset import TaskSet, mt19
    sub = mt19().subset(list(tasks))
    infos = []
    for t in sub.tasks:
        found = {EpisodeSetManifest.load(Path(d)).task for d in tasks[t.name]["episode_sets"]}
        if len(found) != 1:
            raise ValueError(f"task {t.name}: the source episode sets disagree on the task "
                             f"description {sorted(map(str, found))}")
        infos.append(found.pop())
    if tuple(infos) == sub.tasks:
        return sub, False
    Ts = "-".join(str(i.episode_length) for i in infos)   # outside the mt19 family's
    return TaskSet(name=f"check-{sub.name}-T{Ts}", tasks=tuple(infos),  # names (their T)
                   reference_scores=sub.reference_scores,
                   reference_source=sub.reference_source), True


def build_dataset(home: Path, tasks: dict[str, dict], out_dir: Path) -> str:
    """``name@<hash>`` of the dataset pooling exactly the sources' episode sets; built
    with the Beam job (build_mt19.py --tasks --sources, or build_taskset.py for runs
    with a T override) unless it is in the store already."""
    from wmx.cli import beam
    from wmx.cli.demo import find_dataset
    ts, custom = taskset_for(tasks)
    set_dirs = [Path(d) for t in tasks.values() for d in t["episode_sets"]]
    ref = find_dataset(home, ts.name, set_dirs, ts)
    if ref is not None:
        print(f"dataset {ref} pools these episode sets already; not rebuilt")
        return ref
    sources = [f"{d.parent.name}/{d.name}" for d in set_dirs]
    if custom:
        spec = out_dir / f"{ts.name}.taskset.json"
        spec.write_text(ts.to_json())
        argv = ["run", str(REPO / "pipelines/build_taskset.py"), "--taskset", str(spec)]
    else:
        argv = ["run", str(REPO / "pipelines/build_mt19.py"), "--tasks", ",".join(ts.names)]
    argv += ["--home", str(home), "--sources", *sources]
    print("$ beam " + " ".join(argv))
    if beam.main(argv) != 0:
        raise SystemExit("the dataset build failed")
    ref = find_dataset(home, ts.name, set_dirs, ts)
    if ref is None:
        raise SystemExit(f"the build finished but no dataset {ts.name} is in {home}")
    return ref


# ---- the check's run ----------------------------------------------------------------------
def parser(doc: str, *, batch_size: int | None, log_every: int,
           batch_help: str | None = None) -> argparse.ArgumentParser:
    """The flags every offline check takes (the entry point adds its own); ``doc`` is the
    entry point's module doc, its first paragraph the description."""
    from wmx.runs.cli_common import HelpFormatter
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=HelpFormatter)
    p.add_argument("--home", default=None, help="data root holding the source runs' episode sets")
    p.add_argument("--sources", nargs="+", metavar="RUN_DIR[@ENV_STEPS]", default=None,
                   help="finished train_online runs (their episode sets are in the store): "
                        "RUN_DIR, the whole run, or RUN_DIR@ENV_STEPS, the run as it stood "
                        "at that env step (each seed's episodes collected by then and its "
                        "eval row there; e.g. RUN_DIR@50000)")
    p.add_argument("--updates", type=int, default=None,
                   help=f"gradient steps of the run (the offline x axis; default "
                        f"{DEFAULT_UPDATES:,d}); with --resume, a larger value extends a run "
                        "that has not finished")
    p.add_argument("--batch-size", type=int, default=batch_size, help=batch_help)
    p.add_argument("--preset", default="cpu",
                   help="the agent's preset: paper | cpu | tiny (train_offline's)")
    p.add_argument("--set", dest="set_", action="append", default=[], metavar="KEY=VALUE",
                   help="a field of the agent's config for the check's model (repeatable; "
                        "train_offline's --set), e.g. --set units=128; saved in the run's "
                        "config.json and recorded in the result")
    p.add_argument("--eval-every", type=int, default=5_000,
                   help="updates between evaluations on the real Playground tasks")
    p.add_argument("--eval-episodes", type=int, default=10,
                   help="episodes per task and seed at each evaluation")
    p.add_argument("--final-episodes", type=int, default=FINAL_EPISODES,
                   help="episodes per task and seed of the final evaluation of the finished "
                        "run, whose returns the verdict judges (the run's report/, `evaluate "
                        "--run`); 0 judges the last periodic evaluation instead")
    p.add_argument("--log-every", type=int, default=log_every,
                   help="updates per chunk (reduced to divide --eval-every)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds, run vmapped")
    p.add_argument("--budget-min", type=float, default=None,
                   help="stop after this many minutes (whole chunks); record as far as reached")
    p.add_argument("--resume", default=None, metavar="RUN_DIR",
                   help="continue an earlier (budget-stopped) check run with its saved "
                        "config: run flags typed with it must equal it (--updates may "
                        "extend it)")
    p.add_argument("--out", default=str(REPO / "benchmarks/results"),
                   help="folder of the result JSON and plot (default benchmarks/results, the "
                        "committed results: a run replaces their files of the same name, so "
                        "give another folder for a trial run)")
    p.add_argument("--report-only", action="store_true",
                   help="with --resume: no training; write the result JSON and plot of the "
                        "run as far as its metrics.csv goes (e.g. a run trained elsewhere "
                        "whose run directory came back without checkpoints)")
    p.add_argument("--pack", default=None, metavar="DIR",
                   help="with --prepare-only (or --resume of a prepared run): copy what "
                        "training the run needs (the run, its dataset, its source runs' and "
                        "the TD-MPC2 run beside's config, summary and metrics) into the new "
                        "folder DIR outside the home folder, a home folder of its own to "
                        "copy to another machine; then stop")
    p.add_argument("--prepare-only", action="store_true",
                   help="pool the dataset, measure the random returns and write the check's "
                        "run directory, then stop: train it with --resume, e.g. on a GPU "
                        "machine after copying the home folder there (it may move)")
    return p


CHECK_FLAGS_NOT_SET = {"preset": "--preset", "batch_size": "--batch-size"}
"""Config fields the checks take as their own flags, refused in --set."""


def check_config(args, agent: str, dataset: str, taskset: dict,
                 episode_length: int | None):
    """The check run's OfflineRunConfig from its flags (batch: --batch-size, None for the
    agent preset's; --set as agent_overrides). Raises SystemExit with the config's one-line
    error (an unknown field, a bad value, a field the TaskSet sets, a flag given as --set)."""
    from wmx.runs.cli_common import parse_set
    from wmx.runs.offline_config import OfflineRunConfig
    try:
        over = parse_set(args.set_)
        mine = sorted(set(over) & set(CHECK_FLAGS_NOT_SET))
        if mine:
            raise ValueError(f"--set {mine[0]}: give {CHECK_FLAGS_NOT_SET[mine[0]]} instead")
        return OfflineRunConfig(
            dataset=dataset, taskset=taskset, agent=agent, seeds=tuple(args.seeds),
            updates=DEFAULT_UPDATES if args.updates is None else args.updates,
            batch_size=args.batch_size, preset=args.preset, agent_overrides=over,
            log_every=math.gcd(args.eval_every, args.log_every), eval_every=args.eval_every,
            checkpoint_every=args.eval_every, eval_episodes=args.eval_episodes,
            episode_length=episode_length)
    except ValueError as e:
        raise SystemExit(str(e)) from None


def new_offline_run(home: Path, ref: str, args, episode_length: int | None, agent: str,
                    run_prefix: str) -> Path:
    """Validate the dataset and write the run directory's config.json (as train_offline
    does; batch: --batch-size, None for the agent preset's) and return the new
    ``<home>/runs/<run_prefix>-<time>``."""
    from wmx.datasets.store import Store
    from wmx.train_offline.cli import resolve_and_validate
    from wmx.version import code_version, device_label
    ds = resolve_and_validate(ref, home)
    rc = check_config(args, agent, f"{ds.name}@{ds.content_hash}", ds.taskset.to_dict(),
                      episode_length)
    run_dir = Store(home).ensure_layout().runs_dir / \
        f"{run_prefix}-{time.strftime('%Y%m%d-%H%M%S')}"
    run_dir.mkdir(parents=True)
    meta = {**rc.to_json(), "code_version": code_version(), "dataset_path": str(ds.path),
            "training_hash": rc.training_hash(), "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "device": device_label()}
    (run_dir / "config.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return run_dir


def resumable_run(run_dir: Path, agent: str, report_only: bool) -> dict:
    """The config.json of ``run_dir`` once checked to be an offline check run of ``agent``
    that ``--resume`` (``report_only``: ``--report-only``) can go on with. Raises
    SystemExit naming the problem: no benchmark.json (not a check run), an unreadable
    config.json, an online run, another agent's run, no metrics.csv to report on, a live
    process training it (its lock, `wmx.runs.owner`), or evaluations recorded but no
    checkpoints/ (a run directory brought back without them: training would start again
    from update 0 and drop its metrics)."""
    cfg_file = run_dir / "config.json"
    script = f"benchmarks/learning/{agent}_offline.py"
    if not (run_dir / "benchmark.json").is_file():
        raise SystemExit(f"--resume {run_dir}: not an offline check run (no benchmark.json; "
                         f"make one with {script} --prepare-only)" if run_dir.is_dir() else
                         f"--resume {run_dir}: no such run directory")
    if not cfg_file.is_file():
        raise SystemExit(f"--resume {run_dir}: no config.json; the run directory is damaged")
    cfg = read_json(cfg_file, "--resume")
    if "dataset" not in cfg:
        raise SystemExit(f"--resume {run_dir}: an online run (config.json has no dataset); "
                         "the online checks resume it")
    got = cfg.get("agent", "tdmpc2")
    if got != agent:
        raise SystemExit(f"--resume {run_dir}: a {got} run; resume it with "
                         f"benchmarks/learning/{got}_offline.py")
    metrics = run_dir / "metrics.csv"
    from wmx.runs.owner import probe
    owner = None if report_only else probe(run_dir)
    if owner is not None:
        raise SystemExit(f"--resume {run_dir}: {owner.describe()} trains it now; wait for "
                         "it to stop (or stop it) and resume then")
    if report_only:
        if not metrics.is_file():
            raise SystemExit(f"--report-only: {run_dir} has no metrics.csv, nothing to report")
        return cfg
    from wmx.runs.listing import checkpoints
    if not checkpoints(run_dir) and eval_rows(metrics_rows(run_dir)):   # complete ones only
        raise SystemExit(f"--resume {run_dir}: evaluations recorded but no checkpoints/ "
                         "(brought back without them?); training would restart from "
                         f"update 0: {script} --resume RUN --report-only writes its result")
    return cfg


RESUME_FIELDS = {"updates": "updates", "preset": "preset", "seeds": "seeds",
                 "batch_size": "batch_size", "eval_every": "eval_every",
                 "eval_episodes": "eval_episodes", "log_every": "log_every",
                 "learned_margin": "learned_margin", "min_pass": "min_pass"}
"""The checks' run flags -> keys of the run's config.json and benchmark.json, compared on
--resume (`resume_flags`)."""


def resume_flags(p: argparse.ArgumentParser, args, run_dir: Path, cfg: dict,
                 bench: dict) -> None:
    """Check the flags typed with ``--resume`` against the run (its config.json ``cfg`` and
    benchmark.json ``bench``; a judging setting a run from before it was recorded lacks is the
    flag's default, which judges it): each must equal the saved value, except
    ``--updates``, which may extend a run that has not finished (as ``train_offline
    --resume --updates`` does), and ``--final-episodes``, which re-judges (`start_or_resume`
    records it); ``--log-every`` is compared as the run saved it (its gcd
    with --eval-every); ``--home`` must be the run's home; --sources and the new run's
    other flags do not apply. Raises SystemExit naming the flag, so a typed flag is never
    silently ignored."""
    from wmx.paths import wmx_home
    from wmx.runs.cli_common import agent_config_of, parse_set, resume_changes, run_has_finished
    from wmx.runs.offline_config import OfflineRunConfig
    if "home" in args.given and wmx_home(args.home).resolve() != run_dir.parent.parent:
        raise SystemExit(f"--resume: --home {args.home} is not the run's home folder "
                         f"{run_dir.parent.parent}; drop --home (a run trains where it lies)")
    if "log_every" in args.given:
        every = args.eval_every if "eval_every" in args.given else cfg.get("eval_every")
        if isinstance(every, int) and every > 0 and args.log_every > 0:
            args.log_every = math.gcd(every, args.log_every)    # as new_offline_run saves it
    defaults = {key: p.get_default(dest) for dest, key in RESUME_FIELDS.items()
                if key not in bench and key not in cfg and hasattr(args, dest)}
    try:
        changes = resume_changes(
            args, {**defaults, **bench, **cfg}, RESUME_FIELDS, extendable=("updates",),
            overrides=parse_set(args.set_),
            free=("budget_min", "out", "report_only", "pack", "tdmpc2_run", "home",
                  "final_episodes"),
            new_run="start a new check run (--sources, without --resume)",
            config_of=agent_config_of(OfflineRunConfig.from_json(cfg)))
    except ValueError as e:
        raise SystemExit(str(e)) from None
    if changes and run_has_finished(run_dir):
        raise SystemExit(f"--updates {args.updates:,d}: the run {run_dir} has finished its "
                         f"{cfg['updates']:,d} updates (final evaluation written), so it "
                         "cannot be extended; start a new check run")


def run_config(run_dir: Path, args):
    """The check run's OfflineRunConfig (config.json), with ``--updates`` when ``--resume``
    extends it (`resume_flags` checked it: larger than the run's; `train` records it in
    config.json under the run's lock)."""
    import dataclasses

    from wmx.runs.offline_config import OfflineRunConfig
    rc = OfflineRunConfig.from_json(read_json(run_dir / "config.json", "--resume"))
    if args.resume and args.updates is not None and args.updates != rc.updates:
        rc = dataclasses.replace(rc, updates=args.updates)
    return rc


def start_or_resume(p: argparse.ArgumentParser, args, agent: str, run_prefix: str,
                    extra: dict, check=None) -> tuple[Path, Path, dict, dict[str, dict]]:
    """(run_dir, home, the run's benchmark.json, the pooled sources per task).

    ``--resume RUN_DIR``: that run (`resumable_run`) and its benchmark.json. Otherwise
    ``--sources`` (required) are pooled into a dataset (built unless stored), and a new
    run ``<run_prefix>-<time>`` of ``agent`` is written with benchmark.json
    ``{"sources", **extra, "resume_command", "dataset"}`` (sources inside home relative
    to it, a ``RUN_DIR@N``'s ``@N`` kept, `source_entry`; a run given twice, whole or at
    N, is refused: its episodes would pool once, its returns average; a resumed run without
    ``resume_command`` gains it; written atomically, after every refusal). A
    ``RUN_DIR@N`` source's prefix sets are written into home's store just before the
    build (`offline_sources.source_episode_sets`); a resume reads only the sources'
    config, summary and metrics (a packed home folder has no episode sets).
    ``check(home, dataset)``, when given, returns entries for benchmark.json and raises
    SystemExit on bad input; it runs before anything of the run is written. ``--out`` is
    created once the arguments are checked."""
    from wmx.paths import wmx_home
    if args.report_only and not args.resume:
        p.error("--report-only needs --resume RUN_DIR (the run to report on)")
    if args.final_episodes < 0:
        p.error(f"--final-episodes must be >= 0 (0: judge the last periodic evaluation), "
                f"got {args.final_episodes}")
    if args.prepare_only and args.resume:
        p.error("--prepare-only starts a new run; it takes --sources, not --resume")
    if getattr(args, "pack", None) and args.report_only:
        p.error("--pack packs a run to train elsewhere; it takes no --report-only")
    for flag, on in (("--report-only", args.report_only),
                     ("--pack", getattr(args, "pack", None))):
        if on and args.resume and args.updates is not None:
            p.error(f"--updates with {flag}: nothing is trained here (--updates with --resume "
                    "alone extends the run where it trains)")
    if args.resume:
        run_dir = Path(args.resume).expanduser().resolve()
        cfg = resumable_run(run_dir, agent, args.report_only)
        home = run_dir.parent.parent
        bench = read_json(run_dir / "benchmark.json", "--resume")
        resume_flags(p, args, run_dir, cfg, bench)
    else:
        if not args.sources:
            p.error("--sources RUN_DIR ... is required (or --resume RUN_DIR)")
        home = wmx_home(args.home)
        try:
            bench = {"sources": [source_entry(home, s) for s in args.sources], **extra}
        except ValueError as e:
            p.error(f"--sources: {e}")
        runs_given: dict[str, list[str]] = {}
        for s in bench["sources"]:
            runs_given.setdefault(split_source(s)[0], []).append(s)
        twice = next((k for k, v in runs_given.items() if len(v) > 1), None)
        if twice is not None:           # its episodes pooled once, its returns averaged
            p.error(f"--sources: run {twice} given more than once "
                    f"({', '.join(runs_given[twice])}); give each run once (RUN_DIR@N: the "
                    "run as it stood at N env steps)")
        for s in bench["sources"]:
            if Path(s).is_absolute():
                print(f"note: source run {s} is outside the home folder {home}: recorded "
                      "by its absolute path, it does not move with the home folder")
    if getattr(args, "pack", None):                   # before anything is prepared
        given = getattr(args, "tdmpc2_run", None)     # dreamerv3_offline's run beside
        beside = (bench.get("tdmpc2_run") if given is None else
                  None if given.lower() == "none" else home_relative(home, given))
        check_pack(Path(args.pack).expanduser().resolve(), home,
                   [*(split_source(s)[0] for s in bench["sources"]),
                    *([beside] if beside else [])],
                   run_dir if args.resume else None)
    try:
        runs = [source_run(home / s) for s in bench["sources"]]   # absolute paths stay
        tasks = pooled_sources(runs)
    except ValueError as e:
        raise SystemExit(str(e)) from None
    Ts = {r["episode_length"] for r in runs}
    if len(Ts) > 1:
        raise SystemExit(f"the source runs use different --episode-length overrides {Ts}; "
                         "give runs with one T")
    T = Ts.pop()
    if not args.resume:
        check_overrides(agent, args, list(tasks), T)          # before the dataset is built
        try:
            tasks = pooled_sources(runs, home)     # a RUN_DIR@N source's sets written now
        except ValueError as e:
            raise SystemExit(str(e)) from None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        ref = bench.get("dataset") if args.resume else build_dataset(home, tasks, out)
    except ValueError as e:            # e.g. the sources' sets disagree on a task's T
        raise SystemExit(str(e)) from None
    add = {"resume_command": resume_command(agent, "offline"),
           **({} if check is None else check(home, ref)),
           **({"final_episodes": args.final_episodes}      # re-judging needs no new run
              if args.resume and "final_episodes" in args.given else {})}
    changed = any(k not in bench or bench[k] != v for k, v in add.items())
    bench = {**bench, **add}
    if not args.resume:
        run_dir = new_offline_run(home, ref, args, T, agent, run_prefix)
        bench = {**bench, "dataset": ref}
    if with_random_returns(tasks, bench, T) or changed or not args.resume:
        from wmx.runs.cli_common import replace_json
        replace_json(run_dir / "benchmark.json", bench, sort_keys=False)
    return run_dir, home, bench, tasks


def model_text(rc) -> str:
    """``preset cpu`` and the run's ``--set`` overrides, as the checks print them."""
    sets = " ".join(f"--set {k}={json.dumps(v)}" for k, v in rc.agent_overrides.items())
    return f"preset {rc.preset}" + (f" {sets}" if sets else "")


def check_overrides(agent: str, args, tasks: list[str], episode_length: int | None) -> None:
    """Raise SystemExit (`check_config`'s one line) when the flags do not make a check run
    of ``agent`` on the pooled ``tasks`` (the TaskSet the build will write: mt19's subset),
    before anything is built."""
    from wmx.schemas.taskset import mt19
    check_config(args, agent, "unbuilt@" + "0" * 64, mt19().subset(tasks).to_dict(),
                 episode_length)


def prepared_only(args, run_dir: Path, bench: dict) -> bool:
    """With ``--prepare-only`` or ``--pack``: print how to train the prepared run (with
    ``--pack DIR``: pack it first, `pack_home`) and return True (the entry point stops);
    else False."""
    if not (args.prepare_only or getattr(args, "pack", None)):
        return False
    home = run_dir.parent.parent
    if getattr(args, "pack", None):
        dest = pack_home(run_dir, home, bench, Path(args.pack).expanduser().resolve())
        packed = dest / "runs" / run_dir.name
        print(f"packed {run_dir} into {dest} (its own home folder: the run, its dataset, "
              "its source runs' config, summary and metrics); copy that folder to the "
              f"machine that trains it and run --resume <copy>/runs/{run_dir.name} there "
              f"(e.g. --resume {packed})")
        return True
    print(f"prepared {run_dir} (dataset, config.json, benchmark.json); train it with "
          f"--resume {run_dir}, here or where its home folder {home} is copied (or "
          "--resume RUN --pack DIR: only what training it needs)")
    return True


def train(rc, run_dir: Path, home: Path, budget_min: float | None,
          report_only: bool = False) -> tuple[dict, float]:
    """(summary, wall seconds) of `train_offline`'s loop on ``run_dir`` (progress bar on;
    stopped after the first chunk past ``budget_min`` minutes), holding the run's lock as
    train_offline does (`wmx runs` shows it running; a second trainer of it fails at
    once with `wmx.runs.owner.RunBusyError`). ``report_only``: no
    training; the run's summary.json when it finished, else what its metrics.csv shows
    (``updates``: the last training row's; ``wall_s`` None)."""
    if report_only:
        path = run_dir / "summary.json"
        if path.is_file():
            return json.loads(path.read_text()), 0.0
        return {"finished": False, "updates": last_updates(run_dir), "wall_s": None}, 0.0
    from wmx.train_offline.loop import run
    t0 = time.perf_counter()
    deadline = None if budget_min is None else time.monotonic() + 60 * budget_min
    saved = read_json(run_dir / "config.json", "--resume")["updates"]
    extended = {} if saved == rc.updates else {"updates": rc.updates}   # --resume --updates
    with training_call(run_dir, "updates") as span:
        with training(run_dir, extended) as stop_request:
            summary = run(rc, run_dir, home=home, progress=True, deadline=deadline,
                          stop_request=stop_request)
        span["to"] = summary["updates"]
    return summary, time.perf_counter() - t0


def run_fields(rc, run_dir: Path, summary: dict, wall: float) -> dict:
    """The result entries every check records about its run; ``code_version`` and
    ``device`` are those of its training calls (`trained_where`), with ``prepared``
    (where the run was created) when that was elsewhere."""
    version, device, prepared = trained_where(run_dir)
    return {"dataset": rc.dataset, "run_dir": str(run_dir), "preset": rc.preset,
            "code_version": version, "device": device,
            **({"prepared": prepared} if prepared else {}),
            "agent_overrides": dict(rc.agent_overrides),
            "seeds": list(rc.seeds), "updates_planned": rc.updates,
            "updates_reached": summary["updates"], "finished": summary["finished"],
            "eval_every": rc.eval_every, "eval_episodes": rc.eval_episodes,
            "wall_s_this_call": round(wall, 1), "run_wall_s": summary.get("wall_s"),
            "date": time.strftime("%Y-%m-%dT%H:%M:%S")}


