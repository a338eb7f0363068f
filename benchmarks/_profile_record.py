"""`profile_step`'s files: the trace recorded and read back, gzipped files written
atomically, and the record analysed and written (again, with ``--reanalyse``, from the
trace and HLO files beside it).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
from pathlib import Path

from _profile_analysis import analyse
from _profile_components import component_rules
from _profile_program import ONLINE_FIELDS
from _profile_verdict import add_rates, peak_rate


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it, renamed in place."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_gz(path: Path, data: bytes, max_mib: float) -> str | None:
    """Gzip ``data`` to ``path`` (atomically) unless larger than ``max_mib``; returns the
    file's name, or None when left out."""
    packed = gzip.compress(data, compresslevel=6, mtime=0)
    if len(packed) > max_mib * 2 ** 20:
        return None
    write_atomic(path, packed)
    return path.name


def record_trace(call, calls: int, trace_dir: Path) -> list[float]:
    """Run ``call`` ``calls`` times under ``jax.profiler.trace`` (Python tracer off);
    returns the traced calls' wall ms."""
    import jax
    from _machine import time_calls
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    with jax.profiler.trace(str(trace_dir), profiler_options=options):
        wall = time_calls(call, calls)["wall_ms"]
    return wall


def read_trace(trace_dir: Path) -> bytes:
    """The serialized XSpace of the one trace ``jax.profiler.trace`` wrote."""
    files = sorted(trace_dir.rglob("*.xplane.pb"))
    if not files:
        raise RuntimeError(f"jax.profiler.trace wrote no .xplane.pb under {trace_dir}")
    return files[-1].read_bytes()


def write_record(path: Path, rec: dict, raw: bytes, hlo: str | None,
                 args: argparse.Namespace) -> dict:
    """Analyse the serialized trace ``raw`` into ``rec`` (`analyse`, `add_rates`) and write
    it to ``path`` (atomically). A failed analysis is written too, with its error, and
    then raised. Returns the record with ``_path``."""
    import jax
    base = {k: v for k, v in rec.items() if k in _MEASURED}
    try:
        data = jax.profiler.ProfileData.from_serialized_xspace(raw)
        rules = component_rules(base["agent"], base["program"])
        rec = add_rates({**base, **analyse(data, hlo, base["calls"], args.top, rules),
                         "component_rules": [list(r) for r in rules]},
                        base["gflop"], peak_rate(base["device_kind"], args.peak_tflops))
    except Exception as e:
        rec = {**base, "analysis_error": f"{type(e).__name__}: {e}",
               "verdict": "The trace analysis failed; the trace and the HLO are in files "
                          "(redo it with --reanalyse after a fix)."}
        write_atomic(path, (json.dumps(rec, indent=1) + "\n").encode())
        raise
    write_atomic(path, (json.dumps(rec, indent=1) + "\n").encode())
    return {**rec, "_path": str(path)}


_MEASURED = ("agent", "program", "size", *ONLINE_FIELDS, "seeds", "compute_dtype",
             "scan_weight_grads", "calls", "warmup",
             "platform", "device_kind", "jax", "wmx_commit", "command", "compile_s", "gflop",
             "wall_ms_median", "wall_ms", "traced_wall_ms_median", "traced_wall_ms", "files",
             "notes")
"""The fields of a record that the run measured; the rest come from the trace."""


def reanalyse(path: Path, args: argparse.Namespace) -> dict:
    """Redo the analysis of a record written earlier (on any machine, no device needed)
    from its gzipped trace and HLO beside it, and rewrite the record."""
    rec = json.loads(path.read_text())
    files = rec.get("files") or {}
    if not files.get("trace"):
        raise SystemExit(f"profile_step.py: error: {path}: its trace was not written "
                         f"({'; '.join(rec.get('notes') or [])})")
    raw = gzip.decompress((path.parent / files["trace"]).read_bytes())
    hlo = (gzip.decompress((path.parent / files["hlo"]).read_bytes()).decode()
           if files.get("hlo") else None)
    return write_record(path, rec, raw, hlo, args)
