"""Typed agent overrides (--set, a --config file's agent_overrides): wrong types and task
fields are one-line errors before a config is built (wmx.agents.overrides)."""
import pytest

from wmx.agents.registry import agent_names, get_agent
from wmx.envs.registry import get_task

TASK = get_task("probe-action")


@pytest.mark.parametrize("agent,over,msg", [
    ("tdmpc2", {"horizon": "abc"}, "horizon='abc': takes an integer"),
    ("tdmpc2", {"horizon": 3.5}, "horizon=3.5: takes an integer"),
    ("tdmpc2", {"horizon": True}, "horizon=True: takes an integer"),
    ("tdmpc2", {"lr": float("inf")}, "lr=inf: takes a finite number"),
    ("tdmpc2", {"lr": "fast"}, "lr='fast': takes a finite number"),
    ("dreamerv3", {"units": "abc"}, "units='abc': takes an integer"),
    ("dreamerv3", {"imag_horizon": 1.5}, "imag_horizon=1.5: takes an integer"),
])
def test_wrong_types_are_refused(agent, over, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        get_agent(agent).make_config("tiny", over, task=TASK)


@pytest.mark.parametrize("name", agent_names())
def test_task_fields_are_refused(name):
    with pytest.raises(ValueError, match="obs_dim is set by the task"):
        get_agent(name).make_config("tiny", {"obs_dim": 7}, task=TASK)


def test_right_types_pass_ints_for_floats_included():
    cfg = get_agent("tdmpc2").make_config("tiny", {"horizon": 4, "lr": 1}, task=TASK)
    assert (cfg.horizon, cfg.lr) == (4, 1)
    cfg = get_agent("dreamerv3").make_config("tiny", {"imag_horizon": 7}, task=TASK)
    assert cfg.imag_horizon == 7
