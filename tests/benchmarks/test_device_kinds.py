"""benchmarks/_device_kinds.py and what the mt19 campaign takes from it: the device command's
wheels, the warm period in status, a session's device time in the plan, and ``next``'s kind
by JAX's backend."""
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _device_kinds as kinds_lib  # noqa: E402
import _mt19_next as next_lib  # noqa: E402
import _mt19_plan as plan_lib  # noqa: E402
import _mt19_record as record_lib  # noqa: E402
import _mt19_tasks as tasks_lib  # noqa: E402
import mt19_campaign as camp  # noqa: E402
import mt19_physics as physics_lib  # noqa: E402

_KIND = next_lib._kind


def test_each_kind_names_its_wheels_and_how_they_are_made():
    assert set(kinds_lib.KINDS) == {"tpu", "h200"} and kinds_lib.DEFAULT == "tpu"
    tpu, h200 = kinds_lib.KINDS["tpu"], kinds_lib.KINDS["h200"]
    assert (tpu.warm_s, tpu.session_s, h200.warm_s, h200.session_s) == (100, 1800, 30, 900)
    assert h200.setup() == "source .whl-h200/setup.sh &&"
    assert (ROOT / h200.made_by.split()[-1]).is_file()           # tools/h200_wheels.sh
    assert f"/{h200.wheels}/" in (ROOT / ".gitignore").read_text().split()   # never committed
    assert kinds_lib.kind_of_backend("tpu") is tpu
    assert kinds_lib.kind_of_backend("gpu") is h200 and kinds_lib.kind_of_backend("cpu") is None


def test_the_device_command_sources_the_kinds_wheels():
    tpu = record_lib.device_command("abc")
    h200 = record_lib.device_command("abc", "h200")
    assert tpu.startswith("source .whl-tpu/setup.sh && WMX_CODE_VERSION=abc timeout")
    assert h200 == tpu.replace(".whl-tpu", ".whl-h200")


def test_status_prints_the_h200_command_and_its_warm_period(tmp_path, capsys):
    assert camp.main(["status", "--device", "h200", "--home", str(tmp_path / "h"),
                      "--results", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "device command on the NVIDIA H200 machine (carry .whl-h200, made here by " \
           "`bash tools/h200_wheels.sh`" in out and "again within 30 s" in out
    assert "  source .whl-h200/setup.sh && WMX_CODE_VERSION=" in out
    assert camp.main(["status", "--home", str(tmp_path / "h"),
                      "--results", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "carry .whl-tpu" in out and "again within 100 s" in out


def test_a_session_is_the_kinds_unless_given():
    parse = camp.build_parser().parse_args
    assert plan_lib.session_seconds(parse(["plan"])) == 1800
    assert plan_lib.session_seconds(parse(["plan", "--device", "h200"])) == 900
    assert plan_lib.session_seconds(parse(["plan", "--device", "h200",
                                           "--session-s", "1200"])) == 1200
    nx = parse(["next", "--home", "h", "--out", "o", "--budget-s", "540"])
    assert nx.device is None and plan_lib.session_seconds(nx) == 1800   # the TPU's
    assert next_lib._kind(None) is kinds_lib.KINDS["tpu"]               # on the CPU


def test_next_takes_the_kind_jax_runs_on_and_refuses_another():
    """``next``'s session and 'call again within' are the flag's kind, the backend's when no
    flag is given; on an accelerator a flag naming another kind is refused (on the CPU any
    kind may be rehearsed)."""
    kinds = kinds_lib.KINDS
    assert next_lib._kind(None, "gpu") is kinds["h200"]
    assert next_lib._kind(None, "tpu") is kinds["tpu"]
    assert next_lib._kind("h200", "cpu") is kinds["h200"]
    assert next_lib._kind("h200", "cuda") is kinds["h200"]
    with pytest.raises(ValueError, match=r"^--device tpu, but JAX runs on gpu here \(the "
                                         r"NVIDIA H200 machine\): give --device h200 or none"):
        next_lib._kind("tpu", "gpu")
    with pytest.raises(ValueError, match="give --device tpu or none"):
        next_lib._kind("h200", "tpu")


def test_next_refuses_a_device_flag_of_another_accelerator(tmp_path, capsys, monkeypatch):
    """A refused --device stops the call before it writes its account or trains."""
    monkeypatch.setattr(next_lib, "_kind", lambda device: _KIND(device, "gpu"))   # an H200
    monkeypatch.setenv("WMX_CODE_VERSION", "0" * 40)
    assert camp.main(["next", "--device", "tpu", "--home", str(tmp_path / "h"), "--out",
                      str(tmp_path / "o"), "--budget-s", "60", "--results",
                      str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mt19_campaign.py next: error: --device tpu, but JAX runs on gpu")
    assert not (tmp_path / "o" / next_lib.CALL_FILE).exists()


def test_the_plan_fits_a_run_to_the_h200_session(tmp_path, capsys):
    """walker at 170.9 env steps/s per seed: 100,000 fits a 30-minute session, not a
    15-minute one (two calls and the machine's start)."""
    common = ["--home", str(tmp_path), "--results", str(tmp_path), "--sps", "170.9"]
    assert camp.main(["plan", *common]) == 0
    out = capsys.readouterr().out
    walker = next(r for r in out.splitlines() if r.startswith("walker-walk"))
    assert not walker.endswith("DOES NOT FIT ONE SESSION")
    assert "Sessions of 30 device min (TPU v5e)" in out
    assert camp.main(["plan", "--device", "h200", *common]) == 0
    out = capsys.readouterr().out
    walker = next(r for r in out.splitlines() if r.startswith("walker-walk"))
    assert walker.endswith("DOES NOT FIT ONE SESSION")
    assert "Sessions of 15 device min (NVIDIA H200)" in out
    about = camp.build_parser().subcommands["plan"].description
    assert "sessions it takes (--device's: 30 min on the TPU v5e, 15 min on the NVIDIA H200;" \
        in about, about


def test_the_speeds_are_the_kinds_own_runs_first(monkeypatch):
    """A domain recorded on both chips is priced, for a kind, from its newest run on that
    kind's chip, however new the other chip's run; a domain recorded on one chip only is
    priced from it for both; without a kind, from the newest run on any chip."""
    monkeypatch.setattr(plan_lib, "run_sps", lambda e: e["sps"])
    tpu, gpu = "tpu: TPU v5 lite", "gpu: NVIDIA H200"
    rec = {"tasks": {
        "walker-walk": {"chip": tpu, "ingested": "2026-01-01", "seeds": [0, 1], "sps": 170.0},
        "walker-run": {"chip": gpu, "ingested": "2026-01-02", "seeds": [0, 1], "sps": 300.0},
        "cheetah-run": {"chip": tpu, "ingested": "2026-01-02", "seeds": [0, 1], "sps": 264.0},
        "cheetah-x": {"chip": gpu, "ingested": "2026-01-01", "seeds": [0, 1], "sps": 250.0},
        "reacher-easy": {"chip": tpu, "ingested": "2026-01-01", "seeds": [0, 1], "sps": 302.0},
    }}
    kinds = kinds_lib.KINDS
    assert plan_lib.measured_sps(rec, 2) == {"walker": 300.0, "cheetah": 264.0,
                                             "reacher": 302.0}
    assert plan_lib.measured_sps(rec, 2, kinds["tpu"].backends) == {
        "walker": 170.0, "cheetah": 264.0, "reacher": 302.0}
    assert plan_lib.measured_sps(rec, 2, kinds["h200"].backends) == {
        "walker": 300.0, "cheetah": 250.0, "reacher": 302.0}
    assert next_lib.session_sps(rec, Path("no-such-home"), 10_000, 2,
                                kinds["h200"].backends)["cheetah"] == 250.0


def _results(tmp_path: Path, keep: tuple[str, ...]) -> Path:
    """A results folder outside git holding the committed record with only ``keep``'s
    entries (their sets in no data root and not archived here: to be trained again), and
    the committed physics costs; the campaign's other tasks are not done."""
    results = tmp_path / "results"
    results.mkdir(parents=True)
    committed = ROOT / "benchmarks" / "results"
    record = json.loads((committed / record_lib.FILE).read_text())
    assert set(keep) <= set(record["tasks"])
    record["tasks"] = {t: e for t, e in record["tasks"].items() if t in keep}
    (results / record_lib.FILE).write_text(json.dumps(record))
    shutil.copy(committed / physics_lib.FILE, results / physics_lib.FILE)
    return results


def test_status_names_the_piece_a_fresh_session_of_the_kind_trains(tmp_path, capsys):
    """Three walker tasks and cheetah-run recorded, their sets lost: a TPU session trains
    walker-stand again first; the H200's 15 minutes fit none of the walker runs at the
    plan's speeds, so its first is cheetah-run's (as next picks); with the walker tasks
    alone to train again, it names the first task not done that fits, and why."""
    walkers = ("walker-stand", "walker-walk", "walker-run")
    flags = ["--home", str(tmp_path / "h"), "--results", str(_results(tmp_path, walkers +
                                                                      ("cheetah-run",)))]
    assert camp.main(["status", *flags]) == 0
    assert "next piece: walker-stand: trained again" in capsys.readouterr().out
    assert camp.main(["status", "--device", "h200", *flags]) == 0
    out = capsys.readouterr().out
    assert "next piece: cheetah-run: trained again" in out
    assert "no task left fits" not in out
    assert camp.main(["plan", "--device", "h200", *flags]) == 0
    out = capsys.readouterr().out
    assert "do not fit one 15-minute session at these speeds, not even at their floor " \
           "(walker-stand, walker-walk, walker-run, " in out
    only = ["--home", str(tmp_path / "h"), "--results", str(_results(tmp_path / "w", walkers))]
    assert camp.main(["status", "--device", "h200", *only]) == 0
    out = capsys.readouterr().out
    line = next(r for r in out.splitlines() if r.startswith("next piece: "))
    assert "trained again" not in line and line.endswith(
        "(with --regenerate too: walker-stand, walker-walk, walker-run to train again fit no "
        "fresh 15-minute session of the NVIDIA H200 at the plan's speeds)"), line


def test_status_says_when_no_task_fits_a_session(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(plan_lib, "session_seconds", lambda args: 300.0)
    assert camp.main(["status", "--device", "h200", "--home", str(tmp_path)]) == 0
    assert "note: at the plan's speeds no task left fits one 15-minute session of the " \
           "NVIDIA H200 (plan --device h200)" in capsys.readouterr().out


def test_status_names_the_build_of_the_recorded_tasks_whose_sets_are_here(
        tmp_path, capsys, monkeypatch):
    """With some recorded tasks' sets missing, status prints the build of the recorded tasks
    whose sets the data root holds (here: cheetah-run's, as if restored)."""
    missing = tasks_lib.TaskState.missing_sets
    monkeypatch.setattr(tasks_lib.TaskState, "missing_sets", property(
        lambda s: [] if s.task == "cheetah-run" else missing.fget(s)))
    results = _results(tmp_path, ("walker-stand", "walker-walk", "cheetah-run"))
    flags = ["--home", str(tmp_path / "h"), "--results", str(results)]
    assert camp.main(["status", *flags]) == 0
    assert "a dataset of the recorded tasks whose sets are here: python benchmarks/" \
           f"mt19_campaign.py build --home {tmp_path / 'h'} --results {results} " \
           "--tasks cheetah-run\n" in capsys.readouterr().out
    monkeypatch.setattr(tasks_lib.TaskState, "missing_sets", missing)
    assert camp.main(["status", *flags]) == 0                      # none here: no such line
    assert "a dataset of the recorded tasks" not in capsys.readouterr().out
