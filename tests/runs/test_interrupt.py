"""Ctrl-C during training (wmx.runs.interrupt): the first asks for a stop, the second exits."""
import signal
import subprocess
import sys
import textwrap
import threading

from wmx.runs.interrupt import (EXIT_INTERRUPTED, EXIT_TERMINATED, StopRequest, exit_status,
                                 stop_on_interrupt)

PROBE = textwrap.dedent("""
    import os, signal, sys
    from wmx.runs.interrupt import stop_on_interrupt
    with stop_on_interrupt("the probe's chunk") as stop:
        os.kill(os.getpid(), signal.SIGINT)
        print("after first", stop.is_set(), flush=True)
        if sys.argv[1] == "twice":
            os.kill(os.getpid(), signal.SIGINT)
            print("not reached", flush=True)
    print("handler restored", signal.getsignal(signal.SIGINT) is signal.default_int_handler)
""")


def _probe(mode):
    return subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True,
                          timeout=60)


def test_first_interrupt_sets_the_request_and_the_run_goes_on():
    out = _probe("once")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["after first True", "handler restored True"]
    assert "stopping after the probe's chunk" in out.stderr


def test_second_interrupt_exits_at_once_with_130():
    out = _probe("twice")
    assert out.returncode == EXIT_INTERRUPTED
    assert "not reached" not in out.stdout and "exiting now" in out.stderr


def test_disabled_or_off_the_main_thread_leaves_sigint_alone():
    before = signal.getsignal(signal.SIGINT)
    with stop_on_interrupt(enabled=False) as stop:
        assert signal.getsignal(signal.SIGINT) is before and not stop.is_set()
    seen = []

    def worker():
        with stop_on_interrupt() as stop:
            seen.append((signal.getsignal(signal.SIGINT) is before, stop.is_set()))
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [(True, False)]


TERM_PROBE = textwrap.dedent("""
    import os, signal, sys
    from wmx.runs.interrupt import exit_status, stop_on_interrupt
    with stop_on_interrupt("the probe's chunk") as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        print("after first", stop.is_set(), stop.signum == signal.SIGTERM, flush=True)
        if sys.argv[1] == "twice":
            os.kill(os.getpid(), signal.SIGTERM)
            print("not reached", flush=True)
    print("handler restored", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
    sys.exit(exit_status("probe", stop, finished=False, hint="continue with: probe --resume R"))
""")


def _term_probe(mode):
    return subprocess.run([sys.executable, "-c", TERM_PROBE, mode], capture_output=True,
                          text=True, timeout=60)


def test_sigterm_stops_after_the_chunk_like_ctrl_c_and_exits_143():
    out = _term_probe("once")
    assert out.returncode == EXIT_TERMINATED == 143, out.stderr
    assert out.stdout.split("\n")[:2] == ["after first True True", "handler restored True"]
    assert "SIGTERM: stopping after the probe's chunk" in out.stderr
    assert "probe: stopped by SIGTERM after the running chunk" in out.stderr
    assert "probe --resume R" in out.stderr


def test_second_sigterm_exits_at_once_with_143():
    out = _term_probe("twice")
    assert out.returncode == EXIT_TERMINATED
    assert "not reached" not in out.stdout and "exiting now" in out.stderr


def test_exit_status_after_ctrl_c_is_130_and_0_when_finished():
    stop = StopRequest()
    assert exit_status("p", stop, finished=False, hint="h") == 0
    stop.signum = signal.SIGINT
    stop.set()
    assert exit_status("p", stop, finished=True, hint="h") == 0
    assert exit_status("p", stop, finished=False, hint="h") == EXIT_INTERRUPTED == 130
    plain = threading.Event()          # a caller's own event: read as Ctrl-C
    plain.set()
    assert exit_status("p", plain, finished=False, hint="h") == EXIT_INTERRUPTED
