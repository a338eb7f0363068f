"""What the benchmarks/device_check.py test modules share: the script, loaded once as the
module ``device_check``, and running it as a command (``_run``) with its plan's budgets
read back (``_budgets``)."""
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "device_check.py"
_SPEC = importlib.util.spec_from_file_location("device_check", SCRIPT)
device_check = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("device_check", device_check)     # its dataclass looks its module up
_SPEC.loader.exec_module(device_check)

DEFAULT = ["probe", "device_tests", "parity", "tdmpc2_speed", "dreamerv3_speed_f32",
           "dreamerv3_speed_bf16"]


def _run(*args, env=None, timeout=120):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def _budgets(stdout: str) -> dict:
    """{stage: budget s} of the stages a plan runs, and "total"."""
    return {name: float(s) for name, s in re.findall(r"^  (\w+)\s+([\d.]+) s", stdout, re.M)}
