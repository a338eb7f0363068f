"""benchmarks/allocator_ab.py: the per-variant summary (medians over every call, RSS
growth per block). The A/B itself compiles DreamerV3 per variant: not in the suite."""
import sys
from pathlib import Path

import pytest

_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(_DIR))
import allocator_ab as ab  # noqa: E402


def test_summary_medians_over_calls_and_rss_per_block():
    blocks = [{"wall_ms": [10.0, 30.0], "cpu_ms": [5.0, 7.0], "rss_mib": 1000.0},
              {"wall_ms": [20.0, 40.0], "cpu_ms": [6.0, 8.0], "rss_mib": 1006.0},
              {"wall_ms": [25.0], "cpu_ms": [9.0], "rss_mib": 1012.0}]
    s = ab.summary(blocks)
    assert s["median_wall_ms"] == 25.0 and s["median_cpu_ms"] == 7.0 and s["calls"] == 5
    assert s["rss_mib_per_block"] == pytest.approx(6.0)
    assert ab.summary(blocks[:1])["rss_mib_per_block"] is None


def test_rss_of_this_process_is_positive():
    import os
    assert ab.rss_mib(os.getpid()) > 1
