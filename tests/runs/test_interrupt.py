"""Ctrl-C during training (wmx.runs.interrupt): the first asks for a stop, the second exits."""
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from wmx.runs.interrupt import (EXIT_INTERRUPTED, EXIT_TERMINATED, StopRequest, exit_status,
                                 stop_on_interrupt)

PROBE = textwrap.dedent("""
    import os, signal, sys
    from wmx.runs.interrupt import exit_status, stop_on_interrupt
    sig = getattr(signal, sys.argv[2])
    before = signal.getsignal(sig)    # SIG_IGN for SIGINT when started as a background job
    run_dir = sys.argv[3] if len(sys.argv) > 3 else None
    with stop_on_interrupt("the probe's chunk", run_dir=run_dir) as stop:
        os.kill(os.getpid(), sig)
        print("after first", stop.is_set(), stop.signum == sig, flush=True)
        if sys.argv[1] == "twice":
            os.kill(os.getpid(), sig)
            print("not reached", flush=True)
    print("handler restored", signal.getsignal(sig) is before, flush=True)
    sys.exit(exit_status("probe", stop, finished=False, hint="continue with: probe --resume R"))
""")

SIGNALS = [("SIGINT", EXIT_INTERRUPTED, "Ctrl-C"), ("SIGTERM", EXIT_TERMINATED, "SIGTERM")]


def _probe(mode, sig, *run_dir):
    return subprocess.run([sys.executable, "-c", PROBE, mode, sig, *map(str, run_dir)],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("sig,status,said", SIGNALS)
def test_first_signal_sets_the_request_the_chunk_ends_and_the_status_says_it(sig, status, said):
    """Ctrl-C or SIGTERM: the run goes on to the chunk's end, then exits 128 + the signal's
    number (130, 143) with the resume command."""
    out = _probe("once", sig)
    assert out.returncode == status == 128 + getattr(signal, sig), out.stderr
    assert out.stdout.split("\n")[:2] == ["after first True True", "handler restored True"]
    assert f"{said}: stopping after the probe's chunk" in out.stderr
    assert f"probe: stopped by {said} after the running chunk" in out.stderr
    assert "probe --resume R" in out.stderr


@pytest.mark.parametrize("sig,status,said", SIGNALS)
def test_second_signal_exits_at_once(sig, status, said):
    out = _probe("twice", sig)
    assert out.returncode == status
    assert "not reached" not in out.stdout and f"{said} again: exiting now" in out.stderr


def test_second_signal_before_the_first_checkpoint_says_there_is_none(tmp_path):
    """A run stopped before its first checkpoint has none to keep: the message says that
    --resume starts it from the beginning; once one exists, that it is kept."""
    out = _probe("twice", "SIGINT", tmp_path)
    assert out.returncode == EXIT_INTERRUPTED
    assert ("Ctrl-C again: exiting now; the run has no checkpoint yet (--resume starts it "
            "from the beginning)") in out.stderr
    assert "newest checkpoint is kept" not in out.stderr
    (tmp_path / "checkpoints" / "12").mkdir(parents=True)
    (tmp_path / "checkpoints" / "12" / "host.json").write_text("{}")
    out = _probe("twice", "SIGINT", tmp_path)
    assert ("Ctrl-C again: exiting now; the newest checkpoint is kept (--resume continues "
            "from it)") in out.stderr


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


def test_exit_status_after_ctrl_c_is_130_and_0_when_finished(capsys):
    stop = StopRequest()
    assert exit_status("p", stop, finished=False, hint="h") == 0
    assert capsys.readouterr().err == ""
    stop.signum = signal.SIGINT
    stop.set()
    assert exit_status("p", stop, finished=True, hint="h") == 0
    # the stop came in the last chunk: said, and nothing to resume
    assert capsys.readouterr().err == ("p: Ctrl-C came during the run's last chunk: the run "
                                       "finished (its final evaluation included); nothing to "
                                       "resume\n")
    assert exit_status("p", stop, finished=False, hint="h") == EXIT_INTERRUPTED == 130
    plain = threading.Event()          # a caller's own event: read as Ctrl-C
    plain.set()
    assert exit_status("p", plain, finished=False, hint="h") == EXIT_INTERRUPTED
