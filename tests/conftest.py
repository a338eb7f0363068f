"""Shared test fixtures.

`tiny_online_run`: the tiny online run of tests/tiny_runs.py, trained once
per session (read-only: tests that continue or change a run work on a copy
or a run of their own).
"""
from __future__ import annotations

import pytest

from tiny_runs import train_tiny


@pytest.fixture(scope="session")
def tiny_online_run(tmp_path_factory):
    """(home, store, run_dir, summary) of `TINY_RC` trained to the end (read-only)."""
    home = tmp_path_factory.mktemp("tiny-online")
    store, run_dir, summary = train_tiny(home, "tiny")
    assert summary["finished"]
    return home, store, run_dir, summary
