"""Shared test fixtures.

`tiny_online_run`: the tiny online run of tests/tiny_runs.py, trained once
per session (read-only: tests that continue or change a run work on a copy
or a run of their own). `tiny_offline_dataset`: the tiny offline run's
dataset (tests/tiny_runs.py), built once per session (read-only). JAX's
persistent compilation cache is off for the whole session
(WMX_NO_COMPILE_CACHE=1), and lowered programs carry one source frame per
operation, not the whole stack (JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS=0).
At the session's end the garbage is collected and the rest frozen before an
xdist worker reports finished (`pytest_sessionfinish`).

With WMX_TEST_XLA_OPT=0 (`make test`'s first pass) XLA's CPU backend
compiles at LLVM optimisation level 0 (`--xla_backend_optimization_level=0`
added to XLA_FLAGS, here and in every subprocess a test starts): compilation
dominates the suite and takes about half the CPU time that way, and results
differ from the default level only in float32 rounding (relative 1e-9 to
3e-6 on a tiny run's losses). The same pass also emits XLA's fusions with its
older element-wise emitters (`--xla_cpu_use_fusion_emitters=false`) instead
of the MLIR fusion emitters: a tiny DreamerV3 training step then compiles in
about half the time again (1513 kernels instead of 1906, 10 s against 23 s),
and runs as fast; the programs compute the same HLO, so results again differ
only in rounding. The flag is one of the pinned jaxlib's (requirements-lock.txt);
an XLA without it refuses to start, so a jax upgrade shows at once if it goes.
The parity tests (modules named `*parity*`, marked `parity`) compare against
recordings of the official code at tight tolerances and always run at the
default level (`make test`'s second pass): at level 0 they are skipped.
"""
from __future__ import annotations

import os

import pytest

# Tests never share compiled programs through a disk cache (the cache's own test
# turns it on in a subprocess): results must not depend on test order or history.
os.environ.setdefault("WMX_NO_COMPILE_CACHE", "1")
# Lowered programs name one source frame per operation (the innermost user frame) instead
# of the whole Python stack, which under pytest runs dozens of frames deep, so large
# programs trace, lower and compile somewhat faster. Locations are debug metadata only: the
# computation and the results are the same, but not the HLO's op_name metadata (JAX's name
# stacks), which loses the scopes of the calls around an op; benchmarks/profile_step.py,
# which reads them, turns full locations back on for itself. Set in the environment, so
# every subprocess a test starts inherits it.
os.environ.setdefault("JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS", "0")

_OPT0_FLAGS = ("--xla_backend_optimization_level=0", "--xla_cpu_use_fusion_emitters=false")
OPT0 = os.environ.get("WMX_TEST_XLA_OPT") == "0"
if OPT0:
    for _flag in _OPT0_FLAGS:
        if _flag not in os.environ.get("XLA_FLAGS", ""):
            os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_flag}".strip()

from tiny_runs import build_offline_dataset, train_tiny  # noqa: E402


@pytest.fixture(scope="session")
def tiny_online_run(tmp_path_factory):
    """(home, store, run_dir, summary) of `TINY_RC` trained to the end (read-only)."""
    home = tmp_path_factory.mktemp("tiny-online")
    store, run_dir, summary = train_tiny(home, "tiny")
    assert summary["finished"]
    return home, store, run_dir, summary


@pytest.fixture
def compile_ahead_calls(monkeypatch):
    """The evaluations a test's runs make through `wmx.compile_ahead.CompileAhead.call`:
    a list of (key, whether it was submitted before the call), each result checked
    bit-equal to the plain call of the same jitted function."""
    import numpy as np
    from wmx.compile_ahead import CompileAhead
    seen, real = [], CompileAhead.call

    def spy(self, key, jitted, *args):
        seen.append((key, self.submitted(key)))
        got = real(self, key, jitted, *args)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(jitted(*args)))
        return got
    monkeypatch.setattr(CompileAhead, "call", spy)
    return seen


@pytest.fixture(scope="session")
def tiny_offline_dataset(tmp_path_factory):
    """(home, dataset dir) of the tiny offline run's dataset "tst" (read-only)."""
    home = tmp_path_factory.mktemp("tiny-offline")
    return home, build_offline_dataset(home)


def pytest_sessionfinish(session, exitstatus):
    """Collect the garbage now and freeze what is left, before an xdist worker reports that
    it finished: pytest's own collections at exit (5 of them) then take no time. Each
    collection runs JAX's gc callback over every live object (seconds in a worker that ran
    many modules), and execnet interrupts (SIGINT) a worker still busy 5 s after the
    controller closes it; that interrupt, landing in JAX's gc callback, printed a
    KeyboardInterrupt traceback after a green run. Garbage found here is collected (and
    reported) as before; only objects still alive are frozen.
    """
    import gc
    gc.collect()
    gc.freeze()


def pytest_collection_modifyitems(config, items):
    """Mark the tests of `*parity*` modules `parity`; skip them at level 0 (see above)."""
    for item in items:
        if "parity" in item.path.name:
            item.add_marker(pytest.mark.parity)
            if OPT0:
                item.add_marker(pytest.mark.skip(
                    reason="parity tests run at XLA's default optimisation level, not with "
                           "WMX_TEST_XLA_OPT=0 (make test runs them in a second pass)"))


# The test modules that take longest (each well over a minute of CPU on 2 cores, mostly
# compilation: `--durations`), longest first. With `--dist loadfile` a worker takes the
# next module when it is nearly done with its own; xdist's default order (most tests
# first) leaves these few-test modules for the end, where one worker then runs them
# while the other waits. `pytest_xdist_make_scheduler` hands them out first instead.
HEAVY_MODULES = (
    "tests/train_online/test_playground_smoke.py",
    "tests/agents/dreamerv3/test_offline_terms.py",
    "tests/train_online/test_train_online.py",
    "tests/reliability/test_faults_running.py",
    "tests/reliability/test_faults_bad_input.py",
    "tests/train_offline/test_train_offline.py",
    "tests/agents/dreamerv3/test_scan_grads.py",
    "tests/agents/tdmpc2/test_tdmpc2_fast_paths.py",
    "tests/benchmarks/test_mt19_campaign.py",
    "tests/reliability/test_damaged_inputs.py",
    "tests/benchmarks/test_profile_step_cpu_runs.py",
    "tests/train_offline/test_dreamerv3_offline.py",
    "tests/agents/dreamerv3/test_compute_dtype.py",
    "tests/envs/test_env_playground.py",
)


# The modules that use the session fixtures `tiny_online_run` and `tiny_offline_dataset`,
# longest first. Each xdist worker that runs one of them trains the tiny run (and compiles
# its chunk and evaluation programs, which these modules' own runs of the same config
# reuse) or builds the dataset itself: about 40 s of CPU per worker. One worker, the first
# to take one of them, takes them all, before any other module; the other worker runs the
# rest, and takes one of these only when nothing else is left.
SHARED_FIXTURE_MODULES = (
    "tests/train_online/test_train_online.py",
    "tests/reliability/test_faults_bad_input.py",
    "tests/reliability/test_faults_running.py",
    "tests/reliability/test_faults_interrupted.py",
    "tests/reliability/test_damaged_inputs.py",
    "tests/train_offline/test_dreamerv3_offline.py",
    "tests/benchmarks/test_mt19_campaign.py",
    "tests/benchmarks/test_mt19_regenerate.py",
    "tests/benchmarks/test_mt19_archive.py",
    "tests/evaluate/test_cli.py",
    "tests/runs/test_loggers.py",
    "tests/train_online/test_init_from.py",
    "tests/cli/test_runs.py",
    "tests/datasets/test_task_view.py",
    "tests/reliability/test_resume_extend.py",
)


@pytest.hookimpl(optionalhook=True)     # a hook of xdist's: pytest -p no:xdist runs too
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` handing out `HEAVY_MODULES` first (in that order), then the rest
    in xdist's own order, with `SHARED_FIXTURE_MODULES` kept to one worker (above); any
    other --dist: xdist's scheduler. Which tests run, and in which process each module
    runs whole, is unchanged; only the order of modules and which worker takes them."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling
    rank = {m: i for i, m in enumerate(HEAVY_MODULES)}
    shared_rank = {m: i for i, m in enumerate(SHARED_FIXTURE_MODULES)}

    class HeavyFirst(LoadFileScheduling):
        owner = None        # the worker that runs the shared-fixture modules

        def _assign_work_unit(self, node):
            shared = [s for s in self.workqueue if s in shared_rank]
            rest = [s for s in self.workqueue if s not in shared_rank]
            if shared and (self.owner is None or self.owner is node or not rest):
                first = min(shared, key=shared_rank.__getitem__)
                self.owner = self.owner or node
            else:
                first = min(rest, key=lambda s: rank.get(s, len(rank)))
            self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return HeavyFirst(config, log)
