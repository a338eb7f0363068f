"""`BoundSchedule.first_update_tick`, the closed form of each agent's online schedule
(its ``schedule.first_update_tick``), equals a scan of ``n_updates`` over the ticks (the
oracle) for a grid of configs built as ``train_online`` builds them (the agent's
``make_config`` on the task, then ``schedule(cfg, T, n_envs)``): TD-MPC2 over seed
steps, envs, action repeat and episode length; DreamerV3 over envs, action repeat, train
ratio, batch size and length and replay context."""
import itertools

import pytest

from wmx.agents.dreamerv3 import agent as dreamerv3
from wmx.agents.tdmpc2 import agent as tdmpc2
from wmx.envs.registry import get_task


def scanned_first_update_tick(schedule, limit: int = 10 ** 6) -> int:
    """The oracle: the first tick whose ``schedule.n_updates`` is positive, by looping
    over the ticks."""
    for t in range(limit):
        if int(schedule.n_updates(t)) > 0:
            return t
    raise AssertionError(f"no update in the first {limit} ticks")


def _task(action_repeat: int, T: int | None = None):
    """A DMC-like task: T = 1000 // action_repeat agent steps unless given."""
    return get_task("probe-action").replace(action_repeat=action_repeat,
                                            T=T or 1000 // action_repeat)


@pytest.mark.parametrize("action_repeat,T", [(1, None), (2, None), (4, None), (8, None),
                                             (1, 4), (2, 5), (1, 1), (1, 2)])
def test_tdmpc2_closed_form_equals_the_scan(action_repeat, T):
    """T = 1 with no seed steps: the burst tick ends its round, the first update follows
    the next round's first tick."""
    task = _task(action_repeat, T)
    T = task.T
    seed_steps = (None, 0, 1, T - 1, T, T + 1, 3 * T - 1, 3 * T, 2500)
    for s, n_envs in itertools.product(seed_steps, (1, 2, 3, 4, 16)):
        over = {} if s is None else {"seed_steps": s}
        cfg = tdmpc2.make_config("cpu", over, task=task)
        sched = tdmpc2.schedule(cfg, T, n_envs)
        assert sched.first_update_tick() == scanned_first_update_tick(sched), (s, n_envs)


@pytest.mark.parametrize("action_repeat", [1, 2])
@pytest.mark.parametrize("replay_context", [0, 1])
def test_dreamerv3_closed_form_equals_the_scan(action_repeat, replay_context):
    task = _task(action_repeat)
    grid = itertools.product((1, 2, 3, 16), (32, 100, 512.0, 1024), (1, 5, 16), (2, 7, 64))
    for n_envs, ratio, batch_size, batch_length in grid:
        over = {"n_envs": n_envs, "train_ratio": float(ratio), "batch_size": batch_size,
                "batch_length": batch_length, "replay_context": replay_context}
        cfg = dreamerv3.make_config("cpu", over, task=task)
        sched = dreamerv3.schedule(cfg, task.T, n_envs)
        assert sched.first_update_tick() == scanned_first_update_tick(sched), over


def test_the_paper_settings():
    """DreamerV3 paper protocol: tick 64 (16 envs, B 16, L 65); TD-MPC2 on T = 500 with
    one env: S = max(1000, 5T) = 2500, the burst after agent step 2500, tick 5·501 = 2505."""
    cfg = dreamerv3.make_config("paper", {}, task=_task(2))
    assert dreamerv3.schedule(cfg, 500, 16).first_update_tick() == 64
    cfg = tdmpc2.make_config("paper", {}, task=_task(2))
    assert cfg.seed_steps == 2500 and tdmpc2.schedule(cfg, 500, 1).first_update_tick() == 2505
