"""mt19_offline train (there): one piece of an offline run within a device call's budget, and
its small files packed to come back.

``train`` runs one piece of the run ``<home>/runs/<run>``: train_offline in a child
process (`TRAINER`), new (``--name``) when the run has no config.json, else ``--resume``
(with the same flags, which a resumed run checks against its saved config). A `Pacer`
asks it to stop (SIGTERM: after its running chunk, with a checkpoint) as soon as waiting
one chunk more would make it exit later than ``--reserve-s`` before the budget; a second
SIGTERM `PACK_S` before the budget makes it exit at once (its running chunk lost, the
newest checkpoint kept). Then the run's small files (config.json, metrics.csv,
summary.json, logger folders; never checkpoints/) and the calls' account (`CALLS_DIR`:
calls.json, each call's log, kept on the device under ``<home>/offline_calls/<run>/``) go
into one ``<run>.callNN.tar.gz`` of at most `RETURN_FILE_BYTES`, the most a returned file
may have. The checkpoint stays on the device for the next call; `_mt19_offline_ingest`
puts the tarball into the run's folder here.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any


REPO = Path(__file__).resolve().parents[1]
TRAINER = (sys.executable, "-m", "wmx.train_offline.cli")
"""The command that trains (train_offline; a test runs a stand-in env version)."""
MAX_BUDGET_S = 600
"""Longest --budget-s: a device command runs at most 600 s."""
PACK_S = 10.0
"""Seconds before the budget at which a trainer still running is stopped at once (the
second SIGTERM), left for the tarball and the status line."""
KILL_AFTER_S = 5.0
"""Seconds a trainer gets to exit after the second SIGTERM before SIGKILL."""
POLL_S = 0.25
"""How often the trainer's progress is read."""
RETURN_FILE_BYTES = 16 * 2 ** 20
"""The most one returned file may have (a device call brings back files of at most 16 MiB)."""
LOG_TAIL_BYTES = 2 ** 20
"""The most of one call's log a tarball carries (its end)."""
CALLS_DIR = "device_calls"
"""The calls' account: under ``<home>/offline_calls/<run>/`` on the device, under the run's
folder in a tarball and here."""
CALLS_SCHEMA = "wmx.mt19_offline_calls/1"
SKIPPED = ("checkpoints", "processes", "report", "run.lock", CALLS_DIR)
"""Entries of a run folder a tarball never carries (the checkpoints stay on the device;
ingest builds the report)."""
PAPER_MODEL_SIZE = {"tdmpc2": "5", "dreamerv3": None}
"""``--model-size`` by agent when not given: TD-MPC2's size 5 (5.4M parameters, the mt19
issue's), DreamerV3's preset's (``paper``: 12m)."""
OWN_FLAGS = ("--name", "--resume", "--home", "--dataset", "--updates", "--no-progress",
             "--agent", "--preset", "--model-size", "--batch-size", "--eval-every")
"""train_offline flags that `train` sets itself (refused after ``--``)."""

_clock = time.monotonic
"""The clock of the budget (a test moves it forward)."""


class RunCarryError(ValueError):
    """A piece that cannot run or a tarball that cannot be ingested; the message is one
    line naming the problem and the fix."""


# ---- pacing (there) ----------------------------------------------------------------------
@dataclasses.dataclass
class Pacer:
    """When to ask the trainer to stop so that it exits by ``stop_by``.

    The trainer stops after the chunk running when it is asked, evaluating first when
    that chunk ends on an evaluation point (every ``eval_every`` updates, and the last).
    So the pacer asks as soon as waiting one chunk more would end past ``stop_by``: the
    running chunk's end (its evaluation included) plus one chunk (and its evaluation).

    Attributes:
        started: the call's start (clock value).
        stop_by: when the trainer should have exited (clock value).
        log_every, eval_every: the run's chunk and evaluation period (config.json; None
            until the trainer wrote it).
        updates: the run's total (``--updates``, which may extend it).
        eval_s: an evaluation's seconds: the longest one measured in metrics.csv, else
            the ``--eval-s`` guess.
        history_s: a chunk's seconds in the earlier calls (`chunk_seconds`; None: none).
        seen: (updates, clock value when its metrics row was first read) of this call.
    """
    started: float
    stop_by: float
    eval_s: float
    log_every: int | None = None
    eval_every: int | None = None
    updates: int | None = None
    history_s: float | None = None
    seen: list[tuple[int, float]] = dataclasses.field(default_factory=list)

    def _evaluates(self, u: int) -> bool:
        """Whether the chunk ending at ``u`` updates evaluates (scheduled, or the last)."""
        return u >= self.updates or u % self.eval_every == 0

    def chunk_s(self) -> float:
        """Seconds of one chunk: the longest of the last 5 measured between rows read
        with no evaluation between them (per chunk when several ended between two
        reads); before two rows, 1.5 times the earlier calls' (``history_s``, which
        leaves out checkpoint writes), else the time from the call's start to the first
        row (startup and compilation: an overestimate)."""
        per = []
        for (a, ta), (b, tb) in zip(self.seen, self.seen[1:]):
            n = max(1, (b - a) // self.log_every)
            if not any(self._evaluates(u) for u in range(a + self.log_every, b + 1,
                                                         self.log_every)):
                per.append((tb - ta) / n)
        if per:
            return max(per[-5:])
        if self.history_s is not None:
            return 1.5 * self.history_s
        return self.seen[0][1] - self.started if self.seen else 0.0

    def should_stop(self, now: float) -> bool:
        """Whether to ask the trainer to stop now (see the class doc).

        Args:
            now: the clock.

        Returns:
            True once waiting for one more chunk would end past ``stop_by``; before the
            run's settings or its first row are known, once ``now`` reaches it; never
            while the running chunk is the run's last.
        """
        if self.log_every is None or not self.seen:
            return now >= self.stop_by
        u, t = self.seen[-1]
        if u >= self.updates:
            return False
        c = self.chunk_s()
        u1 = min(u + self.log_every, self.updates)
        end1 = max(t + c + (self.eval_s if self._evaluates(u1) else 0.0), now)
        if u1 >= self.updates:
            return False                    # the running chunk is the run's last
        u2 = min(u1 + self.log_every, self.updates)
        return end1 + c + (self.eval_s if self._evaluates(u2) else 0.0) > self.stop_by


def chunk_seconds(rows: list[dict[str, str]], seed: str, log_every: int,
                  eval_every: int) -> float | None:
    """A chunk's seconds in a run's metrics rows of one seed (the run's own ``wall_s``):
    the median over consecutive train rows one chunk apart whose second one is no
    evaluation point; None without such a pair."""
    import statistics
    train = sorted((int(r["updates"]), float(r["wall_s"])) for r in rows
                   if r.get("seed") == seed and r.get("kind") == "train" and r.get("wall_s"))
    per = [wb - wa for (a, wa), (b, wb) in zip(train, train[1:])
           if b - a == log_every and b % eval_every]
    return statistics.median(per) if per else None


def eval_seconds(rows: list[dict[str, str]], seed: str) -> list[float]:
    """Each evaluation's seconds in a run's metrics rows of one seed: its eval rows'
    ``wall_s`` less its train row's (the run's own clock)."""
    train = {r["updates"]: float(r["wall_s"]) for r in rows
             if r.get("seed") == seed and r.get("kind") == "train" and r.get("wall_s")}
    out = {}
    for r in rows:
        if r.get("seed") == seed and r.get("kind") == "eval" and r.get("updates") in train \
                and r.get("wall_s"):
            out[r["updates"]] = float(r["wall_s"]) - train[r["updates"]]
    return list(out.values())


# ---- the run's state (there) -------------------------------------------------------------
def read_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's config.json, or None when it has none (or it does not read)."""
    try:
        cfg = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def newest_host(run_dir: Path) -> tuple[str | None, dict[str, Any]]:
    """(name, host.json) of the run's newest checkpoint whose host.json reads (the one
    ``--resume`` continues from when its items are intact; `wmx.runs.listing.checkpoints`);
    (None, {}) without one. Read without JAX, which must not take the device from the
    trainer."""
    from wmx.runs.listing import checkpoints
    found = checkpoints(run_dir)
    return found[-1] if found else (None, {})


def read_calls(path: Path) -> list:
    """The calls of a calls.json (`CALLS_SCHEMA`); [] when it does not read."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return data.get("calls", []) if isinstance(data, dict) else []


def trainer_command(args, run_dir: Path, resume: bool) -> list[str]:
    """The train_offline command of the piece (`TRAINER` and its flags).

    Args:
        args: ``train``'s parsed flags (``extra``: the flags after ``--``).
        run_dir: the run.
        resume: continue the run (``--resume RUN_DIR``) rather than start it (``--name``).

    Returns:
        The argv: the same flags both ways (a resumed run checks each against its saved
        config), but ``--name`` or ``--resume``.
    """
    cmd = [*TRAINER, "--agent", args.agent, "--preset", args.preset, "--dataset", args.ref,
           "--home", str(args.home), "--updates", str(args.updates), "--no-progress"]
    size = args.model_size if args.model_size is not None else PAPER_MODEL_SIZE[args.agent]
    if size not in (None, "", "none"):
        cmd += ["--model-size", str(size)]
    if args.batch_size is not None:
        cmd += ["--batch-size", str(args.batch_size)]
    if args.eval_every is not None:
        cmd += ["--eval-every", str(args.eval_every)]
    cmd += ["--resume", str(run_dir)] if resume else ["--name", run_dir.name]
    return cmd + list(args.extra)


def _redact(cmd: list[str], home: Path) -> str:
    """The command as a string, the interpreter as ``python`` and the data root as H."""
    words = ["python" if a == sys.executable else a.replace(str(home), "H") for a in cmd]
    return " ".join(shlex.quote(w) for w in words)


def _last_error(log: Path) -> str:
    """The trainer's error line in its log (``train_offline: error: ...``), else its last
    line."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    errs = [ln for ln in lines if "error:" in ln or "Error" in ln]
    return (errs or lines or ["(empty log)"])[-1][:300]


class _Watch:
    """metrics.csv of the run read as it grows: the first seed's train rows past the
    updates already recorded when the call started (``past``), fed to the `Pacer` with
    the run's chunk, evaluation period, earlier chunks' and evaluations' seconds."""

    def __init__(self, run_dir: Path, pacer: Pacer, past: int):
        self.run_dir, self.pacer, self.past = run_dir, pacer, past
        self._size, self._seed = -1, None
        self.eval_times: list[float] = []

    def poll(self, now: float) -> None:
        """Read config.json (once it is there) and metrics.csv (when it grew) into the
        pacer; ``now``: the clock, recorded with a newly read row."""
        from wmx.runs.listing import read_metrics
        p = self.pacer
        if p.log_every is None:
            cfg = read_config(self.run_dir)
            if cfg is None:
                return
            p.log_every, p.eval_every = int(cfg["log_every"]), int(cfg["eval_every"])
            p.updates = p.updates or int(cfg["updates"])    # --updates may extend the run
            self._seed = str(cfg["seeds"][0])
        path = self.run_dir / "metrics.csv"
        try:
            size = path.stat().st_size
        except OSError:
            return
        if size == self._size:
            return
        self._size = size
        rows = read_metrics(path)
        done = [int(r["updates"]) for r in rows
                if r.get("seed") == self._seed and r.get("kind") == "train"]
        if p.history_s is None and not p.seen:
            p.history_s = chunk_seconds([r for r in rows if int(r["updates"]) <= self.past],
                                        self._seed, p.log_every, p.eval_every)
        newest = max(done, default=0)
        if newest > max([self.past] + [u for u, _ in p.seen]):
            p.seen.append((newest, now))
        self.eval_times = eval_seconds(rows, self._seed)
        if self.eval_times:
            p.eval_s = max(self.eval_times)


# ---- train (there) -----------------------------------------------------------------------
def _dies_with_parent():
    """A ``preexec_fn`` that has the kernel send the trainer SIGTERM when this process
    dies (Linux ``PR_SET_PDEATHSIG``; None elsewhere). The trainer runs in a session of
    its own, so a signal to this command's process group (``timeout``, Ctrl-C) reaches
    only this process, which passes it on once; killed, it still stops the trainer."""
    import ctypes
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl      # resolved before the fork
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, int(signal.SIGTERM))             # 1: PR_SET_PDEATHSIG


def run_trainer(cmd: list[str], log: Path, run_dir: Path, pacer: Pacer, past: int,
                t0: float, budget_s: float) -> dict[str, Any]:
    """Run the trainer until it exits, asking it to stop when the `Pacer` says so.

    The stop request is a SIGTERM (the trainer stops after its running chunk, with a
    checkpoint); a SIGTERM or SIGINT to this process is passed on as one (the trainer
    runs in a session of its own: `_dies_with_parent`). At `PACK_S`
    before the budget a trainer still running is asked if it was not (the run's last
    chunk ran long), and one asked before gets a second SIGTERM (it exits at once, its
    running chunk lost, the newest checkpoint kept); `KILL_AFTER_S` later, SIGKILL.

    Args:
        cmd: the trainer's command.
        log: the file its output goes to.
        run_dir: the run (its metrics.csv and config.json are read).
        pacer: the pacer.
        past: the updates the run had when the call started (rows up to them are old).
        t0: the call's start (`_clock` value).
        budget_s: the call's budget.

    Returns:
        {"rc": the trainer's exit status, "stop": None | "budget" | "signal" (why it was
        asked to stop), "stop_at_s": when (from t0), "exited_after_s": how long it took
        then, "hard": whether it got the second SIGTERM}.
    """
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(REPO),
                                                        os.environ.get("PYTHONPATH")])))
    watch = _Watch(run_dir, pacer, past)
    got: dict[str, Any] = {"stop": None, "stop_at_s": None, "exited_after_s": None,
                           "hard": False}
    asked = []
    last_at = t0 + budget_s - PACK_S

    def on_signal(signum, frame):
        """A signal to this process: pass it on as the stop request (the loop)."""
        asked.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    proc = sent = hard = None
    try:
        with log.open("ab") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    cwd=REPO, start_new_session=True,
                                    preexec_fn=_dies_with_parent())
        while proc.poll() is None:
            now = _clock()
            watch.poll(now)
            if sent is None and (asked or now >= last_at or pacer.should_stop(now)):
                proc.send_signal(signal.SIGTERM)
                sent, got["stop"] = now, "signal" if asked else "budget"
                got["stop_at_s"] = round(now - t0, 1)
            elif sent is not None and hard is None and now >= last_at:
                proc.send_signal(signal.SIGTERM)
                hard, got["hard"] = now, True
            elif hard is not None and now >= hard + KILL_AFTER_S:
                proc.kill()
            time.sleep(POLL_S)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if proc is not None:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
    got["rc"] = proc.returncode
    if sent is not None:
        got["exited_after_s"] = round(_clock() - sent, 1)
    return got


def _calls_home(home: Path, run: str) -> Path:
    """The run's calls' folder on the device: ``<home>/offline_calls/<run>``."""
    return home / "offline_calls" / run


def run_members(run_dir: Path, calls: Path) -> list[tuple[str, Path]]:
    """(name in the tarball, file) of what a piece's tarball carries, sorted: the run's
    files but `SKIPPED` ones and hidden ones, and the calls' account under
    ``<run>/device_calls/``.

    Args:
        run_dir: the run.
        calls: its calls' folder on the device (calls.json, call-NN.log).
    """
    run = run_dir.name
    out = []
    for p in sorted(run_dir.rglob("*")):
        rel = p.relative_to(run_dir)
        if rel.parts[0] in SKIPPED or any(x.startswith(".") for x in rel.parts) \
                or p.is_symlink() or not p.is_file():
            continue
        out.append((f"{run}/{rel.as_posix()}", p))
    out += [(f"{run}/{CALLS_DIR}/{p.name}", p) for p in sorted(calls.iterdir())
            if p.is_file() and not p.name.startswith(".")]
    return out


def pack_run(run_dir: Path, calls: Path, out: Path, call: int,
             limit: int = RETURN_FILE_BYTES) -> Path:
    """Write the piece's tarball ``out/<run>.callNN.tar.gz`` (see the module doc); each
    log carries its last `LOG_TAIL_BYTES`.

    Args:
        run_dir: the run.
        calls: its calls' folder.
        out: the folder written (created).
        call: the call's number.
        limit: the largest tarball.

    Returns:
        The tarball (written under an owned temporary name, renamed when whole).

    Raises:
        RunCarryError: it would be larger than ``limit`` (nothing left in ``out``).
    """
    import io

    from wmx import temporaries
    out.mkdir(parents=True, exist_ok=True)
    final = out / f"{run_dir.name}.call{call:02d}.tar.gz"
    tmp = out / temporaries.owned_name(final.name)
    try:
        with tarfile.open(tmp, "w:gz", compresslevel=6, format=tarfile.PAX_FORMAT) as tf:
            for arc, path in run_members(run_dir, calls):
                data = path.read_bytes()
                if path.suffix == ".log" and len(data) > LOG_TAIL_BYTES:
                    data = (f"[the first {len(data) - LOG_TAIL_BYTES} bytes of the log left "
                            "out]\n").encode() + data[-LOG_TAIL_BYTES:]
                info = tarfile.TarInfo(arc)
                info.size, info.mode, info.mtime = len(data), 0o644, int(path.stat().st_mtime)
                tf.addfile(info, io.BytesIO(data))
        size = tmp.stat().st_size
        if size > limit:
            raise RunCarryError(
                f"{final.name} would be {size / 2 ** 20:.2f} MiB, above the {limit / 2 ** 20:.2f} "
                "MiB a returned file may have; drop the --logger folders or log less often "
                "(--log-every), and call again")
        os.replace(tmp, final)
    finally:
        temporaries.remove(tmp)
    return final


def cmd_train(args) -> int:
    """Train one piece of the run within the budget and pack its small files.

    Args:
        args: ``train``'s parsed flags (``extra``: train_offline flags after ``--``).

    Returns:
        0 when the piece ran (finished or not: the status line says which); 1 when the
        trainer failed (its error line; the tarball still carries its log).

    Raises:
        RunCarryError: bad flags, or a tarball above the limit.
    """
    from wmx.paths import wmx_home
    from wmx.runs.host import write_json_atomic
    t0 = _clock()
    if not 0 < args.budget_s <= MAX_BUDGET_S:
        raise RunCarryError(f"--budget-s {args.budget_s:g}: give more than 0 and at most "
                            f"{MAX_BUDGET_S} s (a device command runs at most 600 s)")
    if not PACK_S <= args.reserve_s < args.budget_s:
        raise RunCarryError(f"--reserve-s {args.reserve_s:g}: give {PACK_S:g} s (the tarball) "
                            "up to below --budget-s, enough for the checkpoint write")
    own = sorted({a.split("=", 1)[0] for a in args.extra} & set(OWN_FLAGS))
    if own:
        raise RunCarryError(f"{', '.join(own)} after --: give train's own flag instead "
                            "(--run-name, --home, NAME@HASH, --updates, --preset, ...)")
    home = args.home = wmx_home(args.home)
    run_dir = home / "runs" / args.run_name
    calls_dir = _calls_home(home, args.run_name)
    calls_dir.mkdir(parents=True, exist_ok=True)
    cfg = read_config(run_dir)
    resume = cfg is not None
    calls = read_calls(calls_dir / "calls.json") if resume else []
    if not resume:                  # a run started again: the old account is not its
        for p in calls_dir.iterdir():
            p.unlink()
    call = len(calls) + 1
    log = calls_dir / f"call-{call:02d}.log"
    ckpt, host = newest_host(run_dir)
    before = int(host.get("updates", 0))
    summary = read_summary(run_dir)
    cmd = trainer_command(args, run_dir, resume)
    record: dict[str, Any] = {
        "call": call, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "action": "resume" if resume else "new", "command": _redact(cmd, home),
        "budget_s": args.budget_s, "reserve_s": args.reserve_s, "updates_from": before}
    if summary.get("finished") and cfg and int(cfg.get("updates", -1)) == args.updates:
        record.update(action="none", stop="finished before", trainer_rc=None)
        log.write_text("the run had finished before this call: nothing trained\n")
    else:
        log.write_text(f"$ {record['command']}\n")
        pacer = Pacer(started=t0, stop_by=t0 + args.budget_s - args.reserve_s,
                      eval_s=args.eval_s, updates=args.updates)
        got = run_trainer(cmd, log, run_dir, pacer, max(before, _metrics_max(run_dir)), t0,
                          args.budget_s)
        record.update(trainer_rc=got["rc"], stop=got["stop"], stop_at_s=got["stop_at_s"],
                      exited_after_s=got["exited_after_s"], hard=got["hard"],
                      chunk_s=round(pacer.chunk_s(), 2) if pacer.seen else None,
                      eval_s=round(pacer.eval_s, 1))
    cfg = read_config(run_dir)
    if cfg is None and record.get("stop") == "budget":
        raise RunCarryError(f"the budget stopped the trainer at {record['stop_at_s']:g} s, "
                            f"before it wrote the run {run_dir.name} (exit status "
                            f"{record['trainer_rc']}; --budget-s {args.budget_s:g} less "
                            f"--reserve-s {args.reserve_s:g} leaves too little for its start): "
                            "give a larger --budget-s or a smaller --reserve-s")
    if cfg is None:
        raise RunCarryError(f"the trainer wrote no run {run_dir.name} (exit status "
                            f"{record['trainer_rc']}): {_last_error(log)}")
    ckpt, host = newest_host(run_dir)
    summary = read_summary(run_dir)
    finished = bool(summary.get("finished") or host.get("finished"))
    record.update(created=cfg.get("created"), code_version=cfg.get("code_version"),
                  updates_to=int(host.get("updates", 0)), updates_total=int(cfg["updates"]),
                  finished=finished, checkpoint=ckpt,
                  eval_index=host.get("eval_index"), device_run_dir=str(run_dir),
                  wall_s=round(_clock() - t0, 1))
    write_json_atomic(calls_dir / "calls.json", {"schema": CALLS_SCHEMA, "run": run_dir.name,
                                                 "calls": calls + [record]})
    tarball = pack_run(run_dir, calls_dir, Path(args.out), call)
    rc = record["trainer_rc"]
    if rc not in (None, 0, 128 + signal.SIGTERM, -signal.SIGTERM, -signal.SIGKILL) \
            or (rc not in (None, 0) and record["stop"] is None):
        print(f"mt19_offline.py train: error: the trainer exited with status {rc}: "
              f"{_last_error(log)} ({tarball.name} carries its log)", file=sys.stderr)
        return 1
    print(status_line(run_dir.name, record, tarball), flush=True)
    return 0


def status_line(run: str, record: dict[str, Any], tarball: Path) -> str:
    """The one line `train` ends with: the updates done of the total, this call's share
    (a new run, or resumed where), whether the run finished (else how the trainer
    stopped), the tarball, what next."""
    if record["finished"]:
        how, nxt = "finished", "ingest it here"
    elif record.get("hard"):
        how = ("not finished: stopped at once by a second SIGTERM (its running chunk lost); "
               "give more --reserve-s")
        nxt = "call again while the machine is warm (its checkpoint stays there)"
    else:
        why = {"budget": "the budget", "signal": "a signal"}.get(record.get("stop"))
        how = "not finished" + (f": stopped by {why} ({record['exited_after_s']:g} s after the "
                                f"stop request at {record['stop_at_s']:g} s)" if why else "")
        nxt = "call again while the machine is warm (its checkpoint stays there)"
    done, before = record["updates_to"], record["updates_from"]
    began = {"new": "a new run", "resume": f"resumed at {before:,}"}.get(record["action"],
                                                                      "nothing to train")
    return (f"mt19_offline.py train: {run}: {done:,} / {record['updates_total']:,} updates, "
            f"{done - before:,} in this call ({began}), {how}; {tarball} "
            f"({tarball.stat().st_size / 2 ** 20:.2f} MiB); next: {nxt}")


def read_summary(run_dir: Path) -> dict[str, Any]:
    """The run's summary.json; {} when it has none (or it does not read)."""
    try:
        s = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return {}
    return s if isinstance(s, dict) else {}


def _metrics_max(run_dir: Path) -> int:
    """The most updates any metrics.csv row of the run records (0 without one)."""
    from wmx.runs.listing import read_metrics
    return max((int(r["updates"]) for r in read_metrics(run_dir / "metrics.csv")
                if r.get("updates", "").isdigit()), default=0)
