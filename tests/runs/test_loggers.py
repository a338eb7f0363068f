"""`--logger`: TensorBoard event files and the offline W&B run hold what metrics.csv holds
(same keys, same x axis), across a resume; bad and missing loggers are one line."""
from __future__ import annotations

import csv
import json
import time
import struct
from pathlib import Path

import pytest

from wmx.metrics_csv import MetricsCSV
from wmx.runs import loggers as L

COLUMNS = ("seed", "kind", "agent_steps", "env_steps", "return", "updates", "total_loss")


def _rows(steps, seeds=(0, 3), bump=0.0):
    out = []
    for s in steps:
        for seed in seeds:
            out.append({"seed": seed, "kind": "train", "agent_steps": s // 2, "env_steps": s,
                        "return": s / 7 + seed + bump, "updates": s // 4,
                        "total_loss": "" if s == 0 else 1 / (s + seed) + bump})
        if s % 40 == 0:
            out += [{"seed": seed, "kind": "eval", "agent_steps": s // 2, "env_steps": s,
                     "return": -s - seed - bump, "updates": s // 4} for seed in seeds]
    return out


def read_tensorboard(root: Path) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """{(seed folder, tag): [(step, value)]} read by TensorBoard's own loader (orphaned
    events after a purge step dropped, as TensorBoard shows them)."""
    pytest.importorskip("tensorboard", reason="the tensorboard package (wmx[test]) reads the "
                                              "event files back")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    out = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out[(folder.name, tag)] = [(e.step, e.value) for e in acc.Scalars(tag)]
    return out


def expected_from_csv(path: Path, x: str) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """What the loggers must hold: every numeric field of metrics.csv, as (seed, tag)."""
    out = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            step, seed, vals = L.scalars(r, x)
            for tag, v in vals.items():
                out.setdefault((f"seed_{seed}", tag), []).append((step, v))
    return out


def assert_same(got, want):
    assert set(got) == set(want)
    for k in want:
        assert [s for s, _ in got[k]] == [s for s, _ in want[k]], k
        assert [v for _, v in got[k]] == pytest.approx([v for _, v in want[k]], rel=1e-6), k


def test_parse_loggers(monkeypatch):
    assert L.parse_loggers(None) == ("csv",)
    assert L.parse_loggers("tensorboard") == ("csv", "tensorboard")
    assert L.parse_loggers(" TensorBoard , csv,tensorboard") == ("csv", "tensorboard")
    with pytest.raises(ValueError, match="unknown logger 'tb'; choose from csv, tensorboard"):
        L.parse_loggers("csv,tb")
    real = L.importlib.util.find_spec
    monkeypatch.setattr(L.importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ValueError) as e:
        L.parse_loggers("wandb")
    assert "\n" not in str(e.value) and "pip install 'wmx[wandb]'" in str(e.value)


def test_tensorboard_matches_csv_across_resume(tmp_path):
    """A run logs steps 0..120, is cut back to its checkpoint at 60 and redoes 80..160 with
    other values: TensorBoard shows exactly metrics.csv's rows (the stale ones purged)."""
    run = tmp_path / "run"
    run.mkdir()
    m = MetricsCSV(run / "metrics.csv", COLUMNS, "agent_steps")
    with L.RunLoggers(("csv", "tensorboard"), run) as lg:
        w = lg.attach(m, "env_steps")
        w.append(_rows([0, 20, 40]))
        w.append(_rows([60, 80, 100, 120]))
    assert_same(read_tensorboard(run / "tensorboard"), expected_from_csv(run / "metrics.csv",
                                                                         "env_steps"))
    m = MetricsCSV(run / "metrics.csv", COLUMNS, "agent_steps", keep_until=30)   # 60 env steps
    with L.RunLoggers(L.resolve_loggers(None, run), run) as lg:   # the run's loggers kept
        assert lg.names == ("csv", "tensorboard")
        lg.attach(m, "env_steps").append(_rows([80, 100, 120, 140, 160], bump=0.5))
    want = expected_from_csv(run / "metrics.csv", "env_steps")
    assert want[("seed_3", "eval/return")] == [(0, -3), (40, -43), (80, -83.5), (120, -123.5),
                                               (160, -163.5)]
    assert_same(read_tensorboard(run / "tensorboard"), want)


def test_tensorboard_backfills_a_run_that_had_csv_only(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    MetricsCSV(run / "metrics.csv", COLUMNS, "agent_steps").append(_rows([0, 20, 40]))
    m = MetricsCSV(run / "metrics.csv", COLUMNS, "agent_steps", keep_until=20)
    with L.RunLoggers(("csv", "tensorboard"), run) as lg:
        lg.attach(m, "env_steps").append(_rows([60]))
    want = expected_from_csv(run / "metrics.csv", "env_steps")
    assert [s for s, _ in want[("seed_0", "train/return")]] == [0, 20, 40, 60]
    assert_same(read_tensorboard(run / "tensorboard"), want)
    assert json.loads((run / "loggers.json").read_text())["loggers"] == ["csv", "tensorboard"]


def test_csv_only_opens_nothing(tmp_path):
    m = MetricsCSV(tmp_path / "metrics.csv", COLUMNS, "agent_steps")
    with L.RunLoggers(("csv",), tmp_path) as lg:
        assert lg.attach(m, "env_steps") is m
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.csv"]


# ---- W&B (offline) --------------------------------------------------------------------
def read_wandb_history(run_file: Path, wait_s: float = 60.0) -> list[dict[str, float]]:
    """The history rows of an offline W&B run file (``run-<id>.wandb``: a 7-byte header,
    then LevelDB-log records of 32 KiB blocks holding `wandb_internal_pb2.Record`s).
    W&B's service may still be writing when ``finish`` returns: waits up to ``wait_s``
    for the run's exit record."""
    import time
    deadline = time.monotonic() + wait_s
    while True:
        kinds, rows = _wandb_records(run_file)
        if "exit" in kinds or time.monotonic() > deadline:
            assert "exit" in kinds, f"{run_file}: no exit record after {wait_s} s"
            return rows
        time.sleep(0.2)


def _wandb_records(run_file: Path) -> tuple[list[str], list[dict[str, float]]]:
    from wandb.proto import wandb_internal_pb2 as pb
    b = run_file.read_bytes()
    assert b[:4] == b":W&B"
    block, pos, buf, recs = 32768, 7, b"", []
    while pos + 7 <= len(b):
        if block - pos % block < 7:
            pos += block - pos % block
            continue
        _crc, n, typ = struct.unpack("<IHB", b[pos:pos + 7])
        data, pos = b[pos + 7:pos + 7 + n], pos + 7 + n
        if typ == 0:
            break
        if typ in (1, 4):
            recs.append(buf + data)
            buf = b""
        else:
            buf += data
    rows, kinds = [], []
    for d in recs:
        r = pb.Record()
        r.ParseFromString(d)
        kinds.append(r.WhichOneof("record_type"))
        if kinds[-1] == "history":
            rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json)
                         for i in r.history.item if not (i.key or "").startswith("_")})
    return kinds, rows


def test_wandb_offline_run_and_resume(tmp_path, monkeypatch):
    """No WANDB_MODE and no API key: offline mode, the W&B run in <run>/wandb/, its id in
    loggers.json; a resumed run continues the same W&B run id; history == metrics.csv."""
    pytest.importorskip("wandb", reason="wandb (the optional extra wmx[wandb]) is not installed")
    for v in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL", "WANDB_PROJECT", "WANDB_DIR"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))          # no ~/.netrc: no key
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    assert L.wandb_mode() == "offline"
    run = tmp_path / "run"
    run.mkdir()
    m = MetricsCSV(run / "metrics.csv", COLUMNS, "agent_steps")
    with L.RunLoggers(("csv", "wandb"), run, config={"agent": "tdmpc2"}) as lg:
        lg.attach(m, "env_steps").append(_rows([0, 20, 40]))
    state = json.loads((run / "loggers.json").read_text())
    run_id = state["wandb"]["id"]
    assert state["loggers"] == ["csv", "wandb"] and state["wandb"]["mode"] == "offline"
    first = list((run / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(first) == 1
    hist = read_wandb_history(first[0])
    assert [h["env_steps"] for h in hist] == [0, 20, 40]
    assert hist[2]["eval/return/seed_3"] == -43 and hist[1]["train/total_loss/seed_0"] == \
        pytest.approx(1 / 20)
    assert "train/total_loss/seed_0" not in hist[0]            # empty fields are not logged
    m = MetricsCSV(run / "metrics.csv", COLUMNS, "agent_steps", keep_until=20)
    # W&B names an offline run's folder by the second it starts: a resume within the same
    # second would share the first folder and its .wandb file, so start it in the next one
    time.sleep(1.05 - time.time() % 1)
    with L.RunLoggers(L.resolve_loggers(None, run), run) as lg:
        lg.attach(m, "env_steps").append(_rows([60]))
    assert json.loads((run / "loggers.json").read_text())["wandb"]["id"] == run_id
    runs = sorted((run / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(runs) == 2          # the same id, a second folder
    assert [h["env_steps"] for h in read_wandb_history(runs[-1])][-1] == 60


# ---- through the trainers ----------------------------------------------------------------
def test_train_online_logs_tensorboard(tiny_online_run, tmp_path, capsys):
    """The tiny online run (same config as the session's: compiled once) with --logger
    tensorboard: its event files read back equal to its metrics.csv, x axis env steps;
    a bad --logger is one line, exit 2, nothing written."""
    from tiny_runs import TINY_ONLINE_ARGV
    from wmx.runs.owner import probe
    from wmx.train_online.cli import main
    home = tmp_path / "home"
    assert main([*TINY_ONLINE_ARGV, "--home", str(home), "--logger", "tensorboard,tb"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown logger 'tb'" in err[0] and not home.exists()
    assert main([*TINY_ONLINE_ARGV, "--home", str(home), "--name", "tb", "--no-export",
                 "--logger", "tensorboard"]) == 0
    run = home / "runs" / "tb"
    want = expected_from_csv(run / "metrics.csv", "env_steps")
    assert [s for s, _ in want[("seed_3", "eval/return")]] == [40, 80, 120]
    assert ("seed_0", "train/total_loss") in want
    assert_same(read_tensorboard(run / "tensorboard"), want)
    assert probe(run) is None and not (run / "run.lock").exists()   # released at exit


# slow: it compiles the offline trainer's programs a second time in its process (~4 min
# on 2 cores); the default run keeps the online trainer's case and the logger's own
# resume / backfill cases, which read the event files back the same way.
@pytest.mark.slow
def test_train_offline_logs_tensorboard(tiny_offline_dataset, tmp_path):
    """The tiny offline run with --logger tensorboard: event files == metrics.csv, x axis
    updates, per-task evaluation tags."""
    import shutil

    from tiny_runs import TINY_OFFLINE_ARGS
    from wmx.train_offline.cli import main
    ds_home, ds_dir = tiny_offline_dataset
    home = tmp_path / "home"                   # a copy of the dataset: the fixture is read-only
    shutil.copytree(ds_home / "datasets", home / "datasets")
    ref = f"{ds_dir.parent.name}@{ds_dir.name[:12]}"
    assert main(["--dataset", ref, "--home", str(home), "--name", "off", "--skip-validation",
                 "--logger", "tensorboard", *TINY_OFFLINE_ARGS]) == 0
    run = home / "runs" / "off"
    want = expected_from_csv(run / "metrics.csv", "updates")
    assert [s for s, _ in want[("seed_1", "train/total_loss")]] == [2, 4, 6]
    assert [s for s, _ in want[("seed_0", "eval/mean/score")]] == [4, 6]
    assert [s for s, _ in want[("seed_0", "eval/cheetah-run/return")]] == [4, 6]
    assert_same(read_tensorboard(run / "tensorboard"), want)
