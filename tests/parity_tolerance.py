"""Backend-aware tolerances of the parity tests (docs/deviations.md, "Backends", W-D9 / T34).

The parity tests compare wmx with recordings of the official code made on a CPU. On a
CPU (and a GPU) every function here returns the test's own tolerance unchanged: the
same floats the assert calls had before this module existed
(`tests/test_backend_tolerances.py` checks the identity). On a TPU the float32
elementwise transcendentals themselves are less accurate
(`benchmarks/results/backend_arithmetic_tpu.json`, TPU v5e, JAX 0.10.2): log / log1p /
softplus up to 3.7e-4 relative (~4,000 ulp), tanh 8.1e-5, expm1 1.2e-4, exp and
sigmoid 5.5e-6, while division, reciprocal and the square roots stay within 2.5 ulp.
There a family's tolerance is widened by one rule:

    rtol_tpu = max(rtol, c * eps_op)
    atol_tpu = max(atol, c * eps_op * S)

eps_op is the measured worst relative error of the operation the family's values pass
through (`TPU_REL`), c the family's propagation factor and S its scale: "tensor" =
max|reference| of the compared array (errors of log-type terms are absolute at the
scale of the tensor's values, and cancel into small elements), "unit" = 1, "none" = the
atol is not widened. Each factor c is at least twice the larger of two worst cases,
both written next to the family in units of eps_op * S: the difference seen on the chip
(the run that failed at the CPU tolerances), and the difference of a CPU run of the same
test whose every float32 exp / log / log1p / expm1 / tanh / logistic / pow carries an
error of the chip's measured size (`benchmarks/tpu_emulated_parity.py`; three sign
patterns). The emulation reaches asserts the chip's run never got to; the chip covers
what the emulation's error model misses (tanh: see tdmpc2.planner_actions).

Discrete outcomes that the chip's rounding can legitimately flip have their own TPU
rules here (`assert_close_allowing_flips`, `ties`); everything that does not depend on
the flipped outcome is still compared.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import jax
import numpy as np

# Worst relative error of one float32 operation on a TPU v5e against float64, rounded
# up (benchmarks/results/backend_arithmetic_tpu.json: max_rel; log over (0, 1)).
TPU_REL = {
    "log": 3.71e-4,       # log_unit_interval 3.704e-4 at x = 0.75 (log over (0, inf): 3.60e-4)
    "log1p": 2.65e-4,     # log1p / softplus / symlog 2.64e-4
    "tanh": 8.12e-5,      # 1,359 ulp
    "expm1": 1.19e-4,
    "exp": 5.55e-6,       # 70 ulp
    "sigmoid": 5.52e-6,   # 89 ulp
}
# Worst ulp error of the operations a renorm uses (same file): sqrt 2.51, reciprocal 1.46.
TPU_ULP = {"sqrt": 2.51, "reciprocal": 1.47}


def backend() -> str:
    """JAX's default backend ("cpu", "gpu", "tpu")."""
    return jax.default_backend()


def on_tpu() -> bool:
    """True where the TPU rules apply (a GPU is treated like the CPU)."""
    return backend() == "tpu"


@dataclass(frozen=True)
class Family:
    """One mechanism by which the chip's arithmetic reaches a compared quantity."""
    op: str          # key of TPU_REL: the operation whose error sets eps_op
    c: float         # propagation factor
    scale: str       # "tensor" | "unit" | "none" (see the module docstring)
    what: str        # the quantities and the mechanism
    seen: str        # worst on the chip / in the emulated run, in units of eps_op * S


FAMILIES: dict[str, Family] = {
    # ---- DreamerV3 -------------------------------------------------------------------
    "dv3.components": Family(
        "log", 3, "tensor",
        "components.npz, one or two transcendentals deep: GRU gates (sigmoid, tanh), "
        "unimix logits log(mix), KL / entropy sums of p log p, their gradients, two-hot "
        "loss and gradient (log_softmax), the bounded-normal actor (tanh, log)",
        "chip 0.08 (RSSM prior logits 8.7e-5 abs at max|ref| 3.1); emulated 1.01 (KL gradient)"),
    "dv3.symlog": Family(
        "log", 2, "none",
        "symlog = sign log1p|x| and symexp(symlog(x)): relative errors (log1p, then expm1 "
        "at |y| up to 20.7)",
        "chip 0.53 (symlog 1.96e-4 rel); emulated 0.81 (symexp 3.0e-4 rel)"),
    "dv3.twohot_decode": Family(
        "exp", 3, "none",
        "two-hot mean / mode relative to sum|p b|: the softmax's exp",
        "chip 0.63 (wmx bins, 3.5e-6 of the mass); emulated 1.14"),
    "dv3.laprop": Family(
        "log", 3, "tensor",
        "LaProp bias corrections 1 - beta^t: XLA lowers pow to exp(t log beta) on the "
        "chip, so 1 - beta^t carries log's relative error; the update g / sqrt(nu_hat) "
        "half of it, the momentum correction all of it (<= 1.5 eps per step)",
        "chip 0.43 (1.6e-4 rel, step 1); emulated 0.68"),
    "dv3.forward": Family(
        "log", 4, "tensor",
        "training-call forward values: world-model loss terms, scaled losses and total, "
        "metrics, encoder output, posterior / prior / imagined logits and latents",
        "chip 0.50 (prior_ent/std 6.9e-5 at max|ref| 0.37); emulated 0.81 (dyn loss)"),
    "dv3.backward": Family(
        "log", 8, "tensor",
        "gradients of the training call, the gradient / update norm metrics and the "
        "LaProp moments built from them (nu = b2 nu + (1 - b2) g^2, mu from g / sqrt(nu_hat))",
        "chip 0.09 (init grad 1.1e-4 at max|ref| 3.3); emulated 3.6 (hot mu)"),
    # ---- TD-MPC2 ---------------------------------------------------------------------
    "tdmpc2.update": Family(
        "log", 4, "tensor",
        "one update's losses, pi_loss, norms and intermediates (latents, Q logits, TD "
        "targets, policy mean / action / log_std / log-prob): two-hot log_softmax, the "
        "log_std bound -10 + 6 (tanh + 1), the squash correction log(1 - a^2 + 1e-6)",
        "chip 0.26 (pi_loss 1.03e-4 at 1.08); emulated 0.62"),
    "tdmpc2.grad": Family(
        "log", 16, "tensor",
        "gradients and Adam moments per tensor (the README's frac x max|ref| rule)",
        "chip: not reached (the calls failed earlier); emulated 7.1 (exp_avg_sq)"),
    "tdmpc2.update_chained": Family(
        "log", 12, "tensor",
        "the same quantities of calls chained through wmx's own state, which carries the "
        "earlier calls' rounding into Adam's moments (a call after one whose Adam step "
        "took a sign the other way is skipped: T34)",
        "chip 0.08 (mt value_loss 3.1e-5 rel); emulated 3.8 (pi_grad_norm)"),
    "tdmpc2.grad_chained": Family(
        "log", 96, "tensor",
        "gradients and Adam moments of chained calls",
        "chip: not reached; emulated 39 (pi grad, q2_warm call 2)"),
    "tdmpc2.log_prob_formula": Family(
        "log", 1, "tensor",
        "pe_log_prob on recorded inputs: n sum(-eps^2/2 - log_std) - sum log(relu(1 - a^2) "
        "+ 1e-6), terms up to max|log pi| = 75",
        "chip 0.004 (9.5e-5 abs at max|ref| 65); emulated 0.013"),
    "tdmpc2.planner_values": Family(
        "log", 4, "tensor",
        "planner values, value_raw, reward sums, elite values: two-hot decode (softmax, "
        "expm1) of rollouts through the policy's tanh log_std",
        "chip 0.33 (value_raw 9.7e-3 at max|ref| 80); emulated 0.23"),
    "tdmpc2.planner_actions": Family(
        "tanh", 8, "unit",
        "policy trajectories, candidates, scores, MPPI mean / std, action: tanh in the "
        "log_std bound (x6) and in the squash",
        "chip 3.6 (pi_actions 2.9e-4); emulated 1.7"),
    "tdmpc2.latent": Family(
        "log", 1, "none",
        "encoder latents z (SimNorm softmax, mish through exp): rtol only",
        "chip: within the CPU tolerance; emulated 0"),
}


def eps(family: str) -> float:
    """c * eps_op of `family` on a TPU (its relative tolerance floor)."""
    f = FAMILIES[family]
    return f.c * TPU_REL[f.op]


def tol(family: str, ref=None, *, rtol: float = 0, atol: float = 0) -> dict:
    """{"rtol", "atol"} for one `np.testing.assert_allclose`: exactly the given values on
    the CPU and a GPU; on a TPU widened by `family`'s rule (module docstring). `ref` is
    the reference array (needed by "tensor"-scaled families)."""
    if not on_tpu():
        return {"rtol": rtol, "atol": atol}
    f = FAMILIES[family]
    e = eps(family)
    if f.scale == "none":
        return {"rtol": max(rtol, e), "atol": atol}
    s = 1.0 if f.scale == "unit" else _max_abs(ref)
    return {"rtol": max(rtol, e), "atol": max(atol, e * s)}


def bound(family: str, cpu_value: float, scale: float = 1.0) -> float:
    """A scalar error bound a test asserts against (a relative error, a fraction of
    max|ref|): `cpu_value` on the CPU; max(cpu_value, c * eps_op * scale) on a TPU."""
    if not on_tpu():
        return cpu_value
    return max(cpu_value, eps(family) * scale)


def tpu_or(cpu_value, tpu_value):
    """`cpu_value` on the CPU and a GPU, `tpu_value` on a TPU (a count or bound whose TPU
    value the caller derives, next to the call, from TPU_REL / TPU_ULP)."""
    return tpu_value if on_tpu() else cpu_value


def renorm_ulp_bound(cpu_ulps: int) -> int:
    """Max float32 ulps between wmx's embedding renorm and the recorded one: `cpu_ulps`
    on the CPU; on a TPU plus the chip's sqrt and reciprocal errors, row * 1/(sqrt(sum
    x^2) + 1e-7): ceil(2.51 + 1.47) = 4 more."""
    if not on_tpu():
        return cpu_ulps
    return cpu_ulps + math.ceil(TPU_ULP["sqrt"] + TPU_ULP["reciprocal"])


def _max_abs(ref) -> float:
    if ref is None:
        raise ValueError("a tensor-scaled tolerance needs the reference array")
    a = np.asarray(ref, np.float64)
    return float(np.max(np.abs(a))) if a.size else 0.0


# ---- discrete outcomes --------------------------------------------------------------
def assert_close_allowing_flips(got, want, tolerance: dict, flippable, flip_bound: float,
                                err_msg: str = "") -> int:
    """assert_allclose(got, want, **tolerance) except at `flippable` elements, which may
    differ by up to `flip_bound` (an optimizer step whose sign the chip's rounding of a
    near-zero gradient decides). Returns how many flippable elements exceeded the
    tolerance. Used on a TPU only; the CPU keeps its plain assert."""
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    flippable = np.broadcast_to(np.asarray(flippable, bool), want.shape)
    keep = ~flippable
    np.testing.assert_allclose(got[keep], want[keep], err_msg=err_msg, **tolerance)
    diff = np.abs(got - want)
    over = flippable & (diff > tolerance["atol"] + tolerance["rtol"] * np.abs(want))
    if over.any():
        worst = float(diff[over].max())
        assert worst <= flip_bound, (
            f"{err_msg}: {int(over.sum())} near-zero-gradient elements differ by up to "
            f"{worst:.3g} > {flip_bound:.3g} (the most the flipped steps can move them)")
    return int(over.sum())


def near_zero(ref_grad, tolerance: dict):
    """Elements of a reference gradient whose sign the tolerance cannot fix:
    |g| <= atol + rtol |g| (so the chip's g may have the other sign)."""
    g = np.abs(np.asarray(ref_grad, np.float64))
    return g <= tolerance["atol"] + tolerance["rtol"] * g


def ties(ref_values, idx, kth_value, value_tol: dict) -> np.ndarray:
    """The entries of `idx` whose reference value ties `kth_value` within twice the
    value tolerance: a top-k boundary that the chip's rounding may order either way."""
    v = np.asarray(ref_values, np.float64)[np.asarray(idx, int)]
    t = 2 * (value_tol["atol"] + value_tol["rtol"] * abs(float(kth_value)))
    return np.abs(v - float(kth_value)) <= t
