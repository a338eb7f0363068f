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


# ---- huge pages for malloc's mapped memory (restart_with_huge_pages) -----------------------
GLIBC = ("glibc", "2.36")


@pytest.mark.parametrize("environ, libc, want_tunables", [
    ({}, GLIBC, "glibc.malloc.hugetlb=1"),
    ({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}, GLIBC,
     "glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1"),
    ({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}, GLIBC, None),   # the user's choice stays
    ({"WMX_HUGE_PAGES": "0"}, GLIBC, None),
    ({}, ("glibc", "2.31"), None),                                 # no such tunable before 2.35
    ({}, ("", ""), None),                                          # not glibc (musl, macOS)
    ({}, ("glibc", "2.36-unknown"), None),                         # an unreadable version
    ({"WMX_HUGE_PAGES": "Off"}, GLIBC, None),
    ({"THP": "never"}, GLIBC, None),                               # the kernel has none
])
def test_huge_pages_argv(environ, libc, want_tunables):
    environ = dict(environ)
    thp = environ.pop("THP", "madvise")
    env = dict(environ)
    argv = heap.huge_pages_argv(env, ["python3", "-m", "wmx.cli.main", "runs", "ls"],
                                "/venv/bin/python", libc, thp)
    if want_tunables is None:
        assert argv is None and env == environ
    else:
        assert argv == ["/venv/bin/python", "-m", "wmx.cli.main", "runs", "ls"]
        assert env["GLIBC_TUNABLES"] == want_tunables
        # the restarted process sees the tunable and goes on: no second restart
        assert heap.huge_pages_argv(env, argv, argv[0], libc, thp) is None
    # no command line to restart (an embedded interpreter): nothing to do
    assert heap.huge_pages_argv(dict(environ), [], "/venv/bin/python", libc, thp) is None


def _restarts_here() -> bool:
    import platform
    name, version = platform.libc_ver()
    return (name == "glibc" and tuple(int(x) for x in version.split(".")[:2]) >= (2, 35)
            and heap.thp_mode() not in (None, "never"))


def test_thp_mode_reads_the_bracketed_word(tmp_path):
    (tmp_path / "enabled").write_text("always [madvise] never\n")
    assert heap.thp_mode(str(tmp_path / "enabled")) == "madvise"
    assert heap.thp_mode(str(tmp_path / "missing")) is None


def test_a_failed_restart_leaves_the_process_as_it_was(monkeypatch):
    import os
    if not _restarts_here():
        pytest.skip("glibc 2.35+ with transparent huge pages only")
    calls = []

    def no_exec(path, argv):
        calls.append(argv)
        raise OSError("exec refused")
    monkeypatch.setattr(os, "execv", no_exec)
    monkeypatch.delenv("WMX_HUGE_PAGES", raising=False)
    for before in (None, "glibc.malloc.arena_max=2"):
        if before is None:
            monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
        else:
            monkeypatch.setenv("GLIBC_TUNABLES", before)
        heap.restart_with_huge_pages()
        assert os.environ.get("GLIBC_TUNABLES") == before
    assert len(calls) == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tunables")
def test_a_command_line_restarts_once_with_huge_pages(tmp_path):
    """`wmx` from a command line runs with the tunable (one restart, same arguments and
    output); in-process callers (argv given) never restart."""
    import os
    if not _restarts_here():
        pytest.skip("glibc 2.35+ with transparent huge pages only")
    probe = ("import os, sys; from wmx.runs import heap; heap.restart_with_huge_pages(); "
             "print(os.getpid(), os.environ.get('GLIBC_TUNABLES'), sys.argv[1:])")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "WMX_HUGE_PAGES")}
    out = subprocess.run([sys.executable, "-c", probe, "a b", "--x"], capture_output=True,
                         text=True, check=True, env=env).stdout.splitlines()
    assert len(out) == 1 and out[0].split(" ", 2)[1:] == ["glibc.malloc.hugetlb=1",
                                                          "['a b', '--x']"]
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, env={**env, "WMX_HUGE_PAGES": "0"}).stdout.split()
    assert out[1] == "None"
    out = subprocess.run([sys.executable, "-c", probe.replace("pages()", "pages(['x'])")],
                         capture_output=True, text=True, check=True, env=env).stdout.split()
    assert out[1] == "None"                     # an in-process caller (argv given): no restart
    r = subprocess.run([sys.executable, "-m", "wmx.cli.main", "--home", str(tmp_path), "runs",
                        "ls"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr          # `-m` replayed: the command runs, once
    assert r.stdout.splitlines() == [f"no runs in {tmp_path / 'runs'} (--home {tmp_path}; "
                                     "another with --home DIR or WMX_HOME=DIR); start one with "
                                     "train_online or train_offline"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc tunables")
def test_restart_with_closed_streams_and_not_from_stdin(tmp_path):
    """A command line started with standard output and error closed still restarts and
    runs; a script read from standard input is never restarted (it could not be re-read)."""
    import os
    if not _restarts_here():
        pytest.skip("glibc 2.35+ with transparent huge pages only")
    out = tmp_path / "out"
    probe = ("import os, sys; from wmx.runs import heap; heap.restart_with_huge_pages(); "
             f"open({str(out)!r}, 'a').write(str(os.environ.get('GLIBC_TUNABLES')) + '\\n')")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "WMX_HUGE_PAGES")}
    r = subprocess.run(["bash", "-c", f'"$0" -c "$1" >&- 2>&-', sys.executable, probe], env=env)
    assert r.returncode == 0 and out.read_text() == "glibc.malloc.hugetlb=1\n"
    out.unlink()
    r = subprocess.run([sys.executable, "-"], input=probe, text=True, env=env)
    assert r.returncode == 0 and out.read_text() == "None\n"
