"""device_check's probe: jax's platform, devices, device memory and versions as one JSON
line, printed by ``device_check.py --probe`` in a process of its own (the orchestrator
never opens the device); and the signs of an accelerator jax does not see (an NVIDIA
driver, a TPU's device files).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

ACCELERATORS = ("gpu", "tpu")
"""jax device platforms this check runs on (jax names CUDA and ROCm devices "gpu")."""


def probe_main() -> None:
    """Print one JSON line: jax's backend, platform, devices, device memory and versions."""
    import importlib.metadata as md
    import jax
    devices = jax.devices()
    mem = None
    try:
        mem = devices[0].memory_stats()
    except Exception:  # noqa: BLE001 - not every backend reports
        pass
    versions = {}
    for dist in ("jax", "jaxlib", "libtpu", "libtpu-nightly", "jax-cuda12-plugin",
                 "jax-cuda12-pjrt", "nvidia-cudnn-cu12", "nvidia-cublas-cu12",
                 "jax-cuda13-plugin", "jax-cuda13-pjrt", "nvidia-cudnn-cu13", "nvidia-cublas",
                 "mujoco", "mujoco-mjx", "playground"):
        try:
            versions[dist] = md.version(dist)
        except md.PackageNotFoundError:
            pass
    platform = devices[0].platform
    print(json.dumps({
        "backend": jax.default_backend(), "platform": platform, "jax": jax.__version__,
        "versions": versions, "device_kind": devices[0].device_kind,
        "device_count": len(devices),
        "devices": [{"id": d.id, "platform": d.platform, "kind": d.device_kind}
                    for d in devices],
        "accelerator": platform in ACCELERATORS,
        "device_memory_bytes_limit": (mem or {}).get("bytes_limit"),
        "default_matmul_precision": jax.config.jax_default_matmul_precision}))


def nvidia_driver() -> str | None:
    """nvidia-smi's GPU name, driver and memory (one line per GPU), or None without a driver."""
    if shutil.which("nvidia-smi") is None:
        return "driver present (no nvidia-smi)" if Path("/proc/driver/nvidia").exists() else None
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (out.stdout.strip() or None) if out.returncode == 0 else None


def tpu_device_files() -> list[str]:
    """The device files a TPU VM's chips appear as (/dev/accel*; /dev/vfio/<n> on v5e and
    later), [] elsewhere."""
    found = [str(p) for p in sorted(Path("/dev").glob("accel*"))]
    vfio = Path("/dev/vfio")
    if vfio.is_dir():
        found += [str(p) for p in sorted(vfio.iterdir()) if p.name.isdigit()]
    return found
