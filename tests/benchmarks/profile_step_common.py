"""What the benchmarks/profile_step.py test modules share: the script and its analysis
module imported (``ps``, ``pa``), the fields every record has, the environment its runs
get, and the check of a record's components."""
import os
import sys
from pathlib import Path

import pytest

__all__ = ["FIELDS", "SCRIPT", "_check_components", "_env", "pa", "ps"]

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "profile_step.py"
sys.path.insert(0, str(SCRIPT.parent))
import _profile_analysis as pa  # noqa: E402
import profile_step as ps  # noqa: E402

FIELDS = {"agent", "program", "size", "seeds", "compute_dtype", "calls", "platform",
          "device_kind", "compile_s", "wall_ms_median", "wall_ms", "traced_wall_ms_median",
          "trace", "busy_ms_per_call", "op_ms_per_call", "op_events", "categories",
          "classified_by", "top_ops", "rest", "modules", "gflop", "tflop_s",
          "matmul_tflop_s", "busy_share_of_wall", "idle_share_of_wall", "peak", "verdict",
          "files", "notes"}


def _env():
    return {**os.environ, "JAX_PLATFORMS": "cpu"}   # the script puts its checkout first


def _check_components(rec: dict) -> None:
    """The record's components: its program's rules in order, then "other"; their ms per
    call sum to the busy time, their shares to 1, their op counts to the distinct ops."""
    rules = ps.component_rules(rec["agent"], rec["program"])
    assert rec["component_rules"] == [list(r) for r in rules]
    assert list(rec["components"]) == list(dict.fromkeys([lb for lb, _ in rules] + ["other"]))
    comps = rec["components"].values()
    assert sum(c["ms_per_call"] for c in comps) == pytest.approx(rec["busy_ms_per_call"],
                                                                rel=1e-9)
    assert sum(c["share"] for c in comps) == pytest.approx(1.0)
    assert sum(c["ops"] for c in comps) == sum(c["ops"] for c in rec["categories"].values())
    assert rec["components_named_share"] > 0.95
    assert all(r["component"] in rec["components"] for r in rec["top_ops"])
