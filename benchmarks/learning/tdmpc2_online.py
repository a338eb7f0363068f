"""Learning check: does online TD-MPC2 learn real Playground tasks on this machine?

`online_check.main` with TD-MPC2's defaults (cpu preset, 1 env per seed, 2
seeds, eval returns judged). Acceptance (online issue): cartpole-balance
reaches a mean eval return of at least 800 within 20,000 env steps;
pendulum-swingup is recorded as far as a 30-minute budget allows.

    python benchmarks/learning/tdmpc2_online.py --task cartpole-balance --env-steps 20000 \\
        --eval-every 5000 --threshold 800
    python benchmarks/learning/tdmpc2_online.py --task pendulum-swingup --env-steps 60000 \\
        --budget-min 30
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from online_check import main  # noqa: E402

if __name__ == "__main__":
    main("tdmpc2", {})
