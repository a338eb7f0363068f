"""Prepare ``.official-dv3/``: the official DreamerV3 and the wheels it needs on the TPU machine.

The lent TPU machine reaches no network (no PyPI, no GitHub) and already has
Python 3.11 with JAX/jaxlib 0.10.2, numpy and scipy; what a device call needs
beside that travels in the call (64 MiB in all with the checkout). This script
runs where PyPI is reachable and writes, into an ignored folder (default
``.official-dv3/``, added to the repository's ``info/exclude``):

- ``src/``: danijar/dreamerv3 at 29eb964 (the commit wmx's fixtures were recorded
  from: 2411f7d "Update agent and infrastructure" plus the replay-context fix),
  its ``dreamerv3/`` and ``embodied/`` packages and licence only (the ``scores/``
  folder, 6 MB of published curves, is left out);
- ``wheels/``: CPython 3.11 x86_64 wheels of every package the official training
  loop imports that the machine lacks, at the versions in `PINS` (their
  dependencies are named one by one: ``pip download --no-deps``). dm_control's
  wheel (56 MB) is rebuilt without what a DMC suite task never loads
  (`DM_CONTROL_DROP`: the locomotion and manipulation packages, the dog's
  meshes, test files);
- ``setup.sh``: ``source .official-dv3/setup.sh`` on the TPU machine installs the
  wheels once per machine into the machine's temporary folder (``dv3site``) and
  puts it on PYTHONPATH after the machine's own JAX;
- ``bundle.json``: the commit, the pins, the wheel files and sizes.

Why 29eb964 with an adapter and a newer tfp. Every commit of the official
repository, 29eb964 to the newest, calls ``jax.jit(fun, in_shardings,
out_shardings, ...)`` positionally, which JAX 0.10.2 refuses (it takes them by
keyword only): run on the CPU with JAX 0.10.2, 29eb964 and the newest commit
(e3f0224, 2026-05) both stop building their agent with ``TypeError: jit() takes
from 0 to 1 positional arguments``; the commits between share one of those two
call sites (251910d differs from 29eb964 in selectors.py only; f8817c4 onwards
is the rewrite that pins JAX 0.4.33 and numpy < 2). So no commit runs unchanged
on 0.10.2, and the nearest is 29eb964 itself.
``benchmarks/_official_compat.py`` passes those shardings by keyword at run time
(the source stays as published). tensorflow-probability 0.25.0, its newest
release, fails at import on JAX 0.10.2 (``jax.interpreters.xla.pytype_aval_mappings``
is gone); the tfp-nightly build in `PINS` imports and trains.

Usage (from the project root):

    python tools/official_dreamerv3_bundle.py --source MIRROR_OR_CLONE   # a dreamerv3 git repo
    python tools/official_dreamerv3_bundle.py              # clones it from GitHub
    python tools/official_dreamerv3_bundle.py --check PYTHON   # then install it into a temporary
        # folder and import the official code and a DMC task with PYTHON (one with JAX)

Then carry ``.official-dv3`` (and not ``.whl-tpu``) in the device call.
"""
from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPO_URL = "https://github.com/danijar/dreamerv3"
COMMIT = "29eb964e2918a3f4db04086f7f51b60388e97f3d"
SRC_PARTS = ("dreamerv3", "embodied", "LICENSE", "README.md")
LIMIT_MIB = 55.0

PINS = (
    # the agent (dreamerv3/): chex, einops, optax, tensorflow_probability's JAX substrate
    "chex==0.1.92", "optax==0.2.8", "einops==0.8.2", "absl-py==2.5.1", "toolz==1.2.0",
    "typing_extensions==4.16.0", "etils==1.15.0",
    "tfp-nightly==0.26.0.dev20261027",   # tensorflow-probability 0.25.0 fails on JAX 0.10.2
    "decorator==5.3.1", "gast==0.7.0", "six==1.17.0", "cloudpickle==3.1.3",
    "dm-tree==0.1.10", "attrs==26.1.0", "wrapt==2.5.2",
    # the infrastructure (embodied/): config files, env processes, sockets module, usage
    "ruamel.yaml==0.19.1", "msgpack==1.2.4", "psutil==7.2.2", "pyzmq==27.3.0",
    # the environment: dm_control's suite on MuJoCo (mujoco-core holds the binaries)
    "dm-control==1.0.52", "dm-env==1.6", "mujoco==4.0.1", "mujoco-core==4.0.1",
    "lxml==6.1.3",
)
"""The wheels, at the versions the CPU trial runs used (where wmx's lock pins a package,
its version). Left out as never imported by a DMC proprio run: tensorflow (the
TensorBoard logger, which the driver does not use), mujoco-studio (a GUI), glfw and
PyOpenGL (rendering), labmaze (locomotion mazes), protobuf, pyparsing, requests, tqdm."""

PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_26_x86_64", "manylinux_2_27_x86_64", "manylinux_2_28_x86_64",
             "any")

DM_CONTROL_DROP = ("dm_control/locomotion/", "dm_control/manipulation/",
                   "dm_control/entities/", "dm_control/composer/", "dm_control/blender/",
                   "dm_control/third_party/", "dm_control/viewer/", "dm_control/mjcf/",
                   "dm_control/autowrap/", "dm_control/mujoco/testing/",
                   "dm_control/suite/dog_assets/", "dm_control/suite/all_domains.png")
"""Paths (prefixes) dropped from dm_control's wheel: what suite.load of a non-dog task
never reads (dm_control.suite, mujoco, rl, utils and _render stay; tests go too)."""

SETUP_SH = r'''# Source me first in each command on the TPU machine, from the project root:
#   source .official-dv3/setup.sh; python benchmarks/official_dreamerv3.py ...
# Installs the official DreamerV3's wheels once per machine into the machine's temporary
# folder (dv3site, apart from wmx's own), then puts it on PYTHONPATH after the machine's JAX.
B=$PWD/.official-dv3
DV3_SITE=${DV3_SITE:-$(python3 -c 'import tempfile; print(tempfile.gettempdir())')/dv3site}
if [ ! -f "$DV3_SITE/.dv3-done" ]; then
  PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps \
    --no-compile --no-cache-dir --target "$DV3_SITE" "$B"/wheels/*.whl \
    && touch "$DV3_SITE/.dv3-done" \
    || echo "setup.sh: installing .official-dv3/wheels failed (rebuild the bundle)"
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$DV3_SITE
export PYTHONUNBUFFERED=1 MUJOCO_GL=${MUJOCO_GL:-off}
'''

CHECK_PY = r'''
import os, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
os.environ.setdefault("MUJOCO_GL", "off")
import _official_compat
_official_compat.apply()
import jax, embodied
from dreamerv3 import agent, main
from dm_control import suite
env = suite.load("reacher", "easy")
env.reset()
step = env.step([0.0, 0.0])
print("check: jax", jax.__version__, "official agent imported; reacher-easy obs",
      {k: v.shape for k, v in step.observation.items()})
'''


def fail(message: str) -> None:
    """Print ``message`` (the problem and the fix, one line) and exit with status 2."""
    print(f"official_dreamerv3_bundle.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def git_exclude(root: Path, entry: str) -> None:
    """Add ``entry`` to the repository's info/exclude (worktrees share the common one).

    Args:
      root: the checkout.
      entry: a gitignore pattern, e.g. ``/.official-dv3/``.
    """
    out = subprocess.run(["git", "-C", str(root), "rev-parse", "--git-path", "info/exclude"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"{root} is not a git checkout; run me from the project's checkout")
    path = Path(out.stdout.strip())
    path = path if path.is_absolute() else root / path
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = path.read_text().splitlines() if path.is_file() else []
    if entry not in lines:
        with path.open("a") as f:
            f.write(("\n" if lines and not path.read_text().endswith("\n") else "")
                    + entry + "\n")


def export_source(source: str | None, dest: Path) -> None:
    """Write the official tree at `COMMIT` (`SRC_PARTS` only) into ``dest``.

    Args:
      source: a git repository of danijar/dreamerv3 (bare or not) holding the commit, or
        None to clone it from GitHub into a temporary folder.
      dest: the folder to create (replaced when present).
    """
    tmp = None
    if source is None:
        tmp = Path(tempfile.mkdtemp(prefix="dv3clone_"))
        print(f"cloning {REPO_URL} ...", flush=True)
        r = subprocess.run(["git", "clone", "-q", "--bare", REPO_URL, str(tmp / "repo")])
        if r.returncode != 0:
            fail(f"cloning {REPO_URL} failed; pass --source with a local clone or mirror")
        source = str(tmp / "repo")
    git = ["git", "-C", source]
    if subprocess.run(git + ["cat-file", "-e", f"{COMMIT}^{{commit}}"],
                      capture_output=True).returncode != 0:
        fail(f"--source {source}: no commit {COMMIT[:7]} there; pass a clone or mirror of "
             f"{REPO_URL} with its history")
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    archive = subprocess.run(git + ["archive", "--format=tar", COMMIT, *SRC_PARTS],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    (dest / "COMMIT").write_text(COMMIT + "\n")
    if tmp is not None:
        shutil.rmtree(tmp, ignore_errors=True)


def download_wheels(dest: Path) -> None:
    """``pip download --no-deps`` of `PINS` for CPython 3.11 on manylinux x86_64 into ``dest``.

    Args:
      dest: the wheels folder (replaced when present).
    """
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
           "--python-version", "3.11", "--implementation", "cp", "-d", str(dest)]
    for p in PLATFORMS:
        cmd += ["--platform", p]
    if subprocess.run(cmd + list(PINS)).returncode != 0:
        fail("pip download failed (see above); check the network and the pins in PINS")


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def slim_wheel(path: Path, drop: tuple[str, ...]) -> tuple[int, int]:
    """Rewrite the wheel at ``path`` without the files under ``drop`` and without tests,
    with its RECORD rewritten to match.

    Args:
      path: a .whl file (rewritten in place).
      drop: path prefixes inside the wheel to leave out.
    Returns:
      (bytes before, bytes after) of the wheel file.
    """
    before = path.stat().st_size
    with zipfile.ZipFile(path) as zin:
        names = zin.namelist()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        keep = [n for n in names if n != record and not n.startswith(drop)
                and not n.endswith("_test.py")]
        files = {n: zin.read(n) for n in keep}
    buf = io.StringIO(newline="")
    w = csv.writer(buf, lineterminator="\n")
    for n, data in files.items():
        w.writerow([n, _record_hash(data), len(data)])
    w.writerow([record, "", ""])
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        for n, data in files.items():
            zout.writestr(n, data)
        zout.writestr(record, buf.getvalue())
    tmp.replace(path)
    return before, path.stat().st_size


def check(bundle: Path, python: str) -> None:
    """Install the bundle's wheels into a temporary folder with ``python`` (as setup.sh does)
    and import the official agent and a DMC task with them; exits (2) when that fails.

    Args:
      bundle: the bundle folder.
      python: an interpreter with JAX, numpy and scipy (like the TPU machine's).
    """
    with tempfile.TemporaryDirectory(prefix="dv3check_") as tmp:
        site = Path(tmp) / "site"
        r = subprocess.run([python, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                            "--no-compile", "--target", str(site),
                            *map(str, sorted((bundle / "wheels").glob("*.whl")))])
        if r.returncode != 0:
            fail(f"--check: {python} could not install the wheels (see above)")
        env = {**__import__("os").environ, "PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu"}
        r = subprocess.run([python, "-c", CHECK_PY, str(bundle / "src"),
                            str(ROOT / "benchmarks")], env=env)
        if r.returncode != 0:
            fail(f"--check: the official code did not import with {python} and the bundle "
                 "(see above); is JAX 0.10.2 installed there?")


def folder_mib(path: Path) -> float:
    """Size in MiB of the files under ``path``."""
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


def main(argv=None) -> None:
    """Build the bundle (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", help="a git clone or mirror of danijar/dreamerv3 (default: "
                   "clone it from GitHub)")
    p.add_argument("--dest", default=".official-dv3",
                   help="the bundle folder, relative to the project root (default .official-dv3)")
    p.add_argument("--check", metavar="PYTHON", help="after building, install into a "
                   "temporary folder with PYTHON (which has JAX) and import the official code")
    p.add_argument("--keep-wheels", action="store_true",
                   help="reuse the wheels already in the bundle (rebuild src/ and setup.sh only)")
    args = p.parse_args(argv)
    if not (ROOT / "benchmarks" / "official_dreamerv3.py").is_file():
        fail(f"{ROOT} is not the wmx checkout (no benchmarks/official_dreamerv3.py)")
    bundle = (ROOT / args.dest).resolve()
    if ROOT.resolve() not in bundle.parents:
        fail(f"--dest {args.dest}: must lie inside the checkout (only its folders travel)")
    git_exclude(ROOT, "/" + bundle.relative_to(ROOT.resolve()).as_posix() + "/")
    bundle.mkdir(parents=True, exist_ok=True)
    export_source(args.source, bundle / "src")
    wheels = bundle / "wheels"
    if not (args.keep_wheels and wheels.is_dir()):
        download_wheels(wheels)
    slimmed = None
    for whl in wheels.glob("dm_control-*.whl"):
        slimmed = slim_wheel(whl, DM_CONTROL_DROP)
    (bundle / "setup.sh").write_text(SETUP_SH)
    files = {f.name: f.stat().st_size for f in sorted(wheels.glob("*.whl"))}
    total = folder_mib(bundle)
    (bundle / "bundle.json").write_text(json.dumps({
        "official_commit": COMMIT, "pins": list(PINS), "wheels": files,
        "dm_control_bytes": slimmed, "mib": round(total, 2)}, indent=1))
    print(f"{bundle.name}/: src at {COMMIT[:7]}, {len(files)} wheels, {total:.1f} MiB in all")
    if total > LIMIT_MIB:
        fail(f"the bundle is {total:.1f} MiB, over {LIMIT_MIB:g}: drop wheels or prune more "
             "(the device call carries 64 MiB with the checkout)")
    if args.check:
        check(bundle, args.check)
    print(f"carry {bundle.name} in device calls; start each command with: "
          f"source {bundle.name}/setup.sh;")


if __name__ == "__main__":
    main()
