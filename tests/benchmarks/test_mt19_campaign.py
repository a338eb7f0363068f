"""benchmarks/mt19_campaign.py at tiny settings: the tiny online run's config on probe-action
(tests/tiny_runs.py, so its programs compile once per session) stands in for the paper's
runs. status on an empty home and on a home with a finished run; next stopped by its budget
after one chunk and resumed by the next call, ending identical in metrics and episode sets to
the uninterrupted run; the bundle (whole and in parts); ingest into a store (verified, all or
nothing, a damaged bundle refused in one line with nothing written); the record's schema; the
env steps of a new run fitted to the device time between the task's floor and aim (a fixed
--target or --env-steps never), a fitted run resumed and counted done."""
import csv
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _mt19_bundle as bundle_lib  # noqa: E402
import _mt19_next as next_lib  # noqa: E402
import _mt19_plan as plan_lib  # noqa: E402
import _mt19_record as record_lib  # noqa: E402
import _mt19_tasks as tasks_lib  # noqa: E402
import mt19_campaign as camp  # noqa: E402

from tiny_runs import TINY_RC  # noqa: E402
from wmx.datasets.store import Store  # noqa: E402
from wmx.runs.listing import FINISHED, read_run  # noqa: E402

TINY = ["--tasks", "probe-action", "--preset", "tiny", "--seeds", "0", "3", "--env-steps", "120",
        "--checkpoint-every", "1", "--eval-every", "40", "--eval-episodes", "2",
        "--set", "seed_steps=40"]
"""The campaign flags whose run is TINY_RC (asserted below)."""
TINY_AIMED = TINY[:TINY.index("--env-steps")] + TINY[TINY.index("--env-steps") + 2:]
"""TINY without its fixed --env-steps: probe-action's env steps are the table's aim, fitted."""


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def _next(tmp: Path, out: str, *flags: str) -> tuple[int, dict]:
    rc = camp.main(["next", *TINY, "--home", str(tmp / "h"), "--out", str(tmp / out),
                    "--results", str(tmp / "results"), "--reserve-s", "0", "--min-start-s", "0",
                    *flags])
    call = tmp / out / camp.CALL_FILE
    return rc, (json.loads(call.read_text()) if call.is_file() else {})


@pytest.fixture(scope="module")
def calls(tiny_online_run, tmp_path_factory):
    """Two `next` calls of the tiny campaign: the first past its budget at once (one chunk),
    the second resuming to the end; between them a call with other settings, refused."""
    tmp = tmp_path_factory.mktemp("mt19")
    first = _next(tmp, "out1", "--budget-s", "0.001")      # past it at once: one chunk
    before = (tmp / "h" / "runs").iterdir().__next__()
    ckpts = sorted(p.name for p in (before / "checkpoints").iterdir())
    other = camp.main(["next", *TINY[:-4], "--eval-episodes", "3", "--set", "seed_steps=40",
                       "--home", str(tmp / "h"), "--out", str(tmp / "other"),
                       "--budget-s", "100", "--min-start-s", "0",
                       "--results", str(tmp / "results")])
    second = _next(tmp, "out2", "--budget-s", "570")
    third = _next(tmp, "out3", "--budget-s", "570")
    return tmp, tiny_online_run, first, ckpts, other, second, third


def test_the_campaign_run_is_the_tiny_run():
    args = camp.build_parser().parse_args(["status", *TINY])
    assert camp.campaign_of(args).run_config("probe-action") == TINY_RC


def test_status_on_an_empty_home(tmp_path, capsys):
    assert camp.main(["status", "--home", str(tmp_path / "h"), "--results",
                      str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    lines = [ln.split()[0] for ln in out.splitlines()[2:21]]
    from wmx.schemas.taskset import mt19
    assert lines == list(mt19().names)                     # mt30 order, every task
    assert "0/19 tasks done" in out and "next piece: walker-stand: new run to 100,000" in out
    hop = next(ln for ln in out.splitlines() if ln.startswith("hopper-hop"))
    assert hop.split()[1:4] == ["200,000", "(100,000)", "todo"]              # aim (floor)
    assert hop.endswith("new run to 200,000 (at least 100,000 as device time allows)")
    walker = next(ln for ln in out.splitlines() if ln.startswith("walker-walk"))
    assert walker.split()[1:3] == ["100,000", "todo"] and walker.endswith("new run to 100,000")
    assert "WMX_CODE_VERSION=" in out and not (tmp_path / "h").exists()   # nothing written


def test_status_on_a_home_with_a_finished_run(tiny_online_run, tmp_path, capsys):
    home, store, run_dir, summary = tiny_online_run
    assert camp.main(["status", *TINY, "--home", str(home), "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("probe-action"))
    hashes = [Path(p).name[:10] for _, p in sorted(summary["episode_sets"].items(),
                                                   key=lambda kv: int(kv[0]))]
    assert ",".join(hashes) in row and f" {run_dir.name} " in row and "0 3" in row
    assert " 120 " in row and " 6 " in row and "todo" in row     # not a campaign run
    assert "new run to 120" in row


def test_next_stops_at_its_budget_and_the_next_call_resumes_exactly(calls):
    tmp, (home, store, run_dir, summary), first, ckpts, other, second, third = calls
    rc1, call1 = first
    assert rc1 == 0 and [p["action"] for p in call1["pieces"]] == ["new"]
    p1 = call1["pieces"][0]
    assert (p1["stop"], p1["finished"], p1["env_steps_to"]) == ("budget", False, 20)
    assert ckpts == ["000000000021"]                        # one round, checkpointed
    assert call1["bundles"] == [] and "within 100 s" in call1["next"]["how"]
    assert other == 2                                       # other settings: refused
    rc2, call2 = second
    assert rc2 == 0 and [p["action"] for p in call2["pieces"]] == ["resume"]
    assert call2["pieces"][0]["finished"] and call2["pieces"][0]["env_steps_from"] == 20
    timing = call2["pieces"][0]["timing"]
    evals = [r for r in _metrics(run_dir) if r["kind"] == "eval" and r["seed"] == "0"]
    assert len(timing["evals_s"]) == len(evals) == 3 and min(timing["evals_s"]) >= 0
    assert {"compile_s", "compiles", "trace_s", "lower_s", "cache_hits", "cache_misses",
            "cache_load_s", "longest"} <= set(timing["compile"])
    run = tmp / "h" / "runs" / call2["pieces"][0]["run"]
    assert _metrics(run) == _metrics(run_dir)              # as the uninterrupted run
    mine = json.loads((run / "summary.json").read_text())["episode_sets"]
    assert {k: Path(v).name for k, v in mine.items()} == \
        {k: Path(v).name for k, v in summary["episode_sets"].items()}
    assert call2["code_version"] and "H" in call2["command"].split() and "/" not in \
        call2["command"].replace("benchmarks/mt19_campaign.py", "")
    rc3, call3 = third                                      # nothing left to do
    assert rc3 == 0 and call3["pieces"] == [] and call3["bundles"] == []
    assert call3["next"]["what"] == "every task of the campaign is done"


def test_the_bundle_holds_the_run_and_its_sets(calls):
    tmp, *_, second, _ = calls
    call2 = second[1]
    (b,) = call2["bundles"]
    assert [f["name"] for f in b["files"]] == ["probe-action.tar.gz"]
    with tarfile.open(tmp / "out2" / "probe-action.tar.gz") as tf:
        names = sorted(tf.getnames())
    run = b["run"]
    sets = sorted(n for n in names if n.startswith("episodes/"))
    assert [n for n in names if n.startswith("runs/")] == [
        f"runs/{run}/{f}" for f in ("config.json", "metrics.csv", "summary.json")]
    assert len(sets) == 4 and all(n.split("/")[1] == "probe-action" for n in sets)
    assert f"campaign/{run}.json" in names and len(names) == 3 + 4 + 1
    # cut into parts, the same bundle comes back
    parts = bundle_lib.pack(tmp / "h", tmp / "h" / "runs" / run, {"calls": []},
                            tmp / "parts", "probe-action", part_bytes=4096)
    assert len(parts) > 2 and all(p.stat().st_size <= 4096 for p in parts)
    (bundle,) = bundle_lib.read_bundles([tmp / "parts"])
    with bundle_lib.staging(tmp / "scratch") as scratch:
        u = bundle_lib.unpack(bundle, scratch)
        assert u.run == run and sorted(u.sets) == [0, 3]
    parts[1].unlink()
    with pytest.raises(bundle_lib.BundleError, match="without a gap"):
        bundle_lib.read_bundles([tmp / "parts"])


def test_ingest_round_trip(calls, tmp_path, capsys):
    tmp, (home, store, run_dir, summary), *_, second, _ = calls
    local, results = tmp_path / "local", tmp_path / "results"
    argv = ["ingest", str(tmp / "out2"), *TINY, "--home", str(local), "--results", str(results)]
    assert camp.main(argv) == 0
    run = second[1]["bundles"][0]["run"]
    info = read_run(local / "runs" / run)
    assert info.status == FINISHED and info.done == 120
    want = {Path(p).name for p in summary["episode_sets"].values()}
    assert {e.content_hash for e in Store(local).list_episode_sets("probe-action")} == want
    from wmx.episode_sets.episode_set import verify_episode_set
    ingested = json.loads((local / "runs" / run / "summary.json").read_text())
    assert all(Path(p).parent.parent == local / "episodes" and verify_episode_set(p) == []
               for p in ingested["episode_sets"].values())
    rec = json.loads((results / record_lib.FILE).read_text())
    assert record_lib.check(rec) == []
    e = rec["tasks"]["probe-action"]
    last = {}
    for r in _metrics(run_dir):
        if r["kind"] == "eval":
            last[r["seed"]] = float(r["return"])
    assert e["final_return"] == last and e["seeds"] == [0, 3] and e["done"]
    assert e["eval_curve"]["env_steps"] == [40, 80, 120] and e["run"] == f"runs/{run}"
    assert {s["content_hash"] for s in e["episode_sets"]} == want
    assert e["command"].startswith("train_online --agent tdmpc2 --task probe-action")
    assert len(e["calls"]) == 2 and e["chip"].startswith("cpu")
    assert (results / record_lib.PLOT).stat().st_size > 10_000
    capsys.readouterr()
    assert camp.main(argv) == 0                             # again: nothing new, same record
    assert "(0 new)" in capsys.readouterr().out
    assert json.loads((results / record_lib.FILE).read_text())["tasks"]["probe-action"][
        "run"] == f"runs/{run}"


def test_build_names_exactly_the_recorded_sets(calls, tmp_path, capsys):
    tmp, (home, store, run_dir, summary), *_ = calls
    local, results = tmp_path / "local", tmp_path / "results"
    assert camp.main(["ingest", str(tmp / "out2"), *TINY, "--home", str(local), "--results",
                      str(results)]) == 0
    sets = json.loads((results / record_lib.FILE).read_text())["tasks"]["probe-action"][
        "episode_sets"]
    ids = [f"probe-action/{e['content_hash'][:12]}" for e in sets]
    capsys.readouterr()
    build = ["build", "--tasks", "probe-action", "--home", str(local)]
    assert camp.main([*build, "--results", str(results)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split() == ["beam", "run", "pipelines/build_mt19.py", "--home", str(local),
                              "--tasks", "probe-action", "--sources", *ids]
    assert out[0] == "# the 1 recorded task (12 episodes), pooling exactly its recorded " \
        "episode sets"
    assert camp.main(["status", *TINY, "--home", str(local), "--results", str(results)]) == 0
    assert "the dataset's build command: python benchmarks/mt19_campaign.py build --home " \
        f"{local} --results {results} --tasks probe-action" in capsys.readouterr().out
    # another set of the task in the data root (a prefix of a recorded one, as an offline
    # check's run@N makes): left out, said
    from wmx.episode_sets.episode_set import write_prefix_set
    st = Store(local)
    prefix = write_prefix_set(st, next(p for p in (local / "episodes" / "probe-action").iterdir()
                                       if p.name == sets[0]["content_hash"]), 1)
    assert camp.main([*build, "--results", str(results)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[-3:] == ["--sources", *ids]
    assert f"1 other set of these tasks in the data root left out: {prefix.name[:12]})" in out[0]
    # a data root without the recorded sets, and no record: one line each, exit 2
    assert camp.main(["build", "--tasks", "probe-action", "--home", str(tmp_path / "empty"),
                      "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "recorded episode sets of probe-action are not in" in err[0]
    assert "next --regenerate probe-action" in err[0]
    assert camp.main(["build", "--tasks", "probe-action", "--home", str(local), "--results",
                      str(tmp_path / "none")]) == 2
    assert "no task recorded" in capsys.readouterr().err
    assert camp.main([*build, "--results", str(results), "--seeds", "0"]) == 2   # a run flag
    assert "--seeds: build reads the record" in capsys.readouterr().err


def _tamper_record(src: Path, dst: Path) -> None:
    """Re-pack ``src`` with one byte of an episode file changed (gzip intact)."""
    with tarfile.open(src) as tf, tarfile.open(dst, "w:gz") as out:
        for m in tf.getmembers():
            data = tf.extractfile(m).read()
            if m.name.endswith(".array_record"):
                data = data[:1000] + bytes([data[1000] ^ 1]) + data[1001:]
            out.addfile(m, io.BytesIO(data))


@pytest.mark.parametrize("damage", ["flipped byte", "edited record"])
def test_a_damaged_bundle_is_refused_with_nothing_written(calls, tmp_path, capsys, damage):
    tmp, *_ = calls
    bad = tmp_path / "bad"
    bad.mkdir()
    src = tmp / "out2" / "probe-action.tar.gz"
    if damage == "flipped byte":
        data = bytearray(src.read_bytes())
        data[len(data) // 2] ^= 0xFF
        (bad / src.name).write_bytes(bytes(data))
    else:
        _tamper_record(src, bad / src.name)
    local, results = tmp_path / "local", tmp_path / "results"
    assert camp.main(["ingest", str(bad), *TINY, "--home", str(local),
                      "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "probe-action.tar.gz" in err
    assert ("damaged" in err) if damage == "flipped byte" else ("sha256" in err)
    assert not (results / record_lib.FILE).exists()
    leftover = [p for p in local.rglob("*") if p.is_file() or p.name.startswith(".")]
    assert leftover == [] and list((local / "runs").iterdir()) == []


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    base = ["--home", str(tmp_path / "h"), "--out", str(tmp_path / "o")]
    for argv, said in [
            (["next", *base, "--budget-s", "900"], "--budget-s 900"),
            (["next", *TINY, *base, "--budget-s", "60", "--task", "walker-walk"],
             "--task walker-walk"),
            (["plan", "--target", "walker-walk=lots"], "--target walker-walk=lots"),
            (["status", "--tasks", "walker-wlak"], "walker-wlak"),
            (["ingest", str(tmp_path / "nowhere"), "--home", str(tmp_path / "h")],
             "no such file or folder")]:
        assert camp.main(argv) == 2, argv
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err, err
    import wmx.version
    monkeypatch.setattr(wmx.version, "code_version", lambda: "unknown")
    assert camp.main(["next", *TINY, *base, "--budget-s", "60"]) == 2
    assert "WMX_CODE_VERSION=" in capsys.readouterr().err
    assert not (tmp_path / "h").exists()


def test_an_os_error_is_one_line_and_a_failed_plot_leaves_no_temporary(tmp_path, capsys,
                                                                        monkeypatch):
    """A full disk while ingest writes is one line and exit 2, not a traceback; the plot's
    temporary is removed when the drawing fails."""
    import wmx.evaluate.plots as plots

    def full(*a, **k):
        raise OSError(28, "No space left on device", str(tmp_path / "r"))
    monkeypatch.setattr(camp, "cmd_ingest", full)
    assert camp.main(["ingest", "--home", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "No space left on device" in err, err
    monkeypatch.undo()

    def broken(panels, path, *a, **k):
        Path(path).write_bytes(b"half a png")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(plots, "learning_curves", broken)
    with pytest.raises(OSError):
        record_lib.plot(record_lib.empty({}, 100_000, []), ["walker-walk"],
                        tmp_path / record_lib.PLOT)
    assert list(tmp_path.iterdir()) == []


def test_next_starts_nothing_that_does_not_fit_the_device_time_left(tmp_path, capsys):
    assert camp.main(["next", *TINY, "--home", str(tmp_path / "h"), "--out", str(tmp_path / "o"),
                      "--budget-s", "500", "--device-left-s", "60",
                      "--results", str(tmp_path)]) == 0
    call = json.loads((tmp_path / "o" / camp.CALL_FILE).read_text())
    assert call["pieces"] == [] and "no task left fits the 1.0 device minutes" in \
        call["next"]["what"]
    assert list((tmp_path / "h" / "runs").iterdir()) == []


def test_plan(tmp_path, capsys):
    assert camp.main(["plan", "--home", str(tmp_path), "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    walker = next(r for r in out.splitlines() if r.startswith("walker-walk"))
    assert walker.split()[1:5] == ["100,000", "9.8", "2", "15.7"]       # 100k / 170 per s
    # the three walker runs (15.7 device minutes each, 2.0 of machine start) open sessions
    # 1-3: two do not fit one. 100k / 302 per s is one call (40 s start-up, 120 s compile,
    # 331 s training, 30 s finish: 8.7 minutes) and 0.3 more for the gap before it: cheetah-
    # run, reacher-easy and reacher-hard each fill the session a walker run opened
    # (2.0 + 15.7 + 9.0 = 26.7 of 30), as next fills it
    rows = {r.split()[0]: r.split() for r in out.splitlines()[2:] if r and r[0].isalpha()}
    assert [rows[t][-1] for t in ("walker-stand", "walker-walk", "walker-run")] == \
        ["1", "2", "3"]
    assert rows["cheetah-run"][1:7] == ["100,000", "5.5", "1", "9.0", "8.7", "1"]
    assert rows["reacher-easy"][1:7] == ["100,000", "5.5", "1", "9.0", "3.5", "2"]
    assert rows["reacher-hard"][1:7] == ["100,000", "5.5", "1", "9.0", "3.5", "3"]
    # its aim of 200k at 160 per s (20.8 training minutes, four calls: 32.2 device minutes)
    # exceeds a session; 180k is the largest multiple of 10k that fits a fresh one (three
    # calls, 27.4 device minutes + 2.0 machine start of 30), 190k would need four
    acrobot = next(r for r in out.splitlines() if r.startswith("acrobot-swingup"))
    assert acrobot.split()[1:8] == ["200,000", "->", "180,000", "18.8", "3", "27.4", "5.6"]
    assert acrobot.split()[-1] == "4"
    assert "DOES NOT FIT" not in out
    assert "to do: 19 task(s), 5 fitted below their aim, 342 device minutes in 16 session(s)" \
        in out
    # what each session leaves: 30 - 26.7 in the first three, 30 - 2.0 - 27.4 in acrobot's
    # (the 4th), and 30 - 2.0 - 16.3 where a 160-per-s task of two calls runs alone (5th)
    left = next(ln for ln in out.splitlines() if ln.startswith("device minutes each"))
    assert left.split(": ", 1)[1].split(", ")[:5] == ["1: 3.3", "2: 3.3", "3: 3.3", "4: 0.6",
                                                      "5: 11.7"]
    assert len(left.split(", ")) == 16
    # a fixed --target is never fitted: it does not fit
    assert camp.main(["plan", "--home", str(tmp_path), "--results", str(tmp_path),
                      "--target", "acrobot-swingup=200000"]) == 0
    out = capsys.readouterr().out
    acrobot = next(r for r in out.splitlines() if r.startswith("acrobot-swingup"))
    assert acrobot.split()[1:5] == ["200,000", "20.8", "4", "32.2"]
    assert acrobot.endswith("4: DOES NOT FIT ONE SESSION") and "4 fitted below" in out
    # at 80 per s not even the floor fits: planned at the floor, said
    assert camp.main(["plan", "--home", str(tmp_path), "--results", str(tmp_path),
                      "--sps", "80"]) == 0
    out = capsys.readouterr().out
    acrobot = next(r for r in out.splitlines() if r.startswith("acrobot-swingup"))
    assert acrobot.split()[1:4] == ["200,000", "->", "100,000"]
    assert acrobot.endswith("DOES NOT FIT ONE SESSION")
    assert camp.main(["plan", "--home", str(tmp_path), "--results", str(tmp_path),
                      "--sps", "166", "--compile-s", "90", "--cached-compile-s", "80"]) == 0
    out = capsys.readouterr().out
    rows = [ln for ln in out.splitlines() if ln.split()[:1] and ln.split()[0] in
            camp.campaign_of(camp.build_parser().parse_args(["plan"])).tasks]
    assert len(rows) == 19
    walker = next(r for r in rows if r.startswith("walker-walk"))
    assert walker.split()[1:5] == ["100,000", "10.0", "2", "15.8"]      # 100k / 166 per s
    acrobot = next(r for r in rows if r.startswith("acrobot-swingup"))
    assert acrobot.split()[1:4] == ["200,000", "->", "180,000"]  # 200k at 90 s per compile
    assert "DOES NOT FIT" not in out and "in 19 session(s)" in out
    assert camp.main(["plan", "--home", str(tmp_path), "--results", str(tmp_path),
                      "--sps", "166", "--compile-s", "90",
                      "--cached-compile-s", "20", "--budget-s", "570", "--reserve-s", "30"]) == 0
    out = capsys.readouterr().out
    acrobot = next(r for r in out.splitlines() if r.startswith("acrobot-swingup"))
    assert acrobot.split()[1:3] == ["200,000", "20.1"]                  # the aim fits
    assert "0 fitted below their aim" in out and "in 19 session(s)" in out
    args = camp.build_parser().parse_args(["plan", "--budget-s", "60"])   # no time to train
    assert plan_lib.run_cost(10.0, plan_lib.Clock(None, 0.0), args)[0] == \
        float("inf")
    assert camp.main(["plan", "--budget-s", "60", "--home", str(tmp_path)]) == 2
    assert "leaves no time to train" in capsys.readouterr().err


def test_record_schema(calls, tmp_path):
    committed = ROOT / "benchmarks" / "results" / record_lib.FILE
    assert record_lib.check(json.loads(committed.read_text())) == []
    tmp, *_ = calls
    camp.main(["ingest", str(tmp / "out2"), *TINY, "--home", str(tmp_path / "h"),
               "--results", str(tmp_path)])
    rec = json.loads((tmp_path / record_lib.FILE).read_text())
    e = rec["tasks"]["probe-action"]
    for broken, said in [({**e, "seeds": [0]}, "episode sets of seeds"),
                         ({k: v for k, v in e.items() if k != "chip"}, "lacks ['chip']"),
                         ({**e, "done": False}, "done disagrees"),
                         ({**e, "floor_env_steps": e["target_env_steps"] + 1},
                          "floor_env_steps is above"),
                         ({**e, "floor_env_steps": 1.5}, "['floor_env_steps'] has the wrong"),
                         ({**e, "eval_curve": {"env_steps": [40], "returns": {"0": [1.0]}}},
                          "eval_curve")]:
        problems = record_lib.check({**rec, "tasks": {"probe-action": broken}})
        assert any(said in p for p in problems), (said, problems)
    assert record_lib.check({**rec, "schema": "x"}) == [f"schema is not {record_lib.SCHEMA!r}"]
    # a source fitted below its aim is done at its floor, not below it
    fitted = {**e, "target_env_steps": 200, "floor_env_steps": 100, "env_steps": 120,
              "done": True}
    assert record_lib.check({**rec, "tasks": {"probe-action": fitted}}) == []
    short = {**fitted, "floor_env_steps": 160}
    assert any("done disagrees" in p for p in record_lib.check(
        {**rec, "tasks": {"probe-action": short}}))
    assert record_lib.check({**rec, "tasks": {"probe-action": {**short, "done": False}}}) == []


def _model(*flags: str):
    """(campaign, the plan model's flags) of a ``next`` command line; the model's figures
    pinned (160 env steps/s per seed, 180 s compile, 110 s cached), not the measured
    defaults, so that the arithmetic below stays the tests' own."""
    args = camp.build_parser().parse_args(["next", "--home", "h", "--out", "o", "--budget-s",
                                           "540", "--sps", "160", "--compile-s", "180",
                                           "--cached-compile-s", "110", *flags])
    return camp.campaign_of(args), args


def test_choose_fits_a_new_run_to_the_device_time_left(tmp_path):
    campaign, args = _model("--tasks", "acrobot-swingup,walker-stand")
    assert campaign.sizes("acrobot-swingup") == list(range(200_000, 90_000, -10_000))
    assert (campaign.floor("acrobot-swingup"), campaign.fixed("acrobot-swingup")) == \
        (100_000, False)
    states = camp.read_state(tmp_path, campaign, None)

    def chosen(left, task=None, c=campaign, st=states):
        s, n, why = next_lib.choose(st, c, task, left, 0.0, args)
        return (s.task if s else None), n, why
    # the model (call open at 0 s, 180 s compile, 110 s cached): 200k needs 2105 s, 160k
    # 1640, 150k 1577.5, 130k 1452.5, 100k 1050
    assert chosen(None)[:2] == ("acrobot-swingup", 200_000)        # not checked: the aim
    assert chosen(2105)[:2] == ("acrobot-swingup", 200_000)
    assert chosen(1800)[:2] == ("acrobot-swingup", 160_000)
    assert chosen(1577.5)[:2] == ("acrobot-swingup", 150_000)
    # below the 150k a fresh session gives it (plan's size), acrobot waits for one: the
    # part-used session goes to walker-stand, whose whole 100k run fits (1050 s)
    assert chosen(1577.4)[:2] == ("walker-stand", 100_000)
    assert chosen(1050)[:2] == ("walker-stand", 100_000)
    assert chosen(1500, "acrobot-swingup")[:2] == ("acrobot-swingup", 130_000)   # --task: fitted
    alone = _model("--tasks", "acrobot-swingup")[0]
    only = camp.read_state(tmp_path, alone, None)
    assert next_lib.choose(only, alone, None, 1577.5, 0.0, args)[1] == 150_000
    s, n, why = next_lib.choose(only, alone, None, 1050, 0.0, args)   # its floor fits, but
    assert (s, n) == (None, 0) and "acrobot-swingup would train to 100,000 env steps " \
        "now, 150,000 in a fresh session" in why
    task, n, why = chosen(1049)
    assert (task, n) == (None, 0) and "shortest floor needs 17.5" in why
    # a table aim recorded at a fitted 140k is done (its floor is 100k); the next is walker
    rec = {"tasks": {"acrobot-swingup": {"env_steps": 140_000}}}
    done = camp.read_state(tmp_path, campaign, rec)
    assert done[0].done and done[0].next_text() == "-"
    assert chosen(1800, st=done)[:2] == ("walker-stand", 100_000)
    short = camp.read_state(tmp_path, campaign, {"tasks": {"acrobot-swingup":
                                                          {"env_steps": 90_000}}})
    assert not short[0].done
    assert short[0].next_text(150_000) == "new run to 150,000 (fitted; aim 200,000) " \
        "(has 90,000)"


@pytest.mark.parametrize("fixed", [["--target", "acrobot-swingup=200000"],
                                   ["--env-steps", "200000"]])
def test_a_fixed_target_is_never_fitted(tmp_path, fixed):
    campaign, args = _model("--tasks", "acrobot-swingup,walker-stand", *fixed)
    assert campaign.fixed("acrobot-swingup") and campaign.floor("acrobot-swingup") == 200_000
    assert campaign.sizes("acrobot-swingup") == [200_000]
    states = camp.read_state(tmp_path, campaign, None)
    assert states[0].next_text() == "new run to 200,000"
    s, n, _ = next_lib.choose(states, campaign, None, None, 0.0, args)
    assert (s.task, n) == ("acrobot-swingup", 200_000)
    s, n, why = next_lib.choose(states, campaign, None, 1800, 0.0, args)
    if "--env-steps" in fixed:                       # walker-stand's 200k does not fit either
        assert s is None and "shortest floor needs 35.1" in why
    else:                                            # skipped: the next task that fits
        assert (s.task, n) == ("walker-stand", 100_000)
    s, n, why = next_lib.choose(states, campaign, "acrobot-swingup", 1800, 0.0, args)
    assert s is None and "no run of it fits" in why and "35.1" in why
    # recorded at a fitted 140k: not done for a fixed 200k
    rec = camp.read_state(tmp_path, campaign, {"tasks": {"acrobot-swingup":
                                                        {"env_steps": 140_000}}})
    assert not rec[0].done


def test_a_run_fitted_to_the_device_time_resumes_and_counts_as_done(tiny_online_run, tmp_path,
                                                                    monkeypatch, capsys):
    """probe-action aimed at 160 env steps, floor 80, steps of 40; the model's cost stood in
    by env steps / --sps (1): with 130 device seconds left, all a fresh session has, a new run
    is fitted to 120 (TINY_RC's config), stopped after one chunk, resumed by the next call to the end, packed and done."""
    home, store, run_dir, summary = tiny_online_run
    monkeypatch.setattr(tasks_lib, "TARGETS", {"probe-action": 160})
    monkeypatch.setattr(tasks_lib, "FLOOR", 80)
    monkeypatch.setattr(tasks_lib, "FIT_STEP", 40)
    monkeypatch.setattr(plan_lib, "run_cost", lambda train_s, clock, args: (
        train_s, 1, plan_lib.Clock(clock.call_t, clock.session_used + train_s)))
    h, results = tmp_path / "h", tmp_path / "results"

    def call(out, *flags, aimed=TINY_AIMED):
        rc = camp.main(["next", *aimed, "--home", str(h), "--out", str(tmp_path / out),
                        "--results", str(results), "--reserve-s", "0", "--min-start-s", "0",
                        "--sps", "1", "--device-left-s", "130", "--session-s", "250",
                        *flags])                    # a fresh session: 120 s start + 130
        path = tmp_path / out / camp.CALL_FILE
        return rc, (json.loads(path.read_text()) if path.is_file() else {})
    rc1, call1 = call("out1", "--budget-s", "0.001")
    assert rc1 == 0
    (p1,) = call1["pieces"]
    assert (p1["action"], p1["total_env_steps"], p1["aim_env_steps"], p1["fitted"]) == \
        ("new", 120, 160, True)
    assert (p1["env_steps_to"], p1["finished"]) == (20, False)
    assert (call1["next"]["env_steps"], call1["next"]["fitted"]) == (120, True)
    (run,) = (h / "runs").iterdir()
    assert camp.campaign_of(camp.build_parser().parse_args(["status", *TINY_AIMED])).run_config(
        "probe-action", 120) == TINY_RC
    assert json.loads((run / "config.json").read_text())["env_steps"] == 120
    # the campaign at a fixed 160 does not take the fitted run as its own
    capsys.readouterr()
    rc, _ = call("other", "--budget-s", "100", aimed=[*TINY_AIMED, "--env-steps", "160"])
    err = capsys.readouterr().err
    assert rc == 2 and "other settings (" in err and "env_steps" in err
    rc2, call2 = call("out2", "--budget-s", "570")       # its run at its own 120: no error
    assert rc2 == 0 and [p["action"] for p in call2["pieces"]] == ["resume"]
    p2 = call2["pieces"][0]
    assert (p2["env_steps_from"], p2["env_steps_to"], p2["finished"], p2["fitted"]) == \
        (20, 120, True, True)
    assert _metrics(run) == _metrics(run_dir)             # as the uninterrupted tiny run
    assert [b["task"] for b in call2["bundles"]] == ["probe-action"]
    assert call2["next"]["what"] == "every task of the campaign is done"
    campaign = camp.campaign_of(camp.build_parser().parse_args(["status", *TINY_AIMED]))
    (state,) = camp.read_state(h, campaign, None)
    assert state.done and state.finished_run().name == run.name     # 120 >= floor 80
    monkeypatch.setattr(tasks_lib, "FLOOR", 160)                    # a floor above it: not
    (state,) = camp.read_state(h, campaign, None)
    assert not state.done and state.finished_run() is None
    monkeypatch.setattr(tasks_lib, "FLOOR", 80)
    # ingested: recorded at 120 of an aim of 160, done at its floor of 80
    assert camp.main(["ingest", str(tmp_path / "out2"), *TINY_AIMED, "--home",
                      str(tmp_path / "local"), "--results", str(results)]) == 0
    rec = json.loads((results / record_lib.FILE).read_text())
    e = rec["tasks"]["probe-action"]
    assert (e["env_steps"], e["target_env_steps"], e["floor_env_steps"], e["done"]) == \
        (120, 160, 80, True)
    assert record_lib.check(rec) == [] and "--env-steps 120" in e["command"]


def test_a_run_that_cannot_finish_in_the_session_ends_early_and_regenerates_so(
        tiny_online_run, tmp_path, monkeypatch, capsys):
    """probe-action aimed at 160, floor 80, steps of 40; the cost stood in by env steps /
    --sps (1). A run fitted to 120 stops after one chunk (20); the next call has 70 device
    seconds left: its 100 env steps left do not fit, 80 does (60), so it ends at 80
    (train_online's end_env_steps), finishes there, is packed and ingested as a source of 80
    (done at its floor), its command with --end-env-steps; and --regenerate trains it again
    to the same end, with the same episode sets."""
    home, store, run_dir, summary = tiny_online_run
    monkeypatch.setattr(tasks_lib, "TARGETS", {"probe-action": 160})
    monkeypatch.setattr(tasks_lib, "FLOOR", 80)
    monkeypatch.setattr(tasks_lib, "FIT_STEP", 40)
    monkeypatch.setattr(next_lib, "FIT_STEP", 40)

    def cost(train_s, clock, args):
        return train_s, 1, plan_lib.Clock(clock.call_t, clock.session_used + train_s)
    monkeypatch.setattr(plan_lib, "run_cost", cost)
    h, results = tmp_path / "h", tmp_path / "results"

    def call(out, left, *flags, home=h):
        assert camp.main(["next", *TINY_AIMED, "--home", str(home), "--out", str(tmp_path / out),
                          "--results", str(results), "--reserve-s", "0", "--min-start-s", "0",
                          "--sps", "1", "--device-left-s", str(left), "--session-s", "250",
                          *flags]) == 0
        return json.loads((tmp_path / out / camp.CALL_FILE).read_text())
    (p1,) = call("out1", 130, "--budget-s", "0.001")["pieces"]
    assert (p1["total_env_steps"], p1["env_steps_to"], p1["finished"]) == (120, 20, False)
    capsys.readouterr()
    call2 = call("out2", 70, "--budget-s", "570")
    (warning,) = call2["warnings"]
    assert "has 100 of 120 env steps left, about 1.7 device minutes at 1 env steps/s per " \
        "seed, and 1.2 are left: ended early at 80 env steps" in warning
    assert f"warning: {warning}" in capsys.readouterr().out
    (p2,) = call2["pieces"]
    assert (p2["action"], p2["total_env_steps"], p2["env_steps_to"], p2["finished"],
            p2["fitted"]) == ("resume", 80, 80, True, True)
    run = h / "runs" / p2["run"]
    assert [r for r in _metrics(run)] == [r for r in _metrics(run_dir)
                                         if int(r["env_steps"]) <= 80]
    assert [b["task"] for b in call2["bundles"]] == ["probe-action"]
    assert camp.main(["ingest", str(tmp_path / "out2"), *TINY_AIMED, "--home",
                      str(tmp_path / "local"), "--results", str(results)]) == 0
    e = json.loads((results / record_lib.FILE).read_text())["tasks"]["probe-action"]
    assert (e["env_steps"], e["done"]) == (80, True)
    assert "--env-steps 120" in e["command"] and "--end-env-steps 80" in e["command"]
    # trained again on a fresh home: sized for 120, ended at 80, the same sets; priced at
    # the 80 it trains (100 device seconds fit 80, not 120)
    call3 = call("out3", 100, "--budget-s", "570", "--regenerate", "probe-action",
                 home=tmp_path / "h2")
    (p3,) = call3["pieces"]
    assert (p3["action"], p3["total_env_steps"], p3["finished"], p3["regenerate"]) == \
        ("new", 80, True, True)
    cfg = json.loads((tmp_path / "h2" / "runs" / p3["run"] / "config.json").read_text())
    assert (cfg["env_steps"], cfg["end_env_steps"]) == (120, 80)
    assert camp.main(["ingest", str(tmp_path / "out3"), *TINY_AIMED, "--home",
                      str(tmp_path / "local"), "--results", str(results)]) == 0
    (ev,) = json.loads((results / record_lib.FILE).read_text())["tasks"]["probe-action"][
        "regenerations"]
    assert ev["identical"]


def test_a_data_root_that_lost_the_sets_regenerates_them(calls, tmp_path, capsys):
    """Recorded in one data root, the sets missing in another: status says so and prints
    --regenerate; next --regenerate trains the recorded run again on a fresh device home
    (then nothing: every task done); ingest finds the same episode sets (the run is
    deterministic here) and keeps the entry; a record naming other sets is replaced, the
    recorded run kept under regenerations."""
    tmp, *_ = calls
    results, first = tmp_path / "results", tmp_path / "first"
    assert camp.main(["ingest", str(tmp / "out2"), *TINY, "--home", str(first),
                      "--results", str(results)]) == 0
    recorded = json.loads((results / record_lib.FILE).read_text())["tasks"]["probe-action"]
    capsys.readouterr()
    lost = tmp_path / "lost"                            # a new machine: the record, no sets
    assert camp.main(["status", *TINY, "--home", str(lost), "--results", str(results)]) == 0
    out = capsys.readouterr().out
    assert "done; sets missing" in out and "--regenerate probe-action" in out
    assert "regenerate (next --regenerate): new run to 120" in out
    dev = ["next", *TINY, "--home", str(tmp_path / "h"), "--results", str(results),
           "--reserve-s", "0", "--min-start-s", "0", "--budget-s", "570"]
    assert camp.main([*dev, "--out", str(tmp_path / "o1"), "--regenerate", "probe-action"]) == 0
    call = json.loads((tmp_path / "o1" / camp.CALL_FILE).read_text())
    (p,) = call["pieces"]
    assert (p["action"], p["regenerate"], p["finished"], p["env_steps_to"]) == \
        ("new", True, True, 120)
    assert [b["task"] for b in call["bundles"]] == ["probe-action"]
    assert call["next"]["what"] == "every task of the campaign is done"
    assert camp.main([*dev, "--out", str(tmp_path / "o2"), "--regenerate", "probe-action"]) == 0
    assert json.loads((tmp_path / "o2" / camp.CALL_FILE).read_text())["pieces"] == []
    other = tmp_path / "results_other"                 # a record naming other sets
    other.mkdir()
    rec = json.loads((results / record_lib.FILE).read_text())
    rec["tasks"]["probe-action"]["episode_sets"][0]["content_hash"] = "0" * 64
    (other / record_lib.FILE).write_text(json.dumps(rec))
    capsys.readouterr()
    assert camp.main(["ingest", str(tmp_path / "o1"), *TINY, "--home", str(lost),
                      "--results", str(results)]) == 0
    assert "the same episode sets" in capsys.readouterr().out
    e = json.loads((results / record_lib.FILE).read_text())["tasks"]["probe-action"]
    assert {k: v for k, v in e.items() if k != "regenerations"} == recorded
    (ev,) = e["regenerations"]
    assert ev["identical"] and ev["replaced"] is None and ev["run"] == f"runs/{p['run']}"
    assert camp.main(["status", *TINY, "--home", str(lost), "--results", str(results)]) == 0
    assert "sets missing" not in capsys.readouterr().out
    assert camp.main(["ingest", str(tmp_path / "o1"), *TINY, "--home", str(lost),
                      "--results", str(results)]) == 0          # again: no second event
    assert len(json.loads((results / record_lib.FILE).read_text())["tasks"]["probe-action"][
        "regenerations"]) == 1
    assert camp.main(["ingest", str(tmp_path / "o1"), *TINY, "--home", str(tmp_path / "l2"),
                      "--results", str(other)]) == 0
    e = json.loads((other / record_lib.FILE).read_text())["tasks"]["probe-action"]
    (ev,) = e["regenerations"]
    assert not ev["identical"] and e["run"] == f"runs/{p['run']}"
    assert ev["replaced"]["run"] == recorded["run"]
    assert ev["replaced"]["episode_sets"]["0"] == "0" * 64
    assert {s["content_hash"] for s in e["episode_sets"]} == {
        s["content_hash"] for s in recorded["episode_sets"]}
    assert record_lib.check(json.loads((other / record_lib.FILE).read_text())) == []


def test_regenerate_refuses_what_it_cannot_train_again(calls, tmp_path, capsys):
    tmp, *_ = calls
    results = tmp_path / "results"
    base = ["--home", str(tmp_path / "h"), "--out", str(tmp_path / "o"), "--budget-s", "60"]
    assert camp.main(["next", *TINY, *base, "--results", str(results),
                      "--regenerate", "probe-action"]) == 2         # nothing recorded
    assert "no source of it is recorded" in capsys.readouterr().err
    assert camp.main(["ingest", str(tmp / "out2"), *TINY, "--home", str(tmp_path / "l"),
                      "--results", str(results)]) == 0
    capsys.readouterr()
    for flags, said in [
            ([*TINY[:-4], "--eval-episodes", "3", "--set", "seed_steps=40"],
             "differs from the recorded one in eval_episodes"),
            ([*TINY, "--task", "probe-action"], "--task and --regenerate"),
            (TINY, "--regenerate walker-walk: not a task of the campaign")]:
        what = "walker-walk" if "walker-walk" in said else "probe-action"
        assert camp.main(["next", *flags, *base, "--results", str(results),
                          "--regenerate", what]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and said in err
        assert not (tmp_path / "h" / "runs").exists() or not any(
            (tmp_path / "h" / "runs").iterdir())


def test_a_regeneration_that_does_not_fit_leaves_the_time_to_one_that_does(tmp_path):
    """--regenerate walker-stand,reacher-hard with device time for reacher-hard's shorter run
    only: reacher-hard goes first; with time for neither, a task not done that fits (a fixed
    40k cheetah-run) trains; with time for nothing, the refusal names the regeneration."""
    campaign, args = _model("--tasks", "walker-stand,reacher-hard,cheetah-run",
                            "--target", "cheetah-run=40000")
    real = json.loads((ROOT / "benchmarks" / "results" / record_lib.FILE).read_text())
    rec = {"tasks": {"walker-stand": real["tasks"]["walker-stand"],
                     "reacher-hard": {**real["tasks"]["reacher-hard"], "env_steps": 50_000,
                                      "command": real["tasks"]["reacher-hard"]["command"]
                                      .replace("--env-steps 100000", "--env-steps 50000")}}}
    states = camp.read_state(tmp_path, campaign, rec)
    regen = ("walker-stand", "reacher-hard")

    def need(n):
        return plan_lib.task_cost("x", n, plan_lib.Clock(0.0, 0.0), args)[0]
    assert need(40_000) < need(50_000) < need(100_000)

    def chosen(left):
        s, n, why = next_lib.choose(states, campaign, None, left, 0.0, args, regen)
        return (s.task if s else None), n, why
    assert chosen(need(100_000))[:2] == ("walker-stand", 100_000)
    assert chosen(need(100_000) - 1)[:2] == ("reacher-hard", 50_000)
    assert chosen(need(50_000) - 1)[:2] == ("cheetah-run", 40_000)
    task, n, why = chosen(need(40_000) - 1)
    assert (task, n) == (None, 0)
    assert why.startswith("--regenerate walker-stand: its run of 100,000 env steps needs ")
    assert why.endswith("end the session") and "no task left fits" in why


def test_the_account_is_written_after_every_piece(tmp_path, monkeypatch):
    """A call killed in a later piece (the device's limit; a second SIGTERM in a compile exits
    at once) keeps the account of the pieces it finished: mt19_call.json is on disk with the
    first piece before the second starts."""
    seen = []

    def piece(store, campaign, s, n, stop_at, argv, progress, t0, regenerate=False):
        if seen:                                            # the second piece: read, then die
            seen.append(json.loads((tmp_path / "o" / camp.CALL_FILE).read_text()))
            raise KeyboardInterrupt
        seen.append(None)
        return {"task": s.task, "run": "r1", "action": "new", "finished": True,
                "signal": False, "env_steps_to": n}

    monkeypatch.setattr(next_lib, "train_piece", piece)
    with pytest.raises(KeyboardInterrupt):
        camp.main(["next", *TINY, "--home", str(tmp_path / "h"), "--out", str(tmp_path / "o"),
                   "--budget-s", "500", "--reserve-s", "0", "--min-start-s", "0",
                   "--results", str(tmp_path / "results")])
    assert [p["run"] for p in seen[1]["pieces"]] == ["r1"] and seen[1]["wall_s"] >= 0
    final = json.loads((tmp_path / "o" / camp.CALL_FILE).read_text())
    assert [p["run"] for p in final["pieces"]] == ["r1"] and final["error"] == "KeyboardInterrupt: "
