"""The mt19 bundles kept in the repository's git history, out of its working tree.

A data root is not kept from one working machine to the next, and the bundles of the 19
source runs (about 150 MB) must not be in the working tree (every device call copies
it, 64 MiB at most). `archive` therefore stores bundle files as git blobs reachable
through two commits on the current branch, made with git's plumbing and a temporary
index (the working tree and the index are not touched)::

    C1  HEAD's tree + mt19-archive/<file>...  "mt19 archive: <tasks> bundles (kept in history...)"
    C2  HEAD's tree again, parent C1          "... out of the working tree (blobs reachable ...)"

and moves the branch to C2 (checked against the HEAD it started from). A blob id is
computed from the file's bytes alone (``hash-object --no-filters``: no clean filter such as
Git LFS's, no end-of-line conversion that ``.gitattributes`` or ``core.autocrlf`` would
apply by the file's name), so it survives a rebase of those commits; the record
(`_mt19_record`, a task's ``archive``) names the blobs, their sha256 and sizes, and C1.
`restore` writes the files back (all or nothing), `available` says whether every blob
is in the repository. Errors are `ArchiveError`, one line naming the problem and the fix.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Iterable

DIR = "mt19-archive"
"""The folder of C1's tree that holds the archived files."""

PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
"""An archived file's name: no folder, not hidden."""
OID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
"""A git object id (SHA-1 or SHA-256 repositories)."""
SHA256 = re.compile(r"^[0-9a-f]{64}$")
"""A sha256 in hex."""
_TASK = re.compile(r"\.tar\.gz(?:\.part\d{2})?$")


_LOCAL_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_IMPLICIT_WORK_TREE", "GIT_COMMON_DIR",
              "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
              "GIT_PREFIX")
"""The environment variables that point git at another repository, index or object store
than ``-C``'s (set in a git hook, say): left out of every git run here."""


class ArchiveError(ValueError):
    """An archive that cannot be written or read back; the message is one line naming the
    problem and the fix."""


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment less `_LOCAL_ENV`, plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if k not in _LOCAL_ENV}, **(extra or {})}


def _git(repo: Path, *args: str, env: dict[str, str] | None = None,
         stdin: str | None = None) -> str:
    """Run ``git -C repo ARGS`` (the environment less `_LOCAL_ENV`: ``repo`` is the
    repository).

    Args:
        repo: the repository's work tree.
        args: git's arguments.
        env: variables added to the environment (e.g. ``GIT_INDEX_FILE``).
        stdin: text given on standard input.

    Returns:
        Its standard output, stripped.

    Raises:
        ArchiveError: git is missing or failed (its first line of stderr).
    """
    try:
        p = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                           input=stdin, env=_env(env))
    except OSError as e:
        raise ArchiveError(f"git {args[0]}: cannot run git ({type(e).__name__}); install git "
                           "or pass --no-archive") from None
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[0]
        raise ArchiveError(f"git {args[0]} in {repo}: {why}")
    return p.stdout.strip()


def task_of(name: str) -> str:
    """The task of a bundle file's name (``<task>.tar.gz`` or ``<task>.tar.gz.partNN``)."""
    return _TASK.sub("", name)


def repo_of(path: Path) -> Path | None:
    """The top of the git work tree that holds ``path``.

    Args:
        path: a file or folder (it need not exist: its nearest existing parent counts).

    Returns:
        The work tree's top folder, or None when ``path`` is in none (no ``.git`` in it or
        above it) or git is missing.

    Raises:
        ArchiveError: a ``.git`` holds it but git cannot use that repository (another
            user's, refused as of "dubious ownership"; a damaged one): one line, git's
            reason and the fix, rather than taking its archive for absent.
    """
    p = Path(path).resolve()
    while not p.is_dir():
        p = p.parent
    try:
        return Path(_git(p, "rev-parse", "--show-toplevel"))
    except ArchiveError as e:
        top = next((q for q in (p, *p.parents) if (q / ".git").exists()), None)
        if top is None or shutil.which("git") is None:
            return None
        raise ArchiveError(f"{e}; fix that and run again (another user's repository: git "
                           f"config --global --add safe.directory {top})") from None


def branch(repo: Path) -> tuple[str, str]:
    """The branch checked out in ``repo`` and its commit.

    Args:
        repo: the repository's work tree.

    Returns:
        (ref, commit id), e.g. ("refs/heads/main", "3f8a...").

    Raises:
        ArchiveError: HEAD is detached, or the branch has no commit yet.
    """
    try:
        ref = _git(repo, "symbolic-ref", "-q", "HEAD")
    except ArchiveError:
        raise ArchiveError(f"{repo}: HEAD is detached; the archive's commits go on a branch: "
                           "check one out (git switch BRANCH) and run again") from None
    try:
        head = _git(repo, "rev-parse", "--verify", "-q", "HEAD^{commit}")
    except ArchiveError:
        raise ArchiveError(f"{repo}: {ref} has no commit yet; commit something first") from None
    return ref, head


def ready(repo: Path) -> tuple[str, str]:
    """Refuse, before anything is written, a repository `archive` cannot commit in: a
    detached HEAD or a branch with no commit (`branch`), or no identity for the commits'
    author and committer (``git var``, as ``commit-tree`` would find it).

    Args:
        repo: the repository's work tree.

    Returns:
        (ref, commit id) of the branch checked out (`branch`).

    Raises:
        ArchiveError: naming the problem and the fix.
    """
    out = branch(repo)
    for who in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
        try:
            _git(repo, "var", who)
        except ArchiveError:
            raise ArchiveError(f"{repo}: git has no identity to commit the archive with; set "
                               "one (git config user.name NAME; git config user.email EMAIL), "
                               "or pass --no-archive") from None
    return out


def sha256_of(path: Path) -> str:
    """The sha256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with Path(path).open("rb") as f:
        for block in iter(lambda: f.read(2 ** 20), b""):
            h.update(block)
    return h.hexdigest()


def archive(repo: Path, files: Iterable[Path], message: str) -> list[dict[str, Any]]:
    """Keep files in ``repo``'s history, not in its working tree (see the module doc).

    Args:
        repo: the repository's work tree (a branch checked out).
        files: the bundle files; their names (unique) become ``mt19-archive/<name>`` in C1.
        message: what they are, for both commit messages ("mt19 archive: <message>
            bundles ..."; the tasks, e.g. "walker-run, hopper-hop").

    Returns:
        Per file in order: {"file": name, "blob": git object id, "sha256": hex, "bytes":
        size, "commit": C1}. The branch is at C2, whose tree is HEAD's; the index and the
        working tree are as they were.

    Raises:
        ArchiveError: no file, a missing file or a repeated name, a detached HEAD or no
            git identity (`ready`), the branch moved while the commits were made (the
            branch is then left as it is), or git failed (its reason: a branch locked by a
            killed git, say).
    """
    repo, files = Path(repo), [Path(f) for f in files]
    names = [f.name for f in files]
    if not files:
        raise ArchiveError("nothing to archive: give the bundle files")
    for f in files:
        if not f.is_file() or not PLAIN_NAME.match(f.name):
            raise ArchiveError(f"{f}: not a file to archive (a bundle file of a plain name)")
    if len(set(names)) != len(names):
        raise ArchiveError(f"two files named {next(n for n in names if names.count(n) > 1)}: "
                           "archive them in separate calls")
    ref, head = ready(repo)
    out = []
    with tempfile.TemporaryDirectory(prefix="mt19-archive-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(repo, "read-tree", head, env=env)
        for f in files:
            blob = _git(repo, "hash-object", "-w", "--no-filters", "--", str(f.resolve()))
            _git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{DIR}/{f.name}",
                 env=env)
            out.append({"file": f.name, "blob": blob, "sha256": sha256_of(f),
                        "bytes": f.stat().st_size})
        tree = _git(repo, "write-tree", env=env)
    c1 = _git(repo, "commit-tree", tree, "-p", head, "-m",
              f"mt19 archive: {message} bundles (kept in history, not in the working tree)")
    c2 = _git(repo, "commit-tree", f"{head}^{{tree}}", "-p", c1, "-m",
              f"mt19 archive: {message} bundles out of the working tree (blobs reachable "
              "through the previous commit)")
    try:
        _git(repo, "update-ref", "-m", f"mt19 archive: {message}", ref, c2, head)
    except ArchiveError as e:
        if _ref(repo, ref) == head:               # not moved: git's reason
            raise ArchiveError(f"{str(e).rstrip('.')}; {ref} is still at {head[:12]}: fix "
                               "that and run again") from None
        raise ArchiveError(f"{repo}: {ref} moved from {head[:12]} while the archive was "
                           "made; nothing was moved: run again") from None
    return [{**o, "commit": c1} for o in out]


def _ref(repo: Path, ref: str) -> str | None:
    """The commit ``ref`` names in ``repo``, None when it names none."""
    try:
        return _git(repo, "rev-parse", "--verify", "-q", f"{ref}^{{commit}}")
    except ArchiveError:
        return None


def _check(entries: list[dict[str, Any]]) -> None:
    """Refuse archive entries that are not as the record keeps them (a plain file name, a
    git object id, a sha256, a size), or that repeat a name."""
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("file"), str)
                and PLAIN_NAME.match(e["file"]) and isinstance(e.get("blob"), str)
                and OID.match(e["blob"]) and isinstance(e.get("sha256"), str)
                and SHA256.match(e["sha256"])
                and isinstance(e.get("bytes"), int) and not isinstance(e["bytes"], bool)):
            raise ArchiveError(f"archive entry {e!r} is not {{file, blob, sha256, bytes}} as "
                               "ingest writes it; restore mt19_sources.json from git")
    names = [e["file"] for e in entries]
    if not entries or len(set(names)) != len(names):
        raise ArchiveError(f"archive {names}: no file or a repeated name; restore "
                           "mt19_sources.json from git")


def entries_ok(entries: Any) -> bool:
    """Whether ``entries`` is an archive as `archive` gives it and the record keeps it: a
    non-empty list of {file, blob, sha256, bytes} with plain, distinct file names, git
    object ids, 64-hex sha256 and integer sizes (`_check`, without raising)."""
    if not isinstance(entries, list):
        return False
    try:
        _check(entries)
    except ArchiveError:
        return False
    return True


def _missing(repo: Path, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The entries whose blob ``repo`` lacks, holds as another kind of object, or holds
    only unreachable from HEAD (after a reset or a squash of the archive's commits: a
    clone would not have it)."""
    said = _git(repo, "cat-file", "--batch-check",
                stdin="".join(e["blob"] + "\n" for e in entries)).splitlines()
    reachable = set(_git(repo, "rev-list", "--objects", "--no-object-names", "HEAD").split())
    return [e for e, line in zip(entries, said)
            if line.split()[:2] != [e["blob"], "blob"] or e["blob"] not in reachable]


def available(repo: Path, entries: list[dict[str, Any]]) -> bool:
    """Whether every archived file's blob is in ``repo``, reachable from HEAD (`restore`
    checks the bytes).

    Args:
        repo: the repository's work tree.
        entries: the archived files (a record's ``archive``).

    Returns:
        True when all are there; False for one missing, or entries that are not an archive.
    """
    return bool(available_each(repo, {"": entries}))


def available_each(repo: Path, archives: dict[str, Any]) -> set[str]:
    """`available` of several archives (a record's tasks'), with one pass of git over
    them all (one ``cat-file`` and one ``rev-list`` of HEAD, not one per task).

    Args:
        repo: the repository's work tree.
        archives: {key (a task): its archived files (a record's ``archive``)}.

    Returns:
        The keys whose every file's blob is there; none for git failing, and a key whose
        files are not an archive is left out.
    """
    ok = {k: v for k, v in archives.items() if entries_ok(v)}
    if not ok:
        return set()
    try:
        lost = {e["blob"] for e in _missing(repo, [e for v in ok.values() for e in v])}
    except ArchiveError:
        return set()
    return {k for k, v in ok.items() if not any(e["blob"] in lost for e in v)}


def restore(repo: Path, entries: list[dict[str, Any]], dest: Path) -> list[Path]:
    """Write archived files back into a new folder, all or nothing.

    The files are written into an owned temporary folder beside ``dest``, each checked
    against its size and sha256, and the folder renamed to ``dest`` at the end; on any
    error the temporary is removed and ``dest`` not created.

    Args:
        repo: the repository's work tree.
        entries: the archived files (a record's ``archive``: file, blob, sha256, bytes).
        dest: the folder to create (it must not exist).

    Returns:
        The files written, in the entries' order.

    Raises:
        ArchiveError: ``dest`` exists, an entry is malformed, a blob is missing from the
            repository (the sets must then be trained again: ``next --regenerate TASK``),
            or a file's bytes differ from the record.
    """
    from wmx import temporaries
    repo, dest = Path(repo), Path(dest)
    _check(entries)
    if dest.exists():
        raise ArchiveError(f"{dest}: exists; restore into a new folder")
    missing = _missing(repo, entries)
    if missing:
        e = missing[0]
        task = task_of(e["file"])
        raise ArchiveError(f"{task}: its archived bundle {e['file']} (blob {e['blob'][:12]}) is "
                           f"not in the repository {repo}; its sets must be regenerated: "
                           f"next --regenerate {task}")
    tmp = temporaries.make_dir(dest.parent, dest.name)
    try:
        for e in entries:
            path = tmp / e["file"]
            with path.open("wb") as f:
                p = subprocess.run(["git", "-C", str(repo), "cat-file", "blob", e["blob"]],
                                   stdout=f, stderr=subprocess.PIPE, env=_env())
            if p.returncode != 0:
                why = (p.stderr.decode(errors="replace").strip().splitlines() or ["?"])[0]
                raise ArchiveError(f"git cat-file in {repo}: {why}")
            size, digest = path.stat().st_size, sha256_of(path)
            if (size, digest) != (e["bytes"], e["sha256"]):
                raise ArchiveError(f"{e['file']}: blob {e['blob'][:12]} holds {size} bytes of "
                                   f"sha256 {digest[:12]}, the record says {e['bytes']} of "
                                   f"{e['sha256'][:12]}; restore mt19_sources.json from git, "
                                   f"or regenerate: next --regenerate {task_of(e['file'])}")
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return [dest / e["file"] for e in entries]
