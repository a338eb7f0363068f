"""`evaluate --video N`: recorded episodes keep their returns, MP4s decode, report links them.

The rollouts use `renderable_env.HingeProbe` (probe-action with a one-hinge
MuJoCo model: no MJX compile) through `evaluate`'s env seam, on a DreamerV3
online run built by hand (its checkpoint holds the initial states, which is
all the evaluator restores; DreamerV3's tiny rollout compiles in seconds,
TD-MPC2's in about 40 s per program on 2 cores, so TD-MPC2 and the real
Playground cartpole are the slow tests at the end). MUJOCO_GL is chosen at
collection, before any test imports mujoco; without a working backend the
rendering tests are skipped with the reason.
"""
import dataclasses
import json
import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from renderable_env import hinge_probe
from wmx.acting import make_evaluate_fn, rollout_key
from wmx.checkpoint import save_checkpoint
from wmx.evaluate import cli, gl_backend
from wmx.evaluate.gl_backend import NoGLBackend, choose_gl_backend, pick_backend
from wmx.runs.host import HostState
from wmx.runs.online_config import OnlineRunConfig

try:
    GL, NO_GL = choose_gl_backend(), ""
except NoGLBackend as err:
    GL, NO_GL = None, str(err)
needs_gl = pytest.mark.skipif(GL is None, reason=f"no OpenGL backend renders here: {NO_GL}")
"""Skip the tests that render when no backend works (the reason names what to install)."""
pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # imageio's ffmpeg

T, E, N = 20, 3, 2         # probe-action's T; evaluated episodes per seed, videos per task
SEEDS = (0, 3)


def _decode(path):
    import imageio.v2 as iio
    return np.stack(iio.mimread(str(path), format="FFMPEG", memtest=False))


def _listing(root):
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*"))


def hand_built_run(home: Path, rc: OnlineRunConfig, next_tick: int = 0) -> Path:
    """An online run directory <home>/runs/<agent> whose only checkpoint holds `rc`'s
    initial agent states (no training)."""
    run_dir = home / "runs" / rc.agent
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(rc.to_json()))
    agent, cfg = rc.agent_module, rc.agent_config
    keys = jnp.stack([jax.random.PRNGKey(s) for s in rc.seeds])
    states = jax.jit(jax.vmap(lambda k: agent.init(k, cfg)))(keys)
    save_checkpoint(run_dir, next_tick, {"agent": states, "keys": keys},
                    HostState(next_tick=next_tick).to_json())
    return run_dir


DV3_RC = OnlineRunConfig(task="probe-action", agent="dreamerv3", seeds=SEEDS, preset="tiny",
                         env_steps=2 * T, eval_every=T, eval_episodes=E)


@pytest.fixture(scope="module")
def dv3_run(tmp_path_factory):
    """(home, run_dir) of DV3_RC at tick 2(T+1): 2 episodes, 40 env steps."""
    home = tmp_path_factory.mktemp("video-home")
    return home, hand_built_run(home, DV3_RC, next_tick=2 * (T + 1))


# ---- the rollout: recording adds outputs, changes nothing ----------------------------------
def _check_recording(run_dir: Path) -> None:
    """record=N returns what record=0 returns, bit for bit, plus the physics of the first N
    episodes of each seed (checked against the resets and the returns). The run's restored
    policy: the programs are those `evaluate` compiles for it."""
    from wmx.evaluate.runs import open_run, restore_policy
    info = open_run(run_dir)
    agent, cfg = info.rc.agent_module, info.rc.agent_config
    env = hinge_probe("probe-action", T, 1)
    params, keys = restore_policy(info)
    plain = make_evaluate_fn(agent, cfg, E, env)(params, keys, None, 1)
    rets, phys = make_evaluate_fn(agent, cfg, E, env, record=N)(params, keys, None, 1)
    np.testing.assert_array_equal(np.asarray(rets), np.asarray(plain))   # bit-identical
    qpos = np.asarray(phys["qpos"])
    assert list(phys) == ["qpos"] and qpos.shape == (len(SEEDS), N, T + 1, 1)
    for s in range(len(SEEDS)):     # row 0: the reset angles of the seed's first N episodes
        k_reset, _ = jax.random.split(rollout_key(keys[s], 1))
        x0 = jax.vmap(env.reset)(jax.random.split(k_reset, E)).inner["angle"]
        np.testing.assert_allclose(qpos[s, :, 0, 0], np.asarray(x0)[:N], rtol=1e-6)
    # each step turns the hinge by 0.3 * a[0] and the return is the sum of a[0]:
    # the recorded path must account for the returns of the recorded episodes
    turned = (qpos[:, :, -1, 0] - qpos[:, :, 0, 0]) / 0.3
    np.testing.assert_allclose(turned, np.asarray(rets)[:, :N], atol=1e-3)


def test_recording_keeps_the_returns_and_records_the_first_episodes(dv3_run):
    _check_recording(dv3_run[1])


@pytest.mark.slow
def test_tdmpc2_recording_keeps_the_returns(tmp_path):
    rc = dataclasses.replace(DV3_RC, agent="tdmpc2")
    _check_recording(hand_built_run(tmp_path, rc, next_tick=2 * (T + 1)))


def test_only_the_filmed_seeds_physics_leaves_the_device(dv3_run, monkeypatch):
    """evaluate_run --video: every seed's returns, but only the first seed's recorded
    physics is fetched to the host; the recording is that seed's (its path accounts for
    its returns)."""
    from wmx.evaluate.runs import evaluate_run, open_run
    info = open_run(dv3_run[1])
    fetched, real = [], jax.device_get
    monkeypatch.setattr(jax, "device_get",
                        lambda x: fetched.append(jax.tree_util.tree_map(np.shape, x)) or real(x))
    rets, _, (rec,) = evaluate_run(info, ["probe-action"], E, env_fn=hinge_probe, video=N)
    assert fetched[-1] == ((len(SEEDS), E), {"qpos": (N, T + 1, 1)})
    assert rets["probe-action"].shape == (len(SEEDS), E) and rec.seed == SEEDS[0]
    np.testing.assert_array_equal(rec.returns, rets["probe-action"][0, :N])
    turned = (rec.physics["qpos"][:, -1, 0] - rec.physics["qpos"][:, 0, 0]) / 0.3
    np.testing.assert_allclose(turned, rets["probe-action"][0, :N], atol=1e-3)


def test_recording_checks_its_arguments():
    agent, cfg = DV3_RC.agent_module, DV3_RC.agent_config
    with pytest.raises(ValueError, match="record must be in"):
        make_evaluate_fn(agent, cfg, E, hinge_probe("probe-action", T, 1), record=E + 1)
    from wmx.envs.probes import make_probe_env
    with pytest.raises(ValueError, match="no MuJoCo model"):
        make_evaluate_fn(agent, cfg, E, make_probe_env("probe-action"), record=1)


# ---- the GL backend -------------------------------------------------------------------------
def test_the_cli_modules_leave_mujoco_unimported():
    """mujoco fixes its GL backend when first imported, so `choose_gl_backend` must run
    before it: importing the CLIs and the env wrapper must not import mujoco."""
    import subprocess
    import sys
    code = ("import sys, wmx.evaluate.cli, wmx.train_online.cli, wmx.train_offline.cli, "
            "wmx.envs.playground; print('mujoco' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr


def test_backend_choice_user_wins_then_egl_then_osmesa():
    tried = []

    def works(ok):
        return lambda name: tried.append(name) or (None if name in ok else f"{name} failed")

    assert pick_backend("OSMesa", works({"osmesa", "egl"})) == "osmesa" and tried == ["osmesa"]
    tried.clear()
    assert pick_backend(None, works({"osmesa", "egl"})) == "egl" and tried == ["egl"]
    tried.clear()
    assert pick_backend("", works({"osmesa"})) == "osmesa" and tried == ["egl", "osmesa"]
    with pytest.raises(NoGLBackend) as e:
        pick_backend(None, works(set()))
    msg = str(e.value)
    assert "\n" not in msg and "libegl1" in msg and "libosmesa6" in msg and "egl failed" in msg
    with pytest.raises(NoGLBackend, match="MUJOCO_GL=glx .set in the environment"):
        pick_backend("glx", works({"egl"}))                # the user's choice is not replaced


@pytest.mark.skipif(bool(os.environ.get("DISPLAY")), reason="a display: GLFW may render")
def test_a_backend_fixed_before_the_choice_is_checked_by_rendering():
    """mujoco imported with MUJOCO_GL unset takes GLFW, which without a display makes a
    null window with warnings only: the check must render a frame to see it fail."""
    import subprocess
    import sys
    code = ("import mujoco\n"
            "from wmx.evaluate.gl_backend import NoGLBackend, choose_gl_backend\n"
            "try:\n    choose_gl_backend()\nexcept NoGLBackend as e:\n    print('NoGL', e)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MUJOCO_GL", "PYOPENGL_PLATFORM")}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("NoGL mujoco was imported in this process with MUJOCO_GL=(unset)")


# ---- evaluate --video end to end --------------------------------------------------------------
@pytest.fixture(scope="module")
def reports(dv3_run, tmp_path_factory):
    """The run evaluated on HingeProbe without and with --video (TensorBoard + W&B)."""
    home, run_dir = dv3_run
    root = tmp_path_factory.mktemp("video-reports")
    mp = pytest.MonkeyPatch()
    mp.setenv("WANDB_MODE", "offline")
    mp.setenv("WANDB_SILENT", "true")
    try:
        plain = cli.evaluate_to_report(run_dir, episodes=E, out=root / "plain", home=home,
                                       env_fn=hinge_probe, compile_cache=False)
        video = cli.evaluate_to_report(run_dir, episodes=E, out=root / "video", home=home,
                                       env_fn=hinge_probe, compile_cache=False, video=N,
                                       logger="tensorboard,wandb")
    finally:
        mp.undo()
    return plain.parent, video.parent


@needs_gl
def test_video_changes_no_return(reports):
    plain, video = (json.loads((d / "report.json").read_text()) for d in reports)
    assert video["returns"] == plain["returns"]                     # same keys, same episodes
    assert video["per_task"] == plain["per_task"]
    assert "videos" not in plain and not (reports[0] / "videos").exists()


@needs_gl
def test_video_files_decode_and_report_links_them(reports):
    out = reports[1]
    rep = json.loads((out / "report.json").read_text())
    names = [f"videos/probe-action_seed0_ep{i}.mp4" for i in range(N)]
    assert [v["path"] for v in rep["videos"]] == names
    assert sorted(p.name for p in (out / "videos").iterdir()) == [Path(n).name for n in names]
    assert rep["evaluation"]["video"] == {"episodes": N, "seed": 0, "gl_backend": GL}
    md = (out / "report.md").read_text()
    movies = []
    for i, (name, v) in enumerate(zip(names, rep["videos"])):
        assert f"[{name}]({name})" in md
        frames = _decode(out / name)
        assert frames.shape == (T + 1, 240, 320, 3) and frames.dtype == np.uint8
        assert (v["frames"], v["height"], v["width"], v["fps"], v["camera"]) == \
            (T + 1, 240, 320, 25.0, "front")
        assert v["return"] == rep["returns"]["probe-action"]["0"][i]   # seed 0, episode i
        movies.append(frames)
    # each video shows its own episode: the first frames differ (other reset angles),
    # and within an episode the hinge moves unless the policy held a[0] at 0
    assert np.abs(movies[0][0].astype(int) - movies[1][0].astype(int)).mean() > 1.0
    for frames, v in zip(movies, rep["videos"]):
        moved = np.abs(frames[-1].astype(int) - frames[0].astype(int)).mean()
        assert moved > 0.5 or abs(v["return"]) < 0.5


@needs_gl
def test_videos_go_to_tensorboard_and_wandb(reports):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    import imageio.v2 as iio
    out = reports[1]
    rep = json.loads((out / "report.json").read_text())
    assert rep["loggers"]["tensorboard"] == "tensorboard"
    acc = EventAccumulator(str(out / "tensorboard" / "seed_0"), size_guidance={"images": 0})
    acc.Reload()
    assert sorted(acc.Tags()["images"]) == [f"video/probe-action/ep{i}" for i in range(N)]
    (ev,) = acc.Images("video/probe-action/ep0")
    assert ev.step == 2 * T and (ev.height, ev.width) == (120, 160)     # env steps; half size
    gif = iio.mimread(ev.encoded_image_string, format="GIF")
    assert len(gif) == T + 1
    wb = rep["loggers"]["wandb"]
    assert wb["mode"] == "offline" and wb["dir"].startswith("wandb/offline-run-")
    media = list((out / wb["dir"]).rglob("*.mp4"))
    assert len(media) == N
    md = (out / "report.md").read_text()
    assert "tensorboard --logdir tensorboard" in md and f"wandb sync {wb['dir']}" in md


@needs_gl
def test_a_failure_while_rendering_leaves_no_report(reports, tmp_path, monkeypatch):
    from wmx.evaluate import report as rep
    from wmx.evaluate import video
    report = rep.load_report(reports[0])
    done = []

    def encode(path, frames, fps):        # the first video is written, the second fails
        if done:
            raise RuntimeError("encoder died")
        done.append(Path(path).write_bytes(b"x"))
        return 1

    monkeypatch.setattr(video, "write_mp4", encode)
    rec = video.Recording("probe-action", 0, {"qpos": np.zeros((2, 3, 1), np.float32)},
                          np.zeros(2, np.float32), hinge_probe("probe-action", T, 1).mj_model,
                          25.0)
    with pytest.raises(RuntimeError, match="encoder died"):
        rep.write_report(report, tmp_path / "r", media=lambda d: {
            "videos": video.write_videos([rec], d)})
    assert done and list(tmp_path.iterdir()) == []            # no report, no temporary


# ---- bad input --------------------------------------------------------------------------------
def test_bad_video_input_is_one_line_exit_2_and_writes_nothing(dv3_run, tmp_path, capsys,
                                                              monkeypatch):
    home, run_dir = dv3_run
    before = _listing(home)
    out = tmp_path / "r"
    cases = [
        (["--run", run_dir, "--out", out, "--video", -1], "--video must be >= 0"),
        (["--run", run_dir, "--out", out, "--episodes", 2, "--video", 3], "more than --episodes"),
        (["--run", run_dir, "--out", out, "--logger", "tensorboard"], "add --video N"),
        (["--run", run_dir, "--out", out, "--video", 1, "--logger", "tb"], "unknown logger"),
        (["--runs", run_dir, run_dir, "--out", out, "--video", 1], "apply to --run only"),
    ]
    monkeypatch.setattr(gl_backend, "choose_gl_backend", lambda: "egl")   # GL is not the issue
    cases.append((["--run", run_dir, "--out", out, "--episodes", 2, "--video", 1],
                  "probe-action cannot be rendered"))                 # the real probe env
    for argv, msg in cases:
        assert cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert msg in err and len(err.strip().splitlines()) == 1, (argv, err)
    assert _listing(home) == before and list(tmp_path.iterdir()) == []


def test_no_gl_backend_is_one_line_exit_2_and_writes_nothing(dv3_run, tmp_path, capsys,
                                                             monkeypatch):
    home, run_dir = dv3_run
    before = _listing(home)
    monkeypatch.setattr(gl_backend, "_works_in_subprocess", lambda name: f"no {name} here")
    monkeypatch.setattr(gl_backend, "_works_in_process", lambda name: f"no {name} here")
    monkeypatch.delenv("MUJOCO_GL", raising=False)
    assert cli.main(["--run", run_dir, "--out", tmp_path / "r", "--episodes", 2,
                     "--video", 1]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "libegl1" in err and "libosmesa6" in err
    assert _listing(home) == before and list(tmp_path.iterdir()) == []


# ---- the real Playground cartpole (slow: an MJX compile per program) -----------------------
@pytest.mark.slow
@needs_gl
@pytest.mark.parametrize("agent_name", ["tdmpc2", "dreamerv3"])
def test_cartpole_video_keeps_returns(agent_name, tmp_path):
    rc = OnlineRunConfig(task="cartpole-balance", agent=agent_name, seeds=(1,), preset="tiny",
                         episode_length=10, env_steps=20, eval_every=20, eval_episodes=2)
    run_dir = hand_built_run(tmp_path, rc)
    plain = cli.evaluate_to_report(run_dir, episodes=2, out=tmp_path / "a", compile_cache=False)
    video = cli.evaluate_to_report(run_dir, episodes=2, out=tmp_path / "b", video=1,
                                   compile_cache=False)
    a, b = (json.loads(p.with_name("report.json").read_text()) for p in (plain, video))
    assert a["returns"] == b["returns"]
    (v,) = b["videos"]
    assert (v["camera"], v["fps"]) == ("fixed", 50.0)                 # dt 0.01 x repeat 2
    assert _decode(video.parent / v["path"]).shape == (11, 240, 320, 3)
