"""Host loop of an online run: chunks, evaluation, metrics, checkpoints, export.

The device does everything between chunk boundaries (wmx.train_online.program);
the host runs only between chunks (DESIGN.md §3 principle 1): it shows a
progress bar, runs evaluations, appends metrics, exports the episodes that
were completed in the chunk and checkpoints. Chunks are whole rounds of
n_envs episodes, so every chunk boundary is an episode boundary; with
``rc.chunk_ticks`` a round runs in parts, and a boundary inside a round only
checkpoints (the round's rows so far go into the checkpoint as "pending";
export, metrics and evaluation wait for the round's end).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from wmx.checkpoint import newest_intact, restore_checkpoint, save_checkpoint
from wmx.compile_ahead import CompileAhead
from wmx.envs.collector import zero_row
from wmx.envs.playground import cached_env
from wmx.metrics_csv import MetricsCSV
from wmx.runs.finite import check_finite
from wmx.runs.heap import release_free_heap
from wmx.runs.host import (HostState, check_metrics_on_resume, env_steps_at_tick,
                           eval_point, stop_reason, write_json_atomic)
from wmx.runs.interrupt import requested
from wmx.runs.online_config import OnlineRunConfig
from wmx.train_online import program
from wmx.train_online.episode_export import (RunEpisodeExport, episode_returns,
                                             episodes_per_seed)

log = logging.getLogger("wmx.train_online")

BASE_COLUMNS = ("seed", "kind", "agent_steps", "env_steps", "episodes", "return",
                "return_std", "updates", "wall_s")


def metrics_columns(rc: OnlineRunConfig) -> tuple[str, ...]:
    """metrics.csv columns: the run's counters, then the agent's METRIC_KEYS."""
    return BASE_COLUMNS + tuple(rc.agent_module.METRIC_KEYS)


def _fmt(x: float) -> str:
    return f"{x:.1f}"


def initial_carries(rc: OnlineRunConfig, env) -> program.OnlineCarry:
    """The run's carries before its first tick: `program.init_carries`, with the agent
    states of ``rc.init_from`` when set (`wmx.runs.init_from.load_agent_states`: each
    seed's trained state; replay, envs, policy carries, keys and counters fresh)."""
    carries = program.init_carries(rc, env)
    if rc.init_from is None:
        return carries
    from wmx.runs.init_from import load_agent_states
    states = load_agent_states(Path(rc.init_from), rc.agent, rc.agent_config, rc.task,
                               rc.seeds)
    log.info("agents start from %s", rc.init_from)
    return carries._replace(agent=states)


def _round_rows_like(rc: OnlineRunConfig, env, ticks: int):
    """Shapes of ``ticks`` rows of every seed: `wmx.envs.collector.Row` of
    ShapeDtypeStruct [S, ticks, n_envs, ...] (the rows of a ``rc.chunk_ticks`` run's
    round in progress; with ``ticks`` = filled, its checkpoint's "pending" item)."""
    S = len(rc.seeds)
    return jax.tree.map(lambda z: jax.ShapeDtypeStruct((S, ticks) + z.shape, z.dtype),
                        jax.eval_shape(lambda: zero_row(env, rc.n_envs)))


def _round_rows(rc: OnlineRunConfig, env):
    """A zeroed host buffer (numpy) for the T+1 rows of a round, filled part by part."""
    return jax.tree.map(lambda s: np.zeros(s.shape, s.dtype),
                        _round_rows_like(rc, env, env.T + 1))


def _write_rows(buf, at: int, rows) -> None:
    """Copy ``rows`` [S, L, ...] into the round buffer ``buf`` at ticks at..at+L−1."""
    for b, x in zip(jax.tree.leaves(buf), jax.tree.leaves(rows)):
        b[:, at:at + x.shape[1]] = x


def _pending_like(rc: OnlineRunConfig, env, filled: int):
    """Shapes of the rows of a round's first ``filled`` ticks, [S, filled, n_envs, ...]
    (the "pending" item of a checkpoint inside a round). Raises ValueError when
    ``rc.chunk_ticks`` is None (such a checkpoint comes only from a run with it)."""
    if rc.chunk_ticks is None:
        raise ValueError("the newest checkpoint is inside a round (saved by a run with "
                         "--chunk-ticks); resume with the run's own config")
    return _round_rows_like(rc, env, filled)


def _keep_until(rc: OnlineRunConfig, host: dict) -> int:
    """The agent steps (all envs) of the whole rounds before a checkpoint's ``next_tick``:
    the last metrics.csv ``agent_steps`` a resume from it keeps."""
    T = rc.task_spec.T
    return (int(host.get("next_tick", 0)) // (T + 1)) * T * rc.n_envs


def check_resume_metrics(rc: OnlineRunConfig, run_dir: Path, found=None) -> None:
    """`wmx.runs.host.check_metrics_on_resume` of an online run (steps: agent steps of
    whole rounds, `_keep_until`; ``found`` as there). Raises
    wmx.metrics_csv.MetricsLostError (one line)."""
    check_metrics_on_resume(run_dir, metrics_columns(rc), "agent_steps",
                            lambda h: _keep_until(rc, h), found, log)


def run(rc: OnlineRunConfig, run_dir: Path, export: RunEpisodeExport | None, *,
        progress: bool = True, stop_after_chunks: int | None = None,
        deadline: float | None = None, loggers=None,
        stop_request: threading.Event | None = None) -> dict[str, Any]:
    """Train (or continue) the run in ``run_dir`` until its last round.

    ``run_dir`` holds config.json already. If it holds a checkpoint the run
    continues from the newest intact one exactly (`wmx.checkpoint.newest_intact`:
    a damaged newer one is said in one warning line and written again). After
    each chunk, a NaN or inf in its metrics, the agents' states or the rows it
    collected stops the run before anything of the chunk is written
    (`wmx.runs.finite.NonFiniteError`; the last checkpoint is kept).
    ``stop_after_chunks`` stops early after that many chunks of this call (tests of
    resume); ``deadline`` (a ``time.monotonic()`` value) stops after the first chunk
    that ends past it,
    evaluating there (budgeted runs; continue later with ``--resume``: the
    schedule and keys of later evaluations are unchanged by the stop; with
    ``rc.chunk_ticks`` a stop inside a round checkpoints without evaluating, the round's
    evaluation comes at its end after the resume). ``loggers``: a
    `wmx.runs.loggers.RunLoggers` (opened and closed by the caller) that gets every
    metrics.csv row too, x axis env steps. ``stop_request`` (set by a first Ctrl-C or SIGTERM,
    `wmx.runs.interrupt.stop_on_interrupt`) stops after the running chunk with its
    checkpoint and no evaluation. Returns a summary
    dict (final evaluation returns per seed, env steps, wall time).
    """
    env = cached_env(rc.task, rc.episode_length)
    T, n_envs, ar = env.T, rc.n_envs, env.action_repeat
    ticks_per_round = T + 1
    total_ticks = rc.end_rounds * ticks_per_round     # end_env_steps may end it early

    agent = rc.agent_module
    host = HostState(next_eval_env_steps=rc.eval_every)
    found = newest_intact(run_dir, log=log)     # a damaged newer one: said, and skipped
    last_ckpt = found[0] if found else None
    pending = None      # rows of the round in progress (chunk_ticks runs), [S, T+1, ...]
    if not found:
        carries = initial_carries(rc, env)
    else:
        ckpt, h = found
        like = program.checkpoint_items(jax.eval_shape(lambda: program.init_carries(rc, env)))
        host = HostState.from_json(h)
        filled = host.next_tick % ticks_per_round
        if filled:
            like["pending"] = _pending_like(rc, env, filled)
        items, _ = restore_checkpoint(ckpt, like, verify=False)
        if filled:
            pending = _round_rows(rc, env)
            _write_rows(pending, 0, jax.tree.map(np.asarray, items.pop("pending")))
        carries = program.from_checkpoint_items(items)
        log.info("resuming %s from %s (%s env steps per seed; tick %d)", run_dir, ckpt.name,
                 f"{env_steps_at_tick(host.next_tick, T, n_envs, ar):,d}", host.next_tick)
    # One placement for fresh and restored state: orbax returns arrays committed
    # to a device, jit outputs are uncommitted, and jit compiles each anew.
    carries = jax.device_put(carries, jax.devices()[0])
    if host.finished and (run_dir / "summary.json").exists():
        log.info("run %s is finished already", run_dir)
        return json.loads((run_dir / "summary.json").read_text())

    check_resume_metrics(rc, run_dir, found)
    # rows past the checkpoint (all rows when there is none: the run starts over) go
    csv_file = MetricsCSV(run_dir / "metrics.csv", metrics_columns(rc), "agent_steps",
                          keep_until=_keep_until(rc, host.to_json()))
    metrics = csv_file if loggers is None else loggers.attach(csv_file, "env_steps")

    chunk_fn = program.make_chunk_fn(rc, env) if rc.chunk_ticks is None else None
    part_fn = None if rc.chunk_ticks is None else program.make_part_fn(rc, env)
    eval_fn = program.make_eval_fn(rc, env)

    def agent_steps_at(tick: int) -> int:        # per run (all envs), at a round boundary
        return (tick // ticks_per_round) * T * n_envs

    def env_steps_at(tick: int) -> int:          # inside a round too (progress bar)
        return env_steps_at_tick(tick, T, n_envs, ar)

    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=rc.end_total_env_steps, initial=env_steps_at(host.next_tick),
                   unit="env step", unit_scale=True, dynamic_ncols=True,
                   desc=f"{rc.agent} {rc.task} seeds {list(rc.seeds)}")

    def save(with_pending: bool) -> Path:
        host.metrics_rows = csv_file.rows
        items = program.checkpoint_items(carries)
        if with_pending:            # the round's rows so far (a view: no copy)
            filled = host.next_tick % ticks_per_round
            items["pending"] = jax.tree.map(lambda x: x[:, :filled], pending)
        return save_checkpoint(run_dir, host.next_tick, items, host.to_json())

    # The evaluation program is traced and compiled in the background while this
    # process's first chunk runs on the device (the host only waits for it), not at the
    # first evaluation: wmx.compile_ahead. Its executable is the plain call's.
    ahead = CompileAhead(workers=1)

    def compile_eval_ahead() -> None:
        # not for a run asked to stop: its exit would wait for a compile it may not use
        if not ahead.submitted("eval") and not requested(stop_request):
            ahead.submit("eval", eval_fn.jitted,
                         eval_fn.args(carries.agent, carries.key, host.eval_index))

    chunks_done = 0
    try:                    # queued builds are cancelled however the loop ends
        while host.next_tick < total_ticks:
            release_free_heap()     # the last chunk's freed buffers go back to the OS
            t_start = time.perf_counter()
            start = host.next_tick
            updates_before = int(np.asarray(jax.device_get(carries.n_updates)).max())
            if part_fn is None:
                end = min(start + rc.chunk_episodes * ticks_per_round, total_ticks)
                carries, rows = chunk_fn(carries, np.arange(start, end, dtype=np.int32))
                compile_eval_ahead()
                rows = new_rows = jax.device_get(rows)
            else:                               # a part of the round; rows gather in `pending`
                end = min(start + rc.chunk_ticks, (start // ticks_per_round + 1) * ticks_per_round)
                ticks = np.arange(start, start + rc.chunk_ticks, dtype=np.int32)
                carries, rows = part_fn(carries, ticks, ticks < end)
                compile_eval_ahead()
                new_rows = jax.tree.map(lambda x: np.asarray(x)[:, :end - start],
                                        jax.device_get(rows))
                if pending is None:         # a new round: one buffer for all its parts
                    pending = _round_rows(rc, env)
                _write_rows(pending, start % ticks_per_round, new_rows)
                rows = pending              # read at the round's end only, when it is full
            rows_start = end - rows.reward.shape[1]
            agent_steps = agent_steps_at(end)
            env_steps = agent_steps * ar
            span = (f"the chunk of env steps {env_steps_at(start):,d}.."
                    f"{env_steps_at(end):,d} (updates {updates_before}.."
                    f"{int(np.asarray(carries.n_updates).max())})")
            check_finite(span, rc.seeds, jax.device_get(carries.metrics), carries.agent, last_ckpt,
                         extra={f"collected {f}": getattr(new_rows, f)
                                for f in ("obs", "action", "reward")})
            host.next_tick = end

            if end % ticks_per_round:           # inside a round: checkpoint only
                host.wall_s += time.perf_counter() - t_start
                chunks_done += 1
                stop = stop_reason(chunks_done, stop_after_chunks, deadline,
                                   stop_request) is not None
                if stop or chunks_done % rc.checkpoint_every_chunks == 0:
                    last_ckpt = save(with_pending=True)
                if bar is not None:
                    bar.update(env_steps_at(end) - bar.n)
                if stop:
                    break
                continue
            pending = None

            # the chunk's episodes: rounds rows_start // (T+1) .. end // (T+1) - 1
            end_round = end // ticks_per_round
            episodes = episodes_per_seed(rows, T)
            if export is not None:
                export.add_episodes(episodes, rows_start // ticks_per_round)
            train_returns = [episode_returns(eps) for eps in episodes]
            host.exported_rounds = end_round
            host.wall_s += time.perf_counter() - t_start

            rows = []
            m = jax.device_get(carries.metrics)
            n_up = np.asarray(jax.device_get(carries.n_updates))
            for i, seed in enumerate(rc.seeds):
                rets = train_returns[i]
                row = {"seed": seed, "kind": "train", "agent_steps": agent_steps,
                       "env_steps": env_steps, "episodes": end_round * n_envs,
                       "return": float(np.mean(rets)) if len(rets) else "",
                       "return_std": float(np.std(rets)) if len(rets) else "",
                       "updates": int(n_up[i]), "wall_s": round(host.wall_s, 2)}
                row.update(agent.read_metrics({k: v[i] for k, v in m.items()}))
                rows.append(row)
            if agent.METRICS_SINCE_LOG:      # the next row averages the next chunk's updates
                carries = carries._replace(metrics=jax.device_put(
                    jax.tree.map(np.zeros_like, m), jax.devices()[0]))

            final = host.next_tick >= total_ticks
            chunks_done += 1
            stop = None if final else stop_reason(chunks_done, stop_after_chunks, deadline,
                                                  stop_request)
            point = eval_point(env_steps >= host.next_eval_env_steps, final, stop)
            if point.evaluate:
                t_eval = time.perf_counter()
                rets = np.asarray(ahead.call("eval", eval_fn.jitted,
                                             *eval_fn.args(carries.agent, carries.key,
                                                           host.eval_index)))
                if point.advance:
                    host.eval_index += 1
                    while host.next_eval_env_steps <= env_steps:
                        host.next_eval_env_steps += rc.eval_every
                host.last_eval = {str(s): rets[i].tolist() for i, s in enumerate(rc.seeds)}
                host.wall_s += time.perf_counter() - t_eval
                for i, seed in enumerate(rc.seeds):
                    rows.append({"seed": seed, "kind": "eval", "agent_steps": agent_steps,
                                 "env_steps": env_steps, "episodes": rc.eval_episodes,
                                 "return": float(rets[i].mean()), "return_std": float(rets[i].std()),
                                 "updates": int(n_up[i]), "wall_s": round(host.wall_s, 2)})
            metrics.append(rows)

            if final:
                host.finished = True
            if final or chunks_done % rc.checkpoint_every_chunks == 0:
                last_ckpt = save(with_pending=False)
            if bar is not None:
                last_train = [r["return"] for r in rows if r["kind"] == "train" and r["return"] != ""]
                post = {"train": "/".join(_fmt(x) for x in last_train)}
                if host.last_eval:
                    post["eval"] = "/".join(_fmt(float(np.mean(v))) for v in host.last_eval.values())
                chunk_env_steps = (end - start) * n_envs * len(rc.seeds) * ar
                post["sps"] = f"{chunk_env_steps / max(time.perf_counter() - t_start, 1e-9):.0f}"
                bar.set_postfix(post, refresh=False)
                bar.update(env_steps - bar.n)
            if stop is not None:
                if chunks_done % rc.checkpoint_every_chunks:
                    save(with_pending=False)
                break
    finally:
        ahead.close()
    if bar is not None:
        bar.close()
    done = env_steps_at(host.next_tick)      # inside a round too (a stopped run)
    summary = {"run_dir": str(run_dir), "finished": host.finished, "agent_steps": done // ar,
               "env_steps": done,
               "wall_s": host.wall_s, "final_eval": host.last_eval,
               "n_offschedule_dones": np.asarray(jax.device_get(
                   program.offschedule_dones(carries))).tolist()}
    if host.finished:
        if export is not None:
            summary["episode_sets"] = export.finalize()
        write_json_atomic(run_dir / "summary.json", summary)
    return summary
