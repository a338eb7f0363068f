"""The three lock files and the cuda12 and tpu extras agree (docs/accelerators.md).

requirements-lock-cuda12.txt is requirements-lock.txt plus JAX's CUDA 12 wheels and
requirements-lock-tpu.txt is requirements-lock.txt plus libtpu (tools/lock_accelerator.py):
every CPU pin must appear in both at the same version, the extra wheels must be the
backend's, and the cuda12 and tpu extras of pyproject.toml must name exactly the jax
version the locks pin (the TPU lock's libtpu the one that jax version's tpu extra asks
for). The CPU lock must also be closed: every installed pinned package's unconditional
requirements are pinned too.
"""
from __future__ import annotations

import importlib.metadata as md
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
CPU = ROOT / "requirements-lock.txt"
CUDA = ROOT / "requirements-lock-cuda12.txt"
TPU = ROOT / "requirements-lock-tpu.txt"
INSTALLER = {"pip", "setuptools", "wheel"}   # left out of both locks, as pip-compile does


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path) -> dict[str, str]:
    """{normalised name: version}; every non-comment line must be name==version."""
    pins: dict[str, str] = {}
    for i, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;=]+)", line)
        assert m, f"{path.name}:{i}: not a 'name==version' pin: {line!r}"
        assert norm(m[1]) not in pins, f"{path.name}:{i}: {m[1]} pinned twice"
        pins[norm(m[1])] = m[2]
    return pins


def cuda_only(name: str) -> bool:
    return name.startswith("jax-cuda12-") or re.fullmatch(r"nvidia-[a-z0-9-]+-cu12", name)


def test_cuda_lock_is_the_cpu_lock_plus_cuda_wheels():
    cpu, cuda = read_lock(CPU), read_lock(CUDA)
    moved = {n: (v, cuda.get(n, "absent")) for n, v in cpu.items() if cuda.get(n) != v}
    assert not moved, f"CPU pin -> CUDA lock differs: {moved}"
    extra = sorted(n for n in cuda if n not in cpu)
    assert extra and all(cuda_only(n) for n in extra), f"not CUDA wheels: {extra}"
    assert {"jax-cuda12-plugin", "jax-cuda12-pjrt", "nvidia-cudnn-cu12"} <= set(extra)
    assert not INSTALLER & (set(cpu) | set(cuda))


def test_tpu_lock_is_the_cpu_lock_plus_libtpu():
    cpu, tpu = read_lock(CPU), read_lock(TPU)
    moved = {n: (v, tpu.get(n, "absent")) for n, v in cpu.items() if tpu.get(n) != v}
    assert not moved, f"CPU pin -> TPU lock differs: {moved}"
    assert sorted(n for n in tpu if n not in cpu) == ["libtpu"]
    assert not INSTALLER & set(tpu)


def test_the_three_locks_pin_one_jax():
    locks = {path.name: read_lock(path) for path in (CPU, CUDA, TPU)}
    assert len({(pins["jax"], pins["jaxlib"]) for pins in locks.values()}) == 1, {
        name: (pins["jax"], pins["jaxlib"]) for name, pins in locks.items()}


def test_tpu_extra_and_libtpu_match_the_locked_jax():
    cpu, tpu = read_lock(CPU), read_lock(TPU)
    jax = cpu["jax"]
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]["tpu"]
    reqs = {norm(r.name): r for r in map(Requirement, extra)}
    assert set(reqs) == {"jax"} and "tpu" in reqs["jax"].extras
    assert [(s.operator, s.version) for s in reqs["jax"].specifier] == [("==", jax)]
    try:
        installed = md.distribution("jax")
    except md.PackageNotFoundError:
        pytest.skip("jax is not installed here: its tpu extra's libtpu cannot be read")
    if installed.version != jax:
        pytest.skip(f"jax {installed.version} installed here, the locks pin {jax}")
    wants = [Requirement(r) for r in installed.requires or []]
    wants = [r for r in wants if norm(r.name) == "libtpu" and r.marker is not None
             and r.marker.evaluate({"extra": "tpu"})]
    assert wants, "jax's metadata names no libtpu for its tpu extra"
    assert all(r.specifier.contains(tpu["libtpu"]) for r in wants), (
        f"{TPU.name} pins libtpu=={tpu['libtpu']}; jax {jax}[tpu] asks for "
        f"{', '.join(str(r.specifier) for r in wants)}")


def test_cuda12_extra_and_plugin_match_the_locked_jax():
    cpu, cuda = read_lock(CPU), read_lock(CUDA)
    jax = cpu["jax"]
    assert cpu["jaxlib"] == jax
    assert cuda["jax-cuda12-plugin"] == cuda["jax-cuda12-pjrt"] == jax
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())[
        "project"]["optional-dependencies"]["cuda12"]
    reqs = {norm(r.name): r for r in map(Requirement, extra)}
    assert "cuda12" in reqs["jax"].extras
    for name in ("jax", "jax-cuda12-plugin", "jax-cuda12-pjrt"):
        spec = [(s.operator, s.version) for s in reqs[name].specifier]
        assert spec == [("==", jax)], f"cuda12 extra: {name}{reqs[name].specifier}, lock jax {jax}"


def test_cpu_lock_pins_what_its_packages_require():
    cpu = read_lock(CPU)
    checked, missing = 0, {}
    for name, version in cpu.items():
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        if dist.version != version:
            continue        # this environment was not installed from the lock
        checked += 1
        for raw in dist.requires or []:
            r = Requirement(raw)
            if r.marker is not None and not r.marker.evaluate({"extra": ""}):
                continue
            if norm(r.name) not in cpu and norm(r.name) not in INSTALLER:
                missing.setdefault(name, []).append(raw)
    if checked < len(cpu) // 2:
        pytest.skip(f"only {checked} of {len(cpu)} pinned packages installed at their pins")
    assert not missing, f"required but not pinned in {CPU.name}: {missing}"


def test_read_lock_rejects_a_loose_line(tmp_path):
    bad = tmp_path / "lock.txt"
    bad.write_text("# header\njax==0.10.2\nnumpy>=2\n")
    with pytest.raises(AssertionError, match="lock.txt:3: not a 'name==version' pin"):
        read_lock(bad)


def test_make_install_leaves_out_only_lock_skip(tmp_path):
    """`make install` installs the CPU lock less LOCK_SKIP (warp-lang) with --no-deps (the
    lock pins every dependency, so nothing else is resolved); the recipe's own filter is run
    here and leaves every other pin as it is."""
    import subprocess
    venv = tmp_path / "v"
    dry = subprocess.run(["make", "-n", "install", f"VENV={venv}"], cwd=ROOT, text=True,
                         capture_output=True, check=True).stdout.splitlines()
    (filt,) = [ln for ln in dry if ln.startswith("grep ")]
    assert f"pip install --no-deps -r {venv}/lock-installed.txt" in "\n".join(dry)
    venv.mkdir()
    subprocess.run(filt, shell=True, cwd=ROOT, check=True)
    cpu, installed = read_lock(CPU), read_lock(venv / "lock-installed.txt")
    assert set(cpu) - set(installed) == {"warp-lang"}
    assert all(cpu[n] == v for n, v in installed.items())
