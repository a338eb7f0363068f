"""wmx.runs.host: env steps of an online run at a tick, inside a round too."""
from wmx.runs.host import env_steps_at_tick


def test_env_steps_at_tick_counts_agent_steps_not_the_held_tick():
    # T = 20 agent steps per round (21 ticks), 2 envs, action repeat 2
    args = dict(T=20, n_envs=2, action_repeat=2)
    assert env_steps_at_tick(0, **args) == 0
    assert env_steps_at_tick(9, **args) == 9 * 2 * 2                 # inside round 0
    assert env_steps_at_tick(20, **args) == 20 * 2 * 2               # before the held tick
    assert env_steps_at_tick(21, **args) == 20 * 2 * 2               # the held tick adds none
    assert env_steps_at_tick(21 + 5, **args) == (20 + 5) * 2 * 2     # 5 ticks into round 1
    assert env_steps_at_tick(3 * 21, **args) == 3 * 20 * 2 * 2
