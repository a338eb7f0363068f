"""benchmarks/mt19_offline.py train and ingest on a real tiny offline run (CPU, the tiny
preset, stand-in evaluation envs): the run trains in two `train` pieces, each a
train_offline process of its own as on the device; the first is stopped by its budget
(the budget's clock moved past the stop time once the first chunk's row is written, so
the stop does not depend on the machine's speed), the second resumes it from its
checkpoint and finishes. Their tarballs are ingested into another home: the updates went
on across the pieces, and the finished run, without its checkpoint, is reported by
``evaluate --runs``. An earlier call's tarball, a damaged one and another run of the same
name are refused with nothing written; a tarball above the limit is not written. The
trainer processes compile at XLA's optimisation level 0 (as ``make test``'s first pass),
the second loading the first's programs from the home's compilation cache."""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks")]
import _mt19_offline_run as run_lib  # noqa: E402
import mt19_offline as off  # noqa: E402

from tiny_runs import build_offline_dataset  # noqa: E402
from wmx.runs.listing import read_metrics  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
"""The trainer and the stand-ins run as child processes; an xdist worker that imported JAX
for an earlier file warns at the fork (the pytest process's threads, not the child's)."""

STAND_IN = ROOT / "tests" / "benchmarks" / "stand_in_train_offline.py"
N, LOG_EVERY, BUDGET, RESERVE = 100, 2, 600.0, 300.0
OPT0 = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def _main(argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``mt19_offline.py argv``."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = off.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


class JumpClock:
    """The budget's clock: real time until the run's metrics.csv holds a train row, then
    moved forward to one second past the time by which the trainer should have exited
    (budget less reserve), long before the budget itself."""

    def __init__(self, metrics: Path):
        self.metrics, self.t0, self.offset = metrics, None, 0.0

    def __call__(self) -> float:
        now = time.monotonic()
        if self.t0 is None:
            self.t0 = now                       # train's first reading: the call's start
        if not self.offset and self.metrics.is_file() and ",train," in self.metrics.read_text():
            self.offset = self.t0 + BUDGET - RESERVE + 1 - now
        return now + self.offset


def _train(dev: Path, out: Path) -> list:
    return ["train", "tst@latest", "--home", dev, "--run-name", "r", "--updates", N,
            "--budget-s", BUDGET, "--reserve-s", RESERVE, "--out", out, "--preset", "tiny",
            "--model-size", "none", "--batch-size", 16, "--eval-every", 50,
            "--", "--log-every", LOG_EVERY, "--eval-episodes", 1, "--seeds", 0]


@pytest.fixture(scope="module")
def flow(tmp_path_factory):
    """The two pieces on the device's home: {"dev", "tars", "lines"} (the tarballs and
    status lines of the two calls)."""
    tmp = tmp_path_factory.mktemp("offline-run")
    dev = tmp / "device"
    build_offline_dataset(dev)
    mp = pytest.MonkeyPatch()
    mp.setattr(run_lib, "TRAINER", (sys.executable, str(STAND_IN)))
    mp.delenv("WMX_NO_COMPILE_CACHE", raising=False)   # this home's cache only
    mp.setenv("XLA_FLAGS", f"{os.environ.get('XLA_FLAGS', '')} {OPT0}".strip())
    tars, lines = [], []
    try:
        for k, clock in ((1, JumpClock(dev / "runs" / "r" / "metrics.csv")),
                         (2, time.monotonic)):
            mp.setattr(run_lib, "_clock", clock)
            rc, out, err = _main(_train(dev, tmp / f"out{k}"))
            assert rc == 0, err
            lines.append(out.strip())
            tars.append(tmp / f"out{k}" / f"r.call{k:02d}.tar.gz")
    finally:
        mp.undo()
    return {"dev": dev, "tars": tars, "lines": lines}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def test_two_pieces_continue_the_run(flow):
    first, second = flow["lines"]
    assert len(first.splitlines()) == 1 and "not finished: stopped by the budget" in first
    assert f"/ {N:,} updates, " in first and " in this call (a new run), " in first
    assert len(second.splitlines()) == 1 and " in this call (resumed at " in second
    assert "), finished;" in second
    calls = json.loads((flow["dev"] / "offline_calls" / "r" / "calls.json").read_text())["calls"]
    assert [c["action"] for c in calls] == ["new", "resume"]
    assert calls[0]["stop"] == "budget" and not calls[0]["hard"]
    assert calls[0]["trainer_rc"] == 143 and calls[1]["trainer_rc"] == 0
    assert LOG_EVERY <= calls[0]["updates_to"] < N and not calls[0]["finished"]
    assert calls[1]["updates_from"] == calls[0]["updates_to"]
    assert calls[1]["updates_to"] == N and calls[1]["finished"]
    assert "--resume H/runs/r" in calls[1]["command"] and "--name r" in calls[0]["command"]
    rows = [int(r["updates"]) for r in read_metrics(flow["dev"] / "runs" / "r" / "metrics.csv")
            if r["kind"] == "train"]
    assert rows == list(range(LOG_EVERY, N + 1, LOG_EVERY))    # each chunk once, in order
    for t in flow["tars"]:
        with tarfile.open(t) as tf:
            names = tf.getnames()
        assert "r/config.json" in names and "r/metrics.csv" in names
        assert not any("/checkpoints" in n or n.endswith("run.lock") for n in names)
        assert t.stat().st_size < run_lib.RETURN_FILE_BYTES
    with tarfile.open(flow["tars"][1]) as tf:
        names = tf.getnames()
    assert {"r/summary.json", "r/device_calls/calls.json", "r/device_calls/call-01.log",
            "r/device_calls/call-02.log"} <= set(names)


def _home_with_the_dataset(flow, home: Path) -> Path:
    """``home`` holding the device's dataset and episode sets (the run's lineage)."""
    for d in ("datasets", "episodes"):
        shutil.copytree(flow["dev"] / d, home / d)
    return home


def test_ingest_replaces_the_earlier_piece_and_the_run_evaluates(flow, tmp_path):
    here = _home_with_the_dataset(flow, tmp_path / "here")
    rc, out, err = _main(["ingest", flow["tars"][0], "--home", here])
    assert rc == 0 and "not finished" in out, err
    assert not (here / "runs" / "r" / "report").exists()
    rc, out, err = _main(["ingest", flow["tars"][1], "--home", here])
    assert rc == 0 and "; finished; report " in out, err
    run = here / "runs" / "r"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["run_dir"] == str(run) and summary["updates"] == N
    assert summary["ingested_from"]["run_dir"] == str(flow["dev"] / "runs" / "r")
    rep = json.loads((run / "report" / "report.json").read_text())
    assert rep["run"]["updates"] == N and rep["run"]["checkpoint_step"] == N
    assert rep["evaluation"]["keys"] == "checkpoint" and rep["evaluation"]["episodes"] == 1
    assert rep["returns"] == {t: {"0": v["0"]} for t, v in
                              summary["final_eval_episodes"].items()}
    assert not (run / "checkpoints").exists()
    from wmx.evaluate.cli import main as evaluate
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert evaluate(["--runs", "r", "--home", str(here), "--out", str(tmp_path / "cmp"),
                         "--seeds-from-checkpoint"]) == 0, err.getvalue()
    cmp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert [r["label"] for r in cmp["runs"]] == ["r"]
    assert set(cmp["scores"]["r"]) == {"cartpole-balance", "cheetah-run"}
    err = io.StringIO()       # fresh rollout keys ask for an evaluation the run cannot make
    with contextlib.redirect_stderr(err):
        assert evaluate(["--runs", "r", "--home", str(here), "--out",
                         str(tmp_path / "cmp2")]) == 2
    assert "--seeds-from-checkpoint" in err.getvalue()
    # an earlier call's tarball is refused, the same one again kept
    before = _files(run)
    rc, out, err = _main(["ingest", flow["tars"][0], "--home", here])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "older than the run" in err
    rc, out, err = _main(["ingest", flow["tars"][1], "--home", here])
    assert rc == 0 and "kept:" in out
    assert _files(run) == before
    assert not [p for p in (here / "runs").iterdir() if p.name.startswith(".")]


def test_damaged_and_foreign_tarballs_are_refused(flow, tmp_path):
    here = tmp_path / "here"
    assert _main(["ingest", flow["tars"][0], "--home", here])[0] == 0
    before = _files(here / "runs" / "r")
    cut = tmp_path / "cut.tar.gz"
    raw = flow["tars"][1].read_bytes()
    cut.write_bytes(raw[:len(raw) // 2])
    rc, _, err = _main(["ingest", cut, "--home", here])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "damaged" in err
    # the same run name, started again on the device (another created)
    src = tmp_path / "src"
    with tarfile.open(flow["tars"][1]) as tf:
        tf.extractall(src, filter="data")
    created = json.loads((src / "r" / "config.json").read_text())["created"]
    for rel in ("config.json", "device_calls/calls.json"):
        p = src / "r" / rel
        p.write_text(p.read_text().replace(created, "2000-01-01T00:00:00"))
    other = tmp_path / "other.tar.gz"
    with tarfile.open(other, "w:gz") as tf:
        tf.add(src / "r", arcname="r")
    rc, _, err = _main(["ingest", other, "--home", here])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "another run of that name" in err
    assert _files(here / "runs" / "r") == before
    assert not [p for p in (here / "runs").iterdir() if p.name.startswith(".")]
    # a run of that name not ingested from a tarball
    (tmp_path / "own" / "runs" / "r").mkdir(parents=True)
    rc, _, err = _main(["ingest", flow["tars"][1], "--home", tmp_path / "own"])
    assert rc == 2 and "was not ingested" in err


def test_a_finished_run_is_not_ingested_without_its_dataset(flow, tmp_path):
    """A home without the run's dataset: the finished run's report would have no source
    returns (no ratios) and would not be built again, so it is refused in one line with
    nothing ingested; an unfinished piece needs no report and is ingested."""
    bare = tmp_path / "bare"
    rc, _, err = _main(["ingest", flow["tars"][1], "--home", bare])
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "dataset tst@" in err and "is not in" in err and "--home" in err
    assert list((bare / "runs").iterdir()) == []
    rc, out, err = _main(["ingest", flow["tars"][0], "--home", bare])
    assert rc == 0 and "not finished" in out, err
    rc, out, err = _main(["ingest", flow["tars"][1], "--home", _home_with_the_dataset(
        flow, tmp_path / "bare2")])
    assert rc == 0 and "; finished; report " in out, err
    rep = json.loads((tmp_path / "bare2" / "runs" / "r" / "report" / "report.json").read_text())
    assert all(row["source_return"] is not None for row in rep["per_task"])


def test_a_budget_that_ends_before_the_trainer_starts_says_so(tmp_path, monkeypatch):
    """A budget whose stop time comes before the trainer has written its run: one line
    naming the budget and the fix, not the trainer's command line."""
    monkeypatch.setattr(run_lib, "TRAINER", (sys.executable, "-c",
                                             "import time; time.sleep(60)"))
    rc, _, err = _main(["train", "tst@latest", "--home", tmp_path, "--run-name", "r",
                        "--updates", 10, "--budget-s", 12, "--reserve-s", 10.5,
                        "--out", tmp_path / "out"])
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "the budget stopped the trainer" in err and "give a larger --budget-s" in err
    assert not (tmp_path / "out").exists()


def test_a_tarball_above_the_limit_is_not_written(flow, tmp_path):
    run = flow["dev"] / "runs" / "r"
    with pytest.raises(run_lib.RunCarryError, match="above the"):
        run_lib.pack_run(run, flow["dev"] / "offline_calls" / "r", tmp_path, 9, limit=100)
    assert list(tmp_path.iterdir()) == []


def test_bad_flags_are_one_line(tmp_path):
    base = ["train", "tst@latest", "--home", tmp_path, "--run-name", "r", "--updates", 10,
            "--out", tmp_path / "out"]
    rc, _, err = _main(base + ["--budget-s", 700])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "--budget-s 700" in err
    rc, _, err = _main(base + ["--budget-s", 100, "--", "--name", "x"])
    assert rc == 2 and "--name after --" in err
    rc, _, err = _main(["ingest", tmp_path / "nothere.tar.gz", "--home", tmp_path])
    assert rc == 2 and "no such file" in err


def test_the_trainer_gets_each_agents_paper_model_size_unless_given(tmp_path):
    """TD-MPC2 trains at size 5 and DreamerV3 at its preset's size (12m at ``paper``)
    unless --model-size says otherwise ('none': the preset's for either)."""
    def cmd(*flags):
        args = off.build_parser().parse_args(["train", "d@latest", "--home", str(tmp_path),
                                              "--run-name", "r", "--updates", "10",
                                              "--budget-s", "100", "--out", "o", *flags])
        args.ref, args.extra = "d@latest", []
        got = run_lib.trainer_command(args, tmp_path / "r", False)
        return got[got.index("--model-size") + 1] if "--model-size" in got else None
    assert cmd() == "5" and cmd("--model-size", "none") is None
    assert cmd("--agent", "dreamerv3") is None
    assert cmd("--agent", "dreamerv3", "--model-size", "25m") == "25m"
    assert cmd("--model-size", "1") == "1"


def test_the_batch_size_help_names_train_offlines_defaults(capsys):
    """TD-MPC2's offline batch is train_offline's 1024 at every preset (not the preset's:
    ``cpu`` has 256), DreamerV3's its preset's."""
    with pytest.raises(SystemExit):
        off.main(["train", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "TD-MPC2 1024 at any preset, DreamerV3 its preset's, 16 at paper" in text, text


def _pacer(**kw) -> run_lib.Pacer:
    p = run_lib.Pacer(started=0.0, stop_by=100.0, eval_s=20.0, log_every=10, eval_every=100,
                      updates=1000)
    for k, v in kw.items():
        setattr(p, k, v)
    return p


def test_pacer_stops_when_one_more_chunk_would_end_too_late():
    assert not _pacer().should_stop(99.0) and _pacer().should_stop(100.0)   # nothing seen
    p = _pacer(seen=[(10, 30.0), (20, 35.0), (30, 40.0)])                   # 5 s chunks
    assert p.chunk_s() == 5.0
    assert not p.should_stop(41.0)            # 40 + 5 + 5 < 100
    p.seen.append((80, 88.0))                 # 50 updates in 48 s: 9.6 s a chunk
    assert p.chunk_s() == 9.6
    assert p.should_stop(88.5)                # 90 ends ~97.6, 100 (an evaluation) past 100
    q = _pacer(seen=[(10, 40.0)])             # one row: its startup and compilation
    assert q.chunk_s() == 40.0 and q.should_stop(40.0)
    q.history_s = 4.0                         # earlier calls' chunks: 1.5 x theirs
    assert q.chunk_s() == 6.0 and not q.should_stop(40.0)
    last = _pacer(seen=[(990, 99.0)])         # the running chunk is the run's last
    assert not last.should_stop(150.0)


def test_train_reads_the_run_without_jax(flow):
    """`train` itself never imports JAX, which on the device could take the chip the
    trainer needs: its parser and its readings of the run's files in a fresh process."""
    code = ("import sys; sys.path[:0] = [sys.argv[1]]\n"
            "import mt19_offline, _mt19_offline_run as r\n"
            "from pathlib import Path\n"
            "mt19_offline.build_parser()\n"
            "run = Path(sys.argv[2])\n"
            "assert r.read_config(run) and r.newest_host(run)[0] and r.read_summary(run)\n"
            "assert r._metrics_max(run) == int(sys.argv[3])\n"
            "assert 'jax' not in sys.modules, sorted(sys.modules)\n")
    subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks"),
                    str(flow["dev"] / "runs" / "r"), str(N)], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
