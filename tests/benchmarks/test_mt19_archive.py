"""benchmarks/_mt19_archive.py and the campaign's archive and restore, in temporary git
repositories: bundle files kept in history by two commits (HEAD's tree, the index and the
working tree unchanged), refused on a detached HEAD or a branch that moved, written back
all or nothing (a wrong sha256 or a missing blob refused in one line); ``ingest`` archiving
the tiny run's bundle (tests/tiny_runs.py, packed as the campaign packs) and ``restore``
putting the same episode sets into a fresh data root without changing the record;
``status`` showing such a task ``done; archived`` with the restore command and no
``--regenerate``."""
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _mt19_archive as archive_lib  # noqa: E402
import _mt19_bundle as bundle_lib  # noqa: E402
import _mt19_record as record_lib  # noqa: E402
import mt19_campaign as camp  # noqa: E402
from test_mt19_campaign import TINY  # noqa: E402

from tiny_runs import TINY_ONLINE_ARGV  # noqa: E402

TASK = "probe-action"


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
    git(repo, "reset", "-q", "--soft", f"{c1}~1")   # the archive's commits dropped
    assert not archive_lib.available(repo, _entries(got))   # the blob stays, unreachable


def test_available_each_judges_every_task_in_one_pass(repo, files, monkeypatch):
    """Per key as `available` judges it (a missing blob, a commit's id, not an archive),
    with one cat-file and one rev-list of git for all the keys together."""
    got = _entries(archive_lib.archive(repo, files, "t"))
    archives = {"whole": got[:1], "parts": got[1:], "gone": [{**got[0], "blob": "1" * 40}],
                "mixed": [got[1], {**got[2], "blob": "2" * 40}], "odd": [{"file": "x"}],
                "none": []}
    runs = []
    real = archive_lib._git
    monkeypatch.setattr(archive_lib, "_git", lambda r, *a, **k: runs.append(a[0]) or real(
        r, *a, **k))
    assert archive_lib.available_each(repo, archives) == {"whole", "parts"}
    assert sorted(runs) == ["cat-file", "rev-list"]
    assert {k for k, v in archives.items() if archive_lib.available(repo, v)} == {
        "whole", "parts"}
    assert archive_lib.available_each(repo, {"odd": [{"file": "x"}]}) == set()


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


# ---- ingest, status and restore ----------------------------------------------------------
@pytest.fixture(scope="module")
def ingested(tiny_online_run, tmp_path_factory):
    """The tiny run packed as the campaign packs it (probe-action.tar.gz), ingested into
    home h1 with the results folder inside a git repository: (tmp, repo, results, bundle
    folder, the HEAD before the ingest, its output)."""
    home, store, run_dir, summary = tiny_online_run
    tmp = tmp_path_factory.mktemp("mt19-archive")
    repo = make_repo(tmp / "repo")
    record = {"calls": [], "chip": "cpu", "jax": "0", "code_version": "0" * 40,
              "train_online_command": "train_online --agent tdmpc2 "
                                      + " ".join(TINY_ONLINE_ARGV) + " --name tiny"}
    bundle_lib.pack(home, run_dir, record, tmp / "out", TASK)
    results = repo / "benchmarks" / "results"
    head = git(repo, "rev-parse", "HEAD")
    import contextlib
    import io
    said = io.StringIO()
    with contextlib.redirect_stdout(said):
        assert camp.main(["ingest", str(tmp / "out"), *TINY, "--home", str(tmp / "h1"),
                          "--results", str(results)]) == 0
    return tmp, repo, results, tmp / "out", head, said.getvalue()


def _record(results: Path) -> dict:
    return json.loads((results / record_lib.FILE).read_text())


def _sets(home: Path) -> dict[str, dict[str, bytes]]:
    """{content hash: {file name: bytes}} of the data root's probe-action episode sets."""
    root = home / "episodes" / TASK
    return {d.name: {f.name: f.read_bytes() for f in sorted(d.iterdir())}
            for d in sorted(root.iterdir())} if root.is_dir() else {}


def test_ingest_archives_the_bundle_in_two_commits(ingested, capsys):
    tmp, repo, results, out, head, said = ingested
    bundle = out / f"{TASK}.tar.gz"
    assert commits(repo) == 3 and git(repo, "rev-parse", "HEAD~2") == head
    assert git(repo, "rev-parse", "HEAD^{tree}") == git(repo, "rev-parse", f"{head}^{{tree}}")
    assert git(repo, "status", "--porcelain") == "?? benchmarks/"     # the record, to commit
    rec = _record(results)
    assert record_lib.check(rec) == []
    e = rec["tasks"][TASK]
    assert e["archive"] == [{"file": bundle.name, "blob": git(repo, "hash-object", str(bundle)),
                             "sha256": hashlib.sha256(bundle.read_bytes()).hexdigest(),
                             "bytes": bundle.stat().st_size}]
    assert e["archive_commit"] == git(repo, "rev-parse", "HEAD^")
    assert f"archived {TASK}: 1 file," in said
    assert any("restore" in c for c in rec["regenerate"])
    # the same bundle again: the entry keeps its archive, no new commit
    before = (results / record_lib.FILE).read_text()
    assert camp.main(["ingest", str(out), *TINY, "--home", str(tmp / "h1"),
                      "--results", str(results)]) == 0
    assert "archived" not in capsys.readouterr().out
    assert commits(repo) == 3 and (results / record_lib.FILE).read_text() == before


def test_restore_puts_the_ingested_sets_into_a_fresh_home(ingested, tmp_path, capsys):
    tmp, repo, results, out, head, said = ingested
    h2 = tmp_path / "h2"
    status = ["status", *TINY, "--home", str(h2), "--results", str(results)]
    assert camp.main(status) == 0
    text = capsys.readouterr().out
    row = next(ln for ln in text.splitlines() if ln.startswith(TASK))
    assert "done; archived" in row and "sets missing" not in text
    assert "--regenerate" not in text and "regenerate (next" not in text
    assert "restore (here: mt19_campaign.py restore)" in row
    tail = text.split("tasks done\n", 1)[1].splitlines()
    assert tail[0].startswith("first, here: python benchmarks/mt19_campaign.py restore "
                              f"--home {h2} --results {results} --tasks {TASK}")
    record_before = (results / record_lib.FILE).read_bytes()
    assert camp.main(["restore", *TINY, "--home", str(h2), "--results", str(results)]) == 0
    text = capsys.readouterr().out
    assert f"{TASK}: restored tiny -> {h2 / 'runs' / 'tiny'}" in text
    ingested_sets = _sets(tmp / "h1")
    assert len(ingested_sets) == 2 and _sets(h2) == ingested_sets      # the same bytes
    assert set(ingested_sets) == {s["content_hash"] for s in
                                  _record(results)["tasks"][TASK]["episode_sets"]}
    assert (results / record_lib.FILE).read_bytes() == record_before and commits(repo) == 3
    summary = json.loads((h2 / "runs" / "tiny" / "summary.json").read_text())
    assert {Path(p).parent.parent for p in summary["episode_sets"].values()} == {h2 / "episodes"}
    assert camp.main(status) == 0
    text = capsys.readouterr().out
    row = next(ln for ln in text.splitlines() if ln.startswith(TASK))
    assert "archived" not in row and " done " in row
    assert "mt19_campaign.py restore" not in text and "first, here" not in text
    assert camp.main(["restore", *TINY, "--home", str(h2), "--results", str(results)]) == 0
    text = capsys.readouterr().out
    assert "its recorded sets are in the data root" in text and "nothing to restore" in text


def _variant(ingested, name: str, **archived) -> Path:
    """A results folder in the repository holding the record with the task's archive
    entry changed."""
    tmp, repo, results, *_ = ingested
    rec = _record(results)
    e = rec["tasks"][TASK]
    e["archive"] = [{**e["archive"][0], **archived}]
    other = repo / name
    other.mkdir(exist_ok=True)
    (other / record_lib.FILE).write_text(json.dumps(rec))
    return other


def test_a_task_whose_blobs_are_missing_is_regenerated(ingested, tmp_path, capsys):
    other = _variant(ingested, "gone", blob="0" * 40)
    h = tmp_path / "h"
    assert camp.main(["status", *TINY, "--home", str(h), "--results", str(other)]) == 0
    text = capsys.readouterr().out
    assert "done; sets missing" in text and "--regenerate probe-action" in text
    assert "mt19_campaign.py restore" not in text
    assert camp.main(["restore", *TINY, "--home", str(h), "--results", str(other)]) == 0
    text = capsys.readouterr().out
    assert f"{TASK}: sets missing and its archived blobs are not in this repository" in text
    assert f"next --regenerate {TASK}" in text and "nothing to restore" in text
    assert not h.exists()
    # with no archive recorded, the same
    rec = _record(other)
    del rec["tasks"][TASK]["archive"], rec["tasks"][TASK]["archive_commit"]
    (other / record_lib.FILE).write_text(json.dumps(rec))
    assert camp.main(["restore", *TINY, "--home", str(h), "--results", str(other)]) == 0
    assert "no archive is recorded" in capsys.readouterr().out and not h.exists()


def test_a_bad_archive_is_one_line_exit_2_and_nothing_moved(ingested, tmp_path, capsys):
    other = _variant(ingested, "bad", sha256="0" * 64)
    h = tmp_path / "h"
    assert camp.main(["restore", *TINY, "--home", str(h), "--results", str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sha256" in err and f"{TASK}.tar.gz" in err
    assert [p for p in h.rglob("*") if p.is_file() or p.name.startswith(".")] == []


def test_ingest_without_archive_and_on_a_detached_head(ingested, tmp_path, capsys):
    tmp, repo, results, out, *_ = ingested
    res = repo / "no-archive"
    assert camp.main(["ingest", str(out), *TINY, "--home", str(tmp_path / "h"),
                      "--results", str(res), "--no-archive"]) == 0
    assert "archive" not in _record(res)["tasks"][TASK] and commits(repo) == 3
    git(repo, "checkout", "-q", "--detach")
    try:
        capsys.readouterr()
        assert camp.main(["ingest", str(out), *TINY, "--home", str(tmp_path / "h2"),
                          "--results", str(repo / "detached")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "HEAD is detached" in err
        assert not (tmp_path / "h2").exists() and not (repo / "detached").exists()
    finally:
        git(repo, "checkout", "-q", "main")


def test_a_replaced_entry_keeps_its_archive_under_the_event(ingested):
    """A regeneration with other sets replaces the entry (which gets its own archive from
    the ingest); the replaced entry's archive stays listed under the event; the schema
    refuses a damaged archive."""
    rec = _record(ingested[2])
    old = rec["tasks"][TASK]
    new = {k: v for k, v in old.items() if k not in record_lib.ARCHIVED_KEYS}
    new = {**new, "run": "runs/other",
           "episode_sets": [{**s, "content_hash": "1" * 64} for s in old["episode_sets"]]}
    entry, _ = record_lib.regenerated(old, new)
    (ev,) = entry["regenerations"]
    assert "archive" not in entry and ev["replaced"]["archive"] == old["archive"]
    assert ev["replaced"]["archive_commit"] == old["archive_commit"]
    assert record_lib.check({**rec, "tasks": {TASK: entry}}) == []
    for damaged in ({"archive": []}, {"archive_commit": "x"},
                    {"archive": [{**old["archive"][0], "file": "../x"}]},
                    {"archive": [{**old["archive"][0], "bytes": "5"}]}):
        problems = record_lib.check({**rec, "tasks": {TASK: {**old, **damaged}}})
        assert any("archive is not" in p for p in problems), damaged
    broken = {**ev, "replaced": {**ev["replaced"], "archive_commit": 5}}
    assert any("regenerations" in p for p in record_lib.check(
        {**rec, "tasks": {TASK: {**entry, "regenerations": [broken]}}}))


@pytest.mark.parametrize("sets", ["identical", "other"])
def test_a_regeneration_archives_for_the_entry_it_leaves(ingested, tmp_path, capsys, sets):
    """The tiny bundle ingested as a regeneration of a recorded run ("runs/before", same env
    steps): with the same sets the entry keeps its run and, having no archive, gets the
    regeneration's; with other sets the entry names the new run with its own archive, and
    the replaced entry's archive stays under the event."""
    tmp, repo, results, out, *_ = ingested
    rec = _record(results)
    first = rec["tasks"][TASK]
    old = {**first, "run": "runs/before"}
    if sets == "identical":
        del old["archive"], old["archive_commit"]
    else:
        old["episode_sets"] = [{**s, "content_hash": "0" * 64} for s in old["episode_sets"]]
    res = repo / f"regen-{sets}"
    res.mkdir()
    (res / record_lib.FILE).write_text(json.dumps({**rec, "tasks": {TASK: old}}))
    n = commits(repo)
    assert camp.main(["ingest", str(out), *TINY, "--home", str(tmp_path / "h"),
                      "--results", str(res)]) == 0
    assert f"archived {TASK}: 1 file," in capsys.readouterr().out
    assert commits(repo) == n + 2
    e = _record(res)["tasks"][TASK]
    (ev,) = e["regenerations"]
    assert ev["run"] == "runs/tiny" and ev["identical"] == (sets == "identical")
    assert e["run"] == ("runs/before" if sets == "identical" else "runs/tiny")
    assert e["archive"] == first["archive"]              # the same bytes: the same blob
    assert e["archive_commit"] == git(repo, "rev-parse", "HEAD^") != first["archive_commit"]
    if sets == "other":
        assert ev["replaced"]["archive"] == first["archive"]
        assert ev["replaced"]["archive_commit"] == first["archive_commit"]
    assert record_lib.check(_record(res)) == []


# ---- the archive against the repository's settings and environment -----------------------
def test_the_blob_is_the_file_s_bytes_whatever_the_attributes_say(repo, tmp_path):
    """A clean filter and end-of-line conversion (``.gitattributes``, ``core.autocrlf``; Git
    LFS is such a filter) apply to ``hash-object`` by the file's name, even for a file
    outside the work tree: the blob must hold the bundle's bytes, or restore can never
    give them back."""
    (repo / ".gitattributes").write_text("*.gz filter=upper\n*.part?? text eol=lf\n")
    git(repo, "add", ".gitattributes")
    git(repo, "commit", "-q", "-m", "attributes")
    git(repo, "config", "filter.upper.clean", "tr a-z A-Z")
    git(repo, "config", "filter.upper.smudge", "cat")
    git(repo, "config", "core.autocrlf", "true")
    d = tmp_path / "bundles"
    d.mkdir()
    files = [d / "walker-run.tar.gz", d / "hopper-hop.tar.gz.part00"]
    for f in files:
        f.write_bytes(b"bundle bytes\r\nin lower case\r\n" * 50)
    entries = _entries(archive_lib.archive(repo, files, "walker-run, hopper-hop"))
    for f, e in zip(files, entries):
        assert e["blob"] == git(repo, "hash-object", "--no-filters", str(f))
    back = archive_lib.restore(repo, entries, tmp_path / "back")
    assert [p.read_bytes() for p in back] == [f.read_bytes() for f in files]


def test_the_repository_is_the_one_named_not_the_environment_s(repo, files, tmp_path,
                                                               monkeypatch):
    """GIT_DIR, GIT_WORK_TREE and GIT_INDEX_FILE in the environment (a git hook's, say) do
    not send the archive's commits, objects or reads to another repository."""
    other = make_repo(tmp_path / "other")
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    assert archive_lib.repo_of(repo / "benchmarks" / "results") == repo
    entries = _entries(archive_lib.archive(repo, files, "walker-run, hopper-hop"))
    assert archive_lib.available(repo, entries)
    back = archive_lib.restore(repo, entries, tmp_path / "back")
    for k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(k)
    assert [p.read_bytes() for p in back] == [f.read_bytes() for f in files]
    assert (commits(repo), commits(other)) == (3, 1)
    assert not archive_lib.available(other, entries)


def test_a_locked_branch_is_not_said_to_have_moved(repo, files):
    """update-ref failing for another reason than a moved branch (a stale lock left by a
    killed git) names that reason, not "run again"."""
    head = git(repo, "rev-parse", "HEAD")
    (repo / ".git" / "refs" / "heads" / "main.lock").write_text("")
    with pytest.raises(archive_lib.ArchiveError) as e:
        archive_lib.archive(repo, files, "x")
    said = str(e.value)
    assert len(said.splitlines()) == 1 and "moved" not in said and "main.lock" in said
    assert git(repo, "rev-parse", "HEAD") == head


def test_ingest_without_a_git_identity_is_refused_before_anything_moves(ingested, tmp_path,
                                                                        monkeypatch, capsys):
    """The archive's commits need an author and a committer: a repository where git has none
    (a fresh machine) refuses the ingest in one line before the store is touched, as a
    detached HEAD does."""
    tmp, repo, results, out, *_ = ingested
    bare = make_repo(tmp_path / "repo")
    for k in ("user.name", "user.email"):
        git(bare, "config", "--unset", k)
    git(bare, "config", "user.useConfigOnly", "true")     # no identity guessed from the host
    for k, v in (("HOME", str(tmp_path)), ("XDG_CONFIG_HOME", str(tmp_path)),
                 ("GIT_CONFIG_NOSYSTEM", "1")):
        monkeypatch.setenv(k, v)
    for k in ("EMAIL", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME",
              "GIT_COMMITTER_EMAIL"):
        monkeypatch.delenv(k, raising=False)
    assert camp.main(["ingest", str(out), *TINY, "--home", str(tmp_path / "h"),
                      "--results", str(bare / "res")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "identity" in err and "user.email" in err
    assert "--no-archive" in err
    assert not (tmp_path / "h").exists() and not (bare / "res").exists() and commits(bare) == 1


def test_ingest_outside_a_git_work_tree_says_it_did_not_archive(ingested, tmp_path, capsys):
    """A results folder in no git work tree records the sets without an archive; the ingest
    says so (a new data root could then only train them again), instead of nothing."""
    tmp, repo, results, out, *_ = ingested
    res = tmp_path / "results"
    assert archive_lib.repo_of(res) is None
    assert camp.main(["ingest", str(out), *TINY, "--home", str(tmp_path / "h"),
                      "--results", str(res)]) == 0
    said = capsys.readouterr().out
    assert f"not archived: {res} is in no git work tree" in said and "archived " not in said
    assert "archive" not in _record(res)["tasks"][TASK]


def test_restore_sweeps_what_a_killed_restore_left(ingested, tmp_path, capsys):
    """A restore (or ingest) killed outright (SIGHUP, SIGKILL: no cleanup) leaves its
    staging folder, a copy of every bundle, under ``<home>/runs/``; the next one removes
    it, as every stage sweeps dead processes' temporaries when it starts."""
    from wmx import temporaries
    tmp, repo, results, *_ = ingested
    dead = subprocess.Popen(["true"])
    dead.wait()
    h = tmp_path / "h"
    left = h / "runs" / f".tmp-mt19-ingest~{temporaries._host()}~{dead.pid}~0badcafe"
    (left / "files-0").mkdir(parents=True)
    (left / "files-0" / f"{TASK}.tar.gz").write_bytes(b"x" * 1000)
    assert camp.main(["restore", *TINY, "--home", str(h), "--results", str(results)]) == 0
    assert f"{TASK}: restored" in capsys.readouterr().out
    assert not left.exists() and sorted(p.name for p in (h / "runs").iterdir()) == ["tiny"]


def test_a_repository_git_refuses_is_an_error_not_an_absent_archive(ingested, tmp_path,
                                                                   monkeypatch, capsys):
    """A repository git will not use (another user's: "dubious ownership") is one line
    naming git's reason and safe.directory, for status, restore and ingest alike; not taken
    for "no git work tree", which would send the archived tasks to be trained again and
    record new ingests unarchived."""
    tmp, repo, results, out, *_ = ingested
    n = commits(repo)
    monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")     # git's own test switch
    if subprocess.run(["git", "-C", str(repo), "rev-parse"], capture_output=True).returncode == 0:
        pytest.skip("this git does not check the repository's owner")
    h = tmp_path / "h"
    for argv in (["status"], ["restore"], ["ingest", str(out)]):
        assert camp.main([*argv, *TINY, "--home", str(h), "--results", str(results)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "dubious ownership" in err, argv
        assert f"safe.directory {repo}" in err
    monkeypatch.delenv("GIT_TEST_ASSUME_DIFFERENT_OWNER")
    assert not h.exists() and commits(repo) == n
