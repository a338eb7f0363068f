"""Fixtures of the fault-injection tests (test_faults_*.py): the synthetic dataset."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import taskset_of, write_set  # noqa: E402
from faults_common import CART, PROBE, episode  # noqa: E402

from wmx.pipelines.sources import make_plan, run_build  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(home, dataset dir): 3 cartpole-balance + 3 probe-action episodes, 2 shards."""
    home = tmp_path_factory.mktemp("faults")
    rng = np.random.default_rng(0)
    write_set(home, CART, [episode(rng, CART) for _ in range(3)], 0)
    write_set(home, PROBE, [episode(rng, PROBE) for _ in range(3)], 1)
    return home, run_build(make_plan(home, taskset_of("tst", [CART, PROBE]), num_shards=2))
