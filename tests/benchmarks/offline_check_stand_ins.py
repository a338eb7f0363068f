"""What the tests of benchmarks/learning/dreamerv3_offline.py's check share
(test_dreamerv3_offline_check_*.py): the script loaded as ``bench`` (its folder on sys.path,
so that ``import offline_check`` finds the sibling), per-task stand-ins (`_tasks`), and a
check run as --prepare-only leaves it with its source run (`_prepared_run`, `_METRICS`)."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path


_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "learning"
sys.path.insert(0, str(_DIR))
_SPEC = importlib.util.spec_from_file_location("dreamerv3_offline", _DIR / "dreamerv3_offline.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def _tasks(**final):
    return {t: {"runs": [f"runs/{t}"], "per_seed": [r], "final_return": r}
            for t, r in final.items()}


def _source_run(run: Path, task: str, final: float) -> None:
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"task": task, "episode_length": None}))
    (run / "summary.json").write_text(json.dumps({"episode_sets": {"0": "episodes/x/0"}}))
    (run / "metrics.csv").write_text(f"kind,seed,return\ntrain,0,1.0\neval,0,{final}\n")


def _prepared_run(home: Path, agent: str = "dreamerv3", seeds: tuple = (0,)) -> Path:
    """A check run as --prepare-only leaves it (no dataset needed to report), its source
    run (reacher-easy, final return 800) under ``home``."""
    from wmx.runs.offline_config import OfflineRunConfig
    from wmx.schemas.taskset import mt19
    _source_run(home / "runs" / "src", "reacher-easy", 800.0)
    run = home / "runs" / "dv3-offline-check-1"
    run.mkdir()
    rc = OfflineRunConfig(dataset="mt19-x@" + "ab" * 32,
                          taskset=mt19().subset(["reacher-easy"]).to_dict(), agent=agent,
                          updates=4000, eval_every=1000, log_every=500, checkpoint_every=1000,
                          seeds=seeds)
    (run / "config.json").write_text(json.dumps({**rc.to_json(), "code_version": "0123abc",
                                                 "device": "tpu: TPU v5 lite"}))
    (run / "benchmark.json").write_text(json.dumps({
        "sources": ["runs/src"], "learned_margin": 100.0, "tdmpc2_run": None,
        "dataset": rc.dataset, "random_returns": {"reacher-easy": {"mean": 60.0}}}))
    return run


_METRICS = ("kind,task,seed,updates,return\ntrain,,0,500,\neval,reacher-easy,0,1000,300.0\n"
            "train,,0,1500,\neval,reacher-easy,0,2000,450.0\ntrain,,0,2500,\n")
