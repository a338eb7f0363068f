"""benchmarks/learning/env_suite_compare.py's pure parts: the task names, the Welch
difference, the flag, the comparison of a task and its Markdown row, and the physics
summary of a MuJoCo model (here on Playground's own model). The dm_control half runs only
where dm_control is installed (CI has none); the Playground half's returns and observation
are the wrapper's, tested with it."""
import math
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "learning"))
import env_suite_compare as esc  # noqa: E402
import env_suite_dmc as dmc  # noqa: E402


def test_every_mt19_task_has_its_dm_control_name():
    from wmx.schemas.taskset import mt19
    assert list(dmc.DMC_NAMES) == list(mt19().names)           # mt30 order, all 19
    assert dmc.DMC_NAMES["cup-catch"] == ("ball_in_cup", "catch")
    assert dmc.DMC_NAMES["finger-turn-hard"] == ("finger", "turn_hard")
    assert set(dmc.TARGET_TASKS) <= set(dmc.DMC_NAMES)


def test_welch_is_the_textbook_formula():
    a, b = np.array([1.0, 2.0, 4.0, 7.0]), np.array([0.0, 1.0, 1.0])
    diff, se = esc.welch(a, b)
    assert diff == pytest.approx(3.5 - 2 / 3)
    # sample variances 7 and 1/3 (ddof 1): sqrt(7/4 + (1/3)/3)
    assert se == pytest.approx(math.sqrt(7 / 4 + 1 / 9))


@pytest.mark.parametrize("pg,dm,flagged", [
    ([100.0, 102.0, 98.0, 100.0], [50.0, 52.0, 48.0, 50.0], True),     # 50 points, SE ~1.2
    ([15.0, 16.0, 14.0, 15.0], [10.0, 11.0, 9.0, 10.0], False),        # 5 points: under 10
    ([100.0, 300.0, 0.0, 200.0], [60.0, 260.0, -40.0, 160.0], False),  # 40 points, SE ~91
    ([0.0, 0.0], [0.0, 0.0], False),                                    # the same constant
    ([20.0, 20.0], [0.0, 0.0], True),                                   # constants apart
])
def test_a_difference_is_flagged_above_3_se_and_10_points(pg, dm, flagged):
    row = esc.returns_row(np.array(pg), np.array(dm))
    assert row["flagged"] is flagged
    assert row["difference"] == pytest.approx(np.mean(pg) - np.mean(dm))
    assert row["playground"]["n"] == len(pg) and row["dm_control"]["n"] == len(dm)


def test_compare_task_and_its_markdown_row():
    settings = {"control_dt": 0.02, "sim_dt": 0.005, "n_substeps": 4}
    phys = {"timestep": 0.005, "iterations": 4, "nq": 2}
    pg_meta = {"settings": settings, "physics": phys}
    dm_meta = {"suite": "reacher/easy", "obs_layout": [["position", 2]],
               "settings": {**settings, "sim_dt": 0.02, "n_substeps": 1},
               "physics": {**phys, "timestep": 0.02, "iterations": 100}}
    r = np.arange(8.0)
    pg = {"random_returns": r + 50, "zero_returns": r, "state_obs": np.ones((3, 4))}
    dm = {"random_returns": r, "zero_returns": r, "state_obs": np.ones((3, 4)) + 1e-3}
    c = esc.compare_task("cartpole-swingup", pg_meta, pg, dm_meta, dm)
    assert c["settings"]["differs"] == {"n_substeps": [4, 1], "sim_dt": [0.005, 0.02]}
    assert c["physics"]["differs"] == {"iterations": [4, 100], "timestep": [0.005, 0.02]}
    assert c["observation"]["max_abs_diff"] == pytest.approx(1e-3)
    assert c["random_policy"]["flagged"] and not c["zero_action"]["flagged"]
    row = esc.markdown({"tasks": {"cartpole-swingup": c}}).splitlines()[-1]
    assert row.startswith("| cartpole-swingup | 0.005 / 0.02 | iterations | 0.001 |")
    assert "53.5 / 3.5 (+50.0 ± 1.2) **differs**" in row
    del pg["state_obs"]
    c = esc.compare_task("reacher-easy", pg_meta, pg, dm_meta, dm)
    assert c["observation"] is None
    assert c["observation_not_compared"] == "qpos or qvel sizes differ"


def test_physics_summary_of_a_mujoco_model():
    import mujoco
    m = mujoco.MjModel.from_xml_string(
        "<mujoco><option timestep='0.004' iterations='7'/><worldbody><body>"
        "<joint name='j' type='hinge' damping='0.5'/><geom size='0.1' mass='2'/>"
        "</body></worldbody><actuator><motor joint='j' gear='3' ctrlrange='-1 1'/>"
        "</actuator></mujoco>")
    s = dmc.physics_summary(m)
    assert (s["timestep"], s["iterations"], s["nq"], s["nv"], s["nu"]) == (0.004, 7, 1, 1, 1)
    assert s["actuator_gear"] == [3.0] and s["dof_damping"] == [0.5]
    assert s["total_mass"] == pytest.approx(2.0) and s["disabled_flags"] == []


def test_unknown_tasks_are_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        esc.main(["--tasks", "walker-fly"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--tasks walker-fly: not mt19 tasks" in err


def test_reset_ks_flags_the_coordinate_whose_start_law_differs():
    """pendulum's start angle: Playground's U[0, pi) against dm_control's U[-pi, pi) (E23)
    is flagged, an equal law is not; sizes that differ are not compared."""
    rng = np.random.default_rng(0)
    n = 1000
    dm = {"reset_qpos": rng.uniform(-np.pi, np.pi, (n, 1)), "reset_qvel": np.zeros((n, 1))}
    same = {"reset_qpos": rng.uniform(-np.pi, np.pi, (n, 1)), "reset_qvel": np.zeros((n, 1))}
    half = {"reset_qpos": rng.uniform(0, np.pi, (n, 1)), "reset_qvel": np.zeros((n, 1))}
    crit = esc.KS_C * math.sqrt(2 / n)
    ok = esc.reset_ks(same, dm)
    assert ok["critical"] == pytest.approx(crit) and ok["flagged"] == []
    assert ok["qvel"] == [0.0] and ok["max"] < crit
    bad = esc.reset_ks(half, dm)
    assert bad["flagged"] == ["qpos[0]"]
    assert bad["qpos"][0] == pytest.approx(0.5, abs=0.05)     # half the mass moved
    assert esc.reset_ks({"reset_qpos": np.zeros((n, 2)), "reset_qvel": np.zeros((n, 1))},
                        dm) is None
    assert esc.reset_ks({}, dm) is None


def test_reset_ks_compares_in_float32():
    """A constant start coordinate (fish's height, 0.1 m) is 0.1 in float64 on dm_control
    and in float32 on Playground: equal, not a KS of 1."""
    n = 200
    pg = {"reset_qpos": np.full((n, 1), np.float32(0.1)), "reset_qvel": np.zeros((n, 1))}
    dm = {"reset_qpos": np.full((n, 1), 0.1), "reset_qvel": np.zeros((n, 1))}
    got = esc.reset_ks(pg, dm)
    assert got["qpos"] == [0.0] and got["flagged"] == []
