"""Adapters that let the official DreamerV3 (danijar/dreamerv3 29eb964, written for
JAX 0.4.28) run on a newer JAX, without changing its source.

Each adapter restores one call form the official code uses that a later JAX release
removed, with the same meaning; each applies only where this JAX lacks the form, so on
JAX 0.4.28 nothing changes. `apply` installs them; call it before the official code
builds its agent. `APPLIED` names the ones installed.

One diagnostic switch rides on the same wrapper: `set_donation(False)` makes every
``jax.jit`` call made after it drop ``donate_argnums`` / ``donate_argnames`` (the official
agent donates the non-policy parameters to its train program), to tell whether buffer
donation changes a result. It is off unless asked for.
"""
from __future__ import annotations

import functools
import inspect

APPLIED: list[str] = []
DONATE = True
"""False: the jit wrapper drops donation (`set_donation`)."""
_STATE = {"installed": False, "positional": False}


def _install_jit_wrapper() -> None:
    """Replace ``jax.jit`` (once) by a wrapper that passes two positional arguments after
    ``fun`` as ``in_shardings`` and ``out_shardings`` when this JAX takes them by keyword
    only, and drops donation while `DONATE` is False; everything else is passed on as
    given."""
    if _STATE["installed"]:
        return
    import jax
    original = jax.jit

    @functools.wraps(original)
    def jit(fun=None, *args, **kwargs):
        if args:
            if not _STATE["positional"]:
                return original(fun, *args, **kwargs)
            if len(args) > 2:
                raise TypeError("jit takes at most fun, in_shardings, out_shardings "
                                "positionally")
            kwargs.update(zip(("in_shardings", "out_shardings"), args))
        if not DONATE:
            kwargs.pop("donate_argnums", None)
            kwargs.pop("donate_argnames", None)
        return original(fun, **kwargs) if fun is not None else original(**kwargs)

    jit.__wmx_original__ = original
    jax.jit = jit
    _STATE["installed"] = True


def _jit_positional_shardings() -> None:
    """``jax.jit(fun, in_shardings, out_shardings, ...)``: JAX 0.4.28 took the shardings
    as the second and third positional arguments (jaxagent.py's ``_transform``); later
    releases take them by keyword only. The adapter passes them by keyword."""
    import jax
    target = getattr(jax.jit, "__wmx_original__", jax.jit)
    params = inspect.signature(target).parameters
    p = params.get("in_shardings")
    if p is None or p.kind != inspect.Parameter.KEYWORD_ONLY:
        return
    _STATE["positional"] = True
    _install_jit_wrapper()
    APPLIED.append("jax.jit positional shardings")


def set_donation(on: bool) -> None:
    """Keep (True, the default) or drop (False) buffer donation in the ``jax.jit`` calls
    made from now on (jits already built keep theirs). Installs the jit wrapper when
    needed."""
    global DONATE
    DONATE = bool(on)
    if not on:
        _install_jit_wrapper()


def apply() -> list[str]:
    """Install every adapter this JAX needs (once). Returns the names of those installed."""
    if not APPLIED:
        _jit_positional_shardings()
    return list(APPLIED)
