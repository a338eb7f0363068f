"""benchmarks/_compile_meter.py: compiles inside the block are counted per function, with
their trace and lowering time; nothing is counted after the block (listeners removed)."""
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _compile_meter import CompileMeter  # noqa: E402


def test_counts_compiles_inside_the_block_only():
    def scaled_sum_for_meter(x):
        return jnp.sum(x * 3.0)

    with CompileMeter() as meter:
        jax.jit(scaled_sum_for_meter)(jnp.ones(7)).block_until_ready()
        jax.jit(scaled_sum_for_meter)(jnp.ones(7)).block_until_ready()   # in-memory hit
    s = meter.summary()                  # rounded to 10 ms: a tiny program may show 0.0
    assert s["compiles"] >= 1 and sum(meter.by_fun["jit(scaled_sum_for_meter)"]) > 0
    assert meter.trace_s > 0 and meter.lower_s > 0
    names = [n for n, _, _ in s["longest"]]
    assert "jit(scaled_sum_for_meter)" in names
    assert dict((n, c) for n, _, c in s["longest"])["jit(scaled_sum_for_meter)"] == 1
    assert s["cache_hits"] == 0 and s["cache_load_s"] == 0.0
    jax.jit(lambda x: x - 1.0)(jnp.ones(5)).block_until_ready()           # after the block
    assert meter.summary() == s
