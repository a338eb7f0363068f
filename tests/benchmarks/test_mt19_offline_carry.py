"""benchmarks/mt19_offline.py on a tiny synthetic dataset: pack cuts it into parts of at most
--part-mib with a parts.json and prints the carry plan; unpack over two calls (half the parts,
then the rest, gathered in the stage) stores the same dataset, which validates; a damaged
part, missing parts, an unknown dataset and an --out holding another dataset's parts are
refused (one line, exit 2) or wait (exit 0), with nothing stored and no temporary left."""
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT / "tests" / "pipelines")]
import mt19_offline as off  # noqa: E402
from episode_fixtures import synthetic_episode, taskset_of, write_set  # noqa: E402

from wmx.datasets.store import Store  # noqa: E402
from wmx.datasets.validate import validate_dataset  # noqa: E402
from wmx.schemas.taskset import TaskInfo  # noqa: E402

PART_MIB = 0.01
"""10 KiB parts: the tiny dataset (~40 KiB) travels in several."""


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(home, dataset folder) of a tiny synthetic dataset "tst" (2 tasks, 2 shards)."""
    home = tmp_path_factory.mktemp("src")
    rng = np.random.default_rng(0)
    a, b = TaskInfo("task-a", 5, 1, 8, 2, 0.9), TaskInfo("task-b", 24, 6, 8, 2, 0.9)
    write_set(home, a, [synthetic_episode(rng, 8, 5, 1) for _ in range(8)], 0)
    write_set(home, b, [synthetic_episode(rng, 8, 24, 6) for _ in range(8)], 1)
    from wmx.pipelines.sources import make_plan, run_build
    return home, run_build(make_plan(home, taskset_of("tst", [a, b]), num_shards=2))


@pytest.fixture
def packed(source, tmp_path, capsys):
    """(parts.json, its parts, the printed plan) of the dataset packed into tmp/out."""
    home, ds = source
    ref = f"tst@{ds.name[:8]}"
    assert off.main(["pack", ref, "--home", str(home), "--out", str(tmp_path / "out"),
                     "--part-mib", str(PART_MIB), "--first-call-mib", "0.015",
                     "--call-mib", "0.03"]) == 0
    doc = json.loads((tmp_path / "out" / f"tst@{ds.name[:12]}.parts.json").read_text())
    return doc, [tmp_path / "out" / p["name"] for p in doc["parts"]], capsys.readouterr().out


def _carry(tmp_path: Path, files: list[Path], name: str) -> Path:
    """A carried folder holding ``files`` (a fresh one per call)."""
    d = tmp_path / name
    d.mkdir()
    for f in files:
        shutil.copy(f, d / f.name)
    return d


def _leftovers(home: Path) -> list[str]:
    """Temporaries and stray files under the home (the stage's parts aside)."""
    return sorted(str(p.relative_to(home)) for p in home.rglob("*")
                  if ".tmp-" in p.name or "~" in p.name)


def test_pack_writes_parts_within_the_limit_and_the_plan(source, packed, tmp_path):
    _, ds = source
    doc, parts, out = packed
    assert doc["schema"] == off.SCHEMA and doc["name"] == "tst"
    assert doc["content_hash"] == ds.name
    assert len(parts) >= 4
    assert all(p.stat().st_size <= PART_MIB * 2 ** 20 for p in parts)
    assert [p.stat().st_size for p in parts] == [q["size_bytes"] for q in doc["parts"]]
    assert doc["total_bytes"] == sum(p.stat().st_size for p in parts)
    from wmx.schemas.hashing import file_digest
    assert [file_digest(p) for p in parts] == [q["sha256"] for q in doc["parts"]]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        [p.name for p in parts] + [f"tst@{ds.name[:12]}.parts.json"])     # no temporary
    # the plan: one 10 KiB part fits the first call's 15 KiB room, three each later call's 30
    calls = off.carry_plan([q["size_bytes"] for q in doc["parts"]], int(0.015 * 2 ** 20),
                           int(0.03 * 2 ** 20))
    assert calls[0] == [0] and all(len(c) <= 3 for c in calls[1:])
    assert f"carries: {len(calls)} call(s)" in out and "call 1: part00 " in out
    assert "lets the first call" not in out


def test_plan_with_a_first_call_too_small(source, tmp_path, capsys):
    home, ds = source
    assert off.main(["pack", f"tst@{ds.name[:8]}", "--home", str(home), "--out",
                     str(tmp_path / "out"), "--part-mib", str(PART_MIB),
                     "--first-call-mib", "0.005"]) == 0
    out = capsys.readouterr().out
    assert "call 1: none" in out and "a --part-mib of at most 0.005 lets the first call" in out


def test_carry_plan():
    assert off.carry_plan([50, 50, 50], 12, 50) == [[], [0], [1], [2]]
    assert off.carry_plan([10, 10, 30], 12, 50) == [[0], [1, 2]]
    with pytest.raises(off.CarryError):
        off.carry_plan([60], 12, 50)


def test_pack_again_is_identical_and_refuses_another_datasets_out(source, packed, tmp_path,
                                                                   capsys):
    home, ds = source
    doc, parts, _ = packed
    assert off.main(["pack", f"tst@{ds.name[:8]}", "--home", str(home), "--out",
                     str(tmp_path / "out"), "--part-mib", str(PART_MIB)]) == 0
    again = json.loads((tmp_path / "out" / f"tst@{ds.name[:12]}.parts.json").read_text())
    assert again["parts"] == doc["parts"]                    # the same bytes: deterministic
    (tmp_path / "out" / "other@0123456789ab.tar.part00").write_bytes(b"x")
    capsys.readouterr()
    assert off.main(["pack", f"tst@{ds.name[:8]}", "--home", str(home), "--out",
                     str(tmp_path / "out"), "--part-mib", str(PART_MIB)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "other@0123456789ab" in err


def test_unknown_dataset_is_one_line(source, tmp_path, capsys):
    home, _ = source
    assert off.main(["pack", "tst@ffffffff", "--home", str(home), "--out",
                     str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "tst@ffffffff" in err and "wmx dataset ls" in err
    assert not (tmp_path / "out").exists()
    assert off.main(["pack", "nope@12345678", "--home", str(home), "--out",
                     str(tmp_path / "out")]) == 2
    assert "'nope'" in capsys.readouterr().err


def test_unpack_in_two_calls_stores_the_same_dataset(source, packed, tmp_path, capsys):
    _, ds = source
    doc, parts, _ = packed
    home = tmp_path / "there"
    half = len(parts) // 2
    first = _carry(tmp_path, [parts[0].with_name(f"tst@{ds.name[:12]}.parts.json")]
                   + parts[:half], "call1")
    assert off.main(["unpack", str(first), "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "waiting for" in out and f"part{half:02d}" in out
    assert not (home / "datasets" / "tst").exists()
    second = _carry(tmp_path, parts[half:], "call2")          # the parts.json came before
    assert off.main(["unpack", str(second), "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1 and "stored in" in out
    got = Store(home).resolve_dataset(f"tst@{ds.name[:10]}")
    assert got == (home / "datasets" / "tst" / ds.name).resolve()
    rep = validate_dataset(f"tst@{ds.name[:10]}", home=home)
    assert rep.ok and rep.episodes_checked == 16
    assert sorted(p.name for p in got.iterdir()) == sorted(p.name for p in ds.iterdir())
    assert not any((home / ".carry").iterdir())                # the stage emptied
    assert _leftovers(home) == []
    # carried again: kept, said so
    assert off.main(["unpack", str(_carry(tmp_path, parts + [
        parts[0].with_name(f"tst@{ds.name[:12]}.parts.json")], "call3")),
        "--home", str(home)]) == 0
    assert "kept: already stored" in capsys.readouterr().out


def test_damaged_part_is_refused_and_nothing_stored(source, packed, tmp_path, capsys):
    _, ds = source
    doc, parts, _ = packed
    carried = _carry(tmp_path, parts + [parts[0].with_name(f"tst@{ds.name[:12]}.parts.json")],
                     "call")
    bad = carried / parts[1].name
    raw = bytearray(bad.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    bad.write_bytes(bytes(raw))
    home = tmp_path / "there"
    assert off.main(["unpack", str(carried), "--home", str(home)]) == 2
    cap = capsys.readouterr()
    assert len(cap.err.strip().splitlines()) == 1 and parts[1].name in cap.err
    assert "damaged" in cap.err and "carry it again" in cap.err
    assert not (home / "datasets" / "tst").exists()
    assert _leftovers(home) == []
    assert not (home / ".carry" / parts[1].name).exists()     # removed: carry it again
    # the good part carried again completes it
    assert off.main(["unpack", str(_carry(tmp_path, [parts[1]], "again")),
                     "--home", str(home)]) == 0
    assert "stored in" in capsys.readouterr().out
    assert validate_dataset(home / "datasets" / "tst" / ds.name).ok


def test_damaged_parts_are_found_in_the_call_that_carried_them(source, packed, tmp_path,
                                                              capsys):
    """Two damaged parts in the first of two calls: both refused in that call (not after the
    last part came), named in one line, removed; the second call's good parts wait for them."""
    _, ds = source
    doc, parts, _ = packed
    assert len(parts) >= 4
    half = len(parts) // 2
    first = _carry(tmp_path, [parts[0].with_name(f"tst@{ds.name[:12]}.parts.json")]
                   + parts[:half], "call1")
    for f in (first / parts[0].name, first / parts[1].name):
        raw = bytearray(f.read_bytes())
        raw[0] ^= 0xFF
        f.write_bytes(bytes(raw))
    home = tmp_path / "there"
    assert off.main(["unpack", str(first), "--home", str(home)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "damaged" in err
    assert parts[0].name in err and parts[1].name in err
    assert not (home / ".carry" / parts[0].name).exists()
    assert not (home / ".carry" / parts[1].name).exists()
    assert _leftovers(home) == []
    assert off.main(["unpack", str(_carry(tmp_path, parts[half:], "call2")),
                     "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert "waiting for 2 of" in out and "part00" in out and "part01" in out
    assert off.main(["unpack", str(_carry(tmp_path, parts[:2], "call3")),
                     "--home", str(home)]) == 0
    assert "stored in" in capsys.readouterr().out
    assert validate_dataset(home / "datasets" / "tst" / ds.name).ok


def test_a_dataset_failing_validation_is_refused(source, tmp_path, capsys):
    """Parts whose sha256 match but whose dataset was changed after its build (a shard's
    byte flipped in the packed copy): unpack's validation refuses it."""
    home, ds = source
    changed = tmp_path / "changed"
    shutil.copytree(home, changed)
    shard = sorted((changed / "datasets" / "tst" / ds.name).glob("shard-*"))[0]
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    shard.write_bytes(bytes(raw))
    assert off.main(["pack", f"tst@{ds.name[:8]}", "--home", str(changed), "--out",
                     str(tmp_path / "out"), "--part-mib", str(PART_MIB)]) == 0
    there = tmp_path / "there"
    assert off.main(["unpack", str(tmp_path / "out"), "--home", str(there)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "fails validation" in err
    assert "shard_digest" in err
    assert not (there / "datasets" / "tst").exists()
    assert _leftovers(there) == []


def test_missing_parts_store_nothing(source, packed, tmp_path, capsys):
    _, ds = source
    doc, parts, _ = packed
    home = tmp_path / "there"
    carried = _carry(tmp_path, parts[:-1] + [parts[0].with_name(
        f"tst@{ds.name[:12]}.parts.json")], "call")
    assert off.main(["unpack", str(carried), "--home", str(home)]) == 0
    out = capsys.readouterr().out
    assert f"waiting for 1 of {len(parts)} part(s): part{len(parts) - 1:02d}" in out
    assert not (home / "datasets" / "tst").exists()
    assert _leftovers(home) == []


def test_unpack_with_nothing_carried_is_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert off.main(["unpack", str(tmp_path / "empty"), "--home", str(tmp_path / "h")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert off.main(["unpack", str(tmp_path / "nothere"), "--home", str(tmp_path / "h")]) == 2
    assert "no such folder" in capsys.readouterr().err
