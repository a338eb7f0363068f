"""benchmarks/_mt19_archive.py in temporary git repositories: bundle files kept in history
by two commits (HEAD's tree, the index and the working tree unchanged), refused on a
detached HEAD or a branch that moved, written back all or nothing (a wrong sha256 or a
missing blob refused in one line)."""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import _mt19_archive as archive_lib  # noqa: E402
import _mt19_record as record_lib  # noqa: E402


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


def make_repo(path: Path) -> Path:
    """A git repository with one commit (a.txt), its identity set locally."""
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    for k, v in (("user.name", "Archive Test"), ("user.email", "archive@example.com"),
                 ("commit.gpgsign", "false")):
        git(path, "config", k, v)
    (path / "a.txt").write_text("a\n")
    git(path, "add", "a.txt")
    git(path, "commit", "-q", "-m", "first")
    return path


def commits(repo: Path) -> int:
    return int(git(repo, "rev-list", "--count", "--all"))


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo")


@pytest.fixture
def files(tmp_path):
    """Three bundle files of random bytes: one whole, one in two parts."""
    d = tmp_path / "bundles"
    d.mkdir()
    out = []
    for name, n in (("walker-run.tar.gz", 70_001), ("hopper-hop.tar.gz.part00", 4096),
                    ("hopper-hop.tar.gz.part01", 123)):
        (d / name).write_bytes(os.urandom(n))
        out.append(d / name)
    return out


def _entries(got):
    return [{k: g[k] for k in record_lib.ARCHIVE_KEYS} for g in got]


def test_archive_makes_two_commits_and_touches_neither_index_nor_working_tree(repo, files):
    (repo / "a.txt").write_text("staged\n")
    git(repo, "add", "a.txt")
    (repo / "a.txt").write_text("staged, then changed\n")
    (repo / "untracked.txt").write_text("u\n")
    head, tree = git(repo, "rev-parse", "HEAD"), git(repo, "rev-parse", "HEAD^{tree}")
    status = git(repo, "status", "--porcelain")
    staged, unstaged = git(repo, "diff", "--cached"), git(repo, "diff")
    index = (repo / ".git" / "index").read_bytes()
    got = archive_lib.archive(repo, files, "walker-run, hopper-hop")
    assert (repo / ".git" / "index").read_bytes() == index         # before any status call
    assert (repo / "a.txt").read_text() == "staged, then changed\n"
    assert sorted(p.name for p in repo.iterdir()) == [".git", "a.txt", "untracked.txt"]
    assert (git(repo, "status", "--porcelain"), git(repo, "diff", "--cached"),
            git(repo, "diff")) == (status, staged, unstaged)
    assert commits(repo) == 3 and git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    assert git(repo, "rev-parse", "HEAD~2") == head
    assert git(repo, "rev-parse", "HEAD^{tree}") == tree             # HEAD's tree unchanged
    c1 = git(repo, "rev-parse", "HEAD^")
    assert {g["commit"] for g in got} == {c1}
    assert git(repo, "ls-tree", "-r", "--name-only", c1).splitlines() == sorted(
        ["a.txt"] + [f"mt19-archive/{f.name}" for f in files])
    assert "walker-run, hopper-hop bundles (kept in history" in git(repo, "log", "-1",
                                                                   "--format=%s", c1)
    assert "out of the working tree" in git(repo, "log", "-1", "--format=%s", "HEAD")
    for f, g in zip(files, got):
        data = f.read_bytes()
        assert g["file"] == f.name and g["bytes"] == len(data)
        assert g["sha256"] == hashlib.sha256(data).hexdigest()
        assert g["blob"] == git(repo, "hash-object", str(f))
        assert git(repo, "rev-parse", f"{c1}:mt19-archive/{f.name}") == g["blob"]
        blob = subprocess.run(["git", "-C", str(repo), "cat-file", "blob", g["blob"]],
                              check=True, capture_output=True).stdout
        assert blob == data
    assert archive_lib.available(repo, _entries(got))
    assert not archive_lib.available(repo, [{**_entries(got)[0], "blob": "1" * 40}])
    assert not archive_lib.available(repo, [{**_entries(got)[0], "blob": c1}])   # a commit


def test_archive_refuses_a_detached_head_a_moved_branch_and_a_repeated_name(
        repo, files, monkeypatch, tmp_path):
    git(repo, "checkout", "-q", "--detach")
    with pytest.raises(archive_lib.ArchiveError, match="HEAD is detached") as e:
        archive_lib.archive(repo, files, "x")
    assert len(str(e.value).splitlines()) == 1 and commits(repo) == 1
    git(repo, "checkout", "-q", "main")
    real = archive_lib._git

    def meanwhile(r, *args, **kw):            # a commit lands between the archive's steps
        if args[0] == "update-ref":
            real(r, "commit", "-q", "--allow-empty", "-m", "meanwhile")
        return real(r, *args, **kw)
    monkeypatch.setattr(archive_lib, "_git", meanwhile)
    with pytest.raises(archive_lib.ArchiveError, match="moved from") as e:
        archive_lib.archive(repo, files, "x")
    assert len(str(e.value).splitlines()) == 1
    assert git(repo, "log", "-1", "--format=%s") == "meanwhile"      # left as it was
    assert git(repo, "rev-list", "--count", "HEAD") == "2"
    monkeypatch.setattr(archive_lib, "_git", real)
    other = tmp_path / "other"
    other.mkdir()
    (other / files[0].name).write_bytes(b"another")
    with pytest.raises(archive_lib.ArchiveError, match="two files named walker-run.tar.gz"):
        archive_lib.archive(repo, [files[0], other / files[0].name], "x")
    assert git(repo, "rev-list", "--count", "HEAD") == "2"


def test_restore_writes_the_same_bytes_and_refuses_a_wrong_sha256(repo, files, tmp_path):
    entries = _entries(archive_lib.archive(repo, files, "walker-run, hopper-hop"))
    back = archive_lib.restore(repo, entries, tmp_path / "back" / "files")
    assert [p.name for p in back] == [f.name for f in files]
    assert [p.read_bytes() for p in back] == [f.read_bytes() for f in files]
    assert [p.name for p in (tmp_path / "back").iterdir()] == ["files"]   # no temporary left
    with pytest.raises(archive_lib.ArchiveError, match="exists"):
        archive_lib.restore(repo, entries, tmp_path / "back" / "files")
    for bad in ({**entries[2], "sha256": "0" * 64}, {**entries[2], "bytes": 124}):
        with pytest.raises(archive_lib.ArchiveError, match="the record says") as e:
            archive_lib.restore(repo, [*entries[:2], bad], tmp_path / "bad" / "files")
        assert len(str(e.value).splitlines()) == 1 and "hopper-hop.tar.gz.part01" in str(e.value)
        assert list((tmp_path / "bad").iterdir()) == []             # nothing written
    with pytest.raises(archive_lib.ArchiveError, match="not .file, blob, sha256, bytes"):
        archive_lib.restore(repo, [{**entries[0], "file": "../x"}], tmp_path / "evil")
    assert not (tmp_path / "evil").exists()


def test_a_missing_blob_is_one_line_naming_the_task(repo, files, tmp_path):
    entries = _entries(archive_lib.archive(repo, files, "walker-run, hopper-hop"))
    gone = [entries[0], {**entries[2], "blob": "0" * 40}]
    assert not archive_lib.available(repo, gone)
    with pytest.raises(archive_lib.ArchiveError) as e:
        archive_lib.restore(repo, gone, tmp_path / "out" / "files")
    said = str(e.value)
    assert len(said.splitlines()) == 1 and said.startswith("hopper-hop: ")
    assert "not in the repository" in said and "next --regenerate hopper-hop" in said
    assert not (tmp_path / "out").exists()
