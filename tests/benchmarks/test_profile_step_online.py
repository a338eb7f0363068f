"""benchmarks/profile_step.py's online chunk: (slow: minutes of compilation) one chunk of
each agent at the tiny preset profiled into a complete record, and each call of the online
program advancing the carries the last one left."""
import json
import subprocess
import sys

import pytest

from profile_step_common import FIELDS, SCRIPT, _check_components, _env, ps


# ---- the online chunk -----------------------------------------------------------------
ONLINE = {"tdmpc2": ["--seeds", "2", "--calls", "2", "--max-file-mib", "0.001"],
          "dreamerv3": ["--calls", "1"]}
"""The online runs: the tiny preset on probe-action, T = 4 (TD-MPC2 2 seeds vmapped, one
round of 5 ticks per call, its trace and HLO too large to keep; DreamerV3 1 seed, 4 ticks
of 2 envs per call)."""


@pytest.fixture(scope="module")
def online_runs(tmp_path_factory):
    """{agent: (out folder, return code, stdout, stderr)} of the two online CPU runs,
    started together."""
    procs = {}
    for agent, argv in ONLINE.items():
        out = tmp_path_factory.mktemp(f"online_{agent}")
        procs[agent] = (out, subprocess.Popen(
            [sys.executable, str(SCRIPT), "--agent", agent, "--program", "online", "--task",
             "probe-action", "--preset", "tiny", "--episode-length", "4", "--warmup", "1",
             "--top", "8", *argv, "--out", str(out)], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, env=_env()))
    done = {}
    for agent, (out, proc) in procs.items():
        stdout, stderr = proc.communicate(timeout=1800)
        done[agent] = (out, proc.returncode, stdout, stderr)
    return done


@pytest.mark.slow
@pytest.mark.parametrize("agent", sorted(ONLINE))
def test_online_chunk_writes_a_complete_record(online_runs, agent):
    out, rc, stdout, stderr = online_runs[agent]
    assert rc == 0, stderr[-3000:]
    stem = f"profile_{agent}_online_cpu"
    rec = json.loads((out / f"{stem}.json").read_text())
    assert FIELDS | set(ps.ONLINE_FIELDS) <= set(rec), (FIELDS | set(ps.ONLINE_FIELDS)) - set(rec)
    seeds, calls = (2, 2) if agent == "tdmpc2" else (1, 1)
    assert (rec["program"], rec["task"], rec["preset"], rec["episode_length"], rec["seeds"],
            rec["calls"], rec["size"]) == ("online", "probe-action", "tiny", 4, seeds, calls,
                                           None)
    if agent == "tdmpc2":       # one round of T + 1 ticks; T steps of 1 env, action repeat 1
        assert (rec["ticks_per_call"], rec["n_envs"], rec["env_steps_per_call"],
                rec["updates_per_call"], rec["warmup_chunks"]) == (5, 1, 2 * 4, 4, 3)
    else:                       # 4 ticks of the tiny preset's 2 envs, after the first update
        assert (rec["ticks_per_call"], rec["n_envs"], rec["env_steps_per_call"]) == (4, 2, 8)
        assert rec["updates_per_call"] > 0 and rec["warmup_chunks"] >= 2
        assert rec["scan_weight_grads"] in ("inside", "outside")
    assert rec["gflop"] is None and rec["tflop_s"] is None and rec["matmul_tflop_s"] is None
    assert any(n.startswith("gflop: not counted") for n in rec["notes"])
    assert len(rec["wall_ms"]) == calls and rec["wall_ms_median"] > 0
    assert rec["op_events"] > 100 and rec["classified_by"]["hlo"] > 0.99
    assert sum(c["share"] for c in rec["categories"].values()) == pytest.approx(1.0)
    assert f"A call is {rec['ticks_per_call']} ticks of the online loop" in rec["verdict"]
    assert "Bounded by" in rec["verdict"] and "matmul FLOPs not counted" in stdout
    # the components, from the events and the HLO in memory even when neither is kept
    _check_components(rec)
    parts = (("plan: candidate values", "env step (MJX)", "replay write",
              "update: world model", "update: Q ensemble", "update: policy",
              "update: optimizer") if agent == "tdmpc2" else
             ("policy", "env step (MJX)", "update: world model", "update: actor",
              "update: critic", "update: optimizer"))
    assert all(rec["components"][k]["ops"] > 0 < rec["components"][k]["ms_per_call"]
               for k in parts), rec["components"]
    assert "By component, per tick: plan " in rec["verdict"] or agent == "dreamerv3"
    kept = ("json",) if agent == "tdmpc2" else ("json", "xplane.pb.gz", "hlo.txt.gz")
    assert sorted(p.name for p in out.iterdir()) == sorted(f"{stem}.{s}" for s in kept)
    if agent == "tdmpc2":
        assert rec["files"] == {"trace": None, "hlo": None}
        assert any(n.startswith("trace: not written (over --max-file-mib")
                   for n in rec["notes"])


def test_online_chunk_calls_advance_the_carries(monkeypatch):
    """Each call of the online program runs the next ticks on the carries the last call
    left (a stand-in chunk), and the warm-up runs past the first update."""
    from types import SimpleNamespace
    import _online
    import wmx.envs.playground as playground
    from wmx.train_online import program
    seen = []
    monkeypatch.setattr(playground, "cached_env",
                        lambda task, T: SimpleNamespace(action_repeat=1))
    monkeypatch.setattr(program, "init_carries",
                        lambda rc, env: SimpleNamespace(n_updates=0, calls=0))
    monkeypatch.setattr(program, "make_chunk_fn", lambda rc, env: lambda c, ticks: (
        seen.append((c.calls, ticks.tolist())) or SimpleNamespace(n_updates=0,
                                                                   calls=c.calls + 1), None))
    run = _online.start_online("probe-action", "tdmpc2", "tiny", n_seeds=3, episode_length=4,
                               agent_overrides={"seed_steps": 4}, chunks=2)
    assert (run.first_update_tick, run.warmup_chunks, run.rc.seeds) == (5, 3, (0, 1, 2))
    assert run.rc.rounds == 5                       # the warm-up and the 2 calls to come
    run()
    run()
    assert seen == [(i, list(range(5 * i, 5 * i + 5))) for i in range(5)]
    assert (run.env_steps_per_call, run.updates_next_call()) == (3 * 4, 4)
