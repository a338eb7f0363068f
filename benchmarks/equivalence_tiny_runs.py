"""Fingerprint of the tiny online -> build -> offline pipeline, to compare two commits.

Runs, through the command-line tools a user types, on synthetic probe tasks
(no MJX compile):

  1. train_online TD-MPC2 (tiny preset) on probe-action and probe-constant,
     2 seeds each, with episode-set export;
  2. beam run pipelines/build_taskset.py with a TaskSet of the two probes;
  3. train_offline (tiny preset) on that dataset, 2 seeds, evaluated on both
     tasks.

and writes a JSON fingerprint: the sha256 of each metrics.csv with the
wall-clock column removed, the episode sets' content hashes, the dataset's
content hash. Two commits that "change no result" give equal fingerprints
on the same machine (XLA's float results may differ between CPU models, so
compare fingerprints made on one machine, in one session).

    python benchmarks/equivalence_tiny_runs.py --out fp_new.json
    python benchmarks/equivalence_tiny_runs.py --compare fp_old.json fp_new.json
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TASKS = ("probe-action", "probe-constant")
WALL_COLUMNS = ("wall_s",)


def _sh(args: list[str], cwd: Path) -> str:
    bindir = Path(sys.executable).parent
    exe = [str(bindir / args[0])] + args[1:]
    out = subprocess.run(exe, cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    if out.returncode:
        raise SystemExit(f"{' '.join(args)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def metrics_digest(path: Path) -> str:
    """sha256 of metrics.csv without its wall-clock columns (rows and values as written)."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    keep = [i for i, c in enumerate(rows[0]) if c not in WALL_COLUMNS]
    buf = io.StringIO()
    w = csv.writer(buf)
    for r in rows:
        w.writerow([r[i] for i in keep])
    return hashlib.sha256(buf.getvalue().encode()).hexdigest()


def fingerprint(home: Path) -> dict:
    common = ["--preset", "tiny", "--home", str(home), "--no-progress"]
    fp: dict = {"online": {}, "episode_sets": {}}
    for task in TASKS:
        _sh(["train_online", "--agent", "tdmpc2", "--task", task, "--seeds", "0", "3",
             "--env-steps", "120", "--seed-steps", "40", "--eval-every", "40",
             "--eval-episodes", "2", "--name", f"online-{task}", *common], REPO)
        run = home / "runs" / f"online-{task}"
        fp["online"][task] = metrics_digest(run / "metrics.csv")
        summary = json.loads((run / "summary.json").read_text())
        fp["episode_sets"][task] = sorted(Path(p).name for p in summary["episode_sets"].values())
    from wmx.envs.registry import get_task
    from wmx.schemas.taskset import TaskInfo, TaskSet
    ts = TaskSet("probes", tuple(TaskInfo.from_spec(get_task(t)) for t in TASKS),
                 (None,) * len(TASKS), "none")
    (home / "probes.json").write_text(ts.to_json())
    _sh(["beam", "run", "pipelines/build_taskset.py", f"--home={home}",
         f"--taskset={home / 'probes.json'}"], REPO)
    datasets = sorted(p for p in (home / "datasets").glob("*/*") if p.is_dir()
                      and not p.name.startswith("."))
    assert len(datasets) == 1, datasets
    manifest = json.loads((datasets[0] / "manifest.json").read_text())
    fp["dataset"] = f"{datasets[0].parent.name}@{manifest['content_hash']}"
    off = ["train_offline", "--agent", "tdmpc2", "--dataset", fp["dataset"], "--seeds", "0", "1",
           "--batch-size", "16", "--updates", "6", "--log-every", "2", "--eval-every", "4",
           "--checkpoint-every", "2", "--eval-episodes", "2", *common]
    _sh(off + ["--name", "offline"], REPO)
    fp["offline"] = metrics_digest(home / "runs" / "offline" / "metrics.csv")
    return fp


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="write the fingerprint JSON here")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"),
                    help="compare two fingerprint files; exit 1 when they differ")
    args = ap.parse_args(argv)
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        a.pop("meta", None), b.pop("meta", None)
        same = a == b
        print("identical" if same else f"DIFFERENT:\n{json.dumps(a, indent=1)}\n"
              f"{json.dumps(b, indent=1)}")
        return 0 if same else 1
    with tempfile.TemporaryDirectory(prefix="wmx-fp-") as tmp:
        fp = fingerprint(Path(tmp))
    from wmx.version import code_version
    fp["meta"] = {"commit": code_version()}
    text = json.dumps(fp, indent=1, sort_keys=True)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
