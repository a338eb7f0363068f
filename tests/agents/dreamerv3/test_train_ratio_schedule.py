"""The train-ratio schedule against a port of the 2411f7d driver + when.Ratio.

The port (dreamerv3_spec 6.1-6.2, 5.1) walks transitions one by one: step += 1,
replay.add (an env's stream yields an item once it holds `length` rows), then
the train function: nothing until len(replay) >= batch_size, then
Ratio(train_ratio / batch_steps)(step) updates, with Ratio's float prev.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3 import schedule as S


class Ratio:
    """2411f7d embodied/core/when.py Ratio, as dreamerv3_spec 6.1 describes it."""

    def __init__(self, ratio):
        self._ratio = ratio
        self._prev = None

    def __call__(self, step):
        step = int(step)
        if self._ratio == 0:
            return 0
        if self._prev is None:
            self._prev = step
            return 1
        repeats = int((step - self._prev) * self._ratio)
        self._prev += repeats / self._ratio
        return repeats


def reference_updates(n_envs, ticks, batch_size=16, batch_length=65, replay_context=1,
                      train_ratio=512.0):
    """Updates after each tick (cumulative), walking the reference's transitions."""
    batch_steps = batch_size * (batch_length - replay_context)
    should_train = Ratio(train_ratio / batch_steps)
    step, items, done = 0, 0, 0
    stream = [0] * n_envs
    out = []
    for _ in range(ticks):
        for w in range(n_envs):
            step += 1                                  # driver.on_step: step.increment()
            stream[w] += 1                             # replay.add
            if stream[w] >= batch_length:
                items += 1
            if items < batch_size:                     # train_step gate (train_fill 0)
                continue
            done += should_train(step)
        out.append(done)
    return out


@pytest.mark.parametrize("n_envs", [1, 4, 16, 32])
@pytest.mark.parametrize("train_ratio", [512, 32, 1024])
def test_cumulative_updates_match_reference_driver(n_envs, train_ratio):
    ticks = 3000
    sched = S.make_schedule(n_envs, train_ratio=train_ratio)
    ref = reference_updates(n_envs, ticks, train_ratio=float(train_ratio))
    ours = np.cumsum([S.n_updates(i, sched) for i in range(ticks)])
    np.testing.assert_array_equal(ours, ref)
    np.testing.assert_array_equal([S.total_updates(i, sched) for i in range(ticks)], ref)
    first = S.first_update_tick(sched)
    assert ref[first] >= 1 and (first == 0 or ref[first - 1] == 0)
    np.testing.assert_array_equal(jax.jit(lambda t: S.n_updates(t, sched))(jnp.arange(ticks)),
                                  np.diff(ref, prepend=0))


def test_gate_ticks_of_the_paper_setting():
    # 2411f7d gate (B = 16 items, not HEAD's 1024): with 16 envs the 16th item
    # appears at env 15 of tick 64 (transition 1040); 1 env: after 80 rows.
    assert S.first_update_tick(S.make_schedule(16)) == 64
    assert S.make_schedule(16).gate == 64 * 16 + 16
    assert S.make_schedule(1).gate == 80
    assert S.make_schedule(4).gate == 67 * 4 + 4
    # RR 512 with B·T = 1024: half an update per transition, 8 per 16-env tick
    sched = S.make_schedule(16)
    assert [S.n_updates(t, sched) for t in range(63, 68)] == [0, 1, 8, 8, 8]


def test_non_dyadic_ratio_is_exact_and_within_one_of_float_prev():
    # D26: r = 100 / (9·7) has no exact float64 inverse; the reference's float
    # prev may run an update one transition late, wmx never does.
    for n_envs in (3, 5):
        sched = S.make_schedule(n_envs, train_ratio=100, batch_size=9, batch_length=7)
        ref = reference_updates(n_envs, 2000, batch_size=9, batch_length=8, train_ratio=100.0)
        ours = np.array([S.total_updates(i, sched) for i in range(2000)])
        assert np.all(ours - np.array(ref) >= 0) and np.all(ours - np.array(ref) <= 1)
        t = (np.arange(2000) + 1) * n_envs - sched.gate          # exact closed form
        want = np.where(t < 0, 0, 1 + (np.maximum(t, 0) * 100) // (9 * 7))
        np.testing.assert_array_equal(ours, want)


def test_policy_acts_from_the_first_tick():
    sched = S.make_schedule(16)
    assert S.action_mode(0, sched) == S.POLICY
    np.testing.assert_array_equal(S.action_mode(jnp.arange(5), sched), S.POLICY)


def test_bad_arguments_raise():
    with pytest.raises(ValueError):
        S.make_schedule(0)
    with pytest.raises(ValueError):
        S.make_schedule(4, train_ratio=0)
