"""Learning check: does online DreamerV3 learn real Playground tasks on this machine?

`online_check.main` with DreamerV3's defaults: the `cpu` preset (the code-only
1m widths with every paper hyperparameter: 16 envs, train ratio 512, action
repeat 2; deviation W-D1), 2 seeds, an evaluation every 16,000 env steps (one
round of 16 episodes), the threshold judged on the training-episode returns of
the stochastic policy (the reference's primary metric, and what the published
DreamerV3 curve shows). Acceptance (DreamerV3 online issue): reacher-easy reaches
a mean return of at least 300 within 50,000 env steps (published 12m: ~630 at
50,000); cartpole-balance is recorded as far as a 60-minute budget allows.

    python benchmarks/learning/dreamerv3_online.py --task reacher-easy --env-steps 50000 \\
        --threshold 300
    python benchmarks/learning/dreamerv3_online.py --task cartpole-balance --env-steps 100000 \\
        --budget-min 60
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from online_check import main  # noqa: E402

if __name__ == "__main__":
    main("dreamerv3", {"eval_every": 16_000, "eval_episodes": 10, "threshold_on": "train"})
