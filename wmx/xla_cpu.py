"""Which matmul path XLA's CPU backend compiles the training and evaluation programs with.

jax 0.10's XLA hands dots (with neighbouring element-wise work) to YNNPACK fusions by
default; the compile option ``xla_cpu_experimental_ynn_fusion_type=""`` keeps them as
XLA's own (Eigen) dots. Measured (docs/performance.md, "Dot backend"): the DreamerV3
training step is 4-20% faster with XLA's dots on an AVX-512 CPU and ~10% faster on an
AVX2 one; TD-MPC2's size-1 planning decision (which the online chunk runs) is ~25%
faster on AVX2 and its update as fast or ~3% faster (equal on AVX-512; planning not
measured there). The trainers' chunks and the evaluation rollout take the choice (the
policy computed as in training); the 16-env DreamerV3 policy step looked faster with
YNNPACK at 1m on AVX-512 (one run) and is 27% faster with XLA's dots at 12m on AVX2.
Results change only by float summation order.

The environment variable ``WMX_CPU_DOTS`` overrides the choice: ``auto``
(default: the agent's preference), ``ynnpack`` or ``xla``.

TD-MPC2's programs also keep XLA's reductions native (`NATIVE_ROW_REDUCTIONS`, no
tree-reduction rewrite), with their parameter gradients' column sums written as dots:
its planning decision 6-11% faster, the update as fast or faster (docs/performance.md,
"Native row sums").
"""
from __future__ import annotations

import os

import jax

ENV_VAR = "WMX_CPU_DOTS"
CHOICES = ("auto", "ynnpack", "xla")
XLA_DOTS = {"xla_cpu_experimental_ynn_fusion_type": ""}
"""Compile options that turn YNNPACK fusions off (XLA's own dots)."""
NATIVE_ROW_REDUCTIONS = {"xla_disable_hlo_passes": "tree_reduction_rewriter"}
"""Compile options that keep reductions as XLA's own loops instead of its CPU
tree-reduction rewrite (a reduce-window over blocks of 32, then a reduce): row sums
(LayerNorm statistics, softmax) then fuse with their producers and run faster, column
sums as reductions 5-9x slower, so a program taking it writes its parameter
gradients' column sums as dots (`wmx.nn.affine`). Long full reductions then add
sequentially (a 1.3M-element sum of squares: relative error 4.5e-6 against 2.2e-8).
As a compile option it replaces any ``--xla_disable_hlo_passes`` of ``XLA_FLAGS`` for
these programs. TD-MPC2 takes it."""


def dots_choice(choice: str | None = None) -> str:
    """The dot choice, ``choice`` or else ``WMX_CPU_DOTS`` (default ``auto``), lower-cased.

    The trainers call it before they write anything, so a bad value fails before a run
    directory exists. Raises ValueError (one line, naming the variable and the values)
    unless it is one of `CHOICES`."""
    choice = (os.environ.get(ENV_VAR, "auto") if choice is None else choice).strip().lower()
    if choice not in CHOICES:
        raise ValueError(f"{ENV_VAR}={choice!r} is not one of {', '.join(CHOICES)}; "
                         f"unset it for the automatic choice")
    return choice


def training_options(prefer_xla_dots: bool, *, native_row_reductions: bool = False,
                     choice: str | None = None, backend: str | None = None
                     ) -> dict[str, str]:
    """XLA compile options (``jax.jit(..., compiler_options=...)``) for an agent's
    programs: the trainers' chunks and the evaluation rollout (`Agent.compiler_options`).

    Args:
      prefer_xla_dots: the agent's measured preference (True for both agents).
      native_row_reductions: add `NATIVE_ROW_REDUCTIONS` on the CPU (whatever the dot
        choice): for programs whose column sums are dots (TD-MPC2's).
      choice / backend: the ``WMX_CPU_DOTS`` value and ``jax.default_backend()``; read
        from the environment when None.
    Returns:
      `XLA_DOTS` or {}, with `NATIVE_ROW_REDUCTIONS` when asked (always {} off the
      CPU backend).
    Raises:
      ValueError: ``WMX_CPU_DOTS`` is not one of `CHOICES`.
    """
    choice = dots_choice(choice)
    if (jax.default_backend() if backend is None else backend) != "cpu":
        return {}
    if choice == "auto":
        choice = "xla" if prefer_xla_dots else "ynnpack"
    options = dict(XLA_DOTS) if choice == "xla" else {}
    if native_row_reductions:
        options.update(NATIVE_ROW_REDUCTIONS)
    return options


def options_key(options: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """Compile options in a hashable form, for caches of jitted programs: the options
    follow ``WMX_CPU_DOTS``, which may change within a process."""
    return tuple(sorted(options.items()))
