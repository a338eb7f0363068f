"""benchmarks/memory_in_use.py: the in-use count follows what malloc hands out (a block
held is counted, freed it is not; RSS alone cannot tell), and the per-part slopes."""
import ctypes
import sys
from pathlib import Path

import pytest

_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(_DIR))
import memory_in_use as miu  # noqa: E402


def test_in_use_counts_a_held_block_and_not_a_freed_one():
    before = miu.sample()
    if before is None:
        pytest.skip("no mallinfo2 in this C library")
    libc = ctypes.CDLL(None)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    n = 96 * 2**20
    ptr = libc.malloc(n)
    ctypes.memset(ptr, 1, n)                                # touched: resident too
    held = miu.sample()
    libc.free(ptr)
    after = miu.sample()
    assert held["in_use_mib"] - before["in_use_mib"] >= 95
    assert held["rss_mib"] - before["rss_mib"] >= 90
    assert abs(after["in_use_mib"] - before["in_use_mib"]) < 5


def test_slope_per_part_from_the_steady_state():
    samples = [{"rss_mib": v} for v in (100, 900, 1000, 1013, 1026, 1039)]
    assert miu.slope(samples, "rss_mib", 2) == pytest.approx(13.0)
    assert miu.slope(samples, "rss_mib", 4) is None          # 2 points: no fit


def test_train_online_arguments_are_required(tmp_path, capsys):
    with pytest.raises(SystemExit):
        miu.main(["--out", str(tmp_path / "m.json")])
    assert "give train_online's arguments after --" in capsys.readouterr().err
    assert not (tmp_path / "m.json").exists()
