"""benchmarks/memory_watch.py: the flat / growing verdict, and a real watch of a
child process whose memory grows (not flat) and of one that holds still (flat)."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "memory_watch", Path(__file__).resolve().parents[2] / "benchmarks" / "memory_watch.py")
watch = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(watch)


def _s(rss, steps=None, ckpt=None):
    return {"t_s": 0.0, "rss_mib": rss, "env_steps": steps, "checkpoint": ckpt}


def test_verdict_starts_at_the_first_checkpoint_of_the_watched_process():
    # compile and replay allocation before the first chunk do not count as growth
    samples = [_s(100), _s(900), _s(1000, 16000, 501), _s(1050, 32000, 1002),
               _s(1020, 48000, 1503)]
    v = watch.verdict(samples, 0.10)
    assert v["baseline_mib"] == 1000 and v["peak_mib"] == 1050
    assert abs(v["growth_rel"] - 0.05) < 1e-12 and v["flat"] is True
    v = watch.verdict(samples + [_s(1200, 64000, 2004)], 0.10)
    assert v["growth_mib"] == 200 and v["flat"] is False
    assert watch.verdict(samples[:2], 0.10) == {"flat": None}   # no checkpoint written yet
    assert watch.verdict(samples[:2], 0.10, run_watched=False)["baseline_mib"] == 100
    # a resumed run: its older checkpoint and logged rows are there from the first sample
    resumed = [_s(300, 48000, 1503), _s(3200, 48000, 1503), _s(2000, 48000, 1553),
               _s(2100, 48000, 1603)]
    v = watch.verdict(resumed, 0.10)
    assert v["baseline_mib"] == 2000 and v["peak_mib"] == 2100 and v["flat"] is True
    assert watch.verdict(resumed[:2], 0.10) == {"flat": None}


def test_newest_checkpoint(tmp_path):
    assert watch.newest_checkpoint(None) is None and watch.newest_checkpoint(tmp_path) is None
    for name in ("000000000050", "000000000100", ".tmp-000000000150~h~1~abcdef01"):
        (tmp_path / "checkpoints" / name).mkdir(parents=True)
        (tmp_path / "checkpoints" / name / "host.json").write_text("{}")
    (tmp_path / "checkpoints" / "000000000200").mkdir()        # no host.json: incomplete
    assert watch.newest_checkpoint(tmp_path) == 100


def _watch(tmp_path, code):
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"   # interpreter start-up is not growth
    out = tmp_path / "mem.json"
    try:
        assert watch.main(["--pid", str(child.pid), "--every", "0.1", "--tolerance", "0.2",
                           "--out", str(out)]) == 0
    finally:
        child.kill()
        child.wait()
    return json.loads(out.read_text())


def test_a_growing_process_is_not_flat_and_a_still_one_is(tmp_path):
    grow = ("import time\nx = []\nprint('ready', flush=True)\n"
            "for _ in range(15):\n    x.append(bytearray(20 * 2**20)); time.sleep(0.1)\n")
    res = _watch(tmp_path, grow)
    assert len(res["samples"]) >= 5 and res["verdict"]["flat"] is False
    assert res["verdict"]["growth_mib"] > 100
    assert (tmp_path / "mem.png").stat().st_size > 0
    res = _watch(tmp_path, ("import time\nx = bytearray(50 * 2**20)\nprint('ready', flush=True)\n"
                          "time.sleep(1.5)\n"))
    assert res["verdict"]["flat"] is True


def test_a_missing_process_is_one_line_and_exit_2(tmp_path, capsys):
    assert watch.main(["--pid", "999999999", "--out", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no process 999999999" in err
    assert not (tmp_path / "m.json").exists()
