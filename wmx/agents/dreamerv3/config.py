"""DreamerV3 hyperparameters (dreamerv3_spec "Hyperparameter defaults";
reference_design §6.1), at the paper-era 2411f7d (+ 29eb964) defaults.

`DreamerV3Config` is a frozen, hashable dataclass, so it can be a static
argument of `jax.jit`. Fields hold what the user asked for; `None` means
"derive it": the widths `units`, `hidden`, `deter`, `classes` come from the
`model_size` table (spec 2.1: d = units = hidden, deter = 8d, classes = d/16)
unless given explicitly. `cfg.resolved()` fills them in (idempotent); every
function of `wmx.agents.dreamerv3` resolves the config it is given.
`make_config(preset, **overrides)` returns a resolved config.

Names that differ from the reference's config keys: `return_horizon` is the
reference's `horizon` (333; gamma = 1 - 1/return_horizon), `imag_horizon` its
`imag_length` (15; an imagined trajectory has imag_horizon + 1 states),
`batch_length` counts the trained steps T (the reference's batch_length is
T + replay_context), `n_envs` its `run.envs`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from wmx.agents.overrides import check_field_names

# model_size -> (d, deter, hidden, classes); spec 2.1 (d = units = hidden).
MODEL_SIZES: dict[str, tuple[int, int, int, int]] = {
    "1m": (64, 512, 64, 4),        # code only (HEAD's dmc_proprio)
    "12m": (256, 2048, 256, 16),   # paper size for proprio / visual control
    "25m": (384, 3072, 384, 24),
    "50m": (512, 4096, 512, 32),
    "100m": (768, 6144, 768, 48),
    "200m": (1024, 8192, 1024, 64),  # the reference's `defaults`
    "400m": (1536, 12288, 1536, 96),
}

_WIDTHS = ("units", "deter", "hidden", "classes")

COMPUTE_DTYPES = ("float32", "bfloat16", "auto")
"""Values of `DreamerV3Config.compute_dtype` ("auto": by the backend, `auto_compute_dtype`)."""

SCAN_WEIGHT_GRADS = ("inside", "outside", "auto")
"""Values of `DreamerV3Config.scan_weight_grads` ("auto": by the backend,
`auto_scan_weight_grads`)."""

MAX_OFFLINE_ENSEMBLE = 64
"""The most extra reward heads `offline_ensemble` takes (W-D11: MOPO and LOMPO use 5-7;
each head is a reward head's size, so a larger count is a typo, not a setting)."""


def auto_compute_dtype(backend: str | None = None) -> str:
    """What compute_dtype "auto" resolves to: "bfloat16" on an accelerator (the
    reference's `jax.compute_dtype`), "float32" on the CPU (the parity fixtures'
    setting; XLA's bfloat16 matmuls were no faster than float32 ones on the CPUs
    measured, docs/performance.md; deviation D4).

    Args:
        backend: a jax backend name ("cpu", "gpu", "cuda", "rocm", "tpu"); None reads
            `jax.default_backend()`.
    Returns:
        "float32" or "bfloat16".
    Source: dreamerv3_spec 1.12; deviation D4.
    """
    backend = jax.default_backend() if backend is None else backend
    return "float32" if backend == "cpu" else "bfloat16"


def auto_scan_weight_grads(backend: str | None = None) -> str:
    """What scan_weight_grads "auto" resolves to: "outside" on an accelerator (the
    kernel gradients of the observe scan summed after the loop), "inside" on the CPU
    (the plain scan; "outside" was slower there, docs/performance.md).

    Args:
        backend: a jax backend name; None reads `jax.default_backend()`.
    Returns:
        "inside" or "outside".
    Source: docs/performance.md "Where the time goes"; deviation W-D12.
    """
    backend = jax.default_backend() if backend is None else backend
    return "inside" if backend == "cpu" else "outside"


AUTO_FIELDS = {"compute_dtype": auto_compute_dtype, "scan_weight_grads": auto_scan_weight_grads}
"""The fields whose "auto" the backend resolves: field -> resolver(backend=None) (`resolved`,
`backend_choices`)."""


@dataclass(frozen=True)
class DreamerV3Config:
    """Every DreamerV3 hyperparameter, 2411f7d defaults (spec Hyperparameter table).

    Required: `obs_dim` (flat vector observation), `action_dim` (continuous
    action dims, or the number of classes when `discrete_actions`).

    Architecture: `model_size` in MODEL_SIZES fills the widths left `None`
    (`units` = MLP width of enc/dec/heads/actor/critic, `hidden` = RSSM MLP
    width, `deter` = 8d GRU state, `classes` = d/16 per latent); `stoch` 32
    latents; `blocks` 8 GRU blocks (must divide deter); layer counts per
    module; `bins` 255 two-hot bins; output outscales of 2411f7d (decoder
    0.1, reward 0, continue 1, actor 0.01, critic 0, RSSM logits 1);
    `rms_eps` 1e-4; `mse_tol` 1e-8 (2411f7d symlog MSE tolerance).

    Losses: scales {rec 1, rew 1, con 1, dyn 1, rep 0.1, policy 1, value 1,
    repval 0.3}, `free_nats` 1, latent `unimix` 0.01, `actor_unimix` 0.01
    (discrete actor only), `contdisc` True (continue target 0.997(1 - term),
    imagination discount 1).

    Actor-critic: `imag_horizon` H = 15, `return_horizon` 333 (gamma property),
    `lam` / `repval_lam` 0.95, `actent` 3e-4, `slowreg` 1, slow critic
    `slow_rate` 0.02 every `slow_every` update with a hard copy after the first
    optimizer step (2411f7d), retnorm rate 0.01 / limit 1 / percentiles 5, 95,
    `minstd` 0.1 / `maxstd` 1.0.

    Optimizer (LaProp + AGC): lr 4e-5, eps 1e-20, agc 0.3, agc_pmin 1e-3,
    beta1 0.9, beta2 0.999, warmup 1000, weight decay 0.

    Replay / schedule: batch_size 16, batch_length 64 (+ replay_context 1),
    replay_capacity 5e6 items, train_ratio 512, n_envs 16, action_repeat 2.

    Multi-task (a wmx extension, deviation W-D8; `multitask`): `num_tasks` > 0
    makes a model over the zero-padded widths obs_dim / action_dim of a
    TaskSet, with a learned task embedding of `task_dim` (96, as TD-MPC2's,
    T14) given to the encoder, the dynamics, the actor and the critic;
    `task_discount` picks the per-task discount table: "taskset" (each
    task's stored TaskSet discount, the default, as the DreamerV3-offline
    issue asks) or "horizon" (every task 1 - 1/return_horizon, the
    reference's fixed gamma). 0 tasks (the default) is the reference's
    single-task agent, unchanged.

    Offline terms against model exploitation (wmx extensions for training from
    a dataset, `offline`; off by default, and off they leave the step the
    reference's): `offline_bc_weight` α (W-D10) adds α · mean(−log π(a_data | s))
    over the imagination starts, a_data the dataset's action at the start's row;
    `offline_ensemble` K (0, or 2 to `MAX_OFFLINE_ENSEMBLE`; W-D11) trains K extra reward heads on
    the stop-gradiented posterior features, and `offline_penalty_weight` λ
    (needs K >= 2) subtracts λ · std over their predicted rewards from every
    imagined reward that enters the λ-return.

    Numerics (`compute_dtype`, spec 1.12): "bfloat16" computes as 2411f7d's
    `jax.compute_dtype: bfloat16` (matmuls, activations and the RSSM state in
    bfloat16; parameters, gradients, optimizer and normaliser state,
    distributions, losses and returns in float32; `dtype`); "float32" computes
    everything in float32 (the parity tests, whose recordings are float32);
    "auto" (the default) is resolved by `resolved()` to "bfloat16" on an
    accelerator and "float32" on the CPU (`auto_compute_dtype`; deviation D4).
    The "paper" preset sets "bfloat16". Parameters are float32 either way.

    Observe-scan gradients (`scan_weight_grads`, a performance choice): "inside"
    differentiates the RSSM observe scan as JAX does, adding each step's kernel
    gradient x_tᵀ g_t (a contraction over one step's B rows) to its sum inside the
    backward loop, as the reference; "outside" (`scan_grads`) takes each RSSM
    kernel's gradient as one contraction over all T·B rows after the loop,
    accumulated in float32. In float32 compute the two differ by float summation
    order only (the parity tests pass with either); in bfloat16 compute "inside"
    rounds each step's product to bfloat16 before the float32 sum and "outside"
    does not (deviation W-D12). "auto" (the default) is resolved by `resolved()` to
    "outside" on an accelerator and "inside" on the CPU, where "outside" was slower
    (`auto_scan_weight_grads`; docs/performance.md "Where the time goes").

    Raises ValueError naming the offending field on construction.
    """

    obs_dim: int
    action_dim: int
    discrete_actions: bool = False
    # architecture (spec 2.1, 1.5)
    model_size: str = "12m"
    units: int | None = None
    deter: int | None = None
    hidden: int | None = None
    classes: int | None = None
    stoch: int = 32
    blocks: int = 8
    enc_layers: int = 3
    dec_layers: int = 3
    rew_layers: int = 1
    con_layers: int = 1
    actor_layers: int = 3
    critic_layers: int = 3
    img_layers: int = 2
    obs_layers: int = 1
    dyn_layers: int = 1
    bins: int = 255
    rms_eps: float = 1e-4
    rssm_outscale: float = 1.0
    dec_outscale: float = 0.1
    rew_outscale: float = 0.0
    con_outscale: float = 1.0
    actor_outscale: float = 0.01
    critic_outscale: float = 0.0
    mse_tol: float = 1e-8
    # world-model losses (spec 2.11-2.14, 4.1)
    unimix: float = 0.01
    actor_unimix: float = 0.01
    free_nats: float = 1.0
    contdisc: bool = True
    rec_scale: float = 1.0
    rew_scale: float = 1.0
    con_scale: float = 1.0
    dyn_scale: float = 1.0
    rep_scale: float = 0.1
    # actor-critic (spec 3.x)
    policy_scale: float = 1.0
    value_scale: float = 1.0
    repval_scale: float = 0.3
    imag_horizon: int = 15
    return_horizon: float = 333.0
    lam: float = 0.95
    repval_lam: float = 0.95
    actent: float = 3e-4
    slowreg: float = 1.0
    slow_rate: float = 0.02
    slow_every: int = 1
    retnorm_rate: float = 0.01
    retnorm_limit: float = 1.0
    retnorm_lo: float = 5.0
    retnorm_hi: float = 95.0
    minstd: float = 0.1
    maxstd: float = 1.0
    # optimizer (spec 4.3-4.8)
    lr: float = 4e-5
    eps: float = 1e-20
    agc: float = 0.3
    agc_pmin: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    warmup: int = 1000
    weight_decay: float = 0.0
    # replay and schedule (spec 5.x, 7.5)
    batch_size: int = 16
    batch_length: int = 64
    replay_context: int = 1
    replay_capacity: int = 5_000_000
    online_queue: bool = True
    train_ratio: float = 512.0
    n_envs: int = 16
    action_repeat: int = 2
    # multi-task (wmx extension, W-D8)
    num_tasks: int = 0
    task_dim: int = 96
    task_discount: str = "taskset"
    # offline terms (wmx extensions, W-D10, W-D11; 0 = off)
    offline_bc_weight: float = 0.0
    offline_ensemble: int = 0
    offline_penalty_weight: float = 0.0
    # numerics (spec 1.12, D4)
    compute_dtype: str = "auto"
    scan_weight_grads: str = "auto"

    def __post_init__(self) -> None:
        def need(cond: bool, field: str, msg: str) -> None:
            if not cond:
                raise ValueError(f"DreamerV3Config.{field}={getattr(self, field)!r}: {msg}")

        need(self.obs_dim >= 1, "obs_dim", "must be >= 1")
        need(self.action_dim >= 1, "action_dim", "must be >= 1")
        if self.discrete_actions:
            need(self.action_dim >= 2, "action_dim", "a discrete action needs >= 2 classes")
        need(self.model_size in MODEL_SIZES, "model_size",
             f"must be one of {list(MODEL_SIZES)}")
        for f in _WIDTHS:
            v = getattr(self, f)
            need(v is None or v >= 1, f, "must be None (from model_size) or >= 1")
        for f in ("stoch", "blocks", "enc_layers", "dec_layers", "actor_layers",
                  "critic_layers", "obs_layers", "img_layers", "dyn_layers",
                  "rew_layers", "con_layers"):
            need(getattr(self, f) >= 1, f, "must be >= 1")
        deter = self.deter if self.deter is not None else MODEL_SIZES[self.model_size][1]
        need(deter % self.blocks == 0, "deter" if self.deter is not None else "blocks",
             f"deter={deter} must be divisible by blocks={self.blocks} (block GRU, spec 2.4)")
        need(self.bins >= 3 and self.bins % 2 == 1, "bins",
             "must be odd and >= 3 (mirrored symexp bins, deviation D22)")
        need(self.rms_eps > 0, "rms_eps", "must be > 0")
        for f in ("rssm_outscale", "dec_outscale", "rew_outscale", "con_outscale",
                  "actor_outscale", "critic_outscale", "mse_tol", "free_nats",
                  "rec_scale", "rew_scale", "con_scale", "dyn_scale", "rep_scale",
                  "policy_scale", "value_scale", "repval_scale", "actent", "slowreg",
                  "weight_decay"):
            need(getattr(self, f) >= 0, f, "must be >= 0")
        for f in ("unimix", "actor_unimix"):
            need(0.0 <= getattr(self, f) < 1.0, f, "must be in [0, 1)")
        need(self.imag_horizon >= 1, "imag_horizon", "must be >= 1")
        need(self.return_horizon >= 1.0, "return_horizon",
             "must be >= 1 (gamma = 1 - 1/return_horizon)")
        for f in ("lam", "repval_lam"):
            need(0.0 <= getattr(self, f) <= 1.0, f, "must be in [0, 1]")
        need(0.0 < self.slow_rate <= 1.0, "slow_rate", "must be in (0, 1]")
        need(self.slow_every >= 1, "slow_every", "must be >= 1")
        need(0.0 < self.retnorm_rate <= 1.0, "retnorm_rate", "must be in (0, 1]")
        need(self.retnorm_limit > 0, "retnorm_limit", "must be > 0")
        need(0.0 <= self.retnorm_lo < self.retnorm_hi <= 100.0, "retnorm_lo",
             "need 0 <= retnorm_lo < retnorm_hi <= 100")
        need(0.0 < self.minstd <= self.maxstd, "minstd", "need 0 < minstd <= maxstd")
        for f in ("lr", "eps", "agc", "agc_pmin"):
            need(getattr(self, f) > 0, f, "must be > 0")
        for f in ("beta1", "beta2"):
            need(0.0 <= getattr(self, f) < 1.0, f, "must be in [0, 1)")
        need(self.warmup >= 0, "warmup", "must be >= 0")
        need(self.batch_size >= 1, "batch_size", "must be >= 1")
        need(self.batch_length >= 2, "batch_length",
             "must be >= 2 (the replay critic needs two trained steps)")
        need(self.replay_context in (0, 1), "replay_context",
             "must be 0 (zero-state start) or 1 (the reference's context step)")
        need(self.replay_capacity >= 1, "replay_capacity", "must be >= 1")
        need(self.train_ratio > 0, "train_ratio", "must be > 0")
        need(self.n_envs >= 1, "n_envs", "must be >= 1")
        need(self.action_repeat >= 1, "action_repeat", "must be >= 1")
        need(self.num_tasks >= 0, "num_tasks", "must be >= 0 (0: single task)")
        need(self.task_dim >= 1, "task_dim", "must be >= 1")
        need(self.task_discount in ("horizon", "taskset"), "task_discount",
             "must be 'horizon' (1 - 1/return_horizon for every task) or 'taskset'")
        need(self.offline_bc_weight >= 0, "offline_bc_weight",
             "must be >= 0 (0: off; e.g. --set offline_bc_weight=0.3)")
        need(self.offline_ensemble == 0 or 2 <= self.offline_ensemble <= MAX_OFFLINE_ENSEMBLE,
             "offline_ensemble",
             f"must be 0 (off) or 2 to {MAX_OFFLINE_ENSEMBLE} reward heads (a disagreement "
             "needs two; e.g. --set offline_ensemble=5)")
        need(self.offline_penalty_weight >= 0, "offline_penalty_weight",
             "must be >= 0 (0: off; e.g. --set offline_penalty_weight=1)")
        if self.offline_penalty_weight > 0:
            need(self.offline_ensemble >= 2, "offline_ensemble",
                 f"offline_penalty_weight={self.offline_penalty_weight!r} needs the "
                 "ensemble's disagreement: set offline_ensemble >= 2 (e.g. 5)")
        need(self.compute_dtype in COMPUTE_DTYPES, "compute_dtype",
             f"must be one of {', '.join(COMPUTE_DTYPES)} (e.g. --set compute_dtype=float32)")
        need(self.scan_weight_grads in SCAN_WEIGHT_GRADS, "scan_weight_grads",
             f"must be one of {', '.join(SCAN_WEIGHT_GRADS)} "
             "(e.g. --set scan_weight_grads=outside)")
        if self.num_tasks:
            need(not self.discrete_actions, "discrete_actions",
                 "multi-task DreamerV3 needs continuous actions (padded dims are masked)")

    # ---- derived values -------------------------------------------------
    def resolved(self) -> "DreamerV3Config":
        """This config with every `None` width filled from `model_size`, compute_dtype
        "auto" replaced by `auto_compute_dtype()` and scan_weight_grads "auto" by
        `auto_scan_weight_grads()` (idempotent)."""
        if self.is_resolved:
            return self
        table = dict(zip(_WIDTHS, MODEL_SIZES[self.model_size]))
        fill = {f: table[f] for f in _WIDTHS if getattr(self, f) is None}
        fill.update({f: resolve() for f, resolve in AUTO_FIELDS.items()
                     if getattr(self, f) == "auto"})
        return dataclasses.replace(self, **fill)

    @property
    def is_resolved(self) -> bool:
        """True when no width is `None` and neither compute_dtype nor
        scan_weight_grads is "auto"."""
        return (all(getattr(self, f) is not None for f in _WIDTHS)
                and self.compute_dtype != "auto" and self.scan_weight_grads != "auto")

    @property
    def dtype(self) -> jnp.dtype:
        """The compute dtype of the resolved config: jnp.float32 or jnp.bfloat16
        (spec 1.12; what matmul inputs, activations and the RSSM state use)."""
        return jnp.dtype(self.resolved().compute_dtype)

    @property
    def gamma(self) -> float:
        """Discount 1 - 1/return_horizon (0.996997 at 333; spec 3.6)."""
        return 1.0 - 1.0 / self.return_horizon

    @property
    def cont_target_scale(self) -> float:
        """Continue-head target factor: gamma with contdisc (0.997(1 - term)), else 1 (2.13)."""
        return self.gamma if self.contdisc else 1.0

    @property
    def imag_discount(self) -> float:
        """Explicit discount of the imagination return: 1 with contdisc, else gamma (3.6)."""
        return 1.0 if self.contdisc else self.gamma

    @property
    def multitask(self) -> bool:
        """True for a multi-task model (num_tasks > 0; W-D8)."""
        return self.num_tasks > 0

    @property
    def offline_bc(self) -> bool:
        """True when the behaviour-cloning term is on (offline_bc_weight > 0; W-D10)."""
        return self.offline_bc_weight > 0

    @property
    def offline_penalty(self) -> bool:
        """True when imagined rewards are penalised by the reward ensemble's
        disagreement (offline_penalty_weight > 0; W-D11)."""
        return self.offline_penalty_weight > 0

    @property
    def task_width(self) -> int:
        """Width the task embedding adds to the encoder, dynamics, actor and critic
        inputs: task_dim when multi-task, else 0."""
        return self.task_dim if self.num_tasks else 0

    @property
    def seq_length(self) -> int:
        """Replay window length: batch_length + replay_context (65 at the defaults)."""
        return self.batch_length + self.replay_context

    @property
    def stoch_flat(self) -> int:
        """stoch * classes, the flattened one-hot latent width."""
        return self.stoch * self.resolved().classes

    @property
    def feat_dim(self) -> int:
        """Width of feat = concat(deter, stoch_flat): 10d at the presets (2560 at 12m)."""
        c = self.resolved()
        return c.deter + c.stoch * c.classes

    @property
    def twohot_outputs(self) -> int:
        """Output units of a two-hot head: bins + (bins % 2) = 256 (2411f7d pads an
        odd bin count by one logit and drops it; spec 1.9 version note)."""
        return self.bins + self.bins % 2


PRESETS: dict[str, dict[str, Any]] = {
    # The paper's DMC-proprio protocol (Table 2, 2411f7d dmc_proprio).
    "paper": {"model_size": "12m", "n_envs": 16, "train_ratio": 512.0, "action_repeat": 2,
              "compute_dtype": "bfloat16"},
    # CPU preset: 1m widths (d 64, deter 512, classes 4), the paper's algorithm.
    "cpu": {"model_size": "1m", "n_envs": 16, "train_ratio": 512.0, "action_repeat": 2},
    # Tests only: the sizes of the reference fixtures (fixtures/dreamerv3/README.md).
    "tiny": {"units": 10, "hidden": 14, "deter": 24, "stoch": 4, "classes": 3,
             "batch_size": 9, "batch_length": 6, "imag_horizon": 7, "n_envs": 2},
}
"""Named override sets for `make_config`.

- "paper": the paper's DMC-proprio protocol, 12m / 16 envs / train ratio 512 /
  action repeat 2 (spec 7.5; 2411f7d dmc_proprio), bfloat16 compute (2411f7d's
  `jax.compute_dtype`, spec 1.12) on any backend.
- "cpu": the same algorithm and every non-width hyperparameter of the paper
  (batch 16 x 64, H = 15, train ratio 512, LaProp), at the code-only 1m widths
  (d 64, deter 512, classes 4). A training step is dominated by the 1024
  imagined trajectories x 15 steps through the block GRU and the MLPs, whose
  cost scales with d^2: the 1m model is ~16x cheaper per update than 12m, which
  makes an update affordable on a few CPU cores. Not the paper's size: learning
  curves from it are not comparable with Table 11 (deviation W-D1).
  compute_dtype "auto": bfloat16 on an accelerator, float32 on the CPU (D4).
- "tiny": the reference fixtures' sizes (units 10, hidden 14, deter 24,
  stoch 4, classes 3, B 9, T 6, H 7), compute_dtype "auto"; tests only (the
  parity tests set float32).
"""


def backend_choices(preset: str, overrides: dict[str, Any], backend: str) -> dict[str, str]:
    """{field: its value on ``backend``} of the `AUTO_FIELDS` that the preset and
    ``overrides`` leave "auto": what a run created on that backend fixes (`wmx.runs.pins`).

    Args:
        preset: a name in `PRESETS`.
        overrides: the run's agent overrides (a field given there is not "auto" unless
            given as "auto").
        backend: a jax backend name ("cpu", "tpu", "gpu", ...).
    Returns:
        The "auto" fields with their values on ``backend``; {} when none is left "auto".
    Raises:
        KeyError: an unknown preset.
    """
    defaults = {f.name: f.default for f in dataclasses.fields(DreamerV3Config)}
    return {name: resolve(backend) for name, resolve in AUTO_FIELDS.items()
            if overrides.get(name, PRESETS[preset].get(name, defaults[name])) == "auto"}


def make_config(preset: str = "paper", **overrides: Any) -> DreamerV3Config:
    """A resolved `DreamerV3Config` from a named preset plus keyword overrides.

    `obs_dim` and `action_dim` must be given as overrides. Explicit widths
    override the preset's `model_size`. Raises ValueError for an unknown
    preset (listing the known ones), an unknown field (naming it) or a
    missing obs_dim/action_dim.
    """
    if preset not in PRESETS:
        raise ValueError(f"unknown DreamerV3 preset {preset!r}; known: {sorted(PRESETS)}")
    check_field_names(DreamerV3Config, overrides, "DreamerV3")
    kwargs = {**PRESETS[preset], **overrides}
    if "obs_dim" not in kwargs or "action_dim" not in kwargs:
        raise ValueError("make_config needs obs_dim=... and action_dim=... overrides")
    return DreamerV3Config(**kwargs).resolved()
