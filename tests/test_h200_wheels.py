"""tools/h200_wheels.sh and tools/h200_setup.sh, the recipe for the lent H200 machine
(docs/accelerators.md, "On the lent H200 machine"), with no network: the scripts are read as text,
and setup.sh is also sourced in bash, with a wheel made here installed under the test's folder.

The wheels carried are pinned in requirements-lock.txt; with the image's packages they cover
every third-party import of wmx/ and every unconditional requirement of a carried package,
except those the script leaves out on purpose; jax and jaxlib are never carried (the image's
CUDA 13 build is used); setup.sh puts the image's site-packages before the carried wheels, each
path once however often it is sourced, installs once per set of wheels, and says what went wrong.
"""
from __future__ import annotations

import ast
import base64
import hashlib
import importlib.metadata as md
import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
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
    pins = lock()
    stale = {n: md.version(n) for n in carried() if md.version(n) != pins[n]}
    assert not stale, f"installed here at other versions than the lock's (their requirements " \
        f"are the ones read): {stale}"
    for name in carried():
        for spec in md.requires(name) or []:
            req = Requirement(spec)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            if norm(req.name) not in have:
                unmet.setdefault(name, []).append(req.name)
    assert not unmet, f"requirements neither the image's, carried nor LEFT_OUT: {unmet}"


def test_setup_installs_once_and_exports_what_the_device_command_needs():
    """The defaults that are not exercised below: the wheels go under /tmp/site unless
    WMX_H200_SITE says otherwise, installed offline and without dependencies."""
    text = SETUP.read_text()
    assert re.search(r"^_wmx_site=\$\{WMX_H200_SITE:-/tmp/site\}$", text, re.M)
    assert "--no-index --no-deps" in text and "WMX_HUGE_PAGES=0" in text
    assert "MUJOCO_GL" not in text          # training renders nothing


def fake_wheel(folder: Path, name: str = "wmxfake") -> Path:
    """A pure-Python wheel of one empty package, made here (no network).

    Args:
        folder: where the wheel is written.
        name: the distribution's and the package's name.

    Returns:
        The wheel's path.
    """
    info = f"{name}-0.1.dist-info"
    files = {f"{name}/__init__.py": "",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest())
        record.append(f"{path},sha256={digest.decode().rstrip('=')},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    wheel = folder / f"{name}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
    return wheel


@pytest.fixture
def h200_root(tmp_path):
    """A project root as the device machine gets it (wmx/, tools/h200_setup.sh and
    .whl-h200/ with setup.sh and one wheel), ``python3`` this test's interpreter, the wheels'
    folder under ``tmp_path`` and a PYTHONPATH already set.

    Returns:
        (root, env for `bash`, the wheels' install folder).
    """
    root = tmp_path / "root"
    (root / "wmx").mkdir(parents=True)
    (root / "wmx" / "__init__.py").write_text("")
    (root / "tools").mkdir()
    (root / ".whl-h200").mkdir()
    shutil.copy(SETUP, root / "tools" / "h200_setup.sh")
    shutil.copy(SETUP, root / ".whl-h200" / "setup.sh")
    fake_wheel(root / ".whl-h200")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python3", "python"):
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (bin_dir / name).chmod(0o755)
    site_dir = tmp_path / "site"
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path),
           "WMX_H200_SITE": str(site_dir), "PYTHONPATH": "/keep"}
    return root, env, site_dir


def bash(script: str, root: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)


def test_setup_sourced_twice_under_strict_flags_installs_once_and_adds_each_path_once(
        h200_root, tmp_path):
    """Sourced twice from a symlinked root in a shell with ``set -euo pipefail`` and
    PYTHONSAFEPATH (no "" on sys.path): one install, the caller's PYTHONPATH first, then the
    image's site-packages, the wheels and the root, each once; no variable left behind."""
    root, env, site_dir = h200_root
    link = tmp_path / "link"
    link.symlink_to(root)
    out = bash(f"""set -euo pipefail; export PYTHONSAFEPATH=1; cd "{link}"
source .whl-h200/setup.sh; touch "$WMX_H200_SITE/sentinel"; source .whl-h200/setup.sh
echo "PYTHONPATH=$PYTHONPATH"; compgen -v _wmx || echo "no _wmx variables"
cd /; python3 -c 'import wmx, wmxfake; print("from", wmx.__file__, wmxfake.__file__)'
""", root, env)
    assert out.returncode == 0, out
    assert out.stdout.count("h200 setup: python ") == 2 and "wmx from" not in out.stdout, out
    assert (site_dir / "sentinel").exists(), "the second source installed again"
    parts = re.search(r"^PYTHONPATH=(.*)$", out.stdout, re.M)[1].split(os.pathsep)
    assert parts == ["/keep", *site.getsitepackages(), str(site_dir), str(link)], parts
    assert "no _wmx variables" in out.stdout
    assert f"from {link}/wmx/__init__.py {site_dir}/wmxfake/__init__.py" in out.stdout
    assert (site_dir / "versions.txt").read_text().startswith("h200 setup: python ")
    assert "python here is not python3" not in out.stdout


def test_setup_installs_again_over_a_stale_marker_and_says_when_pip_fails(h200_root):
    root, env, site_dir = h200_root
    assert bash("source .whl-h200/setup.sh", root, env).returncode == 0
    marker = site_dir / ".wmx-wheels"
    wheels = marker.read_text()
    marker.write_text("wmxfake-0.0-py3-none-any.whl \n")
    (site_dir / "sentinel").touch()
    assert bash("set -e; source .whl-h200/setup.sh", root, env).returncode == 0
    assert marker.read_text() == wheels and not (site_dir / "sentinel").exists()
    (root / ".whl-h200" / "broken-0.1-py3-none-any.whl").write_bytes(b"not a zip")
    out = bash('source .whl-h200/setup.sh; echo "returned $?"', root, env)
    assert f"installing the carried wheels into {site_dir} failed (ERROR: " in out.stdout
    assert "bash tools/h200_wheels.sh" in out.stdout and "returned 1" in out.stdout, out
    assert "Traceback" not in out.stderr and "No such file" not in out.stderr, out


def test_a_later_call_may_carry_setup_alone_a_first_call_may_not(h200_root):
    """A later call on the warm machine carries .whl-h200/setup.sh alone: the wheels an
    earlier call installed stay and are used; on a fresh machine that is refused (1)."""
    root, env, site_dir = h200_root
    assert bash("source .whl-h200/setup.sh", root, env).returncode == 0
    marker = (site_dir / ".wmx-wheels").read_text()
    for w in (root / ".whl-h200").glob("*.whl"):
        w.unlink()
    out = bash("set -euo pipefail; source .whl-h200/setup.sh; "
               "python3 -c 'import wmxfake; print(\"imported\")'", root, env)
    assert out.returncode == 0 and "no wheels carried; using those an earlier call " \
        f"installed in {site_dir}" in out.stdout and "imported" in out.stdout, out
    assert (site_dir / ".wmx-wheels").read_text() == marker
    shutil.rmtree(site_dir)
    out = bash('source .whl-h200/setup.sh; echo "returned $?"', root, env)
    assert "carry the whole .whl-h200 in this machine's first call" in out.stdout
    assert "returned 1" in out.stdout and not site_dir.exists(), out


def test_setup_refuses_to_run_outside_the_root_or_as_a_script_and_warns_of_a_stale_copy(
        h200_root):
    root, env, site_dir = h200_root
    out = bash("bash .whl-h200/setup.sh", root, env)
    assert out.returncode == 2 and "do not run me" in out.stdout, out
    out = bash("cd wmx; source ../.whl-h200/setup.sh; echo \"returned $?\"", root, env)
    assert "source me from the project root" in out.stdout and "returned 2" in out.stdout
    assert not site_dir.exists()
    with open(root / "tools" / "h200_setup.sh", "a") as f:
        f.write("# changed\n")
    out = bash("source .whl-h200/setup.sh", root, env)
    assert out.returncode == 0 and "copy it there again (cp tools/h200_setup.sh " \
        ".whl-h200/setup.sh)" in out.stdout, out


def test_setup_says_when_python_is_not_the_python3_it_set_up(h200_root, tmp_path):
    """The device commands run ``python``; the wheels and PYTHONPATH are python3's."""
    root, env, _ = h200_root
    (tmp_path / "bin" / "python").write_text("#!/bin/sh\necho another interpreter\n")
    out = bash("source .whl-h200/setup.sh", root, env)
    assert out.returncode == 0 and "h200 setup: python here is not python3 (the interpreter " \
        "set up): start the command's Python with python3" in out.stdout, out


def test_wheels_script_copies_setup_refuses_outside_the_root_and_is_ignored(tmp_path):
    text = WHEELS.read_text()             # setup.sh's copy: the renaming test below
    assert "--python-version 3.12" in text and "--no-deps" in text
    out = subprocess.run(["bash", str(WHEELS)], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 2 and out.stdout.count("\n") == 1, out
    assert not (tmp_path / ".whl-h200").exists()
    assert {"/.whl-h200/", "/.whl-h200.partial/"} <= set(
        (ROOT / ".gitignore").read_text().splitlines())


@pytest.mark.parametrize("download", ["fails", "works"])
def test_wheels_are_renamed_into_place_only_once_downloaded(tmp_path, download):
    """h200_wheels.sh downloads beside the folder and renames it into place at the end: a
    download that fails part-way (here: pip writes one wheel, then exits 1) leaves the
    previous .whl-h200 as it was and no partial folder; one that works replaces it, with
    setup.sh beside the wheels."""
    root = tmp_path / "root"
    (root / "tools").mkdir(parents=True)
    shutil.copy(WHEELS, root / "tools" / "h200_wheels.sh")
    shutil.copy(SETUP, root / "tools" / "h200_setup.sh")
    shutil.copy(ROOT / "requirements-lock.txt", root / "requirements-lock.txt")
    (root / ".whl-h200").mkdir()
    (root / ".whl-h200" / "setup.sh").write_text("old\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    rc = 1 if download == "fails" else 0
    (bin_dir / "python3").write_text(f"""#!/bin/sh
while [ "$#" -gt 0 ]; do [ "$1" = "-d" ] && dest="$2"; shift; done
touch "$dest/mujoco-0-cp312-none-any.whl"
exit {rc}
""")
    (bin_dir / "python3").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path)}
    out = subprocess.run(["bash", "tools/h200_wheels.sh"], cwd=root, env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == rc, out
    assert not (root / ".whl-h200.partial").exists()
    got = sorted(p.name for p in (root / ".whl-h200").iterdir())
    if download == "fails":
        assert got == ["setup.sh"] and (root / ".whl-h200" / "setup.sh").read_text() == "old\n"
    else:
        assert got == ["mujoco-0-cp312-none-any.whl", "setup.sh"]
        assert (root / ".whl-h200" / "setup.sh").read_text() == SETUP.read_text()
