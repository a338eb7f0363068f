"""Which matmul path XLA's CPU backend compiles the training programs with.

jax 0.10's XLA hands dots (with neighbouring element-wise work) to YNNPACK
fusions by default; the compile option ``xla_cpu_experimental_ynn_fusion_type=""``
keeps them as XLA's own (Eigen) dots. Measured (docs/performance.md, "Dot
backend"): on an AVX-512 CPU the DreamerV3 training step is 4-20% faster with
XLA's dots (same-process A/Bs at 1m and 12m), the TD-MPC2 update unchanged; the
16-row policy step looked faster with YNNPACK, so only programs that run updates
take the choice. Results change only by float summation order.

The environment variable ``WMX_CPU_DOTS`` overrides the choice: ``auto``
(default: the agent's preference on CPUs with AVX-512, YNNPACK elsewhere),
``ynnpack`` or ``xla``.
"""
from __future__ import annotations

import os
from pathlib import Path

import jax

ENV_VAR = "WMX_CPU_DOTS"
CHOICES = ("auto", "ynnpack", "xla")
XLA_DOTS = {"xla_cpu_experimental_ynn_fusion_type": ""}
"""Compile options that turn YNNPACK fusions off (XLA's own dots)."""


def cpu_flags(cpuinfo: str | Path = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU feature flags of the first processor in ``cpuinfo`` (Linux), e.g.
    ``{"avx2", "avx512f", ...}``; empty when the file is missing or has no flags line."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


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


def training_options(prefer_xla_dots_on_avx512: bool, *, flags: frozenset[str] | None = None,
                     choice: str | None = None, backend: str | None = None) -> dict[str, str]:
    """XLA compile options (``jax.jit(..., compiler_options=...)``) for a program that
    runs training updates.

    Args:
      prefer_xla_dots_on_avx512: the agent's measured preference (DreamerV3 True,
        TD-MPC2 False). flags / choice / backend: the CPU flags, the ``WMX_CPU_DOTS``
        value and ``jax.default_backend()``; read from the machine when None.
    Returns:
      `XLA_DOTS` or {} (always {} off the CPU backend).
    Raises:
      ValueError: ``WMX_CPU_DOTS`` is not one of `CHOICES`.
    """
    choice = dots_choice(choice)
    if (jax.default_backend() if backend is None else backend) != "cpu":
        return {}
    if choice == "auto":
        flags = cpu_flags() if flags is None else flags
        choice = "xla" if prefer_xla_dots_on_avx512 and "avx512f" in flags else "ynnpack"
    return dict(XLA_DOTS) if choice == "xla" else {}
