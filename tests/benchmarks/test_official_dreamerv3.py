"""benchmarks/official_dreamerv3.py without the official code: its --help, the conversion of
official logs into wmx's metrics.csv (made-up logs of a run that was killed once and
resumed), the stop of the official loop, the resume checks; the JAX adapter of
_official_compat.py; the wheel slimming of tools/official_dreamerv3_bundle.py."""
import ast
import base64
import csv
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DRIVER = ROOT / "benchmarks" / "official_dreamerv3.py"


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


off = _load("official_dreamerv3", DRIVER)
logs = _load("_official_logs", DRIVER.parent / "_official_logs.py")
chk = _load("_official_check", DRIVER.parent / "_official_check.py")   # after off: imports it
bundle = _load("official_dreamerv3_bundle", ROOT / "tools" / "official_dreamerv3_bundle.py")


def _jsonl(path, objs):
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))


def _made_up_run(logdir: Path) -> None:
    """A 4-env run (action repeat 2): one round of episodes at env steps ~2004, a save at
    2400, a round at ~4004 written by a call that was killed before saving again, and the
    resumed call's round at ~4404 (its envs restarted their episodes at 2400)."""
    logdir.mkdir()
    (logdir / logs.RUN_RECORD).write_text(json.dumps({
        "task": "dmc_reacher_easy", "seed": 3, "size": "12m", "compute_dtype": "bfloat16",
        "envs": 4, "train_ratio": 512.0, "sets": [], "action_repeat": 2}))
    round1 = [{"step": 1998 + 2 * i, "episode/score": s} for i, s in enumerate((10, 20, 30, 40))]
    lost = [{"step": 3998 + 2 * i, "episode/score": 900.0} for i in range(4)]
    _jsonl(logdir / "scores.jsonl", round1 + lost)
    offset = (logdir / "scores.jsonl").stat().st_size
    with (logdir / "scores.jsonl").open("a") as f:
        for i, s in enumerate((100, 200, 300, 400)):
            f.write(json.dumps({"step": 4398 + 2 * i, "episode/score": s}) + "\n")
        f.write('{"step": 5000, "episode/sco')         # a killed writer's last line
    progress = [
        {"event": "save", "step": 0, "train_steps": 0, "wall_s": 60.0},
        {"event": "log", "step": 2000, "train_steps": 1000, "wall_s": 100.0},
        {"event": "save", "step": 2400, "train_steps": 1200, "wall_s": 110.0},
        {"event": "log", "step": 4000, "train_steps": 2000, "wall_s": 150.0},   # lost
    ]
    _jsonl(logdir / logs.PROGRESS, progress)
    p_off = (logdir / logs.PROGRESS).stat().st_size
    with (logdir / logs.PROGRESS).open("a") as f:
        for o in ({"event": "resume", "step": 2400, "train_steps": 1200,
                   "scores_offset": offset, "progress_offset": p_off},
                  {"event": "log", "step": 4800, "train_steps": 2400, "wall_s": 250.0},
                  {"event": "save", "step": 4800, "train_steps": 2400, "wall_s": 251.0}):
            f.write(json.dumps(o) + "\n")


def test_help_runs_without_the_official_code(tmp_path):
    r = subprocess.run([sys.executable, str(DRIVER), "--help"], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "--convert-only" in r.stdout and "--time-train" in r.stdout
    r = subprocess.run([sys.executable, str(DRIVER), "--logdir", str(tmp_path / "run"),
                        "--official", str(tmp_path / "nowhere")], capture_output=True,
                       text=True, cwd=tmp_path)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "official_dreamerv3_bundle.py" in r.stderr


def test_columns_are_wmx_online_columns():
    tree = ast.parse((ROOT / "wmx" / "train_online" / "loop.py").read_text())
    cols = next(ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "BASE_COLUMNS" for t in n.targets))
    assert logs.BASE_COLUMNS == cols


def test_convert_drops_lost_training_and_groups_rounds(tmp_path):
    logdir = tmp_path / "run"
    _made_up_run(logdir)
    rows = logs.convert(logdir, seed=3, n_envs=4, repeat=2)
    assert [r["env_steps"] for r in rows] == [2004, 4404]
    assert [r["return"] for r in rows] == [25.0, 250.0]        # the 900s were lost training
    assert [r["episodes"] for r in rows] == [4, 8]
    assert rows[0]["agent_steps"] == 1002 and rows[0]["seed"] == 3
    assert rows[0]["return_std"] == pytest.approx(11.1803, abs=1e-3)
    # interpolated between the kept records (2000, 1000 / 100 s) and (2400, 1200 / 110 s),
    # then (2400, 110 s) and (4800, 250 s): the lost log at 4000 is not used
    assert rows[0]["updates"] == 1002 and rows[0]["wall_s"] == pytest.approx(100.1)
    assert rows[1]["updates"] == 2202 and rows[1]["wall_s"] == pytest.approx(226.9)


def test_convert_only_writes_what_wmx_reads(tmp_path):
    logdir = tmp_path / "run"
    _made_up_run(logdir)
    r = subprocess.run([sys.executable, str(DRIVER), "--convert-only", str(logdir), "--out",
                        str(tmp_path / "out")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with (logdir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == logs.BASE_COLUMNS
    # what benchmarks/learning/online_check.py's eval_curve(rows, "train") reads
    train = {int(r["env_steps"]): float(r["return"]) for r in rows if r["kind"] == "train"}
    assert train == {2004: 25.0, 4404: 250.0}
    summary = json.loads((tmp_path / "out" / off.SUMMARY).read_text())
    assert summary["env_steps"] == 4800 and summary["train_steps"] == 2400
    assert summary["wall_s"] == 251.0 and summary["episodes"] == 8
    assert summary["config"]["seed"] == 3 and summary["last_return"] == 250.0
    assert (tmp_path / "out" / "metrics.csv").read_text() == (logdir / "metrics.csv").read_text()
    with tarfile.open(tmp_path / "out" / off.LOGS_TAR) as tar:
        assert {"scores.jsonl", logs.PROGRESS, logs.RUN_RECORD} <= set(tar.getnames())
    assert len(list((tmp_path / "out").iterdir())) == 3


def test_group_episodes_splits_at_n_envs_and_at_gaps():
    scores = [(100, 1.0), (102, 2.0), (104, 3.0), (300, 4.0), (302, 5.0), (304, 6.0)]
    groups = logs.group_episodes(scores, n_envs=2, repeat=2)
    assert [[s for s, _ in g] for g in groups] == [[100, 102], [104], [300, 302], [304]]
    groups = logs.group_episodes(scores, n_envs=16, repeat=2)
    assert [len(g) for g in groups] == [3, 3]


def test_loop_condition_stops_at_target_budget_and_signal():
    def lt(counter_value, steps):     # the official Counter.__lt__: int(self) < other
        return int(counter_value) < steps

    stop = off._Stop(deadline=None)
    steps = off._Steps(100, stop)
    assert lt(99, steps) and not lt(100, steps) and stop.reason == "target"
    stop = off._Stop(deadline=0.0)                  # long past
    assert not lt(1, off._Steps(100, stop)) and stop.reason == "budget"
    stop = off._Stop(deadline=None)
    steps = off._Steps(100, stop)
    stop.reason = "signal SIGTERM"
    assert not lt(1, steps)


def test_episode_window_stops_at_the_first_episode_end_inside_it():
    stop = off._Stop(deadline=1000.0, episode_window=150.0)
    stop.episode_ended(now=820.0)                   # before the window: no stop
    assert not stop.check(now=900.0) and stop.reason is None
    stop.episode_ended(now=910.0)                   # inside it: stop at the next check
    assert stop.check(now=911.0) and stop.reason == "budget, at an episode end"
    late = off._Stop(deadline=1000.0, episode_window=150.0)
    late.episode_ended(now=700.0)
    assert not late.check(now=999.0) and late.check(now=1000.0) and late.reason == "budget"
    off_ = off._Stop(deadline=1000.0)               # no window: only the deadline
    off_.episode_ended(now=990.0)
    assert not off_.check(now=995.0) and off_.check(now=1001.0)


def test_driver_stops_on_the_step_a_group_of_episodes_ends_inside_the_window():
    """Envs in lockstep with episodes of 5 steps, a driver call of 30 steps: with the
    window open the call ends right after step 5 (the group's end); with it closed, or
    without a window, it takes its 30 steps as the official driver does."""
    def call(stop):
        taken = []

        def step_once(step, episode):
            taken.append(step + 1)
            return step + 1, episode + ((step + 1) % 5 == 0)
        off.drive(step_once, 30, 0, lambda: taken[-1] % 5 == 0, stop)
        return taken[-1]

    now = time.monotonic()
    open_ = off._Stop(deadline=now + 100.0, episode_window=1000.0)
    assert call(open_) == 5 and open_.reason == "budget, at an episode end"
    assert open_.check()                            # the loop's next check stops it
    assert call(off._Stop(deadline=now + 1000.0, episode_window=10.0)) == 30
    assert call(off._Stop(deadline=now + 1000.0)) == 30
    assert call(off._Stop(deadline=None)) == 30


def test_group_end_stops_only_inside_the_window():
    stop = off._Stop(deadline=1000.0, episode_window=50.0)
    assert not stop.group_ended(now=949.0) and stop.reason is None
    assert stop.group_ended(now=950.0) and stop.reason == "budget, at an episode end"
    late = off._Stop(deadline=1000.0, episode_window=50.0)
    assert late.group_ended(now=1200.0)             # past the deadline: at once too
    assert not off._Stop(deadline=1000.0).group_ended(now=999.0)     # no window
    assert not off._Stop(deadline=None, episode_window=50.0).group_ended(now=1e9)


def test_resume_refuses_a_changed_setting(tmp_path, capsys):
    logdir = tmp_path / "run"
    _made_up_run(logdir)
    args = off.parse(["--logdir", str(logdir), "--seed", "4"])
    with pytest.raises(SystemExit) as e:
        off.resolve_settings(args, logdir)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "--seed 4" in err and "3" in err and len(err.splitlines()) == 1
    args = off.parse(["--logdir", str(logdir), "--train-ratio", "512", "--env-steps", "9000"])
    settings, saved = off.resolve_settings(args, logdir)
    assert settings["seed"] == 3 and settings["envs"] == 4 and saved is not None


def test_task_names():
    assert off.official_task("reacher-easy") == "dmc_reacher_easy"
    assert off.official_task("ball-in-cup-catch") == "dmc_cup_catch"
    assert off.official_task("dmc_walker_walk") == "dmc_walker_walk"


def _run_with_compat(code: str) -> str:
    """stdout of ``code`` run in a fresh CPU process with benchmarks/ first on sys.path
    (argv[1]); the process must exit 0."""
    r = subprocess.run([sys.executable, "-c", code, str(ROOT / "benchmarks")],
                       capture_output=True, text=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_jit_adapter_passes_positional_shardings(tmp_path):
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import jax, _official_compat; "
            "names = _official_compat.apply(); "
            "s = jax.sharding.SingleDeviceSharding(jax.devices()[0]); "
            "f = jax.jit(lambda x, y: x * y, (s, s), s, donate_argnums=[1]); "
            "print(names, int(f(3, 4)))")
    assert _run_with_compat(code).strip().endswith("12")


def test_jit_adapter_can_drop_donation():
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import jax, jax.numpy as jnp, "
            "_official_compat as c; c.apply(); "
            "f = jax.jit(lambda x, y: x * y, donate_argnums=[1]); y = jnp.ones(3); f(2.0, y); "
            "c.set_donation(False); "
            "g = jax.jit(lambda x, y: x * y, donate_argnums=[1]); z = jnp.ones(3); g(2.0, z); "
            "c.set_donation(True); "
            "h = jax.jit(lambda x, y: x * y, donate_argnames=['y']); w = jnp.ones(3); h(2.0, y=w); "
            "print(y.is_deleted(), z.is_deleted(), w.is_deleted())")
    assert _run_with_compat(code).split() == ["True", "False", "True"]


def test_param_report_counts_nonfinite_leaves():
    np = pytest.importorskip("numpy")
    pytest.importorskip("jax")
    import ml_dtypes
    params = {
        "agent/enc/mlp0/kernel": np.array([[1.0, np.nan], [np.inf, -3.0]], np.float32),
        "agent/enc/mlp0/norm/scale": np.ones(4, ml_dtypes.bfloat16),
        "agent/dyn/dyncore/bias": np.array([np.nan] * 3, ml_dtypes.bfloat16),
        "agent/opt/state": {"mu": np.zeros(2, np.float32), "count": np.array(3, np.int32)},
        "agent/actor/out/kernel": np.array([0.5, -7.0], np.float32),
    }
    rep = chk.param_report(params)
    assert rep["params"] == 5 and rep["values"] == 4 + 4 + 3 + 2 + 2
    assert rep["nonfinite_params"] == 2 and rep["nonfinite_values"] == 5
    assert rep["nan_values"] == 4 and rep["inf_values"] == 1
    assert [f["name"] for f in rep["first"]] == ["agent/dyn/dyncore/bias",
                                                 "agent/enc/mlp0/kernel"]
    assert rep["by_module"] == {"agent/dyn": 3, "agent/enc": 2}
    assert rep["by_kind"]["kernel"] == [2, 6] and rep["by_kind"]["scale"] == [0, 4]
    assert rep["absmax"] == 7.0 and rep["absmax_name"] == "agent/actor/out/kernel"


def test_finite_report_names_keys_with_a_nonfinite_env():
    np = pytest.importorskip("numpy")
    finite = {"embed": (np.array([True, False]), np.array([-1.0, np.nan]),
                        np.array([2.0, np.nan])),
              "obs/position": (np.array([True, True]), np.array([0.0, -1.0]),
                               np.array([1.0, 3.0])),
              "lat/deter": (np.array([False, False]), np.array([np.nan, np.nan]),
                            np.array([np.nan, np.nan]))}
    rep = chk.finite_report(finite)
    assert rep["obs/position"] == {"finite_envs": 2, "envs": 2, "min": -1.0, "max": 3.0}
    assert rep["embed"]["finite_envs"] == 1 and rep["embed"]["max"] == 2.0
    assert rep["lat/deter"]["min"] is None
    assert chk.bad_keys(rep) == ["embed", "lat/deter"]


def test_check_envs_step_as_the_official_driver():
    np = pytest.importorskip("numpy")

    class Space:
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, dtype

    class Env:
        act_space = {"action": Space((2,), np.float32), "reset": Space((), bool)}

        def __init__(self, i):
            self.i, self.seen = i, []

        def step(self, act):
            self.seen.append({k: np.array(v) for k, v in act.items()})
            return {"position": np.full(2, float(self.i)), "is_last": self.i == 1,
                    "is_first": bool(act["reset"])}

        def close(self):
            pass

    envs = chk._Envs(Env, 2)
    obs = envs.step()
    assert obs["position"].shape == (2, 2) and obs["is_first"].all()
    envs.act({"action": np.array([[0.5, np.nan], [1.0, 1.0]], np.float32)}, obs)
    envs.step()
    first, second = envs.envs
    assert first.seen[0]["reset"] and second.seen[0]["reset"]
    assert first.seen[1]["action"].tolist() == [0.5, 0.0] and not first.seen[1]["reset"]
    assert second.seen[1]["action"].tolist() == [0.0, 0.0] and second.seen[1]["reset"]


def test_primitive_report_on_the_cpu():
    pytest.importorskip("jax")
    rep = chk.primitive_report()
    for name in ("truncated_normal", "uniform", "erf_inv", "nextafter", "normal",
                 "bf16_matmul"):
        assert rep[name]["nonfinite"] == 0, (name, rep[name])
    assert -2.0 < rep["truncated_normal"]["min"] < rep["truncated_normal"]["max"] < 2.0


def test_check_finite_flags():
    args = off.parse(["--check-finite", "3"])
    assert args.check_finite == 3 and args.check_train_steps == 2
    assert args.check_variants.split(",") == list(off.CHECK_VARIANTS)
    for bad in (["--check-finite", "0"], ["--check-finite", "2", "--time-train", "1"],
                ["--check-finite", "2", "--check-train-steps", "-1"]):
        with pytest.raises(SystemExit):
            off.parse(bad)


def test_slim_wheel_drops_paths_and_rewrites_record(tmp_path):
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    files = {"pkg/__init__.py": b"x = 1\n", "pkg/big/data.bin": b"0" * 1000,
             "pkg/mod_test.py": b"assert True\n", "pkg/keep.xml": b"<a/>"}
    with zipfile.ZipFile(whl, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr("pkg-1.0.dist-info/RECORD", "stale\n")
    bundle.slim_wheel(whl, ("pkg/big/",))
    with zipfile.ZipFile(whl) as z:
        names = set(z.namelist())
        record = list(csv.reader(z.read("pkg-1.0.dist-info/RECORD").decode().splitlines()))
    assert names == {"pkg/__init__.py", "pkg/keep.xml", "pkg-1.0.dist-info/RECORD"}
    digest = base64.urlsafe_b64encode(hashlib.sha256(b"<a/>").digest()).rstrip(b"=").decode()
    assert ["pkg/keep.xml", f"sha256={digest}", "4"] in record
    assert ["pkg-1.0.dist-info/RECORD", "", ""] in record


# ==== the training call's process handling (no official code needed) ====================
def test_exit_text_names_signals():
    assert off.exit_text(0) == "exited with status 0"
    assert off.exit_text(1) == "exited with status 1"
    assert off.exit_text(-9) == "was ended by SIGKILL (status -9)"
    assert off.exit_text(143) == "was ended by SIGTERM (status 143)"
    assert off.exit_text(None) == "has not ended"


def test_tee_process_keeps_the_whole_output_and_how_it_ended(tmp_path):
    import io
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    logs[1].write_text("earlier call\n")
    echo = io.BytesIO()
    code = ("import os, signal, sys; print('to stdout'); print('to stderr', file=sys.stderr); "
            "sys.stdout.flush(); sys.stderr.flush(); os.kill(os.getpid(), signal.SIGKILL)")
    status = off.tee_process([sys.executable, "-c", code], dict(os.environ), logs, echo=echo)
    assert status == -9
    for log in logs:
        text = log.read_text()
        assert "to stdout" in text and "to stderr" in text
        assert text.rstrip().endswith("the training process was ended by SIGKILL (status -9)")
    assert logs[1].read_text().startswith("earlier call\n==== ")     # appended
    shown = echo.getvalue().decode()
    assert "to stdout" in shown and "SIGKILL" in shown and "====" in shown.splitlines()[-1]
    status = off.tee_process([sys.executable, "-c", "raise SystemExit(3)"], dict(os.environ),
                             logs[:1], echo=io.BytesIO())
    assert status == 3 and logs[0].read_text().count("==== ") >= 4


class _FakeProc:
    def __init__(self, running, exitcode=None):
        self.running, self.exitcode, self.name = running, exitcode, "_env_server"


def test_wait_for_answer_ends_when_the_env_process_died():
    import multiprocessing as mp
    mine, theirs = mp.Pipe()
    theirs.send(("result", 1))
    off.wait_for_answer(mine, _FakeProc(False, -9), 0, poll_s=0.01)   # answered, then ended
    assert mine.recv() == ("result", 1)
    with pytest.raises(RuntimeError, match=r"env process 3 .* was ended by SIGKILL"):
        off.wait_for_answer(mine, _FakeProc(False, -9), 3, poll_s=0.01)
    with pytest.raises(RuntimeError, match="exited with status 1"):
        off.wait_for_answer(mine, _FakeProc(False, 1), 0, poll_s=0.01)


def test_env_processes_start_with_jax_on_the_cpu(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "tpu")
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    with off.env_process_environ():
        assert os.environ["JAX_PLATFORMS"] == "cpu" and os.environ["MUJOCO_GL"] == "off"
    assert os.environ["JAX_PLATFORMS"] == "tpu" and "MUJOCO_GL" not in os.environ
    monkeypatch.setenv("MUJOCO_GL", "egl")
    with off.env_process_environ():
        assert os.environ["MUJOCO_GL"] == "egl"


def test_signal_handler_counts_one_signal_sent_twice_once(monkeypatch):
    import faulthandler
    import signal
    monkeypatch.setattr(sys.modules[off._OnSignal.__module__], "_say", lambda text: None)
    previous = signal.getsignal(signal.SIGUSR1)
    try:
        stop = off._Stop(deadline=None)
        handler = off._OnSignal(stop, window_s=60.0)
        signal.signal(signal.SIGUSR1, handler)
        handler(signal.SIGUSR1)
        handler(signal.SIGUSR1)      # the process group's copy and the supervisor's
        assert handler.n == 1 and stop.reason == "signal SIGUSR1"
        assert signal.getsignal(signal.SIGUSR1) is handler
        handler.window_s = 0.0
        handler(signal.SIGUSR1)      # a second signal: the next one ends the process
        assert handler.n == 2 and signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    finally:
        faulthandler.cancel_dump_traceback_later()
        signal.signal(signal.SIGUSR1, previous)


def _fake_official(root: Path, agent_source: str) -> Path:
    """An official tree whose dreamerv3/agent.py runs ``agent_source`` when imported."""
    for name in ("dreamerv3/main.py", "dreamerv3/configs.yaml", "embodied/run/train.py"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    (root / "dreamerv3" / "agent.py").write_text(agent_source)
    return root


def test_a_failing_training_call_leaves_its_error_in_the_run_log(tmp_path):
    src = _fake_official(tmp_path / "src", "raise RuntimeError('made-up failure at import')\n")
    out, logdir = tmp_path / "out", tmp_path / "run"
    r = subprocess.run([sys.executable, str(DRIVER), "--official", str(src), "--logdir",
                        str(logdir), "--out", str(out), "--platform", "cpu"],
                       capture_output=True, text=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 1, r.stdout + r.stderr
    for log in (out / off.RUN_LOG, logdir / off.RUN_LOG):
        text = log.read_text()
        assert "made-up failure at import" in text and "Traceback" in text
        assert text.rstrip().endswith("the training process exited with status 1")
    assert "made-up failure at import" in r.stdout


def test_a_failing_check_finite_call_names_the_check_process(tmp_path):
    """--check-finite --out: the log's footer names the check-finite process (no training
    loop runs in that mode)."""
    assert off.ended_line("the check-finite process", -15).rstrip().endswith(
        ": the check-finite process was ended by SIGTERM (status -15)")
    src = _fake_official(tmp_path / "src", "raise RuntimeError('made-up failure at import')\n")
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(DRIVER), "--official", str(src), "--check-finite",
                        "1", "--out", str(out), "--platform", "cpu"],
                       capture_output=True, text=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 1, r.stdout + r.stderr
    text = (out / chk.CHECK_LOG).read_text()
    assert "made-up failure at import" in text
    assert text.rstrip().endswith("the check-finite process exited with status 1"), text
    assert "training process" not in text + r.stdout


def test_a_killed_training_call_has_its_logs_converted(tmp_path):
    src = _fake_official(tmp_path / "src",
                         "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    out, logdir = tmp_path / "out", tmp_path / "run"
    _made_up_run(logdir)
    r = subprocess.run([sys.executable, str(DRIVER), "--official", str(src), "--logdir",
                        str(logdir), "--out", str(out), "--platform", "cpu"],
                       capture_output=True, text=True,
                       env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 128 + 9, r.stdout + r.stderr
    assert "was ended by SIGKILL" in (out / off.RUN_LOG).read_text()
    assert {p.name for p in out.iterdir()} == {off.RUN_LOG, off.METRICS_CSV, off.SUMMARY,
                                              off.LOGS_TAR}
    summary = json.loads((out / off.SUMMARY).read_text())
    assert summary["env_steps"] == 4800 and summary["episodes"] == 8


# ==== with the bundle: the official loop itself, on the CPU =============================
BUNDLE_PYTHON = os.environ.get("WMX_OFFICIAL_DV3_PYTHON")


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / ".official-dv3" / "setup.sh").is_file() or not BUNDLE_PYTHON,
                    reason="needs the bundle (tools/official_dreamerv3_bundle.py) and "
                    "WMX_OFFICIAL_DV3_PYTHON, a Python 3.11 with JAX 0.10.2")
def test_official_loop_trains_saves_resumes_and_converts(tmp_path):
    """Two calls of the official loop (the debug model, 2 env processes) in one logdir: the
    second continues from the first's checkpoint; then the logs are converted."""
    logdir, out = tmp_path / "run", tmp_path / "out"

    def call(env_steps, budget_s, window_s=0):
        cmd = ('export PATH="$(dirname "$PY"):$PATH"; source .official-dv3/setup.sh; '
               f'python benchmarks/official_dreamerv3.py --task reacher-easy --logdir {logdir} '
               f'--out {out} --platform cpu --size debug --envs 2 --env-steps {env_steps} '
               f'--budget-s {budget_s} --episode-window {window_s} '
               '--set run.driver_parallel=True')
        env = {**os.environ, "PY": BUNDLE_PYTHON, "JAX_PLATFORMS": "cpu",
               "DV3_SITE": os.environ.get("DV3_SITE", str(tmp_path / "dv3site"))}
        env.pop(off.WORKER_ENV, None)
        r = subprocess.run(["bash", "-c", cmd], cwd=ROOT, env=env, capture_output=True,
                           text=True, timeout=budget_s + 300)
        assert r.returncode == 0, (out / off.RUN_LOG).read_text()[-5000:]
        return [json.loads(line) for line in (logdir / logs.CALLS).read_text().splitlines()]

    first = call(400, 240)[-1]
    assert first["env_steps_end"] >= 400 and first["train_steps_this_call"] > 0
    second = call(1200, 240)[-1]
    assert second["env_steps_start"] == first["env_steps_end"]
    assert second["env_steps_end"] >= 1200 and second["stop"] == "target"
    with (out / off.METRICS_CSV).open() as f:
        rows = list(csv.DictReader(f))
    assert rows and rows[-1]["episodes"] and int(rows[-1]["env_steps"]) <= 1400
    log = (logdir / off.RUN_LOG).read_text()
    assert log.count("the training process exited with status 0") == 2
    assert "Loading checkpoint" in log
    # a window as long as the budget: the resumed envs start new episodes (the debug
    # size's time limit: 100 agent steps), and the call stops on the very step their
    # first group ends, 2 envs x 101 steps (the reset step counts) x action repeat 2 on;
    # a stop at the loop's next check would land up to 10 driver steps (40) later
    third = call(8000, 240, window_s=240)[-1]
    assert third["stop"] == "budget, at an episode end", third
    assert third["env_steps_end"] == third["env_steps_start"] + 404, third


def test_check_train_probe_flag():
    assert off.parse(["--check-finite", "1"]).check_train_probe == "debug_nans"
    assert off.parse(["--check-finite", "1", "--check-train-probe", "checkify"]) \
        .check_train_probe == "checkify"
    with pytest.raises(SystemExit):
        off.parse(["--check-finite", "1", "--check-train-probe", "gdb"])


def _nan_step_inputs():
    """A toy train step whose log makes a NaN where a parameter is below 2, and its
    first call's inputs in the form `check_finite` keeps them."""
    np = pytest.importorskip("numpy")
    jnp = pytest.importorskip("jax.numpy")

    def step(params, data, carry, seed):
        return {"w": params["w"] + jnp.log(params["w"] - data["x"]) * carry}
    first = {"params": {"w": np.array([3.0, 1.0], np.float32)},
             "data": {"x": np.float32(2.0), "seed": np.zeros(2, np.uint32)},
             "carry": np.float32(1.0)}
    return step, first


def test_train_nan_probes_name_the_operation(tmp_path):
    step, first = _nan_step_inputs()
    found = chk.train_nan_report(step, first, tmp_path)
    assert "log" in found["nan_at"] and found["params_after"]["nonfinite_values"] == 1
    debug = chk.train_debug_nans_report(step, first, tmp_path)
    assert debug["raised"] == "FloatingPointError" and "log" in debug["message"]
    assert chk.train_highest_report(step, first)["params_after"]["nonfinite_values"] == 1
    first["params"]["w"][1] = 4.0    # every parameter above 2: the same probes stay quiet
    assert chk.train_nan_report(step, first, tmp_path)["nan_at"] is None
    assert chk.train_debug_nans_report(step, first, tmp_path)["raised"] is None
