"""train_offline's command line with stand-in evaluation envs (tests/stand_in_env.py: no MJX
compile): the trainer `benchmarks/mt19_offline.py train` starts in
tests/benchmarks/test_mt19_offline_run.py, in a process of its own as on the device."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]

from tiny_runs import train_offline_on_stand_ins  # noqa: E402

if __name__ == "__main__":
    sys.exit(train_offline_on_stand_ins(sys.argv[1:]))
