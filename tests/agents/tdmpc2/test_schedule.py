"""The online schedule against a port of the reference loop (tdmpc2_spec 4.C)."""
import jax.numpy as jnp
import pytest

from wmx.agents.tdmpc2 import schedule as S


def reference_loop(total_steps, T, seed_steps):
    """Port of the b67b21c/5f6fade online loop's control flow (spec 4.C).

    Returns, per agent step, (random action?, updates after the step,
    number of completed episodes in the buffer when the updates run).
    """
    out = []
    completed = 0
    for step in range(total_steps):
        if step > 0 and step % T == 0:       # done seen at the start of the iteration
            completed += 1
        random = step <= seed_steps
        n = (seed_steps if step == seed_steps else 1) if step >= seed_steps else 0
        out.append((random, n, completed))
    return out


@pytest.mark.parametrize("T,seed_steps", [(500, 2500), (20, 50), (20, 100), (7, 3)])
def test_single_env_matches_reference_loop(T, seed_steps):
    sched = S.make_schedule(T, 1, seed_steps)
    ref = reference_loop(12 * T, T, seed_steps)
    ticks = [e * (T + 1) + k for e in range(12) for k in range(T)]
    for step, tick in enumerate(ticks):
        random, n, completed = ref[step]
        if step < max(seed_steps, T):      # the reference never updates before an episode is stored
            assert S.action_mode(tick, sched) == S.RANDOM
        mode = S.action_mode(tick, sched)
        if seed_steps >= T:
            assert (mode == S.RANDOM) == random, (step, tick)
            assert S.n_updates(tick, sched) == n, (step, tick)
            if n:
                e, _ = S.tick_position(tick, T)
                assert e == completed     # committed rounds == stored episodes
    for e in range(12):
        held = e * (T + 1) + T
        assert S.action_mode(held, sched) == S.HELD
        assert S.n_updates(held, sched) == 0


def test_jnp_and_int_agree():
    sched = S.make_schedule(10, 3, 25)
    ticks = jnp.arange(0, 200)
    modes = S.action_mode(ticks, sched)
    nup = S.n_updates(ticks, sched)
    for t in range(200):
        assert int(modes[t]) == S.action_mode(t, sched)
        assert int(nup[t]) == S.n_updates(t, sched)


def test_multi_env_burst_after_seed_steps_and_one_round():
    # T=10, 3 envs, S=25: env steps after agent step j are 3(j+1); first > 25 at j=8,
    # but round 0 is not committed yet, so the burst waits for j=10 (round 1, row 0).
    sched = S.make_schedule(10, 3, 25)
    assert sched.burst_tick == 11
    assert S.n_updates(11, sched) == 25
    assert S.n_updates(12, sched) == 3
    sched = S.make_schedule(10, 2, 60)   # 2(j+1) > 60 at j=30 -> round 3, row 0
    assert sched.burst_tick == 3 * 11
    total = sum(S.n_updates(t, sched) for t in range(5 * 11))
    # burst 60 + 2 per stepping tick after the burst tick in rounds 3..4
    assert total == 60 + 2 * (10 + 10 - 1)


def test_bad_sizes():
    with pytest.raises(ValueError, match="episode_length"):
        S.make_schedule(0, 1, 10)
