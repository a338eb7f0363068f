"""The test tree itself: pytest imports test modules by basename (no packages,
`pythonpath = ["tests"]`), so two test files of one name break collection of
whichever comes second in a process (conftest.py files are
loaded by path and may repeat)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_module_basenames_are_unique():
    seen: dict[str, list[str]] = defaultdict(list)
    for f in TESTS.rglob("*.py"):
        if ".venv" not in f.parts and f.name not in ("conftest.py", "__init__.py"):
            seen[f.name].append(str(f.relative_to(TESTS)))
    same = {k: v for k, v in seen.items() if len(v) > 1}
    assert not same, f"rename one of each: {same}"
    assert len(seen) > 50   # the walk found the tree
