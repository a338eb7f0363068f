"""Reading device_check's stages' results: the pytest stages' junit XML (or their ``-v``
log), the speed benchmarks' JSON, and the learning and offline runs' JSON or metrics.csv.
"""
from __future__ import annotations

import csv
import json
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
MESSAGE_LINES = 6
"""Lines of a failing test's message kept in the record."""


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def pytest_results(xml: Path, log: Path, slowest: int = 5) -> dict:
    """A pytest stage's result: from its junit XML, or, when pytest was stopped before
    writing it, from the per-test lines of its ``-v`` log.

    Args:
      xml: the junit XML pytest writes at the end of the session.
      log: the stage's log.
      slowest: how many of the slowest tests to list (junit only).

    Returns:
      {"source", "passed", "failed", "errors", "skipped", "failures": [{"test", "kind",
      "message"}: the first `MESSAGE_LINES` non-empty lines of each failure's or error's
      message (numpy's tolerance, mismatch count and largest differences), at most 800
      characters], "slowest": [[test, s], ...], "time_s"}; from the log, the counts and
      the failing tests' names (messages are in the log).
    """
    try:
        root = ET.parse(xml).getroot()
    except (OSError, ET.ParseError):
        root = None
    if root is not None:
        out = {"source": "junit XML", "passed": 0, "failed": 0, "errors": 0, "skipped": 0,
               "failures": [], "time_s": 0.0}
        times = []
        for case in root.iter("testcase"):
            name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
            t = float(case.get("time") or 0.0)
            out["time_s"] += t
            times.append([name, round(t, 2)])
            bad = case.find("failure")
            kind = "failed"
            if bad is None:
                bad, kind = case.find("error"), "errors"
            if bad is not None:
                out[kind] += 1
                msg = bad.get("message") or (bad.text or "").strip()
                head = [x for x in msg.splitlines() if x.strip()][:MESSAGE_LINES]
                out["failures"].append({"test": name, "kind": kind,
                                        "message": "\n".join(head)[:800]})
            elif case.find("skipped") is not None:
                out["skipped"] += 1
            else:
                out["passed"] += 1
        out["time_s"] = round(out["time_s"], 1)
        out["slowest"] = sorted(times, key=lambda x: -x[1])[:slowest]
        return out
    try:
        text = log.read_text(errors="replace")
    except OSError:
        text = ""
    out = {"source": "log (no junit XML: pytest was stopped)"}
    per_test = re.findall(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)", text, re.M)
    kinds = {"PASSED": "passed", "FAILED": "failed", "ERROR": "errors", "SKIPPED": "skipped"}
    for kind in kinds.values():
        out[kind] = 0
    for _, status in per_test:
        if status in kinds:
            out[kinds[status]] += 1
    out["failures"] = [{"test": t, "kind": kinds[s], "message": None}
                       for t, s in per_test if s in ("FAILED", "ERROR")]
    return out


def tdmpc2_speed_results(path: Path) -> dict | None:
    """Medians (ms), per-seed medians, matmul GFLOP, the rate they imply (TFLOP/s) and the
    device's peak bytes in use, per program (``update_size5``, ``plan_size5_seeds2``...)."""
    res = read_json(path)
    if res is None:
        return None
    out = {"xla_matmul_gflop_per_s": res.get("ceiling_before", {}).get("xla_gflop_per_s")}
    for kind in ("update", "plan"):
        for q in res.get(kind, []):
            n = q.get("seeds", 1)
            mem = q.get("device_memory") or {}
            out[f"{kind}_size{q['model_size']}" + (f"_seeds{n}" if n > 1 else "")] = {
                "median_ms": q["wmx_median_ms"], "cpu_median_ms": q["wmx_cpu_median_ms"],
                "seeds": n, "per_seed_ms": q["wmx_median_ms"] / n,
                "gflop": q["gflop"], "tflop_per_s": q["gflop"] / q["wmx_median_ms"],
                "device_peak_bytes_in_use": mem.get("peak_bytes_in_use")}
    return out


def dreamerv3_speed_results(path: Path, compute_dtype: str = "float32") -> dict | None:
    """Medians (ms), per-seed medians, compile time (s), matmul GFLOP, TFLOP/s and the
    device's peak bytes in use per item (``train_12m``, ``policy_12m_seeds5``...), and
    the stage's ``compute_dtype`` (its --compute-dtype)."""
    res = read_json(path)
    if res is None:
        return None
    out = {"xla_matmul_gflop_per_s": res.get("matmul_baseline", {}).get("gflop_per_s"),
           "compute_dtype": compute_dtype}
    for name, item in res.get("items", {}).items():
        w = item["wmx"]
        n = w.get("seeds", 1)
        mem = w.get("device_memory") or {}
        out[name] = {"median_ms": w["median_ms"], "cpu_median_ms": w["cpu_median_ms"],
                     "seeds": n, "per_seed_ms": w["median_ms"] / n,
                     "compile_s": w.get("compile_s"), "gflop": w.get("gflop"),
                     "tflop_per_s": (w["gflop"] / w["median_ms"]) if w.get("gflop") else None,
                     "xla_total_mib": (w.get("xla_buffers") or {}).get("total_mib"),
                     "device_peak_bytes_in_use": mem.get("peak_bytes_in_use")}
    for name, m in res.get("memory", {}).items():
        dev = m.get("device_memory") or {}
        out.setdefault("memory", {})[name] = {
            "peak_rss_mib": m.get("peak_rss_mib"),
            "device_peak_bytes_in_use": dev.get("peak_bytes_in_use")}
    return out


def metrics_curves(metrics_csv: Path) -> dict:
    """{"eval": {env_steps: [mean return per seed]}, "train": {...}} from a run's metrics.csv."""
    out: dict = {"eval": {}, "train": {}}
    try:
        with metrics_csv.open() as f:
            for r in csv.DictReader(f):
                if r.get("kind") in out and r.get("return") not in ("", None):
                    out[r["kind"]].setdefault(str(int(r["env_steps"])), []).append(
                        float(r["return"]))
    except OSError:
        pass
    return out


def learning_results(raw: Path, home: Path, agent: str, task: str) -> dict | None:
    """The learning script's JSON if it finished, else the curves its run's metrics.csv
    holds (a run stopped by the stage limit); the run's config and metrics are copied
    to ``raw/learning/<agent>_run/``."""
    runs = sorted((home / "runs").glob(f"learning-{agent}-{task}-*"))
    run_dir = runs[-1] if runs else None
    if run_dir is not None:
        keep = raw / "learning" / f"{agent}_run"
        keep.mkdir(parents=True, exist_ok=True)
        for name in ("config.json", "metrics.csv"):
            if (run_dir / name).exists():
                shutil.copy2(run_dir / name, keep / name)
    res = read_json(raw / "learning" / f"{agent}_online_{task}.json")
    if res is not None:
        keys = ("agent", "task", "seeds", "preset", "n_envs", "env_steps_reached",
                "finished", "wall_s", "eval_curve", "train_curve", "final_mean_eval_return",
                f"published_{agent}_at_same_env_steps")
        return {"source": "learning script JSON", **{k: res.get(k) for k in keys}}
    if run_dir is None:
        return None
    curves = metrics_curves(run_dir / "metrics.csv")
    xs = [int(x) for c in curves.values() for x in c]
    return {"source": "metrics.csv (the run was stopped by the stage limit)",
            "agent": agent, "task": task, "env_steps_reached": max(xs, default=0),
            "eval_curve": curves["eval"], "train_curve": curves["train"]}


def offline_results(raw: Path, run_dir: Path) -> dict:
    """The offline check's JSON entries if it wrote them, else the per-task eval curves
    of its run's metrics.csv (a run stopped by the stage limit); the run's config and
    metrics, its summary.json when it finished and its final evaluation
    (report/report.json, as ``run_report.json``) are copied to ``raw/offline/run_<name>``
    (two folders below the output)."""
    keep = raw / "offline"
    keep.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "benchmark.json", "metrics.csv", "summary.json",
                 "report/report.json"):
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, keep / f"run_{Path(name).name}")
    res = read_json(raw / "offline" / "dreamerv3_offline.json")
    if res is not None:
        return {"source": "offline check JSON", "run_dir": str(run_dir),
                "updates_reached": res.get("updates_reached"), "passed": res.get("passed"),
                "eval_curve": {t: v.get("offline_eval_return")
                               for t, v in (res.get("tasks") or {}).items()},
                "final_return": {t: v.get("offline_final_return")
                                 for t, v in (res.get("tasks") or {}).items()},
                "source_final_return": {t: v.get("source_final_return")
                                        for t, v in (res.get("tasks") or {}).items()}}
    sys.path.insert(0, str(HERE / "learning"))
    from offline_check import eval_curves, last_updates      # csv and numpy only, no jax
    return {"source": "metrics.csv (the check wrote no result: stopped at the stage limit, "
                      "or failed)",
            "run_dir": str(run_dir), "updates_reached": last_updates(run_dir),
            "eval_curve": {t: {str(u): sum(v) / len(v) for u, v in c.items()}
                           for t, c in eval_curves(run_dir).items()},
            "final_return": None}
