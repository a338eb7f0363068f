"""_profile_analysis: where a profiled program's time goes, from its trace and its HLO.

The analysis half of `profile_step` (that script builds, times and traces a program; this
module reads the trace back): the op executions of a ``jax.profiler.ProfileData`` (the
device plane's "XLA Ops" line on a TPU or GPU, the XLA:CPU events on the host otherwise),
their self times (a while loop's own time without its body), each op's category
(`CATEGORIES`, from the compiled program's optimized HLO where it names the op, else a
trace stat, else the op's name), each op's component (the first of a list of (label,
regex) rules matching its JAX name stack, the ``op_name`` of its HLO metadata) and the
summary `analyse` returns. Pure functions of the trace and the text; no device needed, so
a recorded trace can be analysed again anywhere (``profile_step.py --reanalyse``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

CATEGORIES = ("matmul/convolution", "elementwise/reduction", "copy/transpose",
              "collective/infeed/outfeed", "while-loop/control", "other")
"""The op categories, fixed. matmul/convolution: dots, convolutions, GEMM custom calls and
fusions holding one; elementwise/reduction: the other fusions and unfused arithmetic,
reductions, comparisons, conversions, random bits; copy/transpose: copies, transposes and
other data movement (slices, concatenations, pads, gathers, scatters, dynamic updates,
broadcasts, and fusions of nothing else); collective/infeed/outfeed: cross-device
collectives, host transfers; while-loop/control: while loops and conditionals (their own
time, without the ops of their bodies), calls, tuples; other: the rest (sorts, other
custom calls, ops that could not be classified)."""

_DATA_MOVE = {"copy", "copy-start", "copy-done", "transpose", "concatenate", "slice",
              "dynamic-slice", "dynamic-update-slice", "pad", "reshape", "bitcast", "broadcast",
              "gather", "scatter", "reverse"}
_COLLECTIVE = {"all-reduce", "all-reduce-start", "all-reduce-done", "all-gather",
               "all-gather-start", "all-gather-done", "reduce-scatter", "all-to-all",
               "collective-permute", "collective-permute-start", "collective-permute-done",
               "collective-broadcast", "infeed", "outfeed", "send", "send-done", "recv",
               "recv-done"}
_CONTROL = {"while", "conditional", "call", "tuple", "get-tuple-element", "parameter",
            "constant", "after-all", "async-start", "async-update", "async-done",
            "opt-barrier", "optimization-barrier", "domain"}
_STRUCTURAL = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast"}
_ELEMENTWISE = {
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "complex", "convert",
    "cosine", "divide", "erf", "exp", "exponential", "exponential-minus-one", "floor",
    "imag", "iota", "is-finite", "log", "log-plus-one", "logistic", "map", "maximum",
    "minimum", "multiply", "negate", "not", "or", "popcnt", "power", "real",
    "reduce", "reduce-precision", "reduce-window", "remainder", "rng", "rng-bit-generator",
    "round-nearest-afz", "round-nearest-even", "rsqrt", "select", "select-and-scatter",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "sqrt",
    "subtract", "tan", "tanh", "xor", "bitcast-convert", "stochastic-convert"}
_GEMM_TARGET = re.compile(r"gemm|matmul|cublas|onednn|mkl|dot|conv", re.I)



# ---- the trace ----------------------------------------------------------------------
@dataclass
class OpEvent:
    """One op execution in the trace: times in ns; ``line``: which line of its plane."""
    name: str
    module: str | None
    hlo_category: str | None
    start: float
    end: float
    line: str


def _stats(event) -> dict:
    out = {}
    for k, v in event.stats:
        out.setdefault(k, v.decode(errors="replace") if isinstance(v, bytes) else v)
    return out


def instruction_name(text: str) -> str:
    """The HLO instruction name of a trace op: a TPU's "XLA Ops" events are named by the
    whole instruction (``%fusion.12 = f32[8]{0} fusion(...), kind=kLoop, ...``), a GPU's
    and the CPU's by its name (``fusion.12``); both give ``fusion.12``."""
    text = text.strip().removeprefix("ROOT ").lstrip("%")
    return text.split(" = ", 1)[0].strip() if " = " in text else text


def _op_event(event, line: str) -> OpEvent:
    s = _stats(event)
    name = instruction_name(str(s.get("hlo_op") or event.name))
    module = s.get("hlo_module")
    return OpEvent(name, str(module) if module is not None else None,
                   str(s["hlo_category"]) if s.get("hlo_category") else None,
                   float(event.start_ns), float(event.start_ns + event.duration_ns), line)


def op_events(data) -> tuple[list[OpEvent], str, str | None]:
    """The XLA op events of a trace: (events, where they come from, the device plane's name
    or None).

    A device plane (``/device:...``, not a CPU) gives its "XLA Ops" line where it has one,
    else its events that carry an ``hlo_op`` stat; of several, the one with the most events
    (the chip the program ran on). Without one, the host plane's events that carry an
    ``hlo_op`` stat (XLA:CPU's thunks)."""
    best: tuple[list, str, str | None] = ([], "", None)
    for plane in data.planes:
        if not plane.name.startswith("/device:") or "CPU" in plane.name:
            continue
        lines = [(f"{plane.name}#{i}", ln) for i, ln in enumerate(plane.lines)]
        ops_lines = [(key, ln) for key, ln in lines if ln.name == "XLA Ops"]
        if ops_lines:
            evs = [_op_event(e, key) for key, ln in ops_lines for e in ln.events]
            where = f"device plane {plane.name}, line 'XLA Ops'"
        else:
            evs = [_op_event(e, key) for key, ln in lines for e in ln.events
                   if any(k == "hlo_op" for k, _ in e.stats)]
            where = f"device plane {plane.name}, events with an hlo_op stat"
        if len(evs) > len(best[0]):
            best = (evs, where, plane.name)
    if best[0]:
        return best
    host = data.find_plane_with_name("/host:CPU")
    evs = [] if host is None else [
        _op_event(e, f"/host:CPU#{i}") for i, ln in enumerate(host.lines) for e in ln.events
        if any(k == "hlo_op" for k, _ in e.stats)]
    return evs, ("no device plane in the trace: XLA ops from the host plane /host:CPU "
                 "(events with an hlo_op stat: XLA:CPU's thunks)"), None


def self_times(events: list[OpEvent]) -> list[float]:
    """Each event's self time (ns): its duration less that of the events of its own line
    nested directly in it (a while loop less its body's ops). Events in the same order."""
    out = [e.end - e.start for e in events]
    by_line: dict[str, list[int]] = {}
    for i, e in enumerate(events):
        by_line.setdefault(e.line, []).append(i)
    for idx in by_line.values():
        idx.sort(key=lambda i: (events[i].start, -events[i].end))
        stack: list[int] = []
        for i in idx:
            e = events[i]
            while stack and events[stack[-1]].end <= e.start:
                stack.pop()
            if stack and e.end <= events[stack[-1]].end:
                out[stack[-1]] -= e.end - e.start
            stack.append(i)
    return [max(0.0, x) for x in out]


def busy_ns(events: list[OpEvent]) -> float:
    """Time (ns) during which at least one op ran: the union of the op intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((ev.start, ev.end) for ev in events):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


# ---- classification -----------------------------------------------------------------
_COMP = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s*(?:\(.*\))?\s*->.*\{\s*$")
_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"(?:^|[\s)}\]])([a-z][a-z0-9\-]*)\(")
_CALLED = re.compile(r"\b(?:calls|to_apply|body|condition|true_computation|"
                     r"false_computation|branch_computations)=\{?([^}=]*?)\}?(?=,\s*\w+=|$)")


@dataclass
class Hlo:
    """An optimized HLO module, indexed: ``module`` its name; ``ops`` instruction name ->
    (opcode, called computations, custom-call target); ``comps`` computation -> its
    instruction names (the ROOT last); ``op_names`` instruction name -> the ``op_name``
    of its metadata (JAX's name stack) where it has one; ``callers`` computation -> the
    instruction that calls it (a fusion, a while loop's body, a conditional's branch);
    ``comp_of`` instruction name -> its computation; ``operands`` instruction name -> its
    operands' names."""
    module: str | None
    ops: dict
    comps: dict
    op_names: dict = field(default_factory=dict)
    callers: dict = field(default_factory=dict)
    comp_of: dict = field(default_factory=dict)
    operands: dict = field(default_factory=dict)


_OP_NAME = re.compile(r'\bop_name="((?:[^"\\]|\\.)*)"')


def parse_hlo(text: str) -> Hlo:
    """Index the instructions of an HLO module's text (``compiled.as_text()``)."""
    m = re.search(r"^HloModule\s+([\w.\-]+)", text, re.M)
    ops: dict = {}
    comps: dict = {}
    op_names: dict = {}
    callers: dict = {}
    operands: dict = {}
    comp = None
    for line in text.splitlines():
        c = _COMP.match(line)
        if c and "=" not in line.split("->")[0].split("(")[0]:
            comp = c.group(1)
            comps.setdefault(comp, [])
            continue
        i = _INSTR.match(line)
        if not i or comp is None:
            continue
        name, rest = i.groups()
        op = _OPCODE.search(rest)
        if not op:
            continue
        called = [n.strip().lstrip("%") for g in _CALLED.findall(rest) for n in g.split(",")
                  if n.strip()]
        target = re.search(r'custom_call_target="([^"]*)"', rest)
        ops[name] = (op.group(1), called, target.group(1) if target else None)
        comps[comp].append(name)
        o = _OP_NAME.search(rest)
        if o and o.group(1):
            op_names[name] = o.group(1).replace('\\"', '"').replace("\\'", "'")
        for callee in called:
            callers.setdefault(callee, name)
        args = rest[op.end():].split(")", 1)[0]
        operands[name] = re.findall(r"%([\w.\-]+)", args) or [
            a.split()[-1] for a in args.split(",") if a.strip()]
    comp_of = {n: c for c, names in comps.items() for n in names}
    return Hlo(m.group(1) if m else None, ops, comps, op_names, callers, comp_of, operands)


def op_name(hlo: Hlo, name: str) -> str | None:
    """The JAX name stack of instruction ``name`` (its metadata's ``op_name``), or None
    when the HLO has no such instruction or nothing names it.

    An instruction without one (ops XLA made: copies, a fusion whose metadata was
    dropped, XLA:CPU's dots for row sums) takes that of what it computes (a fusion: its
    fused computation's ROOT, else the computation's last named instruction), else that
    of its first operand named inside the instruction calling its computation (a while
    loop's body, a conditional's branch, a fusion: whose name stack, the nearest named
    up, starts every name stack inside it), else that caller's."""
    if name not in hlo.ops:
        return None
    if name in hlo.op_names:
        return hlo.op_names[name]
    opcode, called, _ = hlo.ops[name]
    if opcode == "fusion":
        inner = [n for c in called for n in reversed(hlo.comps.get(c, []))]
        found = next((hlo.op_names[n] for n in inner if n in hlo.op_names), None)
        if found is not None:
            return found
    caller = hlo.callers.get(hlo.comp_of.get(name))
    context = op_name(hlo, caller) if caller is not None else None
    for operand in hlo.operands.get(name, []):
        found = hlo.op_names.get(operand)
        if found and (context is None or found.startswith(context)):
            return found
    return context


def component_of(name: str | None, rules) -> str:
    """The label of the first ``(label, regex)`` of ``rules`` whose regex is found
    (``re.search``) in op name stack ``name``; "other" when none is, or ``name`` is
    None."""
    if name:
        for label, pattern in rules:
            if re.search(pattern, name):
                return label
    return "other"


def _inner_ops(hlo: Hlo, comps: list[str], seen: set | None = None) -> list[tuple]:
    """(opcode, target) of every instruction of ``comps`` and what they call, recursively."""
    seen = set() if seen is None else seen
    out = []
    for comp in comps:
        if comp in seen or comp not in hlo.comps:
            continue
        seen.add(comp)
        for name in hlo.comps[comp]:
            opcode, called, target = hlo.ops[name]
            out.append((opcode, target))
            if opcode in ("fusion", "call", "async-start"):
                out += _inner_ops(hlo, called, seen)
    return out


def _category_of_opcode(opcode: str, target: str | None) -> str | None:
    if opcode in ("dot", "convolution") or (opcode == "custom-call" and target
                                            and _GEMM_TARGET.search(target)):
        return "matmul/convolution"
    if opcode in _DATA_MOVE:
        return "copy/transpose"
    if opcode in _COLLECTIVE or opcode.endswith(("-start", "-done")) and any(
            opcode.startswith(c) for c in ("all-", "collective", "send", "recv", "reduce-s")):
        return "collective/infeed/outfeed"
    if opcode in _CONTROL:
        return "while-loop/control"
    if opcode in _ELEMENTWISE:
        return "elementwise/reduction"
    return None


def classify_hlo(hlo: Hlo, name: str) -> str | None:
    """The category of instruction ``name`` of ``hlo``, or None if it is not there."""
    if name not in hlo.ops:
        return None
    opcode, called, target = hlo.ops[name]
    if opcode != "fusion":
        return _category_of_opcode(opcode, target) or "other"
    inner = [_category_of_opcode(o, t) for o, t in _inner_ops(hlo, called)
             if o not in _STRUCTURAL]
    if "matmul/convolution" in inner:
        return "matmul/convolution"
    if "collective/infeed/outfeed" in inner:
        return "collective/infeed/outfeed"
    if inner and all(c == "copy/transpose" for c in inner):
        return "copy/transpose"
    return "elementwise/reduction"


def classify_stat(hlo_category: str) -> str:
    """A category from a trace's ``hlo_category`` stat (e.g. "convolution fusion",
    "loop fusion", "data formatting", "all-reduce")."""
    c = hlo_category.lower()
    if any(w in c for w in ("convolution", "dot", "matmul", "gemm")):
        return "matmul/convolution"
    if any(w in c for w in ("all-", "collective", "infeed", "outfeed", "send", "recv",
                            "host")):
        return "collective/infeed/outfeed"
    if any(w in c for w in ("data formatting", "copy", "transpose", "slice", "concat",
                            "gather", "scatter", "pad")):
        return "copy/transpose"
    if any(w in c for w in ("while", "conditional", "control", "call")):
        return "while-loop/control"
    if any(w in c for w in ("fusion", "elementwise", "reduce", "reduction")):
        return "elementwise/reduction"
    return "other"


def classify_name(name: str) -> str:
    """A category from an op's name alone (the last resort)."""
    n = name.lower()
    for cat, pat in (("matmul/convolution", r"conv|dot|gemm|matmul|ynn_fusion|onednn"),
                     ("collective/infeed/outfeed",
                      r"all-reduce|all-gather|reduce-scatter|all-to-all|collective|infeed|"
                      r"outfeed|send|recv"),
                     ("copy/transpose", r"copy|transpose|slice|concatenate|pad|gather|"
                      r"scatter|bitcast|broadcast"),
                     ("while-loop/control", r"^(while|conditional|call)\b")):
        if re.search(pat, n):
            return cat
    return "elementwise/reduction" if re.search(r"fusion|wrapped_", n) else "other"


def _in_module(event: OpEvent, hlo: Hlo | None) -> bool:
    """Whether ``event`` may be an instruction of ``hlo`` (its module, or either unnamed)."""
    return hlo is not None and (event.module is None or hlo.module is None
                                or hlo.module in event.module)


def classify(event: OpEvent, hlo: Hlo | None) -> tuple[str, str]:
    """(category, how): from the program's HLO when the op is one of its instructions, else
    the trace's hlo_category stat, else the name."""
    if _in_module(event, hlo):
        cat = classify_hlo(hlo, event.name)
        if cat is not None:
            return cat, "hlo"
    if event.hlo_category:
        return classify_stat(event.hlo_category), "trace-stat"
    return classify_name(event.name), "name"


# ---- the record ---------------------------------------------------------------------
def summarise_ops(events: list[OpEvent], hlo: Hlo | None, calls: int, top: int,
                  rules=()) -> dict:
    """Per-call op times by category, by component and by op: {"busy_ms_per_call",
    "op_ms_per_call", "op_events", "categories", "classified_by", "components",
    "components_named_share", "top_ops", "rest", "modules"}. Shares are of the summed op
    self time, so the categories' shares, the components', and top_ops' with rest's, sum
    to 1; "classified_by": the share of that time classified from the HLO, from the
    trace's hlo_category stat, and from the op's name alone.

    "components": {label: {"ms_per_call", "share", "ops"}} in the order of ``rules``
    (``(label, regex)`` pairs, `component_of`: the first whose regex is found in the
    op's name stack, `op_name`), "other" last: each op's component from its name stack,
    the ms per call its share of the busy time (on a device plane the ops' self times
    add up to the busy time; where ops overlap, as XLA:CPU's thunks on several
    threads, the busy time is split in proportion to self time), so the components' ms
    sum to ``busy_ms_per_call``. "components_named_share": the share of op time whose
    op has a name stack in the HLO (the rest is "other" for want of one)."""
    selfs = self_times(events)
    total = sum(selfs)
    busy = busy_ns(events)
    per_op: dict = {}
    for e, t in zip(events, selfs):
        row = per_op.setdefault((e.module, e.name), {"ns": 0.0, "count": 0, "event": e})
        row["ns"] += t
        row["count"] += 1
    cats = {c: {"ms_per_call": 0.0, "share": 0.0, "ops": 0} for c in CATEGORIES}
    comp_ns = {label: 0.0 for label in dict.fromkeys([lb for lb, _ in rules] + ["other"])}
    comp_ops = dict.fromkeys(comp_ns, 0)
    named_ns = 0.0
    rows = []
    modules: dict = {}
    for (module, name), r in per_op.items():
        cat, how = classify(r["event"], hlo)
        stack = op_name(hlo, name) if _in_module(r["event"], hlo) else None
        comp = component_of(stack, rules)
        cats[cat]["ms_per_call"] += r["ns"] / 1e6 / calls
        cats[cat]["ops"] += 1
        comp_ns[comp] += r["ns"]
        comp_ops[comp] += 1
        named_ns += r["ns"] if stack else 0.0
        modules[module or "?"] = modules.get(module or "?", 0.0) + r["ns"] / 1e6 / calls
        rows.append({"name": name, "module": module, "category": cat, "how": how,
                     "component": comp, "op_name": stack,
                     "ms_per_call": r["ns"] / 1e6 / calls,
                     "share": r["ns"] / total if total else 0.0,
                     "count_per_call": r["count"] / calls})
    for c in cats.values():
        c["share"] = c["ms_per_call"] * 1e6 * calls / total if total else 0.0
    components = {label: {"ms_per_call": ns / total * busy / 1e6 / calls if total else 0.0,
                          "share": ns / total if total else 0.0, "ops": comp_ops[label]}
                  for label, ns in comp_ns.items()}
    how_share = {h: sum(r["share"] for r in rows if r["how"] == h)
                 for h in ("hlo", "trace-stat", "name")}
    rows.sort(key=lambda r: -r["ms_per_call"])
    rest = rows[top:]
    return {"busy_ms_per_call": busy / 1e6 / calls,
            "op_ms_per_call": total / 1e6 / calls, "op_events": len(events),
            "categories": cats, "classified_by": how_share, "components": components,
            "components_named_share": named_ns / total if total else 0.0,
            "top_ops": rows[:top],
            "rest": {"ops": len(rest), "ms_per_call": sum(r["ms_per_call"] for r in rest),
                     "share": sum(r["share"] for r in rest)},
            "modules": dict(sorted(modules.items(), key=lambda kv: -kv[1]))}


# ---- the analysis -------------------------------------------------------------------
def module_times(data, device_plane: str | None, calls: int) -> dict | None:
    """{module: ms per call} from the device plane's "XLA Modules" line (each program
    execution, from its first op to its last), or None without one."""
    plane = data.find_plane_with_name(device_plane) if device_plane else None
    lines = [ln for ln in (plane.lines if plane is not None else []) if ln.name == "XLA Modules"]
    if not lines:
        return None
    out: dict = {}
    for e in (e for ln in lines for e in ln.events):
        out[e.name] = out.get(e.name, 0.0) + e.duration_ns / 1e6 / calls
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def analyse(data, hlo_text: str | None, calls: int, top: int, rules=()) -> dict:
    """The trace's part of the record, from a ``ProfileData`` of ``calls`` calls and the
    program's optimized HLO text: "trace" (where the ops come from, the planes, the
    "XLA Modules" times), "classified_by" (share of op time classified from the HLO, a
    trace stat, the name), and `summarise_ops`' fields (its components by ``rules``)."""
    events, source, device_plane = op_events(data)
    hlo = parse_hlo(hlo_text) if hlo_text else None
    ops = summarise_ops(events, hlo, calls, top, rules)
    return {"trace": {"source": source, "device_plane": device_plane,
                      "planes": [p.name for p in data.planes],
                      "hlo_module": hlo.module if hlo else None,
                      "module_ms_per_call": module_times(data, device_plane, calls)},
            **ops}
