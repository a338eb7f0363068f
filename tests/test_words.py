"""The project's text names no working session and no folder of a development machine.

Docs are reference pages (what is true now, how to reproduce it), so a session's number has
no place in them, nor in code, comments or result files; and a path under the development machine's work folder names
one machine's folders (results record run names relative to the data root). Scanned:
README.md, docs/, benchmarks/ (result files included), wmx/, tests/, pipelines/, tools/,
.ci/, Makefile, pyproject.toml. `/tmp/...` paths are refused in README.md and docs/,
where a command example should name a folder of the reader's choosing; code may default
to the system's temporary directory. "session" in other senses (a pytest session
fixture, a Beam session) is fine: the rule is the word followed by a number.
"""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ["README.md", "Makefile", "pyproject.toml", "docs", "benchmarks", "wmx", "tests",
           "pipelines", "tools", ".ci"]
SKIPPED_SUFFIXES = {".png", ".jpg", ".gif", ".mp4", ".npz", ".array_record", ".pyc"}
# built from pieces so that this file does not match itself
SESSION = re.compile("[Ss]ession" + r"s? [0-9]+")
MACHINE = re.compile("/" + "work/")
TMP = re.compile(r"(?<![\w.$])/" + "tmp/")


def text_files():
    for name in SCANNED:
        path = ROOT / name
        files = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
        for f in files:
            if (f.is_file() and f.suffix not in SKIPPED_SUFFIXES and "__pycache__" not in
                    f.parts and f.resolve() != Path(__file__).resolve()):
                try:
                    yield f, f.read_text()
                except UnicodeDecodeError:
                    continue                          # a binary file


def hits(pattern: re.Pattern, files) -> list[str]:
    return [f"{f.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: "
            f"{text[max(0, m.start() - 30):m.end() + 30]!r}"
            for f, text in files for m in pattern.finditer(text)]


def test_no_session_numbers():
    found = hits(SESSION, text_files())
    assert not found, "session numbers (docs say what is true now; history is git's):\n" + \
        "\n".join(found)


def test_no_development_machine_paths():
    found = hits(MACHINE, text_files())
    assert not found, ("paths of a development machine (record names relative to the data "
                       "root or the repository):\n" + "\n".join(found))


def test_no_tmp_paths_in_docs():
    docs = [(f, t) for f, t in text_files()
            if f.name == "README.md" and f.parent == ROOT or "docs" in f.relative_to(ROOT).parts[:1]]
    found = hits(TMP, docs)
    assert not found, "docs name a /tmp folder; use a placeholder (DIR, OUT):\n" + "\n".join(found)


def test_the_patterns_match_what_they_should():
    word = "session"     # built here, so this file does not match its own scan
    assert SESSION.search(f"since {word} 17") and SESSION.search(f"{word}s 25-27")
    assert not SESSION.search('@pytest.fixture(scope="session")')
    assert MACHINE.search("run /" + "work/lc/home") and TMP.search("--out /" + "tmp/cmp")
    assert not TMP.search("$TMPDIR/x") and not TMP.search("tmp_path / 'x'")
