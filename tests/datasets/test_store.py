"""Store layout, name@hash resolution and atomic directories."""
import json
import os

import pytest

from wmx.datasets.names import NameResolutionError, parse_ref
from wmx.datasets.store import (Store, atomic_dir, resolve_dataset,
                                resolve_episode_set)

H1 = "3fa2c1d0" + "1" * 56
H2 = "3fa2c1d0" + "2" * 56   # shares 8 digits with H1
H3 = "aaaaaaaa" + "3" * 56


def put(root, name, h, created):
    d = root / name / h
    d.mkdir(parents=True)
    (d / "manifest.json").write_text(json.dumps({"created": created}))
    return d


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "home").ensure_layout()
    put(s.datasets_dir, "mt19", H1, "2026-01-01T00:00:00+00:00")
    put(s.datasets_dir, "mt19", H2, "2026-03-01T00:00:00+00:00")
    put(s.datasets_dir, "mt19", H3, "2026-02-01T00:00:00+00:00")
    put(s.datasets_dir, "mt5", H3, "2026-02-01T00:00:00+00:00")
    (s.datasets_dir / "mt19" / ("b" * 64)).mkdir()  # incomplete: no manifest
    (s.datasets_dir / "mt19" / ".tmp-x-123").mkdir()  # staging leftovers
    return s


def test_home_and_layout(tmp_path, monkeypatch):
    monkeypatch.setenv("WMX_HOME", str(tmp_path / "env-home"))
    assert Store().home == tmp_path / "env-home"
    s = Store(tmp_path / "explicit")
    assert s.home == tmp_path / "explicit" and not s.home.exists()
    s.ensure_layout()
    assert sorted(os.listdir(s.home)) == ["datasets", "episodes", "runs"]
    assert s.dataset_path("mt19", H1) == s.home / "datasets" / "mt19" / H1
    with pytest.raises(ValueError, match="64 lowercase"):
        s.dataset_path("mt19", "abc")


def test_unique_prefix_resolves(store):
    assert store.resolve_dataset("mt19@" + H3[:8]) == store.datasets_dir / "mt19" / H3
    assert store.resolve_dataset("mt19@3fa2c1d01") == store.datasets_dir / "mt19" / H1
    assert store.resolve_dataset("mt19@" + H2.upper()) == store.datasets_dir / "mt19" / H2
    assert resolve_dataset("mt5@aaaaaaaa", home=store.home) == store.datasets_dir / "mt5" / H3


def test_ambiguous_prefix_lists_the_matches(store):
    with pytest.raises(NameResolutionError, match="ambiguous") as e:
        store.resolve_dataset("mt19@3fa2c1d0")
    assert e.value.candidates == [f"mt19@{H1}", f"mt19@{H2}"]
    assert H1 in str(e.value) and H2 in str(e.value)


def test_unknown_version_and_name_list_candidates(store):
    with pytest.raises(NameResolutionError, match="stored versions") as e:
        store.resolve_dataset("mt19@cccccccc")
    assert sorted(e.value.candidates) == sorted(f"mt19@{h[:10]}" for h in (H1, H2, H3))
    with pytest.raises(NameResolutionError, match="stored names: mt19, mt5") as e:
        store.resolve_dataset("mt30@latest")
    assert e.value.candidates == ["mt19", "mt5"]
    with pytest.raises(NameResolutionError, match="at least 8 hex"):
        store.resolve_dataset("mt19@3fa2c1")
    with pytest.raises(NameResolutionError, match="hex digits"):
        store.resolve_dataset("mt19@notahash!")
    with pytest.raises(NameResolutionError, match="neither"):
        store.resolve_dataset("mt19")


def test_latest_is_newest_by_created(store):
    assert store.resolve_dataset("mt19@latest") == store.datasets_dir / "mt19" / H2


def test_path_resolves(store, tmp_path):
    d = store.datasets_dir / "mt19" / H1
    assert store.resolve_dataset(str(d)) == d
    assert store.resolve_dataset(d) == d
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        store.resolve_dataset(store.datasets_dir / "mt19" / ("b" * 64))


def test_listing_skips_incomplete_and_staging(store):
    entries = store.list_datasets()
    assert [(e.name, e.content_hash) for e in entries] == [
        ("mt19", H1), ("mt19", H3), ("mt19", H2), ("mt5", H3)]
    assert [e.content_hash for e in store.list_datasets("mt5")] == [H3]
    assert store.list_episode_sets() == []


def test_episode_sets_resolve_by_task(store):
    put(store.episodes_dir, "walker-walk", H1, "2026-01-01T00:00:00+00:00")
    put(store.episodes_dir, "cheetah-run", H3, "2026-01-01T00:00:00+00:00")
    assert resolve_episode_set("walker-walk@latest", home=store.home) == \
        store.episodes_dir / "walker-walk" / H1
    assert [e.name for e in store.list_episode_sets()] == ["cheetah-run", "walker-walk"]
    assert [e.name for e in store.list_episode_sets("cheetah-run")] == ["cheetah-run"]
    with pytest.raises(NameResolutionError):
        store.resolve_episode_set("walker-walk@" + H3[:8])


def test_parse_ref():
    r = parse_ref("mt19-1a2b3c4d@LATEST")
    assert r.name == "mt19-1a2b3c4d" and r.is_latest
    with pytest.raises(NameResolutionError):
        parse_ref("@abcdefgh")


def test_atomic_dir_renames_on_success(tmp_path):
    final = tmp_path / "a" / "b"
    with atomic_dir(final) as tmp:
        assert tmp.parent == final.parent and tmp.name.startswith(".tmp-b~")
        (tmp / "x.txt").write_text("hi")
        assert not final.exists()
    assert (final / "x.txt").read_text() == "hi"
    assert os.listdir(final.parent) == ["b"]


def test_atomic_dir_leaves_nothing_on_exception(tmp_path):
    final = tmp_path / "out"
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_dir(final) as tmp:
            (tmp / "partial").write_bytes(b"123")
            raise RuntimeError("boom")
    assert not final.exists() and os.listdir(tmp_path) == []


def test_atomic_dir_refuses_to_overwrite(tmp_path):
    final = tmp_path / "out"
    final.mkdir()
    (final / "keep").write_text("old")
    with pytest.raises(FileExistsError, match="never overwrites"):
        with atomic_dir(final):
            pass
    # the target appears while the directory is being written
    final2 = tmp_path / "out2"
    with pytest.raises(FileExistsError):
        with atomic_dir(final2) as tmp:
            (tmp / "new").write_text("new")
            final2.mkdir()
    assert (final / "keep").read_text() == "old" and os.listdir(final2) == []
    assert sorted(os.listdir(tmp_path)) == ["out", "out2"]
