"""tools/h200_wheels.sh and tools/h200_setup.sh, the recipe for the lent H200 machine
(docs/accelerators.md, "On the lent H200 machine"), read as text: no network, nothing installed.

The wheels carried are pinned in requirements-lock.txt; with the image's packages they cover
every third-party import of wmx/ and every unconditional requirement of a carried package,
except those the script leaves out on purpose; jax and jaxlib are never carried (the image's
CUDA 13 build is used); setup.sh puts the image's site-packages before the carried wheels.
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
WHEELS = ROOT / "tools" / "h200_wheels.sh"
SETUP = ROOT / "tools" / "h200_setup.sh"

# The H200 image's own packages that wmx or a carried package needs (the machine's package
# list names about 200; these are the ones that matter here). Python 3.12, jax 0.11.2.
IMAGE = {"absl-py", "aiofiles", "chex", "cloudpickle", "etils", "flax", "fsspec", "humanize",
         "imageio", "jax", "jaxlib", "jinja2", "lxml", "matplotlib", "msgpack", "numpy",
         "optax", "orbax-checkpoint", "packaging", "pandas", "pillow", "prometheus-client",
         "protobuf", "psutil", "pyyaml", "rich", "scipy", "simplejson", "six", "tensorstore",
         "toolz", "tqdm", "treescope", "typing-extensions", "uvloop", "xxhash", "zipp"}
# imported only by code that does not run on the device
NOT_ON_DEVICE = {"apache-beam", "distributed", "wandb"}   # Beam builds; --logger wandb


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def shell_words(var: str) -> list[str]:
    m = re.search(rf'^{var}="([^"]*)"', WHEELS.read_text(), re.M)
    assert m, f"{var}=\"...\" not found in {WHEELS.name}"
    return m[1].split()


def lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements-lock.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==", 1)
            pins[norm(name)] = version.strip()
    return pins


def carried() -> set[str]:
    return {norm(n) for n in shell_words("NAMES")}


def test_every_carried_wheel_is_pinned_and_jax_is_not_carried():
    pins = lock()
    names = carried()
    assert len(names) >= 10
    assert not [n for n in names if n not in pins], "carried but not in requirements-lock.txt"
    assert not names & {"jax", "jaxlib", "numpy"}, "the image's JAX stack is never carried"
    assert not names & {norm(n) for n in shell_words("LEFT_OUT")}


def test_carried_and_image_packages_cover_wmx_imports():
    """Every third-party module wmx/ imports comes from a package the image has or one carried."""
    have = carried() | IMAGE | NOT_ON_DEVICE
    dists = md.packages_distributions()
    mods = set()
    for path in (ROOT / "wmx").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                mods |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                mods.add(node.module.split(".")[0])
    mods -= set(sys.stdlib_module_names) | {"wmx"}
    missing = {m: dists.get(m) for m in mods
               if not {norm(d) for d in dists.get(m, [m])} & have}
    assert not missing, f"imported by wmx/, neither the image's nor carried: {missing}"


def test_carried_packages_requirements_are_met_or_left_out_on_purpose():
    have = carried() | IMAGE | {norm(n) for n in shell_words("LEFT_OUT")}
    env = {"extra": "", "python_version": "3.12", "sys_platform": "linux",
           "platform_system": "Linux"}
    unmet = {}
    for name in carried():
        for spec in md.requires(name) or []:
            req = Requirement(spec)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            if norm(req.name) not in have:
                unmet.setdefault(name, []).append(req.name)
    assert not unmet, f"requirements neither the image's, carried nor LEFT_OUT: {unmet}"


def test_setup_puts_the_image_site_packages_before_the_carried_wheels():
    text = SETUP.read_text()
    export = re.search(r"^export PYTHONPATH=(.*)$", text, re.M)[1]
    parts = export.split(":")
    img = next(i for i, p in enumerate(parts) if "_wmx_img" in p)
    site = next(i for i, p in enumerate(parts) if "_wmx_site" in p)
    root = next(i for i, p in enumerate(parts) if p == "$PWD")
    assert img < site < root, export
    assert "site.getsitepackages()" in text
    assert re.search(r"^_wmx_site=/tmp/site$", text, re.M)
    assert "--no-index --no-deps" in text and "WMX_HUGE_PAGES=0" in text
    assert "MUJOCO_GL" not in text          # training renders nothing


def test_wheels_script_copies_setup_refuses_outside_the_root_and_is_ignored(tmp_path):
    text = WHEELS.read_text()
    assert "cp tools/h200_setup.sh .whl-h200/setup.sh" in text
    assert "--python-version 3.12" in text and "--no-deps" in text
    out = subprocess.run(["bash", str(WHEELS)], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout.count("\n") == 1, out
    assert not (tmp_path / ".whl-h200").exists()
    assert "/.whl-h200/" in (ROOT / ".gitignore").read_text().splitlines()
