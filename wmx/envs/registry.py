"""Task registry: the mt19 DMC tasks on MuJoCo Playground and the probe tasks.

Each task is a frozen `TaskSpec`. Dimensions are pinned from a probe of the
installed Playground envs (playground 0.2.0, impl="jax"); a slow test checks
the whole table against the real envs. Sources: DESIGN.md §4, tdmpc2_spec 2.20
(discount), 4.3 (seed steps), 4.11/4.13 (DMC: action repeat 2, T = 500),
4.15 (mt30 order); deviation E18 (Playground MJX ports instead of dm_control).
"""
from __future__ import annotations

import dataclasses

__all__ = [
    "TaskSpec", "MT19_TASKS", "MT19", "PROBE_TASKS", "TASKS",
    "get_task", "task_names", "discount_from_length", "seed_steps_from_length",
    "DMC_SCORE_DIVISOR",
]

DMC_SCORE_DIVISOR = 10.0
"""Normalised score of a DMC task = return / 10, on [0, 100] (tdmpc2_spec 4.20)."""


def discount_from_length(T: int, denom: float = 5.0, lo: float = 0.95,
                         hi: float = 0.995) -> float:
    """Discount heuristic γ(T) = clip((T/denom − 1)/(T/denom), lo, hi), in float64.

    T: episode length in agent steps (after action repeat). DMC T=500 -> 0.99,
    T=100 -> 0.95, T=1000 -> 0.995. The TaskSet's per-task discount and
    TD-MPC2's γ both come from here. Source: tdmpc2_spec 2.20 (B19). Raises
    ValueError for T < 1.
    """
    if T < 1:
        raise ValueError(f"episode length T must be >= 1 agent step, got {T}")
    frac = T / denom
    return float(min(max((frac - 1.0) / frac, lo), hi))


def seed_steps_from_length(T: int) -> int:
    """Seeding-phase length S = max(1000, 5·T) agent steps (tdmpc2_spec 4.3)."""
    if T < 1:
        raise ValueError(f"episode length T must be >= 1 agent step, got {T}")
    return int(max(1000, 5 * T))


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """Static description of one task.

    Fields:
      name: mt30 spelling, e.g. "cartpole-balance" (tdmpc2_spec 4.15).
      playground_name: Playground registry name, e.g. "CartpoleBalance";
        None for the synthetic probe tasks.
      obs_dim: length of the flattened float32 observation.
      action_dim: number of action dims; agent actions live in [-1, 1].
      T: episode length in agent steps (after action repeat); an episode is
        T+1 rows.
      action_repeat: simulator control steps per agent step (rewards summed).
      obs_keys: key order used to flatten dict observations; () when the env's
        observation is already a flat array (all mt19 tasks).
      kind: "playground" or "probe".
      reward_range: (low, high) of the reward of one simulator step; an agent
        step sums action_repeat of them (`agent_step_reward_range`). DMC:
        [0, 1] (every dm_control suite reward is a product of `tolerance`
        terms in [0, 1]; the Playground ports keep it), probe-constant: 1,
        probe-action: [-1, 1]. `wmx.datasets.validate` checks pooled rewards
        against it.
    Derived properties: `discount` (tdmpc2_spec 2.20) and `seed_steps`
    (tdmpc2_spec 4.3), both from T.
    """

    name: str
    playground_name: str | None
    obs_dim: int
    action_dim: int
    T: int
    action_repeat: int
    obs_keys: tuple[str, ...] = ()
    kind: str = "playground"
    reward_range: tuple[float, float] = (0.0, 1.0)

    def __post_init__(self):
        if self.obs_dim < 1 or self.action_dim < 1:
            raise ValueError(
                f"task {self.name!r}: obs_dim and action_dim must be >= 1, got "
                f"{self.obs_dim}, {self.action_dim}")
        if self.T < 1 or self.action_repeat < 1:
            raise ValueError(
                f"task {self.name!r}: T and action_repeat must be >= 1, got "
                f"T={self.T}, action_repeat={self.action_repeat}")
        lo, hi = self.reward_range
        if not lo <= hi:
            raise ValueError(f"task {self.name!r}: reward_range {self.reward_range} is empty")
        if self.kind not in ("playground", "probe"):
            raise ValueError(
                f"task {self.name!r}: kind must be 'playground' or 'probe', "
                f"got {self.kind!r}")

    @property
    def discount(self) -> float:
        """γ(T) of tdmpc2_spec 2.20 (Python float)."""
        return discount_from_length(self.T)

    @property
    def seed_steps(self) -> int:
        """max(1000, 5·T) agent steps of random actions (tdmpc2_spec 4.3)."""
        return seed_steps_from_length(self.T)

    def agent_step_reward_range(self, action_repeat: int | None = None) -> tuple[float, float]:
        """(low, high) of the reward of one agent step: reward_range times the action
        repeat (the task's, or ``action_repeat``)."""
        ar = self.action_repeat if action_repeat is None else int(action_repeat)
        return (self.reward_range[0] * ar, self.reward_range[1] * ar)

    def replace(self, **changes) -> "TaskSpec":
        """A copy with the given fields changed (e.g. T for short test runs)."""
        return dataclasses.replace(self, **changes)


def _dmc(name: str, pg: str, obs_dim: int, action_dim: int) -> TaskSpec:
    # Playground DMC envs: episode_length 1000 control steps; DMC protocol
    # action repeat 2 -> T = 500 agent steps (tdmpc2_spec 4.11, 4.13).
    return TaskSpec(name=name, playground_name=pg, obs_dim=obs_dim,
                    action_dim=action_dim, T=500, action_repeat=2)


# The 19 original mt30 DMC tasks in mt30 order (= task id). Dims probed from
# playground 0.2.0 (impl="jax"); they equal the dm_control suite's dims.
MT19_TASKS: tuple[TaskSpec, ...] = (
    _dmc("walker-stand", "WalkerStand", 24, 6),
    _dmc("walker-walk", "WalkerWalk", 24, 6),
    _dmc("walker-run", "WalkerRun", 24, 6),
    _dmc("cheetah-run", "CheetahRun", 17, 6),
    _dmc("reacher-easy", "ReacherEasy", 6, 2),
    _dmc("reacher-hard", "ReacherHard", 6, 2),
    _dmc("acrobot-swingup", "AcrobotSwingup", 6, 1),
    _dmc("pendulum-swingup", "PendulumSwingup", 3, 1),
    _dmc("cartpole-balance", "CartpoleBalance", 5, 1),
    _dmc("cartpole-balance-sparse", "CartpoleBalanceSparse", 5, 1),
    _dmc("cartpole-swingup", "CartpoleSwingup", 5, 1),
    _dmc("cartpole-swingup-sparse", "CartpoleSwingupSparse", 5, 1),
    _dmc("cup-catch", "BallInCup", 8, 2),
    _dmc("finger-spin", "FingerSpin", 9, 2),
    _dmc("finger-turn-easy", "FingerTurnEasy", 12, 2),
    _dmc("finger-turn-hard", "FingerTurnHard", 12, 2),
    _dmc("fish-swim", "FishSwim", 24, 5),
    _dmc("hopper-stand", "HopperStand", 15, 4),
    _dmc("hopper-hop", "HopperHop", 15, 4),
)
MT19 = MT19_TASKS  # the name used in docs/architecture.md

# Synthetic fixed-length, non-terminating probe tasks (reference_design §8);
# implemented in wmx.envs.probes.
PROBE_TASKS: tuple[TaskSpec, ...] = (
    TaskSpec(name="probe-constant", playground_name=None, obs_dim=2,
             action_dim=1, T=20, action_repeat=1, kind="probe", reward_range=(1.0, 1.0)),
    TaskSpec(name="probe-action", playground_name=None, obs_dim=2,
             action_dim=2, T=20, action_repeat=1, kind="probe", reward_range=(-1.0, 1.0)),
)

TASKS: dict[str, TaskSpec] = {t.name: t for t in MT19_TASKS + PROBE_TASKS}


def task_names() -> tuple[str, ...]:
    """All registered task names: mt19 in mt30 order, then the probes."""
    return tuple(TASKS)


def get_task(name: str) -> TaskSpec:
    """The TaskSpec registered under `name` (mt30 spelling or a probe name).

    Raises ValueError listing the known names when `name` is unknown: the mt19 tasks,
    then the probes, marked as test tasks.
    """
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown task {name!r}; known tasks: {', '.join(t.name for t in MT19_TASKS)} "
            f"(and the test probes {', '.join(t.name for t in PROBE_TASKS)})") from None
