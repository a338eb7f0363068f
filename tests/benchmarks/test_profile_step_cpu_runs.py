"""benchmarks/profile_step.py on the CPU: it profiles the smallest DreamerV3 training step
and TD-MPC2 update into a complete record (the two runs at once, ~40 s on 2 cores), and
``--reanalyse`` redoes a record from its files (keeping a failed one with its error)."""
import gzip
import json
import subprocess
import sys

import pytest

from profile_step_common import FIELDS, SCRIPT, _check_components, _env, pa, ps


RUNS = {"dreamerv3_train": ["--agent", "dreamerv3", "--program", "train", "--size", "1m"],
        "tdmpc2_update": ["--agent", "tdmpc2", "--program", "update", "--size", "1"]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: (out folder, completed process)} of the two CPU runs, started together."""
    procs = {}
    for name, argv in RUNS.items():
        out = tmp_path_factory.mktemp(name)
        procs[name] = (out, subprocess.Popen(
            [sys.executable, str(SCRIPT), *argv, "--calls", "2", "--warmup", "1", "--top", "8",
             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=_env()))
    done = {}
    for name, (out, proc) in procs.items():
        stdout, stderr = proc.communicate(timeout=600)
        done[name] = (out, proc.returncode, stdout, stderr)
    return done


@pytest.mark.parametrize("name", sorted(RUNS))
def test_cpu_run_writes_a_complete_record(runs, name):
    out, rc, stdout, stderr = runs[name]
    assert rc == 0, stderr[-3000:]
    agent, program = name.split("_")
    stem = f"profile_{agent}_{program}_cpu"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{stem}.{s}" for s in ("json", "xplane.pb.gz", "hlo.txt.gz"))  # no trace folder left
    rec = json.loads((out / f"{stem}.json").read_text())
    assert FIELDS <= set(rec), FIELDS - set(rec)
    assert (rec["agent"], rec["program"], rec["platform"], rec["calls"]) == (agent, program,
                                                                          "cpu", 2)
    assert rec["wall_ms_median"] > 0 and len(rec["wall_ms"]) == 2
    # the CPU has no device plane: the record says so and gives no device idle time
    assert rec["trace"]["device_plane"] is None and rec["idle_share_of_wall"] is None
    assert "no device plane" in rec["trace"]["source"] and "No device plane" in rec["verdict"]
    assert rec["op_events"] > 100 and 0 < rec["busy_ms_per_call"] <= rec["op_ms_per_call"]
    assert set(rec["categories"]) == set(pa.CATEGORIES)
    assert sum(c["share"] for c in rec["categories"].values()) == pytest.approx(1.0)
    assert len(rec["top_ops"]) == 8
    assert sum(r["share"] for r in rec["top_ops"]) + rec["rest"]["share"] == pytest.approx(1.0)
    assert all(r["category"] in pa.CATEGORIES for r in rec["top_ops"])
    assert [r["ms_per_call"] for r in rec["top_ops"]] == sorted(
        (r["ms_per_call"] for r in rec["top_ops"]), reverse=True)
    # every op of the program is found in its optimized HLO
    assert all(r["how"] == "hlo" for r in rec["top_ops"]), rec["top_ops"]
    assert rec["classified_by"]["hlo"] > 0.99
    assert rec["categories"]["matmul/convolution"]["share"] > 0.05
    assert rec["gflop"] > 1 and rec["matmul_tflop_s"] > rec["tflop_s"] > 0
    assert rec["peak"] is None and "Bounded by" in rec["verdict"]
    _check_components(rec)
    want = {"tdmpc2_update": ("Q ensemble", "TD target", "world model", "policy", "optimizer"),
            "dreamerv3_train": ("world model", "imagination", "actor", "critic", "optimizer")}
    assert all(rec["components"][k]["ops"] > 0 < rec["components"][k]["ms_per_call"]
               for k in want[name]), rec["components"]
    assert rec["components"]["other"]["share"] < 0.05 and "By component" in rec["verdict"]
    # the trace and the HLO come back readable, and define the ops of the record
    import jax
    data = jax.profiler.ProfileData.from_serialized_xspace(
        gzip.decompress((out / f"{stem}.xplane.pb.gz").read_bytes()))
    assert "/host:CPU" in [p.name for p in data.planes]
    hlo = gzip.decompress((out / f"{stem}.hlo.txt.gz").read_bytes()).decode()
    assert all(f"%{r['name']} = " in hlo for r in rec["top_ops"])
    assert rec["verdict"].split(".")[0] in stdout


def test_reanalyse_redoes_the_record_from_its_files_and_keeps_a_failed_one(runs, tmp_path,
                                                                          capsys):
    import shutil
    out = runs["tdmpc2_update"][0]
    for f in out.iterdir():
        shutil.copy(f, tmp_path / f.name)
    path = tmp_path / "profile_tdmpc2_update_cpu.json"
    before = json.loads(path.read_text())
    ps.main(["--reanalyse", str(path), "--top", "3", "--peak-tflops", "1"])
    after = json.loads(path.read_text())
    assert len(after["top_ops"]) == 3 and after["peak"]["tflop_s"] == 1.0
    assert after["categories"] == before["categories"]
    assert after["components"] == before["components"]
    assert {k: after[k] for k in ps._MEASURED} == {k: before[k] for k in ps._MEASURED}
    assert "-> " + str(path) in capsys.readouterr().out
    # a trace that cannot be read: the measurements stay, with the error, and it is raised
    (tmp_path / after["files"]["trace"]).write_bytes(gzip.compress(b"not an XSpace"))
    with pytest.raises(Exception):
        ps.main(["--reanalyse", str(path)])
    failed = json.loads(path.read_text())
    assert failed["analysis_error"] and failed["verdict"].startswith("The trace analysis failed")
    assert failed["wall_ms"] == before["wall_ms"] and "categories" not in failed
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted(f.name for f in out.iterdir())
