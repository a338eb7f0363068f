"""TaskSet and MT19."""
import json

import pytest

from wmx.paths import shared_dir
from wmx.schemas.taskset import (MT19_NAME, TDMPC2_FINAL_RETURNS, TaskInfo, TaskSet,
                                 mt19)

MT19_ORDER = ["walker-stand", "walker-walk", "walker-run", "cheetah-run",
              "reacher-easy", "reacher-hard", "acrobot-swingup", "pendulum-swingup",
              "cartpole-balance", "cartpole-balance-sparse", "cartpole-swingup",
              "cartpole-swingup-sparse", "cup-catch", "finger-spin",
              "finger-turn-easy", "finger-turn-hard", "fish-swim", "hopper-stand",
              "hopper-hop"]


def small():
    return TaskSet("toy", (TaskInfo("a-run", 3, 1, 10, 2, 0.9),
                           TaskInfo("b-walk", 5, 2, 10, 2, 0.9),
                           TaskInfo("c-hop", 4, 3, 10, 2, 0.9)),
                   (100.0, None, 50.0), "made up")


def test_mt19_order_dims_and_maxima():
    ts = mt19()
    assert ts.name == MT19_NAME and list(ts.names) == MT19_ORDER
    assert ts.max_obs_dim == 24 and ts.max_action_dim == 6  # DESIGN.md §4
    assert ts.task("walker-walk").obs_dim == 24 and ts.task("walker-walk").action_dim == 6
    assert ts.task("cartpole-balance").action_dim == 1
    assert all(t.episode_length == 500 and t.action_repeat == 2 for t in ts.tasks)
    assert ts.task_id("cup-catch") == 12
    assert "e9f59321933cbc8e11a002b842adc7d4ffae8ff1" in ts.reference_source


def test_reference_scores_transcribe_the_published_curves():
    curves = json.loads((shared_dir() / "reference" / "tdmpc2_dmc_curves.json").read_text())
    for name in MT19_ORDER:
        assert curves[name]["env_steps"][-1] == 4_000_000
        assert TDMPC2_FINAL_RETURNS[name] == curves[name]["mean"][-1]
        assert mt19().reference_score(name) == curves[name]["mean"][-1]
    assert curves["_source"]["commit"] in mt19().reference_source


def test_json_round_trip_and_properties():
    ts = small()
    assert TaskSet.from_json(ts.to_json()) == ts
    assert TaskSet.from_json(mt19().to_json()) == mt19()
    assert ts.max_obs_dim == 5 and ts.max_action_dim == 3 and len(ts) == 3
    assert ts.task_id("c-hop") == 2 and ts.task(1).name == "b-walk"
    with pytest.raises(ValueError, match="a-run"):
        ts.task_id("nope")


def test_subset_keeps_parent_order_and_renames():
    ts = small()
    sub = ts.subset(["c-hop", "a-run"])
    assert sub.names == ("a-run", "c-hop") and sub.reference_scores == (100.0, 50.0)
    assert sub.name != ts.name and sub.name.startswith("toy-") and len(sub.name) == 12
    assert ts.subset(["a-run", "c-hop"]).name == sub.name  # deterministic
    assert ts.subset(["a-run", "b-walk"]).name != sub.name
    assert ts.subset(ts.names) is ts
    assert ts.subset(["a-run"], name="just-a").name == "just-a"
    with pytest.raises(ValueError, match="not in TaskSet"):
        ts.subset(["zzz"])
    with pytest.raises(ValueError, match="distinct"):
        ts.subset(["a-run", "a-run"])


def test_validation_errors():
    t = TaskInfo("a-run", 3, 1, 10, 2, 0.9)
    with pytest.raises(ValueError, match="duplicate"):
        TaskSet("x", (t, t), (None, None), "")
    with pytest.raises(ValueError, match="reference scores"):
        TaskSet("x", (t,), (1.0, 2.0), "")
    with pytest.raises(ValueError, match="obs_dim"):
        TaskInfo("a", 0, 1, 10, 2, 0.9)
    with pytest.raises(ValueError, match="discount"):
        TaskInfo("a", 1, 1, 10, 2, 1.5)
    with pytest.raises(ValueError, match="'@'"):
        TaskSet("x@y", (t,), (None,), "")
    with pytest.raises(ValueError, match="missing keys"):
        TaskSet.from_dict({"name": "x", "tasks": []})


def test_env_steps_per_episode_is_t_times_the_action_repeat():
    assert TaskInfo("a-run", 3, 1, 10, 2, 0.9).env_steps_per_episode == 20
    assert TaskInfo("a-run", 3, 1, 500, 1, 0.9).env_steps_per_episode == 500
    import dataclasses                       # a derived value, not a stored field
    assert "env_steps_per_episode" not in {f.name for f in dataclasses.fields(TaskInfo)}
