"""Adapters that let the official DreamerV3 (danijar/dreamerv3 29eb964, written for
JAX 0.4.28) run on a newer JAX, without changing its source.

Each adapter restores one call form the official code uses that a later JAX release
removed, with the same meaning; each applies only where this JAX lacks the form, so on
JAX 0.4.28 nothing changes. `apply` installs them; call it before the official code
builds its agent. `APPLIED` names the ones installed.
"""
from __future__ import annotations

import functools
import inspect

APPLIED: list[str] = []


def _jit_positional_shardings() -> None:
    """``jax.jit(fun, in_shardings, out_shardings, ...)``: JAX 0.4.28 took the shardings
    as the second and third positional arguments (jaxagent.py's ``_transform``); later
    releases take them by keyword only. The adapter passes them by keyword."""
    import jax
    params = inspect.signature(jax.jit).parameters
    p = params.get("in_shardings")
    if p is None or p.kind != inspect.Parameter.KEYWORD_ONLY:
        return
    original = jax.jit

    @functools.wraps(original)
    def jit(fun=None, *args, **kwargs):
        if len(args) > 2:
            raise TypeError("jit takes at most fun, in_shardings, out_shardings positionally")
        kwargs.update(zip(("in_shardings", "out_shardings"), args))
        return original(fun, **kwargs) if fun is not None else original(**kwargs)

    jax.jit = jit
    APPLIED.append("jax.jit positional shardings")


def apply() -> list[str]:
    """Install every adapter this JAX needs (once). Returns the names of those installed."""
    if not APPLIED:
        _jit_positional_shardings()
    return list(APPLIED)
