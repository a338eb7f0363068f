"""What a stretch of a process spent compiling: XLA compiles and persistent-cache traffic.

    with CompileMeter() as meter:
        ...                                  # anything that jits
    meter.summary()   # {"compile_s": 61.2, "compiles": 4, "cache_hits": 0, ...}

Reads JAX's own monitoring events (``jax.monitoring``): the backend compile duration of
every program compiled (with its function name; a persistent-cache hit counts its load
here), the seconds of tracing to a jaxpr and of lowering to MLIR (spent on a cache hit
too: the cache key is the lowered program), and the persistent compilation cache's
hits, misses and load time. The listeners are removed on exit; nothing is global.
"""
from __future__ import annotations

from collections import defaultdict
from typing import Any

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"
TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
LOWER_EVENT = "/jax/core/compile/jaxpr_to_mlir_module_duration"
HIT_EVENT = "/jax/compilation_cache/cache_hits"
MISS_EVENT = "/jax/compilation_cache/cache_misses"
LOAD_EVENT = "/jax/compilation_cache/cache_retrieval_time_sec"


class CompileMeter:
    """Accumulates compile seconds (per function name) and cache hits/misses while entered.

    Attributes:
        by_fun: {function name: [seconds of each backend compile]}.
        hits, misses: persistent compilation cache hits and misses.
        load_s: seconds spent reading programs from the persistent cache.
        trace_s, lower_s: seconds tracing functions to jaxprs and lowering them to MLIR.
    """

    def __init__(self) -> None:
        self.by_fun: dict[str, list[float]] = defaultdict(list)
        self.hits = self.misses = 0
        self.load_s = self.trace_s = self.lower_s = 0.0

    def _on_duration(self, event: str, seconds: float, **kw: Any) -> None:
        if event == COMPILE_EVENT:
            self.by_fun[str(kw.get("fun_name", "?"))].append(float(seconds))
        elif event == LOAD_EVENT:
            self.load_s += float(seconds)
        elif event == TRACE_EVENT:
            self.trace_s += float(seconds)
        elif event == LOWER_EVENT:
            self.lower_s += float(seconds)

    def _on_event(self, event: str, **kw: Any) -> None:
        if event == HIT_EVENT:
            self.hits += 1
        elif event == MISS_EVENT:
            self.misses += 1

    def __enter__(self) -> "CompileMeter":
        import jax.monitoring as mon
        mon.register_event_duration_secs_listener(self._on_duration)
        mon.register_event_listener(self._on_event)
        return self

    def __exit__(self, *exc: Any) -> None:
        import jax.monitoring as mon
        mon.unregister_event_duration_listener(self._on_duration)
        mon.unregister_event_listener(self._on_event)

    def summary(self, top: int = 5) -> dict[str, Any]:
        """The totals so far.

        Args:
            top: how many of the longest-compiling functions to name.

        Returns:
            {"compile_s": seconds of backend compiles, "compiles": their count,
            "trace_s", "lower_s", "cache_hits", "cache_misses", "cache_load_s", "longest": [[function name,
            seconds summed over its compiles, compiles], ...] longest first}.
        """
        per = sorted(((f, sum(v), len(v)) for f, v in self.by_fun.items()),
                     key=lambda x: -x[1])
        return {"compile_s": round(sum(s for _, s, _ in per), 2),
                "compiles": sum(n for _, _, n in per),
                "trace_s": round(self.trace_s, 2), "lower_s": round(self.lower_s, 2),
                "cache_hits": self.hits, "cache_misses": self.misses,
                "cache_load_s": round(self.load_s, 2),
                "longest": [[f, round(s, 2), n] for f, s, n in per[:top]]}
