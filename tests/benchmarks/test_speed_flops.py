"""The speed benchmark's matmul FLOP counter (benchmarks/tdmpc2_speed.py)."""
import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

_SPEC = importlib.util.spec_from_file_location(
    "tdmpc2_speed", Path(__file__).resolve().parents[2] / "benchmarks" / "tdmpc2_speed.py")
speed = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(speed)


def test_plain_and_batched_dots():
    assert speed.program_flops(jnp.matmul, jnp.ones((8, 16)), jnp.ones((16, 4))) == 2 * 8 * 16 * 4
    f = lambda a, b: jnp.einsum("bij,bjk->bik", a, b)
    assert speed.program_flops(f, jnp.ones((3, 8, 16)), jnp.ones((3, 16, 4))) == 3 * 2 * 8 * 16 * 4


def test_scan_body_counted_length_times_and_inside_jit():
    w = jnp.ones((16, 16))

    @jax.jit
    def f(x):
        return jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=5)[0]

    assert speed.program_flops(f, jnp.ones((4, 16))) == 5 * 2 * 4 * 16 * 16


def test_gradient_counts_the_backward_dots():
    loss = lambda w, x: jnp.sum((x @ w) ** 2)
    fwd = 2 * 4 * 16 * 8
    # forward, plus d/dw = x^T g (the d/dx product is not needed and not formed)
    assert speed.program_flops(jax.grad(loss), jnp.ones((16, 8)), jnp.ones((4, 16))) == 2 * fwd


def test_cond_counts_its_dearest_branch_and_while_its_body_once():
    w = jnp.ones((16, 16))
    f = lambda p, x: jax.lax.cond(p, lambda y: (y @ w) @ w, lambda y: y @ w, x)
    assert speed.program_flops(f, True, jnp.ones((4, 16))) == 2 * (2 * 4 * 16 * 16)
    g = lambda x: jax.lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0] @ w, c[1] + 1), (x, 0))[0]
    assert speed.program_flops(g, jnp.ones((4, 16))) == 2 * 4 * 16 * 16


def test_median_ms_times_only_the_calls_after_the_warm_up():
    calls = []

    def fn():
        calls.append(None)

    med, wall, cpu = speed.median_ms(fn, repeats=3, warmup=2)
    assert len(calls) == 5 and len(wall) == 3 and med == sorted(wall)[1] and cpu >= 0
    t = speed.time_calls(fn, 4)
    assert len(calls) == 9 and len(t["wall_ms"]) == len(t["cpu_ms"]) == 4
    assert all(w > 0 for w in t["wall_ms"])


@pytest.mark.slow
def test_seeds_multiply_the_matmul_work():
    """--seeds N: one call runs N seeds' programs, N times the matmul work (~1-2 min on
    2 cores: four inits and traces)."""
    for make in (speed.wmx_update, speed.wmx_plan):
        _, one = make(1)
        _, three = make(1, seeds=3)
        assert three == 3 * one > 0, make.__name__


def test_dreamerv3_speed_refuses_two_workers_on_a_tpu():
    import argparse
    spec = importlib.util.spec_from_file_location(
        "dreamerv3_speed", Path(__file__).resolve().parents[2] / "benchmarks" / "dreamerv3_speed.py")
    dv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dv)
    p = argparse.ArgumentParser()
    many = argparse.Namespace(sizes=["1m", "12m"], online_presets=[], reference_dir=None)
    one = argparse.Namespace(sizes=["12m"], online_presets=["paper"], reference_dir=None)
    dv._one_process_on_a_tpu(p, "cpu", many)          # the CPU takes several processes
    dv._one_process_on_a_tpu(p, "tpu", one)
    with pytest.raises(SystemExit) as e:
        dv._one_process_on_a_tpu(p, "tpu", many)
    assert e.value.code == 2
    assert dv._item_name("train", "12m", 1) == "train_12m"
    assert dv._item_name("policy", "12m", 5) == "policy_12m_seeds5"
