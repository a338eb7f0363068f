"""release_free_heap: the free pages glibc's arenas keep go back to the OS (wmx.runs.heap)."""
import subprocess
import sys
import textwrap

import pytest

from wmx.runs import heap
from wmx.runs.heap import release_free_heap

# A thread (its own arena, as XLA's pool threads have) mallocs 1,500 blocks of 64 KiB,
# touches them and frees all but the last: the freed 94 MiB sit below a used block, so
# free() cannot shrink the heap and they stay resident until release_free_heap.
PROBE = textwrap.dedent("""
    import ctypes, threading
    from wmx.runs.heap import release_free_heap
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    def rss_mib():
        return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
    def churn():
        blocks = [libc.malloc(65536) for _ in range(1500)]
        for b in blocks:
            ctypes.memset(b, 1, 65536)
        for b in blocks[:-1]:
            libc.free(b)
    t = threading.Thread(target=churn); t.start(); t.join()
    before = rss_mib()
    released = release_free_heap()
    print(released, before, rss_mib())
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_arena_memory_goes_back_to_the_os():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True).stdout.split()
    released, before, after = out[0] == "True", float(out[1]), float(out[2])
    assert released
    assert before - after > 80, (before, after)          # of the 94 MiB freed


def test_without_malloc_trim_it_does_nothing_and_says_so(monkeypatch):
    class NoTrim:                                  # a C library without malloc_trim (musl)
        def __init__(self, name):
            pass
    monkeypatch.setattr(heap.ctypes, "CDLL", NoTrim)
    assert release_free_heap() is False

    def unloadable(name):
        raise OSError("no C library")
    monkeypatch.setattr(heap.ctypes, "CDLL", unloadable)
    assert release_free_heap() is False
