"""Host loop of an offline run (any agent of the protocol, one task or several): chunks,
evaluation, metrics, checkpoints.

The device runs chunks of ``log_every`` updates (wmx.train_offline.program);
the host runs only between chunks (DESIGN.md §3 principle 1): progress bar,
metrics rows, per-task evaluation every ``eval_every`` updates, checkpoints
every ``checkpoint_every`` updates and at the end. A checkpoint holds the
seeds' full training state and the host counters (with the streaming
iterators' states, bound to the dataset hash), so a run continued from it
by a new process replays the uninterrupted run exactly.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable

import jax
import numpy as np

from wmx.checkpoint import newest_intact, restore_checkpoint, save_checkpoint
from wmx.compile_ahead import CompileAhead
from wmx.envs.playground import cached_env
from wmx.envs.registry import DMC_SCORE_DIVISOR
from wmx.metrics_csv import MetricsCSV
from wmx.runs.finite import check_finite
from wmx.runs.heap import release_free_heap
from wmx.runs.host import (HostState, check_metrics_on_resume, eval_point, stop_reason,
                           write_json_atomic)
from wmx.runs.interrupt import requested
from wmx.runs.offline_config import OfflineRunConfig
from wmx.train_offline import program

log = logging.getLogger("wmx.train_offline")

BASE_COLUMNS = ("seed", "kind", "updates", "task", "episodes", "return", "return_std",
                "score", "wall_s")


def metrics_columns(rc: OfflineRunConfig) -> tuple[str, ...]:
    """metrics.csv columns: BASE_COLUMNS, then the agent's METRIC_KEYS. kind "train":
    mean losses over the last ``log_every`` updates; kind "eval": one row per seed and
    task (return mean/std over the episodes, score = return / 10) and one row with
    task "mean" (mean score)."""
    return BASE_COLUMNS + tuple(rc.agent_module.METRIC_KEYS)

IN_MEMORY_FRACTION = 0.25
"""Datasets up to this fraction of the device's memory (host RAM on CPU) are
loaded into device memory; larger ones stream."""


def dataset_nbytes(ds) -> int:
    """Bytes of the in-memory arrays of an opened pooled dataset (obs, action, reward, task)."""
    ts = ds.taskset
    n, rows = ds.num_episodes, ds.rows
    return 4 * n * (rows * (ts.max_obs_dim + ts.max_action_dim + 1) + 1)


def memory_budget() -> int:
    """Bytes a dataset may take in device memory: IN_MEMORY_FRACTION of the first
    device's memory limit (accelerators) or of the host's physical memory (CPU)."""
    dev = jax.devices()[0]
    try:
        limit = (dev.memory_stats() or {}).get("bytes_limit")
    except Exception:  # noqa: BLE001 - CPU devices may not report
        limit = None
    if not limit:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return int(IN_MEMORY_FRACTION * limit)


def open_run_dataset(rc: OfflineRunConfig, home=None, path=None):
    """Open the run's dataset and check it is the run's content hash and TaskSet.

    path: the folder the run was started on (config.json's ``dataset_path``, e.g. a
    dataset outside the store given to ``--dataset``), used while it holds the run's
    content hash; else ``rc.dataset`` (name@hash) is resolved in ``home``'s store.
    Raises NameResolutionError / FileNotFoundError when it is gone, ValueError when its
    content hash or TaskSet differs from the run's config.
    """
    from wmx.datasets.readers import open_dataset
    if path is not None:
        try:
            ds = open_dataset(path, home=home)
        except (OSError, ValueError):    # moved or no longer a dataset: the store's copy
            ds = None
        if ds is not None and ds.content_hash == rc.dataset_hash:
            return _check_taskset(rc, ds)
    ds = open_dataset(rc.dataset, home=home)
    if ds.content_hash != rc.dataset_hash:
        raise ValueError(f"{rc.dataset} resolved to content hash {ds.content_hash}; the run "
                         f"needs {rc.dataset_hash}")
    return _check_taskset(rc, ds)


def _check_taskset(rc: OfflineRunConfig, ds):
    if ds.taskset.to_dict() != rc.taskset:
        raise ValueError(f"dataset {rc.dataset}'s TaskSet differs from the run's config")
    return ds


def run_dataset_path(run_dir: Path) -> str | None:
    """The dataset folder recorded in the run's config.json (``dataset_path``), if any."""
    try:
        return json.loads((Path(run_dir) / "config.json").read_text()).get("dataset_path")
    except (OSError, ValueError, AttributeError):
        return None


class _Feed:
    """The dataset feed of a run: device arrays, or per-seed Grain streams (placed on the
    run's devices: replicated, batches sharded over the mesh; `program.data_mesh`).
    Both read the run's tasks at the agent config's widths (`rc.task_view()`,
    `wmx.datasets.task_view`), so they draw from the same distribution."""

    def __init__(self, rc: OfflineRunConfig, ds, stream_states: list[dict] | None, mesh=None):
        from wmx.datasets import task_view
        spec = rc.agent_module.batch_spec(rc.agent_config)
        self.stream, self.spec, self.mesh = rc.stream, spec, mesh
        self.view = rc.task_view()
        if not self.stream:
            from wmx.datasets.readers import load_numpy
            arrays = task_view.select_episodes(load_numpy(ds), self.view)
            self.data = program.device_dataset(arrays, spec, mesh)
            self.streams = None
            return
        from wmx.datasets.readers import stream
        episodes = task_view.record_indices(ds, self.view)
        self.streams = [stream(ds, spec, seed=s, num_threads=2, episodes=episodes)
                        for s in rc.seeds]
        if stream_states is not None:
            if len(stream_states) != len(self.streams):
                raise ValueError("checkpoint has stream states for another number of seeds")
            for st, state in zip(self.streams, stream_states):
                st.set_state(state)

    def next_batches(self, n: int) -> dict[str, np.ndarray]:
        """[S, n, ...] stacked batches of the seeds' streams."""
        from wmx.datasets.task_view import view_batch
        per_seed = []
        for st in self.streams:
            bs = [view_batch(next(st), self.view) for _ in range(n)]
            per_seed.append({k: np.stack([b[k] for b in bs]) for k in bs[0]})
        return program.shard_batches({k: np.stack([p[k] for p in per_seed])
                                      for k in per_seed[0]}, self.spec, self.mesh)

    def states(self) -> list[dict] | None:
        return None if self.streams is None else [s.get_state() for s in self.streams]


def check_resume_metrics(rc: OfflineRunConfig, run_dir: Path, found=None) -> None:
    """`wmx.runs.host.check_metrics_on_resume` of an offline run (steps: updates; ``found``
    as there). Past one process only process 0 checks (the others keep their own
    metrics.csv under processes/). Raises wmx.metrics_csv.MetricsLostError (one line)."""
    if jax.process_index() == 0:
        check_metrics_on_resume(run_dir, metrics_columns(rc), "updates",
                                lambda h: int(h.get("updates", 0)), found, log)


def run(rc: OfflineRunConfig, run_dir: Path, *, home=None, progress: bool = True,
        stop_after_chunks: int | None = None, deadline: float | None = None,
        env_fn: Callable[[str, int, int], Any] | None = None, loggers=None,
        stop_request: threading.Event | None = None) -> dict[str, Any]:
    """Train (or continue) the run in ``run_dir`` until ``rc.updates`` updates.

    ``run_dir`` holds config.json already. If it holds a checkpoint the run
    continues from the newest intact one exactly (`wmx.checkpoint.newest_intact`:
    a damaged newer one is said in one warning line and written again). After
    each chunk a NaN or inf in its summed metrics or the agents' states stops the
    run before the chunk's metrics or checkpoint are written (`wmx.runs.finite.NonFiniteError`
    naming the update range and the terms; the last checkpoint is kept).
    ``stop_after_chunks`` stops early
    after that many chunks of this call (tests of resume); ``deadline`` (a
    ``time.monotonic()`` value) stops after the first chunk that ends past it
    and evaluates there (budgeted runs; continue later with ``--resume``; the
    keys of later evaluations are unchanged by the stop). An early stop saves a
    checkpoint where the chunk did not. ``env_fn(task, T,
    action_repeat)`` builds an evaluation env (default: the Playground env,
    cached). ``loggers``: a `wmx.runs.loggers.RunLoggers` (opened and closed by the
    caller) that gets every metrics.csv row too, x axis updates. ``stop_request`` (set
    by a first Ctrl-C or SIGTERM, `wmx.runs.interrupt.stop_on_interrupt`) stops after the
    running chunk with a checkpoint and no extra evaluation. Returns the summary dict (also
    written to summary.json when the run finishes): final per-task evaluation returns
    per seed, mean scores.

    Raises ValueError, before writing anything, when the newest checkpoint
    belongs to another configuration, dataset or TaskSet (or its shapes do
    not match), and the dataset errors of `open_run_dataset`.
    """
    env_fn = env_fn or cached_env
    agent, cfg = rc.agent_module, rc.agent_config
    metric_keys = tuple(agent.METRIC_KEYS)
    ds = open_run_dataset(rc, home, run_dataset_path(run_dir))
    mesh = program.data_mesh(rc.devices)     # None: one device, the single-device program

    host = HostState(training_hash=rc.training_hash(), dataset=rc.dataset)
    found = newest_intact(run_dir, log=log)     # a damaged newer one: said, and skipped
    last_ckpt = found[0] if found else None
    like = program.checkpoint_items(
        jax.eval_shape(lambda: program.init_carries(agent, cfg, rc.seeds)))
    if found:
        ckpt, h = found
        if h.get("training_hash") != rc.training_hash() or h.get("dataset") != rc.dataset:
            raise ValueError(
                f"checkpoint {ckpt} belongs to another run (dataset {h.get('dataset')}, "
                f"training hash {h.get('training_hash')}; this run: {rc.dataset}, "
                f"{rc.training_hash()}): a checkpoint of another TaskSet, dataset or config "
                "cannot be resumed here")
        items, h = restore_checkpoint(ckpt, like, verify=False)
        carries, host = program.from_checkpoint_items(items), HostState.from_json(h)
        log.info("resuming %s from %s (update %d)", run_dir, ckpt.name, host.updates)
    else:
        carries = program.init_carries(agent, cfg, rc.seeds)
    # Committed to one device either way (replicated over the mesh past one device): a
    # restored checkpoint is committed, a fresh init is not, and jit would compile the
    # chunk and eval programs again for it.
    carries = program.replicate(carries, mesh)
    if host.finished and (run_dir / "summary.json").exists():
        log.info("run %s is finished already", run_dir)
        return json.loads((run_dir / "summary.json").read_text())

    if found:
        check_resume_metrics(rc, run_dir, found)
    feed = _Feed(rc, ds, host.streams, mesh)
    csv_file = MetricsCSV(run_dir / "metrics.csv", metrics_columns(rc), "updates",
                          keep_until=host.updates)
    metrics = csv_file if loggers is None else loggers.attach(csv_file, "updates")
    tasks_ctx = agent.task_context(cfg, rc.train_task_set)
    if mesh is not None:
        tasks_ctx = program.replicate(tasks_ctx, mesh)
        log.info("data parallel: batch %d sharded over %d devices", rc.batch, mesh.size)
    chunk_fn = (program.make_stream_chunk_fn if feed.stream else program.make_chunk_fn)(
        agent, cfg, mesh)

    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=rc.updates, initial=host.updates, unit="update", dynamic_ncols=True,
                   desc=f"{rc.agent} {rc.dataset_name}@{rc.dataset_hash[:8]} "
                        f"seeds {list(rc.seeds)}")

    # Every task's evaluation program is traced and compiled in the background while this
    # process's first chunk trains (the host only waits for the device), its compiles
    # several at a time: wmx.compile_ahead. The executables are the plain calls'.
    eval_programs: dict[str, Any] = {}

    def eval_program(name: str):
        if name not in eval_programs:
            info = rc.train_task_set.task(name)
            env = env_fn(name, rc.episode_length or info.episode_length, info.action_repeat)
            eval_programs[name] = program.make_eval_fn(agent, cfg, rc.eval_episodes, env,
                                                       rc.model_task_id(name))
        return eval_programs[name]

    ahead = CompileAhead(workers=max(1, min(4, (os.cpu_count() or 2) // 2)))

    def compile_evals_ahead() -> None:
        # not for a run asked to stop: its exit would wait for compiles it may not use
        if rc.eval_tasks and not ahead.submitted(rc.eval_tasks[0]) \
                and not requested(stop_request):
            for name in rc.eval_tasks:       # the envs are made here, the device busy
                prog = eval_program(name)
                ahead.submit(name, prog.jitted,
                             prog.args(carries.agent, carries.key, tasks_ctx, host.eval_index))

    chunks_done = 0
    try:                    # queued builds are cancelled however the loop ends
        while host.updates < rc.updates:
            release_free_heap()     # the last chunk's freed buffers go back to the OS
            t_start = time.perf_counter()
            start, end = host.updates, min(host.updates + rc.log_every, rc.updates)
            sums = {k: np.zeros(len(rc.seeds)) for k in metric_keys}
            if feed.stream:
                for a in range(start, end, rc.stream_chunk):
                    b = min(a + rc.stream_chunk, end)
                    carries, s = chunk_fn(carries, feed.next_batches(b - a), tasks_ctx,
                                          np.arange(a, b, dtype=np.int32))
                    compile_evals_ahead()
                    for k in sums:
                        sums[k] += np.asarray(s[k], np.float64)
            else:
                carries, s = chunk_fn(carries, feed.data, tasks_ctx,
                                      np.arange(start, end, dtype=np.int32))
                compile_evals_ahead()
                sums = {k: np.asarray(v, np.float64) for k, v in jax.device_get(s).items()}
            check_finite(f"updates {start}..{end}", rc.seeds, sums, carries.agent, last_ckpt)
            host.updates = end
            host.wall_s += time.perf_counter() - t_start
            rows = [{"seed": seed, "kind": "train", "updates": end, "wall_s": round(host.wall_s, 2),
                     **{k: float(sums[k][i] / (end - start)) for k in metric_keys}}
                    for i, seed in enumerate(rc.seeds)]

            final = end >= rc.updates
            chunks_done += 1
            stop = None if final else stop_reason(chunks_done, stop_after_chunks, deadline,
                                                  stop_request)
            point = eval_point(end % rc.eval_every == 0, final, stop)
            if point.evaluate:
                rows += _evaluate(rc, carries, tasks_ctx, host, eval_program, ahead,
                                  advance=point.advance)
            metrics.append(rows)
            if final:
                host.finished = True
            saved = final or end % rc.checkpoint_every == 0
            if saved or stop is not None:
                host.streams, host.metrics_rows = feed.states(), csv_file.rows
                last_ckpt = save_checkpoint(run_dir, end, program.checkpoint_items(carries),
                                            host.to_json())
            if bar is not None:
                post = {"loss": "/".join(f"{r[agent.LOSS_KEY]:.3g}" for r in rows[:len(rc.seeds)])}
                if host.last_eval:
                    post["score"] = f"{_mean_score(host.last_eval):.1f}"
                bar.set_postfix(post, refresh=False)
                bar.update(end - bar.n)
            if stop is not None:
                break
    finally:
        ahead.close()
    if bar is not None:
        bar.close()
    summary = {"run_dir": str(run_dir), "finished": host.finished, "updates": host.updates,
               "dataset": rc.dataset, "wall_s": host.wall_s,
               "final_eval": {t: {s: float(np.mean(v)) for s, v in per.items()}
                              for t, per in host.last_eval.items()},
               "final_eval_episodes": host.last_eval,
               "final_score": _mean_score(host.last_eval) if host.last_eval else None}
    if host.finished:
        write_json_atomic(run_dir / "summary.json", summary)
    return summary


def _mean_score(last_eval: dict[str, dict[str, list[float]]]) -> float:
    """Mean over tasks and seeds of return / 10 (tdmpc2_spec 4.20)."""
    return float(np.mean([np.mean(v) / DMC_SCORE_DIVISOR for per in last_eval.values()
                          for v in per.values()]))


def _evaluate(rc: OfflineRunConfig, carries, tasks_ctx, host: HostState, eval_program,
              ahead: CompileAhead, advance: bool = True):
    """Evaluate every task of rc.eval_tasks; update host.last_eval; return metric rows.
    ``eval_program(task)``: its `wmx.acting.EvalProgram`, run by ``ahead`` (compiled
    ahead where it was submitted). ``advance=False`` leaves ``host.eval_index`` (the
    rollout keys) for the next one."""
    t0 = time.perf_counter()
    rows, scores = [], {s: [] for s in rc.seeds}
    last: dict[str, dict[str, list[float]]] = {}
    for name in rc.eval_tasks:
        prog = eval_program(name)
        rets = np.asarray(ahead.call(name, prog.jitted, *prog.args(
            carries.agent, carries.key, tasks_ctx, host.eval_index)), np.float64)
        last[name] = {str(s): rets[i].tolist() for i, s in enumerate(rc.seeds)}
        for i, s in enumerate(rc.seeds):
            score = float(rets[i].mean()) / DMC_SCORE_DIVISOR
            scores[s].append(score)
            rows.append({"seed": s, "kind": "eval", "updates": host.updates, "task": name,
                         "episodes": rc.eval_episodes, "return": float(rets[i].mean()),
                         "return_std": float(rets[i].std()), "score": score})
    host.eval_index += int(advance)
    host.last_eval = last
    host.wall_s += time.perf_counter() - t0
    for s in rc.seeds:
        rows.append({"seed": s, "kind": "eval", "updates": host.updates, "task": "mean",
                     "episodes": rc.eval_episodes * len(rc.eval_tasks),
                     "score": float(np.mean(scores[s]))})
    for r in rows:
        r["wall_s"] = round(host.wall_s, 2)
    return rows
