"""benchmarks/learning/env_compare.py's pure parts: the reward-tolerance transcription,
the controller beside scripted_reacher.py's, the target's polar form, the KS statistics
and the comparison arithmetic. The dm_control half runs only where dm_control is
installed (CI has none)."""
import importlib.util
import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "learning"
sys.path.insert(0, str(_DIR))
import env_compare as ec  # noqa: E402

_SPEC = importlib.util.spec_from_file_location("scripted_reacher", _DIR / "scripted_reacher.py")
scripted = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(scripted)


def test_tolerance_without_margin_is_the_inclusive_indicator():
    x = np.array([-0.01, 0.0, 0.03, 0.06, 0.0600001, 0.2])
    assert ec.tolerance(x, (0, 0.06)).tolist() == [0, 1, 1, 1, 0, 0]


def test_tolerance_margin_gives_value_at_margin_one_margin_out():
    # gaussian: 0.1 at one margin past the bound, 1 inside, falling in between
    v = ec.tolerance(np.array([0.05, 0.1, 0.15, 0.2]), (0, 0.1), margin=0.1)
    assert v[:2].tolist() == [1.0, 1.0]
    assert v[3] == pytest.approx(0.1)
    assert 0.1 < v[2] < 1.0
    assert ec.tolerance(0.2, (0, 0.1), margin=0.1, sigmoid="linear") == pytest.approx(0.1)
    assert ec.tolerance(-0.1, (0, 0.1), margin=0.1, sigmoid="linear") == pytest.approx(0.1)
    with pytest.raises(ValueError):
        ec.tolerance(0.2, (0, 0.1), margin=0.1, sigmoid="cosine")


@pytest.mark.parametrize("margin,sigmoid", [(0.0, "gaussian"), (0.05, "gaussian"),
                                            (0.05, "linear")])
def test_tolerance_matches_playground_port(margin, sigmoid):
    reward = pytest.importorskip("mujoco_playground._src.reward")
    x = np.linspace(-0.1, 0.3, 81)
    want = np.asarray(reward.tolerance(jnp.asarray(x), (0.0, 0.06), margin=margin,
                                       sigmoid=sigmoid))
    np.testing.assert_allclose(ec.tolerance(x, (0.0, 0.06), margin, sigmoid), want, atol=1e-6)


def test_tolerance_matches_dm_control():
    rewards = pytest.importorskip("dm_control.utils.rewards")
    x = np.linspace(-0.1, 0.3, 81)
    for margin, sigmoid in [(0.0, "gaussian"), (0.05, "gaussian"), (0.05, "linear")]:
        np.testing.assert_allclose(ec.tolerance(x, (0.0, 0.06), margin, sigmoid),
                                   rewards.tolerance(x, (0.0, 0.06), margin, sigmoid))


def test_controller_is_scripted_reachers_in_numpy_and_jax():
    obs = np.random.default_rng(0).uniform(-2, 2, (32, 6)).astype(np.float32)
    want = np.stack([np.asarray(scripted.jacobian_policy(jnp.asarray(o), 60.0, 0.6))
                     for o in obs])
    np.testing.assert_allclose(ec.jacobian_policy(obs, 60.0, 0.6), want, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ec.jacobian_policy(jnp.asarray(obs), 60.0, 0.6, jnp)),
                               want, atol=1e-5)


def test_polar_inverts_dm_controls_target_placement():
    r, a = np.array([0.05, 0.1, 0.2]), np.array([0.3, 3.0, 6.0])
    xy = np.stack([r * np.sin(a), r * np.cos(a)], -1)           # Reacher.initialize_episode
    got_r, got_a = ec.polar(xy)
    np.testing.assert_allclose(got_r, r)
    np.testing.assert_allclose(got_a, a)


def test_ks_statistics():
    n = 1000
    grid = (np.arange(n) + 0.5) / n
    assert ec.ks_uniform(grid, 0, 1) == pytest.approx(0.5 / n)
    assert ec.ks_uniform(grid * 0.5, 0, 1) == pytest.approx(0.5, abs=1e-3)
    assert ec.ks_two(grid, grid) == 0.0
    assert ec.ks_two(grid, grid + 2) == 1.0
    assert ec.ks_two([0.0, 1.0], [0.5]) == 0.5
    assert ec.ks_critical(100) == pytest.approx(0.1628)
    assert ec.ks_critical(100, 100) == pytest.approx(0.1628 * np.sqrt(2))


def test_summaries_and_differences():
    s = ec.returns_summary([0.0, 2.0, 4.0, 10.0])
    assert (s["mean"], s["median"], s["min"], s["max"], s["n"]) == (4.0, 3.0, 0.0, 10.0, 4)
    assert s["sem"] == pytest.approx(np.std([0, 2, 4, 10], ddof=1) / 2)
    d = ec.paired_diff([1.0, 2.0, 3.0], [1.0, 1.0, 1.0])
    assert (d["mean"], d["n_differ"], d["n"]) == (1.0, 2, 3)
    a = np.zeros((2, 3, 2))
    b = a.copy()
    b[1, 0, 1], b[0, 2, 0] = 0.5, -2.0
    assert ec.max_abs_over_steps(a, b, (1, 2, 3, 9)) == {"1": 0.5, "2": 0.0, "3": 2.0}
    u = ec.sample_summary([0.0, 1.0], 0, 1)
    assert (u["mean"], u["min"], u["max"]) == (0.5, 0.0, 1.0) and "ks_vs_uniform" in u


def test_request_files_round_trip(tmp_path):
    meta, arr = {"seed": 3, "kp": 60.0}, {"x": np.arange(6.0).reshape(2, 3)}
    ec._save(tmp_path / "r.npz", meta, arr)
    got_meta, got_arr = ec._load(tmp_path / "r.npz")
    assert got_meta == meta and list(got_arr) == ["x"]
    np.testing.assert_array_equal(got_arr["x"], arr["x"])


def test_build_request_shapes_and_ranges():
    args = ec.argparse.Namespace(seed=0, kp=60.0, kd=0.6, resets=10, states=5, dyn_states=3,
                                 dyn_steps=4, episodes=2, T=7)
    req = ec.build_request(args)
    assert req["state_qpos"].shape == (5, 2) and req["dyn_actions"].shape == (3, 4, 2)
    assert req["episode_actions"].shape == (2, 7, 2)
    assert np.abs(req["episode_actions"]).max() <= 1
    r, _ = ec.polar(req["state_target"])
    assert r.min() >= 0.05 and r.max() <= 0.2
    assert np.abs(req["grid_qpos"][:, 1]).max() <= np.radians(160)
    assert req["grid_dist"].size == 63 * 4


def test_dmc_half_on_a_tiny_request():
    pytest.importorskip("dm_control.suite")
    args = ec.argparse.Namespace(seed=0, kp=60.0, kd=0.6, resets=4, states=3, dyn_states=2,
                                 dyn_steps=3, episodes=1, T=500)
    req = ec.build_request(args)
    req.update(start_qpos=req["dyn_qpos"][:1], start_qvel=np.zeros((1, 2)),
               start_target=req["dyn_target"][:1])
    meta, arr = ec.dmc_half(req)
    assert [k for k, _ in meta["agent"]["obs_layout"]] == ["position", "to_target", "velocity"]
    assert meta["agent"]["T_agent_steps"] == 500
    assert set(meta["agent_step_rewards_seen"]) <= {0.0, 1.0, 2.0}
    assert arr["dyn_qpos"].shape == (2, 3, 2)
    # the observation of a set state is its qpos, target - finger, qvel
    np.testing.assert_allclose(arr["state_obs"][:, [0, 1, 4, 5]],
                               np.concatenate([req["state_qpos"], req["state_qvel"]], 1))


def test_an_interpreter_without_dm_control_is_refused_before_any_work(tmp_path):
    assert ec.dmc_unusable(str(tmp_path / "no-python")) == "no such interpreter"
    script = str(_DIR / "env_compare.py")
    r = subprocess.run([sys.executable, script, "--dmc-python", str(tmp_path / "nope"),
                        "--out", str(tmp_path / "o.json")], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "no such interpreter" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "o.json").exists()
    r = subprocess.run([sys.executable, script, "--episodes", "0"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and "--episodes 0: give a count of 1 or more" in r.stderr


def test_table_of_short_rollouts_names_the_steps_they_reach():
    """The stdout table of a run with rollouts shorter than 5 agent steps and no rollout
    near the wrist's limit: only the steps reached get a row, the empty split reads "-"."""
    import copy
    import json

    import env_compare_report as rep
    res = json.loads((_DIR.parents[0] / "results" / "env_compare_reacher-easy.json").read_text())
    full = rep.table(res)
    assert sum(r[0].startswith("dynamics max") for r in full) == 3   # after 1, 5 and 50 steps
    short = copy.deepcopy(res)
    dy = short["dynamics"]
    dy["agent_steps"] = 2
    for k in ("qpos_max_abs_diff", "qvel_max_abs_diff"):
        dy[k] = {"1": dy[k]["1"], "2": dy[k]["2"]}
    dy["wrist_limit_split"].update(n_near_limit=0, qvel_max_abs_diff_near_limit=None)
    rows = rep.table(short)
    steps = [r[0] for r in rows if r[0].startswith("dynamics max")]
    assert steps == ["dynamics max |dqpos| / |dqvel| after 1 agent steps",
                     "dynamics max |dqpos| / |dqvel| after 2 agent steps"]
    wrist = next(r for r in rows if "wrist near limit" in r[0])
    assert wrist[1].startswith("- / ")
