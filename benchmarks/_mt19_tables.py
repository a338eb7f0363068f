"""The record's two tables for docs/validation.md (`mt19_campaign.py table`): the sources
(final evaluation per seed, the published point, the episode sets) and their speed on the
chip (from every call's ``timing``), so the page is written from the record, not by hand.
"""
from __future__ import annotations

import statistics
from typing import Any

SOURCES_HEADER = ("| task | env steps | final eval, seed 0 / 1 | mean | published (TD-MPC2, "
                  "same env steps) | episode sets |\n| --- | --- | --- | --- | --- | --- |")
SPEED_HEADER = ("| task | wmx | training, s per 1,000 env steps (env steps/s per seed) | "
                "evaluation, s | first evaluation, s: first call / resumed | first row beyond "
                "a round, s: first call / resumed | calls reached (env steps) |\n"
                "| --- | --- | --- | --- | --- | --- | --- |")


def _span(xs: list[float]) -> str:
    """'-' for none, '8.3' for one value or equal ones, '54-62' for a range (whole
    seconds when the values are 10 or more, else one decimal)."""
    if not xs:
        return "-"
    lo, hi = min(xs), max(xs)
    fmt = (lambda v: f"{v:.0f}") if lo >= 10 else (lambda v: f"{v:.1f}")
    return fmt(lo) if fmt(lo) == fmt(hi) else f"{fmt(lo)}-{fmt(hi)}"


def sources_row(task: str, e: dict[str, Any]) -> str:
    """One recorded task's row of the sources table.

    Args:
        task: the task.
        e: its record entry (``env_steps``, ``seeds``, ``final_return`` per seed (str
            keys), ``final_return_mean``, ``published_tdmpc2`` (None or {env_steps,
            return}), ``episode_sets`` [{seed, content_hash}]).

    Returns:
        A markdown row: returns with one decimal, hashes as their first 12 hex digits;
        the published column names its env steps when they differ from the run's.
    """
    finals = " / ".join(f"{e['final_return'][str(s)]:.1f}" for s in e["seeds"])
    pub = e.get("published_tdmpc2")
    if pub is None:
        published = "-"
    else:
        published = f"{pub['return']:.1f}" + (
            f" (at {pub['env_steps']:,})" if pub["env_steps"] != e["env_steps"] else "")
    sets = ", ".join(f"`{s['content_hash'][:12]}`"
                     for s in sorted(e["episode_sets"], key=lambda s: s["seed"]))
    return (f"| {task} | {e['env_steps']:,} | {finals} | {e['final_return_mean']:.1f} | "
            f"{published} | {sets} |")


def speed_row(task: str, e: dict[str, Any]) -> str | None:
    """One recorded task's row of the speed table, from its run's calls.

    Training is the median over calls of each call's median round (1,000 env steps per
    seed); evaluation the median of the evaluations after each call's first; the first
    evaluation and the first row's excess (``compile_s_estimate``) are split into the
    run's first call and its resumed ones.

    Args:
        task: the task.
        e: its record entry (``wmx_commit``, ``calls`` [{action, env_steps_to, timing}]).

    Returns:
        A markdown row, or None when no call has timing (a record made before calls kept
        it).
    """
    calls = [c for c in e.get("calls", []) if isinstance(c.get("timing"), dict)]
    if not calls:
        return None
    rounds = [c["timing"]["median_round_s"] for c in calls
              if c["timing"].get("median_round_s")]
    later_evals = [x for c in calls for x in c["timing"].get("evals_s", [])[1:]]
    first = [c for c in calls if c.get("action") == "new"]
    resumed = [c for c in calls if c.get("action") != "new"]

    def firsts(cs, key):
        return [c["timing"][key][0] if key == "evals_s" else c["timing"][key]
                for c in cs if c["timing"].get(key)]

    if rounds:
        r = statistics.median(rounds)
        training = f"{r:.2f} ({1000.0 / r:.1f})"
    else:
        training = "-"
    reached = ", ".join(f"{c['env_steps_to']:,}" for c in calls)
    return (f"| {task} | {str(e.get('wmx_commit', '?'))[:7]} | {training} | "
            f"{f'{statistics.median(later_evals):.1f}' if later_evals else '-'} | "
            f"{_span(firsts(first, 'evals_s'))} / {_span(firsts(resumed, 'evals_s'))} | "
            f"{_span(firsts(first, 'compile_s_estimate'))} / "
            f"{_span(firsts(resumed, 'compile_s_estimate'))} | {reached} |")


def markdown(data: dict[str, Any], tasks: list[str]) -> str:
    """Both tables for the recorded tasks, in ``tasks``' order (any other recorded task
    after them, sorted).

    Args:
        data: the record (`_mt19_record.load`).
        tasks: the campaign's tasks in order.

    Returns:
        The sources table, a blank line and the speed table (rows of tasks without timing
        left out), each ending in a newline.

    Raises:
        ValueError: one line naming a task whose entry lacks a value a row needs or has
            one of another type.
    """
    recorded = data.get("tasks", {})
    names = [t for t in tasks if t in recorded] + sorted(t for t in recorded if t not in tasks)
    src, spd = [], []
    for t in names:
        try:
            src.append(sources_row(t, recorded[t]))
            spd.append(speed_row(t, recorded[t]))
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            raise ValueError(f"{t}: its record entry is of another shape ({type(e).__name__}: "
                             f"{e}); restore mt19_sources.json from git") from None
    spd = [r for r in spd if r is not None]
    return "\n".join([SOURCES_HEADER, *src]) + "\n\n" + "\n".join([SPEED_HEADER, *spd]) + "\n"
