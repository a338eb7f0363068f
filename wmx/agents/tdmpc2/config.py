"""TD-MPC2 hyperparameters (tdmpc2_spec §5, paper-era "PE" defaults).

`TDMPC2Config` is a frozen, hashable dataclass, so it can be a static argument
of `jax.jit`. Fields hold what the user asked for; `None` means "derive it":

- the widths `enc_dim`, `mlp_dim`, `latent_dim`, `num_enc_layers`, `num_q`
  come from the `model_size` table (spec 1.20) unless given explicitly;
- `seed_steps` is max(1000, 5T) (spec 4.3);
- `discount` is the heuristic gamma(T) of spec 2.20.

`cfg.resolved()` returns the same config with every `None` filled in; it is
idempotent. Every function of `wmx.agents.tdmpc2` resolves the config it is
given, so callers may pass either form. `make_config` returns a resolved one.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from wmx.agents.overrides import check_field_names
from wmx.envs.registry import discount_from_length, seed_steps_from_length

# (enc_dim, mlp_dim, latent_dim, num_enc_layers, num_q), spec 1.20 / Table 9.
MODEL_SIZES: dict[int, tuple[int, int, int, int, int]] = {
    1: (256, 384, 128, 2, 2),
    5: (256, 512, 512, 2, 5),
    19: (1024, 1024, 768, 3, 5),
    48: (1792, 1792, 768, 4, 5),
    317: (4096, 4096, 1376, 5, 8),
}

_WIDTHS = ("enc_dim", "mlp_dim", "latent_dim", "num_enc_layers", "num_q")

discount_from_episode_length = discount_from_length
"""gamma(T) of spec 2.20 (`wmx.envs.registry.discount_from_length`, the one definition)."""


@dataclass(frozen=True)
class TDMPC2Config:
    """Every TD-MPC2 hyperparameter, paper-era defaults (tdmpc2_spec §5).

    Required: `obs_dim` (S, padded max in multi-task), `action_dim` (A).
    `episode_length` is T in agent steps (DMC: 500 at action repeat 2).
    Sizes: `model_size` in {1, 5, 19, 48, 317} fills the widths left `None`.
    Derived: `planning_iterations` = iterations + 2 when action_dim >= 20
    (spec 3.1). Multi-task: `num_tasks` > 0 with `task_dim` (96 in the paper)
    > 0; single task keeps both 0.

    Raises ValueError naming the offending field on construction.
    """

    obs_dim: int
    action_dim: int
    episode_length: int = 500
    # architecture
    model_size: int = 5
    enc_dim: int | None = None
    mlp_dim: int | None = None
    latent_dim: int | None = None
    num_enc_layers: int | None = None
    num_q: int | None = None
    simnorm_dim: int = 8
    num_bins: int = 101
    vmax: float = 10.0
    dropout: float = 0.01
    log_std_min: float = -10.0
    log_std_max: float = 2.0
    # losses
    horizon: int = 3
    rho: float = 0.5
    consistency_coef: float = 20.0
    reward_coef: float = 0.1
    value_coef: float = 0.1
    entropy_coef: float = 1e-4
    # optimisation
    lr: float = 3e-4
    enc_lr_scale: float = 0.3
    grad_clip_norm: float = 20.0
    pi_eps: float = 1e-5
    wm_eps: float = 1e-8
    tau: float = 0.01
    batch_size: int = 256
    buffer_size: int = 1_000_000
    seed_steps: int | None = None
    # discount (spec 2.20)
    discount: float | None = None
    discount_denom: float = 5.0
    discount_min: float = 0.95
    discount_max: float = 0.995
    # planning (spec 3.1)
    iterations: int = 6
    num_samples: int = 512
    num_elites: int = 64
    num_pi_trajs: int = 24
    min_std: float = 0.05
    max_std: float = 2.0
    temperature: float = 0.5
    # multi-task (spec 1.21-1.23)
    num_tasks: int = 0
    task_dim: int = 0

    def __post_init__(self) -> None:
        def need(cond: bool, field: str, msg: str) -> None:
            if not cond:
                raise ValueError(f"TDMPC2Config.{field}={getattr(self, field)!r}: {msg}")

        need(self.obs_dim >= 1, "obs_dim", "must be >= 1")
        need(self.action_dim >= 1, "action_dim", "must be >= 1")
        need(self.episode_length >= 1, "episode_length", "must be >= 1 agent steps")
        need(self.model_size in MODEL_SIZES, "model_size",
             f"must be one of {sorted(MODEL_SIZES)}")
        for f in _WIDTHS:
            v = getattr(self, f)
            need(v is None or v >= 1, f, "must be None (from model_size) or >= 1")
        if self.num_q is not None:
            need(self.num_q >= 2, "num_q", "the ensemble needs at least 2 members "
                 "(a random pair is drawn from it)")
        need(self.simnorm_dim >= 1, "simnorm_dim", "must be >= 1")
        latent = self.latent_dim if self.latent_dim is not None else MODEL_SIZES[self.model_size][2]
        if latent % self.simnorm_dim:
            raise ValueError(f"TDMPC2Config.latent_dim={latent} must be divisible by "
                             f"simnorm_dim={self.simnorm_dim}")
        need(self.num_bins >= 3 and self.num_bins % 2 == 1, "num_bins",
             "must be odd and >= 3 (mirrored symmetric bins, deviation T24)")
        need(self.vmax > 0, "vmax", "must be > 0 (bins span [-vmax, vmax] in symlog space)")
        need(0.0 <= self.dropout < 1.0, "dropout", "must be in [0, 1)")
        need(self.log_std_min < self.log_std_max, "log_std_min", "must be < log_std_max")
        need(self.horizon >= 1, "horizon", "must be >= 1")
        need(0.0 < self.rho <= 1.0, "rho", "must be in (0, 1]")
        for f in ("consistency_coef", "reward_coef", "value_coef", "entropy_coef"):
            need(getattr(self, f) >= 0, f, "must be >= 0")
        for f in ("lr", "enc_lr_scale", "grad_clip_norm", "pi_eps", "wm_eps"):
            need(getattr(self, f) > 0, f, "must be > 0")
        need(0.0 < self.tau <= 1.0, "tau", "must be in (0, 1]")
        need(self.batch_size >= 1, "batch_size", "must be >= 1")
        need(self.buffer_size >= 1, "buffer_size", "must be >= 1")
        need(self.seed_steps is None or self.seed_steps >= 0, "seed_steps",
             "must be None (max(1000, 5T)) or >= 0")
        need(self.discount is None or 0.0 < self.discount <= 1.0, "discount",
             "must be None (heuristic of spec 2.20) or in (0, 1]")
        need(self.discount_denom > 0, "discount_denom", "must be > 0")
        need(0.0 < self.discount_min <= self.discount_max <= 1.0, "discount_min",
             "need 0 < discount_min <= discount_max <= 1")
        need(self.iterations >= 1, "iterations", "must be >= 1")
        need(self.num_samples >= 1, "num_samples", "must be >= 1")
        need(0 <= self.num_pi_trajs <= self.num_samples, "num_pi_trajs",
             "must be in [0, num_samples]")
        need(1 <= self.num_elites <= self.num_samples, "num_elites",
             "must be in [1, num_samples]")
        need(0.0 < self.min_std <= self.max_std, "min_std", "need 0 < min_std <= max_std")
        need(self.temperature > 0, "temperature", "must be > 0")
        need(self.num_tasks >= 0, "num_tasks", "must be >= 0 (0 = single task)")
        need(self.task_dim >= 0, "task_dim", "must be >= 0")
        if self.num_tasks > 0:
            need(self.task_dim > 0, "task_dim", "multi-task (num_tasks > 0) needs task_dim > 0 "
                 "(the paper uses 96)")

    # ---- derived values -------------------------------------------------
    def resolved(self) -> "TDMPC2Config":
        """This config with every `None` filled in (idempotent, cheap)."""
        if self.is_resolved:
            return self
        table = dict(zip(_WIDTHS, MODEL_SIZES[self.model_size]))
        fill: dict[str, Any] = {f: table[f] for f in _WIDTHS if getattr(self, f) is None}
        if self.seed_steps is None:
            fill["seed_steps"] = seed_steps_from_length(self.episode_length)
        if self.discount is None:
            fill["discount"] = discount_from_episode_length(
                self.episode_length, self.discount_denom, self.discount_min, self.discount_max)
        return dataclasses.replace(self, **fill)

    @property
    def is_resolved(self) -> bool:
        """True when no field is `None`."""
        return all(getattr(self, f) is not None
                   for f in _WIDTHS + ("seed_steps", "discount"))

    @property
    def planning_iterations(self) -> int:
        """MPPI iterations: `iterations` + 2 when action_dim >= 20 (spec 3.1)."""
        return self.iterations + (2 if self.action_dim >= 20 else 0)

    @property
    def enc_lr(self) -> float:
        """Encoder learning rate lr * enc_lr_scale (9e-5 at PE, spec 2.9)."""
        return self.lr * self.enc_lr_scale

    @property
    def multitask(self) -> bool:
        """True when `num_tasks` > 0."""
        return self.num_tasks > 0


PRESETS: dict[str, dict[str, Any]] = {
    # Paper defaults: model_size 5 (enc 256, mlp 512, latent 512, 2 encoder layers, 5 Qs).
    "paper": {"model_size": 5},
    # Laptop-CPU preset: NOT the paper's sizes (smaller networks and planner);
    # for quick runs on a few CPU cores only.
    "cpu": {"enc_dim": 128, "mlp_dim": 256, "latent_dim": 64, "num_enc_layers": 2,
            "num_q": 2, "num_samples": 256, "num_pi_trajs": 12, "num_elites": 32,
            "iterations": 6, "batch_size": 256},
    # Tests only.
    "tiny": {"enc_dim": 16, "mlp_dim": 32, "latent_dim": 16, "num_q": 2,
             "num_samples": 32, "num_pi_trajs": 4, "num_elites": 8, "iterations": 2,
             "batch_size": 16},
}
"""Named override sets for `make_config`. "paper" = the paper-era defaults.
"cpu" is a laptop-CPU preset that departs from the paper sizes (enc 128,
mlp 256, latent 64, 2 Qs, 256 samples / 12 pi trajectories / 32 elites).
"tiny" is for tests only."""


def make_config(preset: str = "paper", **overrides: Any) -> TDMPC2Config:
    """A resolved `TDMPC2Config` from a named preset plus keyword overrides.

    `obs_dim` and `action_dim` must be given as overrides. Raises ValueError
    for an unknown preset (listing the known ones) or an unknown field.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown TD-MPC2 preset {preset!r}; known: {sorted(PRESETS)}")
    check_field_names(TDMPC2Config, overrides, "TD-MPC2")
    kwargs = {**PRESETS[preset], **overrides}
    if "obs_dim" not in kwargs or "action_dim" not in kwargs:
        raise ValueError("make_config needs obs_dim=... and action_dim=... overrides")
    return TDMPC2Config(**kwargs).resolved()
