"""Compile jitted programs ahead, in background threads, while the device runs others.

A run's evaluation programs are compiled the first time they are called: tens of seconds
each on a TPU (tracing the MJX env and the policy, XLA's compile or a persistent-cache
load), and one per task for a multi-task run. While a training chunk runs on the device
the host only waits, so the run hands the evaluation programs to a `CompileAhead` after
dispatching its first chunk; they are traced and compiled beside the training, and the
evaluation calls the compiled executables.

    ahead = CompileAhead()
    ahead.submit("eval/walker-walk", jitted, args)       # args: arrays, specs or values
    ...
    out = ahead.call("eval/walker-walk", jitted, *args)   # waits if still compiling

``submit`` takes the arguments' types in the calling thread (`abstract`) and leaves the
rest to the background: tracing and lowering one at a time (one lock; tracing holds the
GIL anyway), XLA's compiles ``workers`` at a time.
The executable is exactly what the first plain call would compile (the same lowering and
the jitted function's compiler options; the persistent compilation cache is read and
written as by a plain call), so results do not depend on whether it was ready: a call
whose arguments do not fit the compiled signature (tree, shapes, dtypes, weak types and
placement), or whose build failed, falls back to the plain call of ``jitted`` and logs one
line why. The trainers submit nothing once asked to stop, and cancel the builds not
started however their loop ends.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import jax

log = logging.getLogger("wmx.compile_ahead")

__all__ = ["CompileAhead", "abstract"]


def abstract(tree: Any) -> Any:
    """Arrays of ``tree`` as `jax.ShapeDtypeStruct` (shape, dtype, sharding, weak type);
    every other leaf (None, Python scalars, specs) as it is."""
    def spec(x):
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding,
                                        weak_type=x.weak_type)
        return x
    return jax.tree.map(spec, tree)


def _signature(args: tuple) -> tuple:
    """The tree structure and each leaf's (shape, dtype, weak type): what a compiled
    executable's call does not check in full (a weak-typed ``~int32[]`` takes a strong
    ``np.int32``, and the result is the weak program's). Leaves JAX cannot type
    (static values) as themselves."""
    def one(x):
        try:
            a = jax.typeof(x)
        except TypeError:
            return ("static", x)
        return (tuple(a.shape), a.dtype, bool(a.weak_type))
    leaves, treedef = jax.tree.flatten(args)
    return treedef, tuple(one(x) for x in leaves)


class CompileAhead:
    """Background tracing and compiling of jitted programs, keyed by name.

    Args:
        workers: XLA compiles at a time (threads; each compile is mostly one core).

    Thread-safe for one submitting and calling thread (the run's host loop). `close`
    cancels the builds not started and waits for none; at the process's exit Python
    waits for the builds in progress (at most ``workers``, each one program's trace and
    compile), as for any worker thread.
    """

    def __init__(self, workers: int = 4):
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(workers)),
                                        thread_name_prefix="wmx-compile-ahead")
        self._lower_lock = threading.Lock()
        self._futures: dict[str, Future] = {}

    def submit(self, key: str, jitted: Any, args: tuple) -> None:
        """Start compiling ``jitted`` for ``args`` under ``key`` unless ``key`` was
        submitted before.

        Args:
            key: the program's name (one executable per key).
            jitted: a `jax.jit` function.
            args: its arguments as the call will pass them (arrays, specs or Python
                values); arrays are taken as specs here (`abstract`), so that later
                donation of them cannot race the background lowering.
        """
        if key not in self._futures:
            self._futures[key] = self._pool.submit(self._build, jitted, abstract(args))

    def _build(self, jitted: Any, args: tuple):
        with self._lower_lock:
            signature = _signature(args)
            lowered = jitted.lower(*args)
        return jitted, signature, lowered.compile()

    def submitted(self, key: str) -> bool:
        return key in self._futures

    def call(self, key: str, jitted: Any, *args: Any) -> Any:
        """``jitted(*args)``, by the executable compiled ahead for ``key`` when there is one
        for this very function and these arguments' types (waiting for it if it is still
        being built); else by the plain call, with one log line saying why."""
        fut = self._futures.get(key)
        if fut is None:
            return jitted(*args)
        try:
            built_for, signature, compiled = fut.result()
        except Exception as e:                       # the build failed: compile as usual
            log.info("%s: compiling ahead failed (%s: %s); compiling it now", key,
                     type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            self._futures.pop(key, None)
            return jitted(*args)
        if built_for is not jitted:
            log.info("%s: compiled ahead for another function; compiling it now", key)
            return jitted(*args)
        try:
            if _signature(args) != signature:   # the executable does not check weak types
                raise TypeError("argument types (shape, dtype, weak type) differ")
            return compiled(*args)
        except (TypeError, ValueError) as e:         # arguments' types differ from the build's
            log.info("%s: the compiled-ahead signature does not fit (%s); compiling it now",
                     key, str(e).splitlines()[0] if str(e) else type(e).__name__)
            self._futures.pop(key, None)
            return jitted(*args)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
