"""device_check's stages table: each stage's command, environment and weight in the budget,
which run (the default ones, or those named with ``--only``), the budgets scaled to the
total, ``--plan``'s listing, and where the parity stage finds its fixtures.

The orchestrator is `device_check.py`; this module opens no device and imports no jax.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from _device_run import KILL_GRACE_S

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
FINISH_RESERVE_S = 30.0
"""Seconds kept after the last stage for the JSON and the plot (part of the total; they
cover the last stage's kill grace)."""
TASK = "cartpole-balance"
"""Default task of both learning stages (--tdmpc2-task / --dreamerv3-task choose others)."""
PARITY_FILES = "tests/**/test_*parity*.py"
"""The parity suite: the modules tests/conftest.py marks `parity`. They are named, not
collected from tests/ (-m parity), so a module whose imports the device's environment
lacks (Beam, say) cannot stop the stage at collection."""


@dataclass
class Stage:
    """One stage: its name, its weight in the budget (s at the default total when the
    default stages run), argv, environment changes (None unsets a variable), whether it
    runs by default, and for learning stages the agent and a tail."""
    name: str
    budget_s: float
    argv: list[str]
    env: dict[str, str | None] = field(default_factory=dict)
    default: bool = True          # False: runs only when named with --only
    learning: str | None = None   # agent name of a learning stage
    tail_s: float = 0.0           # learning: seconds kept after --budget-min for startup,
    #                               the chunk in flight, the final evaluation and writing


def stages(raw: Path, home: Path, smoke: bool, tdmpc2_task: str = TASK,
           dreamerv3_task: str = TASK, offline_run: Path | None = None,
           shared: Path | None = None) -> list[Stage]:
    """Every stage of the check, writing under ``raw``.

    Args:
      raw: the folder of the stages' own files (``<out>/device_check``).
      home: the online learning runs' data root.
      smoke: the --force-cpu sizes (probe-action, one parity module; the task
        arguments unused).
      tdmpc2_task, dreamerv3_task: the learning stages' Playground tasks.
      offline_run: a prepared DreamerV3 offline check run, trained in its own home
        folder by the ``dreamerv3_offline`` stage (None: no such stage).
      shared: the shared folder (its fixtures/ feed the parity suite), passed to the
        parity stage as WMX_SHARED; None leaves WMX_SHARED as it is.

    Returns:
      The stages in running order, budgets at `DEFAULT_TOTAL_S` before `scaled`.
    """
    py = sys.executable
    probe = [py, str(HERE / "device_check.py"), "--probe"]
    no_prealloc = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}   # a GPU's memory as it is used
    if smoke:
        td_speed = ["--sizes", "1", "--rounds", "3", "--calls", "1"]
        dv_speed = ["--sizes", "1m", "--seeds", "1", "2", "--rounds", "3", "--train-calls",
                    "1", "--policy-calls", "2"]
        parity = [str(ROOT / "tests" / "agents" / "dreamerv3" / "test_laprop_parity.py")]
        learn_common = ["--task", "probe-action", "--preset", "tiny", "--seeds", "0",
                        "--eval-every", "40", "--eval-episodes", "2", "--env-steps", "120"]
        td_learn = learn_common + ["--set", "seed_steps=40"]
        dv_learn = learn_common
        # probe, device_tests, parity, tdmpc2_speed, dreamerv3 f32, bf16; learning td, dv
        budgets = (30, 30, 60, 90, 150, 150, 110, 130)
    else:
        td_speed = ["--sizes", "5", "--rounds", "5", "--calls", "10"]
        dv_speed = ["--sizes", "12m", "--seeds", "1", "2", "5", "--rounds", "3",
                    "--train-calls", "5", "--policy-calls", "20"]
        parity = [str(p) for p in sorted(ROOT.glob(PARITY_FILES))]
        td_learn = ["--task", tdmpc2_task, "--preset", "paper", "--seeds", "0", "1",
                    "--env-steps", "50000", "--eval-every", "5000", "--eval-episodes", "10"]
        # 2 seeds vmapped (the online criterion's; nearly free on a GPU) and a checkpoint every
        # 100 ticks (~30 s on an H200), so the budget stop ends the run inside its limit
        dv_learn = ["--task", dreamerv3_task, "--preset", "paper", "--seeds", "0", "1",
                    "--env-steps", "64000", "--eval-every", "16000", "--eval-episodes", "10",
                    "--chunk-ticks", "100"]
        # parity: 108 of the suite's 128 tests (17 skipped) took 208 s on a TPU v5e, the
        # device tests ~40 s; on a TPU the speed stages compile for minutes, so the default
        # stages take two calls there (--only ... then --continue, docs/accelerators.md)
        budgets = (20, 45, 235, 70, 110, 110, 140, 185)
    learn_out = ["--home", str(home), "--out", str(raw / "learning")]
    # pytest: -v so that a stage killed before its junit XML is written still names its
    # tests in the log; the parity tests at the default optimisation level (tests/conftest.py)
    pytest = [py, "-m", "pytest", "-v", "--tb=short", "-p", "no:xdist", "-p", "no:cacheprovider"]
    parity_env = {"JAX_DEFAULT_MATMUL_PRECISION": "highest", "JAX_PLATFORMS": None,
                  "WMX_TEST_XLA_OPT": None}
    if shared is not None:
        parity_env["WMX_SHARED"] = str(shared)

    def dreamerv3_speed(name: str, weight: float, extra: list[str]) -> Stage:
        return Stage(name, weight,
                     [py, str(HERE / "dreamerv3_speed.py"), *dv_speed, *extra,
                      "--load-retries", "0", "--online-presets", "--compile-cache", "",
                      "--logs", str(raw / "logs" / name), "--out", str(raw / f"{name}.json")],
                     env=no_prealloc)

    offline = [] if offline_run is None else [
        Stage("dreamerv3_offline", budgets[7],
              [py, str(HERE / "learning" / "dreamerv3_offline.py"), "--resume",
               str(offline_run), "--out", str(raw / "offline")],
              default=False, learning="dreamerv3_offline", tail_s=60)]
    return [
        Stage("probe", budgets[0], probe),
        # wmx.nn.rbg_bits gives the CPU's bits on every backend (and jax.random's on a GPU);
        # checked here on the device (the test suite runs on the CPU only)
        Stage("device_tests", budgets[1],
              [*pytest, "--junitxml", str(raw / "device_tests.xml"),
               str(ROOT / "tests" / "nn" / "test_rbg_bits.py")]),
        Stage("parity", budgets[2],
              [*pytest, "-m", "parity", "--junitxml", str(raw / "parity.xml"), *parity],
              env=parity_env),
        Stage("tdmpc2_speed", budgets[3],
              [py, str(HERE / "tdmpc2_speed.py"), *td_speed, "--kinds", "plan", "update",
               "--retries", "0", "--no-online", "--out", str(raw / "tdmpc2_speed.json")],
              env=no_prealloc),
        dreamerv3_speed("dreamerv3_speed_f32", budgets[4], []),
        dreamerv3_speed("dreamerv3_speed_bf16", budgets[5], ["--compute-dtype", "bfloat16"]),
        Stage("tdmpc2_learning", budgets[6],
              [py, str(HERE / "learning" / "tdmpc2_online.py"), *td_learn, *learn_out],
              default=False, learning="tdmpc2", tail_s=45),
        Stage("dreamerv3_learning", budgets[7],
              [py, str(HERE / "learning" / "dreamerv3_online.py"), *dv_learn, *learn_out],
              default=False, learning="dreamerv3", tail_s=60),
        *offline,
    ]


def selected(plan: list[Stage], only: set[str] | None) -> list[Stage]:
    """The stages that run: the probe, then those named in ``only``, or without it the
    default stages."""
    return [s for s in plan if s.name == "probe" or (s.name in only if only else s.default)]


def scaled(plan: list[Stage], total_s: float, only: set[str] | None = None) -> list[Stage]:
    """Budgets scaled so that the stages that run (`selected`) plus FINISH_RESERVE_S sum to
    ``total_s``; the probe keeps its own (it only opens the device), the stages that do
    not run keep their weights at the same scale."""
    probe, rest = plan[0].budget_s, selected(plan, only)[1:]
    k = (total_s - FINISH_RESERVE_S - probe) / (sum(s.budget_s for s in rest) or 1.0)
    for s in plan[1:]:
        s.budget_s = int(s.budget_s * k * 10) / 10     # rounded down: never over the total
    return plan


def print_plan(plan: list[Stage], total_s: float, only: set[str] | None,
               shared: Path | None) -> None:
    """The stages, their budgets and commands (and why a stage does not run)."""
    runs = selected(plan, only)
    print(f"device_check plan: {len(runs)} stages within {total_s:.0f} s "
          f"({FINISH_RESERVE_S:.0f} s kept for the JSON and the plot; a late stage gets "
          f"SIGTERM, then SIGKILL {KILL_GRACE_S:.0f} s later)")

    def show(a: str) -> str:
        return (os.path.relpath(a, ROOT) if a.startswith(str(ROOT)) else a) or "''"

    for s in plan:
        if s in runs:
            budget, mark = f"{s.budget_s:6.1f} s", ""
        else:
            budget = "     - "
            mark = ("  (skipped)" if only or s.default else f"  (only with --only {s.name})")
        extra = (f" --budget-min <(limit - {s.tail_s:.0f} s) / 60>" if s.learning else "")
        env = [f"-u {k}" for k, v in s.env.items() if v is None] + [
            f"{k}={v}" for k, v in s.env.items()
            if v is not None and k != "XLA_PYTHON_CLIENT_PREALLOCATE"]
        argv = ["python"] + [show(a) for a in s.argv[1:]]
        if s.name == "parity" and len(argv) > 12:
            n_files = sum(a.endswith(".py") for a in argv)
            argv = [a for a in argv if not a.endswith(".py")] + [f"<{n_files} *parity* modules>"]
        print(f"  {s.name:21s} {budget}{mark}  {'env ' + ' '.join(env) + ' ' if env else ''}"
              f"{' '.join(argv)}{extra}")
    print(f"  {'total':21s} {sum(s.budget_s for s in runs) + FINISH_RESERVE_S:6.1f} s "
          "(a stage's limit: its budget plus what earlier stages left unused)")
    if any(s.name == "parity" for s in runs) and not fixtures_found(shared):
        print(f"  note: no fixtures/ in {shared or 'the default shared folder'}: the parity "
              "stage will fail; pass --shared DIR (the folder holding fixtures/)")


def default_shared() -> Path:
    """WMX_SHARED, else the folder ``shared`` beside the checkout (`wmx.paths.shared_dir`'s
    rule, without its check)."""
    env = os.environ.get("WMX_SHARED")
    return Path(env).expanduser().resolve() if env else ROOT.parent / "shared"


def fixtures_found(shared: Path | None) -> bool:
    """Whether ``shared`` holds the parity fixtures (fixtures/ with a folder per agent)."""
    return shared is not None and (shared / "fixtures").is_dir()
