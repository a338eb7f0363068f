"""benchmarks/results/ holds only cited results: every file or folder in it is cited by
README.md or a page of docs/, or listed in benchmarks/results/README.md, and every
`benchmarks/results/...` path a doc cites (and every result file the index lists) exists.
Brace groups expand as in the shell: `name.{json,png}` cites name.json and name.png."""
from __future__ import annotations

import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
INDEX = RESULTS / "README.md"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CITED = re.compile(r"benchmarks/results/((?:[A-Za-z0-9_.\-/]|\{[^}\s]*\})+)")
LISTED = re.compile(r"`((?:[A-Za-z0-9_.\-/]|\{[^}\s]*\})+)`")
RESULT_SUFFIXES = (".json", ".png", ".csv", ".md", "/")


def expand(pattern: str) -> list[str]:
    """The names a brace pattern stands for (`a.{json,png}` -> a.json, a.png)."""
    parts = re.split(r"(\{[^}]*\})", pattern)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    return ["".join(c) for c in itertools.product(*choices)]


def doc_citations() -> dict[str, list[str]]:
    """{cited path under benchmarks/results/: the docs that cite it}."""
    out: dict[str, list[str]] = {}
    for doc in DOCS:
        for m in CITED.finditer(doc.read_text()):
            for name in expand(m.group(1).rstrip(".")):
                if name:
                    out.setdefault(name, []).append(doc.name)
    return out


def index_entries() -> list[str]:
    """The result names the index lists (backticked names with a result's suffix)."""
    names = []
    for m in LISTED.finditer(INDEX.read_text()):
        names += [n for n in expand(m.group(1)) if n.endswith(RESULT_SUFFIXES) and
                  "/" not in n.rstrip("/")]
    return names


def test_every_result_is_cited_or_listed():
    cited = {p.rstrip("/").split("/")[0] for p in doc_citations()}
    listed = {n.rstrip("/") for n in index_entries()}
    orphans = sorted(p.name for p in RESULTS.iterdir()
                     if p.name != "README.md" and p.name not in cited | listed)
    assert not orphans, (f"files in benchmarks/results/ that no doc cites and "
                         f"benchmarks/results/README.md does not list: {orphans}")


def test_every_cited_result_exists():
    missing = {p: docs for p, docs in doc_citations().items()
               if not (RESULTS / p.rstrip("/")).exists()}
    assert not missing, f"cited by docs but not in benchmarks/results/: {missing}"
    listed = [n for n in index_entries() if not (RESULTS / n.rstrip("/")).exists()]
    assert not listed, f"listed in benchmarks/results/README.md but missing: {listed}"


def test_expand():
    assert expand("a.{json,png}") == ["a.json", "a.png"]
    assert expand("x/") == ["x/"]
