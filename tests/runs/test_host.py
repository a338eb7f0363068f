"""wmx.runs.host: env steps of an online run at a tick, inside a round too; the stop rule."""
import threading
import time

from wmx.runs.host import env_steps_at_tick, eval_point, stop_reason


def test_env_steps_at_tick_counts_agent_steps_not_the_held_tick():
    # T = 20 agent steps per round (21 ticks), 2 envs, action repeat 2
    args = dict(T=20, n_envs=2, action_repeat=2)
    assert env_steps_at_tick(0, **args) == 0
    assert env_steps_at_tick(9, **args) == 9 * 2 * 2                 # inside round 0
    assert env_steps_at_tick(20, **args) == 20 * 2 * 2               # before the held tick
    assert env_steps_at_tick(21, **args) == 20 * 2 * 2               # the held tick adds none
    assert env_steps_at_tick(21 + 5, **args) == (20 + 5) * 2 * 2     # 5 ticks into round 1
    assert env_steps_at_tick(3 * 21, **args) == 3 * 20 * 2 * 2


def test_stop_reason_puts_a_stop_request_before_the_deadline_and_the_chunk_limit():
    """One rule for both trainers' stop points: a stop request wins (it suppresses the
    deadline's off-schedule evaluation), then the deadline (read at ``now``), then the limit."""
    stop = threading.Event()
    assert stop_reason(3, 3, 10.0, stop, now=11.0) == "deadline"
    assert stop_reason(3, 3, 10.0, stop, now=9.0) == "chunks"
    assert stop_reason(4, 3, None, stop) == "chunks"             # past the limit too
    assert stop_reason(2, 3, 10.0, stop, now=9.0) is None
    assert stop_reason(1, None, 10.0, stop, now=10.0) is None    # at the deadline, not past
    assert stop_reason(1, None, None, None) is None
    stop.set()
    assert stop_reason(1, None, 10.0, stop, now=11.0) == "interrupted"
    assert stop_reason(1, 5, None, stop) == "interrupted"
    assert stop_reason(5, 5, 10.0, stop, now=11.0) == "interrupted"


def test_stop_reason_reads_the_clock_when_not_given_one():
    """Without ``now`` the deadline is compared with ``time.monotonic()``."""
    assert stop_reason(1, None, time.monotonic() - 1, None) == "deadline"
    assert stop_reason(1, None, time.monotonic() + 3600, None) is None


def test_eval_point_evaluates_off_schedule_only_at_a_deadline_stop():
    """A deadline stop evaluates without consuming the schedule; an interrupt or a
    chunk limit evaluates only when due; the last chunk always evaluates on schedule."""
    assert eval_point(False, False, None) == (False, False)
    assert eval_point(False, False, "deadline") == (True, False)
    assert eval_point(False, False, "interrupted") == (False, False)
    assert eval_point(False, False, "chunks") == (False, False)
    assert eval_point(True, False, "interrupted") == (True, True)
    assert eval_point(True, False, "deadline") == (True, True)
    assert eval_point(False, True, None) == (True, True)
