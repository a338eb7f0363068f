"""`profile_step`'s verdict: the peak rate a device is judged by, the rates a record's
FLOPs and busy time give, and one paragraph on where the time goes and what bounds it.
"""
from __future__ import annotations

PEAK_TFLOPS = {"TPU v5 lite": 197.0}
"""Dense bfloat16 peak (TFLOP/s) by ``device_kind``: TPU v5e (the figure docs/performance.md
judges the TPU goals by). Other kinds: ``--peak-tflops``."""


def peak_rate(device_kind: str, given: float | None) -> dict | None:
    """The peak the verdict compares with: {"tflop_s", "what"}, or None when unknown (the
    CPU, a device kind not in `PEAK_TFLOPS`, without ``--peak-tflops``)."""
    if given is not None:
        return {"tflop_s": given, "what": "peak given by --peak-tflops"}
    if device_kind in PEAK_TFLOPS:
        return {"tflop_s": PEAK_TFLOPS[device_kind],
                "what": f"{device_kind} dense bfloat16 peak"}
    return None


_BOUNDS = {
    "matmul/convolution": "matmul arithmetic",
    "elementwise/reduction": ("elementwise and reduction fusions: memory traffic and per-op "
                              "overhead, not matmul arithmetic"),
    "copy/transpose": "data movement: copies and transposes between ops",
    "while-loop/control": "loop control: while-loop bookkeeping between small per-iteration ops",
    "collective/infeed/outfeed": "transfers: collectives and host transfers",
    "other": "ops outside the named categories (sorts, custom calls; see top_ops)"}
"""What bounds a call whose device is busy, by the category with the largest share."""


def component_text(rec: dict) -> str:
    """The verdict's sentence on the components (" By component, per tick: plan 6.1 ms
    (41%: ...); ..."; "" without rules): each group (the label before ": ") with its
    ms per tick (online) or per call and its share, and its parts of 1% or more."""
    comps = rec.get("components") or {}
    if set(comps) <= {"other"}:
        return ""
    ticks = rec.get("ticks_per_call") or 1
    groups: dict = {}
    for label, c in comps.items():
        group, _, part = label.partition(": ")
        g = groups.setdefault(group, {"ms": 0.0, "share": 0.0, "parts": []})
        g["ms"] += c["ms_per_call"] / ticks
        g["share"] += c["share"]
        if part and c["share"] >= 0.01:
            g["parts"].append(f"{part} {c['share']:.0%}")
    items = [f"{name} {g['ms']:.3g} ms ({g['share']:.0%}" + (
        ": " + ", ".join(g["parts"]) if g["parts"] else "") + ")"
        for name, g in groups.items() if g["share"] >= 0.005]
    text = f" By component, per {'tick' if ticks > 1 else 'call'}: " + "; ".join(items) + "."
    named = rec.get("components_named_share", 1.0)
    if named < 0.9:
        text += f" Only {named:.0%} of the op time has a name stack in the HLO (the rest " \
                "is other)."
    return text


def verdict(rec: dict) -> str:
    """One paragraph: where the time goes and what bounds it (inferred from the shares and
    rates; not a roofline)."""
    if not rec["op_events"]:
        return (f"The trace has no XLA op events ({rec['trace']['source']}); nothing to "
                "attribute: the timings above are wall clock only.")
    where = "device" if rec["trace"]["device_plane"] else "XLA:CPU op"
    cats = sorted(rec["categories"].items(), key=lambda kv: -kv[1]["share"])
    first, c = cats[0]
    parts = [f"{c['share']:.0%} of {where} time in {first} ops"]
    parts += [f"{v['share']:.0%} in {k}" for k, v in cats[1:3] if v["share"] >= 0.05]
    text = "; ".join(parts) + "."
    text += component_text(rec)
    mm, peak = rec.get("matmul_tflop_s"), rec.get("peak")
    if mm:
        text += f" Matmul ops run at {mm:.2f} TFLOP/s"
        if peak:
            text += f" ({mm / peak['tflop_s']:.0%} of the {peak['tflop_s']:.3g} TFLOP/s " \
                    f"{peak['what']})"
        text += f"; the whole call at {rec['tflop_s']:.2f} TFLOP/s of busy time."
    idle = rec.get("idle_share_of_wall")
    ticks = rec.get("ticks_per_call")
    if ticks:
        text += (f" A call is {ticks} ticks of the online loop: "
                 f"{rec['wall_ms_median'] / ticks:.3g} ms wall and {rec['busy_ms_per_call'] / ticks:.3g} ms busy per tick, "
                 f"{rec['env_steps_per_call'] / rec['wall_ms_median'] * 1e3:.0f} env steps/s "
                 "(all seeds).")
    text += f" Ops busy {rec['busy_ms_per_call']:.3g} ms of the {rec['wall_ms_median']:.3g} " \
            f"ms wall time per call" + (f" (the device idle {idle:.0%})." if idle is not None
                                        else ".")
    if not rec["trace"]["device_plane"]:
        text += " No device plane on this backend: the op times are XLA:CPU's thunks on the " \
                "host (they may run in parallel), and the rest of the wall time shares its " \
                "cores, so no device idle time is given."
    by_name = rec["classified_by"]["name"]
    if by_name >= 0.1:
        text += f" {by_name:.0%} of the op time was classified by op name alone (no HLO " \
                "match): those categories are guesses."
    if idle is not None and idle > 0.25:
        bound = ("the host side: the device waits for dispatch, transfers or Python for "
                 f"{idle:.0%} of each call")
    else:
        bound = _BOUNDS[first]
        if first == "matmul/convolution" and peak and mm and mm / peak["tflop_s"] < 0.5:
            bound += (", at under half the peak (likely products too small or narrow to "
                      "fill the matrix units, or waiting on memory)")
    return text + f" Bounded by {bound}."


def add_rates(rec: dict, gflop: float | None, peak: dict | None) -> dict:
    """Add to ``rec`` (`analyse`'s fields and "wall_ms_median") the program's ``gflop`` per
    call, the rates (TFLOP/s of busy time, of matmul time; None when ``gflop`` is None),
    the busy and idle shares of the
    wall time (idle: only with a device plane; on the CPU the ops and the dispatch share
    the cores), ``peak`` and the verdict. Returns ``rec``."""
    busy_s = rec["busy_ms_per_call"] / 1e3
    mm_s = rec["categories"]["matmul/convolution"]["ms_per_call"] / 1e3
    rec["gflop"] = gflop
    rec["tflop_s"] = gflop / 1e3 / busy_s if busy_s and gflop is not None else None
    rec["matmul_tflop_s"] = gflop / 1e3 / mm_s if mm_s and gflop is not None else None
    rec["busy_share_of_wall"] = rec["busy_ms_per_call"] / rec["wall_ms_median"]
    rec["idle_share_of_wall"] = (max(0.0, 1 - rec["busy_share_of_wall"])
                                 if rec["trace"]["device_plane"] else None)
    rec["peak"] = peak
    rec["verdict"] = verdict(rec)
    return rec
