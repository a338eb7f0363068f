"""Shared test fixtures.

`tiny_online_run`: the tiny online run of tests/tiny_runs.py, trained once
per session (read-only: tests that continue or change a run work on a copy
or a run of their own). `tiny_offline_dataset`: the tiny offline run's
dataset (tests/tiny_runs.py), built once per session (read-only). JAX's
persistent compilation cache is off for the whole session
(WMX_NO_COMPILE_CACHE=1).
"""
from __future__ import annotations

import os

import pytest

# Tests never share compiled programs through a disk cache (the cache's own test
# turns it on in a subprocess): results must not depend on test order or history.
os.environ.setdefault("WMX_NO_COMPILE_CACHE", "1")

from tiny_runs import build_offline_dataset, train_tiny  # noqa: E402


@pytest.fixture(scope="session")
def tiny_online_run(tmp_path_factory):
    """(home, store, run_dir, summary) of `TINY_RC` trained to the end (read-only)."""
    home = tmp_path_factory.mktemp("tiny-online")
    store, run_dir, summary = train_tiny(home, "tiny")
    assert summary["finished"]
    return home, store, run_dir, summary


@pytest.fixture(scope="session")
def tiny_offline_dataset(tmp_path_factory):
    """(home, dataset dir) of the tiny offline run's dataset "tst" (read-only)."""
    home = tmp_path_factory.mktemp("tiny-offline")
    return home, build_offline_dataset(home)
