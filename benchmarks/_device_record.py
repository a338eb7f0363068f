"""device_check's record: the JSON written (atomically, the machine's folders renamed),
checked when read back (``--replot``, ``--continue``), the stages an earlier call passed
kept by ``--continue``, and the summary printed at the end.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

def write_json(path: Path, obj: dict, places: dict[str, str] | None = None) -> None:
    """Write ``obj`` as JSON (atomically); ``places`` {absolute path: its name} renames
    the machine's folders in every string, so the record reads the same on any machine."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(portable(obj, places or {}), indent=1))
    os.replace(tmp, path)


def portable(obj, places: dict[str, str]):
    """``obj`` with every string's absolute folders (`places`' keys, longest first) renamed:
    ``<out>``, ``<home>``, ``<shared>``, the checkout as a relative path, ``python``."""
    if isinstance(obj, dict):
        return {k: portable(v, places) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable(v, places) for v in obj]
    if isinstance(obj, str):
        for old in sorted(places, key=len, reverse=True):
            obj = obj.replace(old, places[old])
        return obj
    return obj

def check_record(record) -> bool:
    """Whether ``record`` reads as a device_check JSON: a mapping whose ``stages`` is a list
    of mappings, each with a text ``name``."""
    return (isinstance(record, dict) and isinstance(record.get("stages"), list)
            and all(isinstance(e, dict) and isinstance(e.get("name"), str)
                    for e in record["stages"]))


def unwritable(out: Path) -> str | None:
    """Why the check could not write ``out`` (a file on the way, a folder without write
    permission), or None; nothing is created."""
    p = out
    while not p.exists():
        if p.parent == p:
            return "no existing folder above it"
        p = p.parent
    if not p.is_dir():
        return f"{p} is not a folder"
    if not os.access(p, os.W_OK | os.X_OK):
        return f"{p} is not writable"
    return None


def with_kept(record: dict, kept: dict[str, dict]) -> dict:
    """``record`` with the kept stages (`passed_stages`) that this call has not reached
    yet appended, so that a JSON written mid-call, or by a killed call, still holds them."""
    seen = {e["name"] for e in record["stages"]}
    rest = [e for name, e in kept.items() if name not in seen]
    return {**record, "stages": record["stages"] + rest} if rest else record


def passed_stages(record: dict) -> dict[str, dict]:
    """{name: entry} of the stages an earlier call passed (status ok), each marked with the
    call that ran it (``call``: its start time); a stage that failed, timed out, was not
    run, skipped or interrupted (any status but ok) runs again."""
    started = record.get("started")
    return {e["name"]: {**e, "call": e.get("call", started)}
            for e in record.get("stages", [])[1:]
            if isinstance(e, dict) and e.get("status") == "ok"}


def call_of(record: dict) -> dict:
    """One call of a check continued over several: its start, commit, budget and wall time."""
    return {k: record.get(k) for k in ("started", "git_commit", "total_budget_s", "wall_s")}


def summarise(record: dict) -> None:
    """A few lines per stage on stdout."""
    print(f"\n{record['device_kind']}: {record['mode']}, {record['wall_s']:.0f} s")
    for st in record["stages"][1:]:
        if st["status"] == "skipped":
            continue
        line = f"  {st['name']:21s} {st['status']:8s}"
        if "wall_s" in st:
            line += f" {st['wall_s']:6.0f} s"
        if st.get("reason"):
            line += f"  {st['reason']}"
        elif st["status"] in ("failed", "timeout") and st.get("log_tail"):
            line += f"  log: {st['log_tail'][-1][-150:]}"
        res = st.get("results") or {}
        if st["name"] in ("device_tests", "parity") and res:
            line += "  " + ", ".join(f"{res[k]} {k}" for k in
                                     ("passed", "failed", "errors", "skipped") if res.get(k))
            for f in res.get("failures", [])[:10]:
                head = " / ".join(x.strip() for x in (f["message"] or "").splitlines()
                                  if x.strip())
                line += f"\n      {f['test']}: {head[:200]}"
        elif "speed" in st["name"]:
            line += "  " + ", ".join(
                f"{k} {v['median_ms']:.2f} ms" + (f" ({v['per_seed_ms']:.2f}/seed)"
                                                  if v.get("seeds", 1) > 1 else "")
                for k, v in res.items() if isinstance(v, dict) and "median_ms" in v)
        elif st["name"] == "dreamerv3_offline" and res:
            line += f"  {res.get('updates_reached') or 0:,} updates"
            for task, curve in (res.get("eval_curve") or {}).items():
                if curve:
                    last = max(curve, key=int)
                    line += f", {task} eval {curve[last]:.1f} at {int(last):,}"
        elif res:
            ev = res.get("eval_curve") or {}
            last = max(ev, key=int) if ev else None
            line += f"  {res.get('env_steps_reached', 0):,} env steps"
            if last is not None:
                vals = ev[last]
                line += f", eval return {sum(vals) / len(vals):.1f} at {int(last):,}"
        print(line)
