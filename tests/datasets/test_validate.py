"""validate_dataset / `wmx dataset validate`: passes on a fresh build, fails
naming the shard and the check on each injected fault."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import synthetic_episode, taskset_of, write_set  # noqa: E402

from wmx.cli.main import main as wmx_main  # noqa: E402
from wmx.datasets.validate import validate_dataset  # noqa: E402
from wmx.pipelines.sources import make_plan, run_build  # noqa: E402
from wmx.schemas import episode as schema  # noqa: E402
from wmx.schemas.taskset import TaskInfo  # noqa: E402

T = 8


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    rng = np.random.default_rng(0)
    a, b = TaskInfo("task-a", 5, 1, T, 2, 0.9), TaskInfo("task-b", 24, 6, T, 2, 0.9)
    write_set(home, a, [synthetic_episode(rng, T, 5, 1) for _ in range(4)], 0)
    write_set(home, b, [synthetic_episode(rng, T, 24, 6) for _ in range(3)], 1)
    return run_build(make_plan(home, taskset_of("tst", [a, b]), num_shards=2))


@pytest.fixture
def copy(fresh, tmp_path):
    d = tmp_path / "ds"
    shutil.copytree(fresh, d)
    return d


def _checks(rep):
    return {(f.where, f.check) for f in rep.failures}


def test_fresh_build_passes(fresh, capsys):
    rep = validate_dataset(fresh)
    assert rep.ok and rep.episodes_checked == 7
    assert wmx_main(["dataset", "validate", str(fresh)]) == 0


def _shard(d):
    return sorted(d.glob("shard-*"))[0]


def _rewrite_record(d, fn, pick=lambda r: True):
    """Apply fn to the first record (in shard order) with pick(record), rewrite its shard."""
    from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter
    for p in sorted(d.glob("shard-*")):
        r = ArrayRecordReader(str(p)); blobs = r.read_all(); r.close()
        for k, b in enumerate(blobs):
            rec = schema.deserialize_episode(b)
            if not pick(rec):
                continue
            fn(rec)
            blobs[k] = schema.serialize_episode(rec)
            p.unlink()
            w = ArrayRecordWriter(str(p), "group_size:1")
            for x in blobs:
                w.write(x)
            w.close()
            return p.name
    raise AssertionError("no record matches")


def test_flipped_byte(copy):
    p = _shard(copy)
    raw = bytearray(p.read_bytes()); raw[len(raw) // 2] ^= 0xFF; p.write_bytes(bytes(raw))
    rep = validate_dataset(copy)
    assert (p.name, "shard_digest") in _checks(rep)
    assert wmx_main(["dataset", "validate", str(copy)]) == 1


def test_truncated_shard(copy):
    p = _shard(copy)
    raw = p.read_bytes(); p.write_bytes(raw[: len(raw) // 2])
    checks = _checks(validate_dataset(copy))
    assert (p.name, "shard_size") in checks and (p.name, "shard_digest") in checks
    assert (p.name, "read") in checks or (p.name, "decode") in checks or \
        (p.name, "counts") in checks


def test_nan_in_obs(copy):
    name = _rewrite_record(copy, lambda r: r["obs"].__setitem__((3, 0), np.nan))
    assert (name, "finite") in _checks(validate_dataset(copy))


def test_nonzero_padding(copy):
    name = _rewrite_record(copy, lambda r: r["obs"].__setitem__((2, -1), 1.0),
                           pick=lambda r: int(r["obs_dim"]) < r["obs"].shape[1])
    assert (name, "padding") in _checks(validate_dataset(copy))


def test_wrong_task_id(copy):
    name = _rewrite_record(copy, lambda r: r.__setitem__(
        "task_id", np.asarray(1 - int(r["task_id"]), np.int32)))
    assert (name, "task_id") in _checks(validate_dataset(copy))


def test_out_of_range_task_id(copy):
    name = _rewrite_record(copy, lambda r: r.__setitem__("task_id", np.asarray(7, np.int32)))
    assert (name, "task_id") in _checks(validate_dataset(copy))


def test_manifest_counts_do_not_match(copy):
    m = json.loads((copy / "manifest.json").read_text())
    m["per_task"]["task-a"]["episodes"] += 1
    (copy / "manifest.json").write_text(json.dumps(m))
    checks = _checks(validate_dataset(copy))
    assert ("manifest", "manifest") in checks and ("dataset", "counts") in checks


def test_row_invariant_fault(copy):
    name = _rewrite_record(copy, lambda r: r["is_first"].__setitem__(3, True))
    assert (name, "rows") in _checks(validate_dataset(copy))


def test_cli_ls_and_info(fresh, capsys):
    home = fresh.parents[2]
    assert wmx_main(["dataset", "--home", str(home), "ls"]) == 0
    out = capsys.readouterr().out
    assert "tst" in out and fresh.name[:10] in out and " 7 " in out
    assert wmx_main(["dataset", "--home", str(home), "info", f"tst@{fresh.name[:8]}"]) == 0
    out = capsys.readouterr().out
    assert "task-b" in out and "lineage" in out
    assert wmx_main(["dataset", "--home", str(home), "info", "tst@ffffffffff"]) == 2
    assert wmx_main(["dataset", "--home", str(home), "info", "nope@latest"]) == 2
