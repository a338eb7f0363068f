"""mt19_offline ingest (here): a piece's tarball, returned by a `train` call, into the run's
folder, and a finished run's report from its trainer's final evaluation.

The tarball is unpacked into an owned temporary under ``<home>/runs/`` and checked (one
run folder of regular files, config.json, metrics.csv and the calls' account); a later
call's tarball replaces an earlier one's (order: updates done, then the call's number),
and an earlier one, a damaged one or one of another run of the same name (another
``created``) is refused with nothing written. A finished run gets ``report/`` built from
summary.json's final episode returns: what ``evaluate --run RUN --seeds-from-checkpoint
--episodes E`` would write where the checkpoint is (rollout keys "checkpoint"), so
``evaluate --runs RUN --seeds-from-checkpoint --out DIR`` reads it without the checkpoint.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import _mt19_bundle as bundle_lib
from _mt19_offline_run import CALLS_DIR, RunCarryError, read_calls, read_summary


@dataclasses.dataclass(frozen=True)
class Piece:
    """A verified tarball unpacked in a temporary: the run's name, its folder there, its
    config.json, its last call's record and the tarball's sha256."""
    run: str
    folder: Path
    config: dict[str, Any]
    call: dict[str, Any]
    sha256: str

    @property
    def order(self) -> tuple[int, int]:
        """(updates done, call number): a later piece of a run has a larger one."""
        return int(self.call["updates_to"]), int(self.call["call"])


def _calls_of(folder: Path, what: str) -> list[dict[str, Any]]:
    """The calls in ``folder/device_calls/calls.json``; RunCarryError naming ``what``
    when it does not read as `train` writes it."""
    calls = read_calls(folder / CALLS_DIR / "calls.json")
    keys = ("call", "created", "updates_to", "updates_total", "finished")
    if not calls or not all(isinstance(c, dict) and all(k in c for k in keys) for c in calls):
        raise RunCarryError(f"{what}: no {CALLS_DIR}/calls.json as `mt19_offline.py train` "
                            "writes it")
    return calls


def unpack_piece(tarball: Path, tmp: Path) -> Piece:
    """Unpack and check a tarball of `train` into ``tmp``.

    Args:
        tarball: the file a call returned.
        tmp: an empty folder.

    Returns:
        The `Piece`, its run under ``tmp/<run>``.

    Raises:
        RunCarryError: a damaged tarball, or one that is not a piece's (one run folder of
            regular files with config.json, metrics.csv and the calls' account).
    """
    from wmx.runs.cli_common import run_name
    name = tarball.name
    digest = hashlib.sha256()
    try:
        with tarball.open("rb") as f:
            for block in iter(lambda: f.read(2 ** 20), b""):
                digest.update(block)
        with tarfile.open(tarball, "r:gz") as tf:
            members = tf.getmembers()
            tops = {m.name.split("/", 1)[0] for m in members}
            if len(tops) != 1:
                raise RunCarryError(f"{name}: holds {len(tops)} top folders, a piece's tarball "
                                    "one run; give a tarball `mt19_offline.py train` wrote")
            run = tops.pop()
            run_name(run)
            for m in members:
                if not (m.isfile() or m.isdir()) or ".." in m.name.split("/") \
                        or m.name.startswith("/"):
                    raise RunCarryError(f"{name}: member {m.name!r} is not a file of a run; "
                                        "give a tarball `mt19_offline.py train` wrote")
            for m in members:
                bundle_lib.extract_member(tf, m, tmp)
    except RunCarryError:
        raise
    except (tarfile.TarError, EOFError, OSError, ValueError) as e:
        raise RunCarryError(f"{name}: the tarball is damaged ({type(e).__name__}: "
                            f"{str(e).splitlines()[0] if str(e) else 'truncated'}); copy it "
                            "again from the call's files") from None
    folder = tmp / run
    for f in ("config.json", "metrics.csv"):
        if not (folder / f).is_file():
            raise RunCarryError(f"{name}: the run {run} has no {f}; give a tarball "
                                "`mt19_offline.py train` wrote")
    config = bundle_lib.read_json(folder / "config.json")
    calls = _calls_of(folder, name)
    if calls[-1]["created"] != config.get("created"):
        raise RunCarryError(f"{name}: its last call trained a run created "
                            f"{calls[-1]['created']}, its config.json says {config.get('created')}")
    return Piece(run, folder, config, calls[-1], digest.hexdigest())


def check_newer(piece: Piece, final: Path, tarball: str) -> bool:
    """Whether ``piece`` should replace what ``final`` holds.

    Args:
        piece: the unpacked tarball.
        final: ``<home>/runs/<run>``.
        tarball: its file name (for the messages).

    Returns:
        True: nothing there, or an earlier piece of the same run; False: this very
        tarball was ingested before.

    Raises:
        RunCarryError: ``final`` is not an ingested run, is another run of the same name
            (another ``created``), or holds a later piece (more updates, or a later call).
    """
    if not final.exists():
        return True
    what = f"{tarball}: {final}"
    try:
        calls = _calls_of(final, what)
    except RunCarryError:
        raise RunCarryError(f"{what} exists and was not ingested from a `train` tarball; move "
                            "it aside or ingest into another --home") from None
    have = calls[-1]
    if have["created"] != piece.call["created"]:
        raise RunCarryError(f"{what} is another run of that name (created {have['created']}; "
                            f"the tarball's {piece.call['created']}: the device started it "
                            "again); move it aside or ingest into another --home")
    order = (int(have["updates_to"]), int(have["call"]))
    if piece.order < order:
        raise RunCarryError(f"{tarball} is older than the run ingested in {final} (call "
                            f"{piece.order[1]} at {piece.order[0]:,} updates; there: call "
                            f"{order[1]} at {order[0]:,}); nothing to do: ingest the latest "
                            "call's tarball")
    if piece.order == order:
        mark = _ingested(final)
        if mark.get("sha256") == piece.sha256:
            return False
        raise RunCarryError(f"{tarball} differs from the tarball of the same call ingested in "
                            f"{final} ({mark.get('tarball')}); ingest each call's own tarball")
    return True


def check_dataset_here(piece: Piece, home: Path, tarball: str) -> None:
    """Refuse a finished run whose dataset is not in ``home``: its report's source returns
    (and so its ratios) come from the dataset's lineage, and an ingested report is not
    built again (the same tarball is then kept as it is).

    Raises:
        RunCarryError: the run's config.json names no dataset stored in ``home``.
    """
    from wmx.datasets.store import Store
    ref = piece.config.get("dataset")
    try:
        Store(home).resolve_dataset(str(ref))
    except (ValueError, FileNotFoundError):
        raise RunCarryError(
            f"{tarball}: the finished run's dataset {ref} is not in {home / 'datasets'}, "
            "and its report's source returns (the ratios) come from it; ingest into the "
            "home that holds it (--home), or store the dataset there first; nothing "
            "ingested") from None


def _ingested(folder: Path) -> dict[str, Any]:
    """``folder/device_calls/ingested.json`` (the tarball that was ingested there, its
    sha256); {} without one."""
    try:
        d = json.loads((folder / CALLS_DIR / "ingested.json").read_text())
    except (OSError, ValueError):
        return {}
    return d if isinstance(d, dict) else {}


def trainer_report(run_dir: Path, home: Path, call: dict[str, Any]) -> Path | None:
    """Write ``run_dir/report/`` from the trainer's final evaluation (summary.json's
    ``final_eval_episodes``): the report `evaluate --run` would write with
    ``--seeds-from-checkpoint --episodes <the run's eval episodes>`` where the
    checkpoint is (`wmx.evaluate.report.build_report`, rollout keys "checkpoint").

    Args:
        run_dir: the ingested, finished run.
        home: the data root here (the dataset's lineage is read from its store).
        call: the call that finished it (its checkpoint, updates and eval index).

    Returns:
        report.md, or None when summary.json holds no final evaluation.
    """
    import numpy as np

    from wmx.evaluate.report import build_report, write_report
    from wmx.evaluate.runs import RunInfo
    from wmx.runs.offline_config import OfflineRunConfig
    config = bundle_lib.read_json(run_dir / "config.json")
    episodes = read_summary(run_dir).get("final_eval_episodes") or {}
    rc = OfflineRunConfig.from_json(config)
    tasks = [t for t in rc.eval_tasks if t in episodes]
    if not tasks:
        return None
    returns = {t: np.asarray([episodes[t][str(s)] for s in rc.seeds], np.float32)
               for t in tasks}
    step = int(call["updates_to"])
    ckpt = Path(call.get("device_run_dir") or str(run_dir)) / "checkpoints" / str(
        call.get("checkpoint") or step)
    host = {"updates": step, "eval_index": int(call.get("eval_index") or 0)}
    info = RunInfo(run_dir, "offline", config, rc, ckpt, step, host,
                   tuple(rc.train_task_set.names), tuple(rc.seeds))
    meta = {"keys": "checkpoint", "eval_index": max(host["eval_index"] - 1, 0),
            "episodes": int(rc.eval_episodes),
            "tasks": {t: {"wall_s": None, "episode_length": info.task_protocol(t)[0],
                          "action_repeat": info.task_protocol(t)[1]} for t in tasks},
            "made_from": "the trainer's final evaluation on the device (summary.json), "
                         "by benchmarks/mt19_offline.py ingest; the checkpoint stayed there"}
    return write_report(build_report(info, returns, meta, home), run_dir / "report",
                        force=True)


def ingest(tarball: Path, home: Path) -> str:
    """Put a piece's tarball into ``home/runs/<run>`` (see the module doc).

    The tarball is unpacked into an owned temporary under ``home/runs/`` and checked;
    summary.json's ``run_dir`` becomes the run's folder here (the device's kept as
    ``ingested_from``); an earlier piece there is moved aside, this one renamed in, the
    report written (a finished run), and only then the earlier one removed: a failure
    puts it back.

    Args:
        tarball: the file a `train` call returned.
        home: the data root here.

    Returns:
        The status line.

    Raises:
        RunCarryError: a damaged tarball, an earlier piece, another run of the name, a
            finished run whose dataset is not in ``home`` (`check_dataset_here`) or whose
            report cannot be built (the earlier piece put back).
    """
    from wmx import temporaries
    from wmx.evaluate.report import recover_dir
    from wmx.runs.host import write_json_atomic
    if not tarball.is_file():
        raise RunCarryError(f"{tarball}: no such file; give the .tar.gz a train call returned")
    runs = home / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    tmp = temporaries.make_dir(runs, "mt19-offline-ingest")
    try:
        piece = unpack_piece(tarball, tmp)
        final = runs / piece.run
        recover_dir(final)          # an earlier ingest killed between its renames
        if not check_newer(piece, final, tarball.name):
            return (f"mt19_offline.py ingest: {piece.run}: kept: {tarball.name} was ingested "
                    f"before ({final})")
        if piece.call["finished"]:
            check_dataset_here(piece, home, tarball.name)
        summary = read_summary(piece.folder)
        if summary:
            write_json_atomic(piece.folder / "summary.json", dict(
                summary, run_dir=str(final), ingested_from={"run_dir": summary.get("run_dir")}))
        write_json_atomic(piece.folder / CALLS_DIR / "ingested.json", {
            "tarball": tarball.name, "sha256": piece.sha256, "call": piece.order[1],
            "updates": piece.order[0], "ingested": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        aside = None
        if final.exists():
            aside = runs / temporaries.owned_name(piece.run, prefix=temporaries.OLD)
            os.rename(final, aside)
        os.rename(piece.folder, final)
        try:
            report = trainer_report(final, home, piece.call) if piece.call["finished"] else None
        except BaseException as e:
            temporaries.remove(final)
            if aside is not None:
                os.rename(aside, final)
            if isinstance(e, (KeyError, TypeError, ValueError)):
                raise RunCarryError(f"{tarball.name}: the report of the finished run cannot be "
                                    f"built ({type(e).__name__}: {e}); nothing ingested: "
                                    "check its summary.json and config.json") from None
            raise
        if aside is not None:
            temporaries.remove(aside)
    finally:
        temporaries.remove(tmp)
    u, n = piece.order[0], int(piece.call["updates_total"])
    if piece.call["finished"]:
        tail = (f"finished; report {report}; compare: evaluate --runs {piece.run} "
                "--seeds-from-checkpoint --out DIR" if report else
                "finished, but summary.json holds no final evaluation: no report")
    else:
        tail = ("not finished: its checkpoint is on the device; train the next piece there "
                "(not train_offline --resume here, which would start it again)")
    return (f"mt19_offline.py ingest: {piece.run}: {u:,} / {n:,} updates (call "
            f"{piece.order[1]}) in {final}; {tail}")


def cmd_ingest(args) -> int:
    """Ingest each tarball given, in order; print one line for each.

    Args:
        args: ``ingest``'s parsed flags (``tarballs``, ``home``).

    Returns:
        0; 2 after one line on stderr per tarball refused.
    """
    from wmx.paths import wmx_home
    home = wmx_home(args.home)
    failed = 0
    for t in args.tarballs:
        try:
            print(ingest(Path(t), home), flush=True)
        except (ValueError, OSError) as e:
            print(f"mt19_offline.py ingest: error: {str(e).splitlines()[0]}", file=sys.stderr)
            failed += 1
    return 2 if failed else 0
