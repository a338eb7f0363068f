"""The agent registry and the CLIs' agent flags: lazy import, known names, flags of
another agent rejected, --set parsed, --model-size typed per agent."""
from __future__ import annotations

import argparse
import sys

import pytest

from wmx.agents import registry
from wmx.agents.registry import AgentEntry
from wmx.runs.cli_common import add_agent_arguments, agent_overrides, parse_set


@pytest.fixture
def two_agents(monkeypatch):
    """The registry with a second, fake agent owning --horizon-frames (str model sizes)."""
    agents = dict(registry.AGENTS)
    agents["other"] = AgentEntry("other", "wmx.agents.tdmpc2.agent",
                                 flags={"horizon_frames": int}, model_size=str,
                                 modes=("online",))
    monkeypatch.setattr(registry, "AGENTS", agents)
    return agents


def _parser(mode):
    p = argparse.ArgumentParser()
    add_agent_arguments(p, mode)
    return p


def _args(argv, mode="online"):
    return _parser(mode).parse_args(argv)


def test_unknown_agent_names_the_known_ones():
    with pytest.raises(ValueError, match=r"'sac'.*tdmpc2"):
        registry.get_agent("sac")


def test_modules_import_lazily():
    assert registry.get_agent("tdmpc2").NAME == "tdmpc2"
    assert "wmx.agents.tdmpc2.agent" in sys.modules


def test_flags_of_another_agent_are_rejected(two_agents):
    with pytest.raises(ValueError, match=r"--horizon-frames \(other\) not understood by "
                                         r"--agent tdmpc2; use --set"):
        agent_overrides(_args(["--agent", "tdmpc2", "--horizon-frames", "3"]))
    with pytest.raises(ValueError, match=r"--num-q \(tdmpc2\) not understood by --agent other"):
        agent_overrides(_args(["--agent", "other", "--num-q", "3"]))
    assert agent_overrides(_args(["--agent", "other", "--horizon-frames", "3"])) == {
        "horizon_frames": 3}
    # an agent that does not train offline is not offered there
    with pytest.raises(ValueError, match="not available for offline training"):
        registry.get_entry("other", "offline")


def test_set_and_model_size_overrides(two_agents):
    over = agent_overrides(_args(["--agent", "tdmpc2", "--model-size", "5", "--num-q", "4",
                                  "--set", "horizon=5", "--set", "num_q=3",
                                  "--set", "tau=0.02"]))
    assert over == {"model_size": 5, "num_q": 3, "horizon": 5, "tau": 0.02}   # --set wins
    assert agent_overrides(_args(["--agent", "other", "--model-size", "12m"])) == {
        "model_size": "12m"}
    with pytest.raises(ValueError, match="--model-size '12m' is not a tdmpc2 model size"):
        agent_overrides(_args(["--agent", "tdmpc2", "--model-size", "12m"]))
    assert parse_set(["a=true", "b=[1, 2]", "c=12m", "d-e=1e-4"]) == {
        "a": True, "b": [1, 2], "c": "12m", "d_e": 1e-4}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_set(["horizon"])


def test_unknown_set_field_is_named_with_the_close_names():
    """A misspelt field names its close field names; a field with none lists every field
    (the command line has no other list of them)."""
    import dataclasses

    from wmx.envs.registry import get_task
    task = get_task("probe-action")
    agent = registry.get_agent("tdmpc2")
    with pytest.raises(ValueError, match=r"\['horizn'\] \('horizn': did you mean 'horizon'\?\)$"):
        agent.make_config("tiny", parse_set(["horizn=5"]), task=task)
    dv3 = registry.get_agent("dreamerv3")
    with pytest.raises(ValueError, match="'imag_horizn': did you mean 'imag_horizon'") as e:
        dv3.make_config("tiny", {"imag_horizn": 5, "qqq": 1}, task=task)
    fields = sorted(f.name for f in dataclasses.fields(type(dv3.make_config("tiny", {},
                                                                              task=task))))
    assert str(e.value).endswith("; the fields: " + ", ".join(fields))


def test_online_only_flags_are_not_offered_offline():
    """--seed-steps (tdmpc2) and --train-ratio (dreamerv3) act only online: train_offline's
    parser does not have them; the shared model flags stay in both."""
    online = {a.dest for a in _parser("online")._actions}
    offline = {a.dest for a in _parser("offline")._actions}
    assert {"seed_steps", "train_ratio"} <= online
    assert not {"seed_steps", "train_ratio"} & offline
    assert {"units", "num_samples", "mlp_dim"} <= offline
    with pytest.raises(SystemExit):
        _parser("offline").parse_args(["--train-ratio", "64"])
