"""Imports run one way, down the layers (DESIGN.md §2, docs/architecture.md "Layers").

Every ``import wmx...`` / ``from wmx... import`` in the package (module level
or inside functions) is read from the source with `ast` and checked against
the layer table: a module may import its own layer or lower ones, never a
higher one; the trainers and `evaluate` do not import each other; and no
module outside ``wmx/agents/`` imports an agent package.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import wmx

ROOT = Path(wmx.__file__).resolve().parent

# (module prefix, layer); the longest matching prefix wins.
LAYERS = [
    ("wmx.paths", 0), ("wmx.version", 0), ("wmx.envs.registry", 0), ("wmx.nn", 0),
    ("wmx.temporaries", 0), ("wmx.sizes", 0), ("wmx.xla_cpu", 0), ("wmx.failpoints", 0),
    ("wmx.compile_ahead", 0),
    ("wmx.failures", 0),
    ("wmx.schemas", 1), ("wmx.envs", 1),
    ("wmx.agents", 2),
    ("wmx.acting", 3), ("wmx.datasets", 3), ("wmx.pipelines", 3), ("wmx.episode_sets", 3),
    ("wmx.checkpoint", 3), ("wmx.metrics_csv", 3),
    ("wmx.runs", 4),
    ("wmx.train_online", 5), ("wmx.train_offline", 5), ("wmx.evaluate", 5),
    ("wmx.cli", 6),
]
SIBLINGS = ("wmx.train_online", "wmx.train_offline", "wmx.evaluate")
AGENTS_SHARED = ("api", "registry", "overrides")
"""The modules of wmx/agents/ every agent and every higher layer may import."""


def layer(name: str) -> tuple[int, str]:
    best = max((p for p, _ in LAYERS if name == p or name.startswith(p + ".")),
               key=len, default=None)
    if best is None:
        raise AssertionError(f"{name} is in no layer; add it to LAYERS and docs/architecture.md")
    return dict(LAYERS)[best], best


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def wmx_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("wmx")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("wmx"):
                out.add(node.module)
                # "from wmx.x import y" may import the submodule wmx.x.y
                out |= {f"{node.module}.{a.name}" for a in node.names
                        if (ROOT.parent / f"{node.module}.{a.name}".replace(".", "/")).exists()
                        or (ROOT.parent / (f"{node.module}.{a.name}".replace(".", "/")
                                           + ".py")).exists()}
    return out


MODULES = sorted(p for p in ROOT.rglob("*.py"))


def test_every_module_has_a_layer():
    for p in MODULES:
        name = module_name(p)
        if name != "wmx":
            layer(name)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_imports_run_down_the_layers(path):
    me = module_name(path)
    if me == "wmx":
        return
    my_layer, my_pkg = layer(me)
    for dep in sorted(wmx_imports(path)):
        if dep == "wmx":
            continue
        dep_layer, dep_pkg = layer(dep)
        assert dep_layer <= my_layer, f"{me} (layer {my_layer}) imports {dep} (layer {dep_layer})"
        if my_pkg in SIBLINGS and dep_pkg in SIBLINGS:
            assert dep_pkg == my_pkg, f"{me} imports the sibling stage {dep}"
        if dep.startswith("wmx.agents.") and dep.split(".")[2] not in AGENTS_SHARED:
            agent_pkg = ".".join(dep.split(".")[:3])
            assert me.startswith("wmx.agents."), f"{me} imports the agent package {dep}"
            if me.startswith("wmx.agents.") and me.split(".")[2] not in AGENTS_SHARED:
                assert me.startswith(agent_pkg + ".") or me == agent_pkg, \
                    f"agent module {me} imports another agent's {dep}"
