"""train_offline on a pooled dataset built (real Beam build) from stored real Playground
episodes: training + per-task evaluation, exact resume, bad input.

The dataset pools cartpole-balance (O=5, A=1) and cheetah-run (O=17, A=6)
episodes of T=20 (tests/pipelines/data, see episode_fixtures). One tiny
configuration is used throughout, so the update chunk compiles once for the
module. In the default run the evaluation envs are stand-ins with the
tasks' dims (an MJX compile per task costs minutes of CPU); the `slow` test
evaluates on the real Playground tasks through the unpatched CLI, and the
streaming feed's exact resume (one more compile) is slow too. The data-parallel
tests (--devices) run data_parallel_check.py in a subprocess with emulated CPU
devices; the default one compiles only the 4-device chunk there and compares
it with this module's 1-device chunk.
"""
from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import playground_info, taskset_of  # noqa: E402

from stand_in_env import stand_in_env  # noqa: E402
from tiny_runs import (TINY_OFFLINE_ARGS, build_offline_dataset,  # noqa: E402
                       last_offline_checkpoint, train_offline_on_stand_ins)
from wmx.checkpoint import list_checkpoints  # noqa: E402
from wmx.pipelines.sources import make_plan, run_build  # noqa: E402
from wmx.train_offline import cli, loop, program  # noqa: E402
from wmx.runs.offline_config import OfflineRunConfig  # noqa: E402

T = 20
TASKS = ("cartpole-balance", "cheetah-run")
ARGS = TINY_OFFLINE_ARGS


@pytest.fixture(autouse=True)
def _stand_in_envs(request, monkeypatch):
    if request.node.name != "test_real_playground_evaluation":
        monkeypatch.setattr(loop, "cached_env", stand_in_env)


def _metrics(run_dir, drop=("wall_s",)):
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(f)]


def _train_rows(run_dir):
    return [r for r in _metrics(run_dir) if r["kind"] == "train"]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Home with dataset "tst" (both tasks, 6 + 6 episodes) and "one" (cartpole only)."""
    home = tmp_path_factory.mktemp("home")
    tst = build_offline_dataset(home)
    one = run_build(make_plan(home, taskset_of("one", [playground_info(TASKS[0])]),
                              num_shards=1))
    return home, tst, one


@pytest.fixture(scope="module")
def full_run(store):
    home, tst, _ = store
    assert train_offline_on_stand_ins(["--dataset", f"tst@{tst.name[:8]}", "--home", str(home),
                                       "--name", "full", *ARGS]) == 0
    return home / "runs" / "full"


def test_run_trains_and_evaluates_every_task(store, full_run):
    _, tst, _ = store
    cfg = json.loads((full_run / "config.json").read_text())
    assert cfg["dataset"] == f"tst@{tst.name}" and len(tst.name) == 64
    assert cfg["code_version"] and [t["name"] for t in cfg["taskset"]["tasks"]] == list(TASKS)
    ac = cfg["resolved_agent_config"]
    assert (ac["num_tasks"], ac["obs_dim"], ac["action_dim"], ac["batch_size"]) == (2, 17, 6, 16)
    rows = _metrics(full_run)
    train = [r for r in rows if r["kind"] == "train"]
    assert [int(r["updates"]) for r in train] == [2, 2, 4, 4, 6, 6]
    assert all(np.isfinite(float(r["total_loss"])) for r in train)
    evals = [r for r in rows if r["kind"] == "eval" and r["task"] != "mean"]
    # evaluations after 4 updates and at the end (6), every task, every seed
    assert [(int(r["updates"]), r["task"], r["seed"]) for r in evals] == [
        (u, t, s) for u in (4, 6) for t in TASKS for s in ("0", "1")]
    for r in evals:
        ret = float(r["return"])
        assert 0 <= ret <= T and float(r["score"]) == pytest.approx(ret / 10)
    means = [r for r in rows if r["task"] == "mean"]
    assert float(means[-1]["score"]) == pytest.approx(
        np.mean([float(r["score"]) for r in evals[-4:] if r["seed"] == means[-1]["seed"]]))
    summary = json.loads((full_run / "summary.json").read_text())
    assert summary["finished"] and summary["updates"] == 6
    assert set(summary["final_eval"]) == set(TASKS)
    assert all(len(v) == 2 for per in summary["final_eval_episodes"].values()
               for v in per.values())


def test_every_task_evaluation_compiles_ahead_and_equals_the_plain_call(
        store, full_run, caplog, compile_ahead_calls):
    """Every task's evaluation program is handed to wmx.compile_ahead with the first chunk;
    each evaluation runs that executable (no fallback said), with the plain call's bits,
    and the run's metrics are the full run's."""
    import logging
    home, tst, _ = store
    with caplog.at_level(logging.INFO, logger="wmx.compile_ahead"):
        assert train_offline_on_stand_ins(["--dataset", f"tst@{tst.name[:8]}", "--home",
                                           str(home), "--name", "ahead", *ARGS]) == 0
    assert compile_ahead_calls == [(t, True) for _ in (4, 6) for t in TASKS]
    assert caplog.records == []
    assert _metrics(home / "runs" / "ahead") == _metrics(full_run)


def test_dataset_is_an_argument_not_a_constant(store, full_run):
    """The jitted chunk takes the dataset as an unbatched parameter (DESIGN.md §5)."""
    home, _, _ = store
    rc = OfflineRunConfig.from_json(json.loads((full_run / "config.json").read_text()))
    ds = loop.open_run_dataset(rc, home)
    from wmx.datasets.readers import load_numpy
    agent, cfg = rc.agent_module, rc.agent_config
    data = program.device_dataset(load_numpy(ds), agent.batch_spec(cfg))
    carries = program.init_carries(agent, cfg, rc.seeds)
    text = program.make_chunk_fn(agent, cfg).lower(
        carries, data, agent.task_context(cfg, rc.task_set),
        np.arange(2, dtype=np.int32)).as_text()
    n = ds.num_episodes
    sig = text[text.index("func.func public @main"):].split("\n")[0]
    assert f"tensor<{n}x{T + 1}x17xf32>" in sig                 # obs is a parameter
    assert f"tensor<2x{n}x{T + 1}x17xf32>" not in text          # not copied per seed
    assert not any("constant" in line and f"tensor<{n}x{T + 1}x17xf32>" in line
                   for line in text.splitlines())          # not closed over


def test_dataset_given_by_path_outside_the_store_is_the_one_trained_on(store, full_run,
                                                                         tmp_path):
    """--dataset PATH: the run reads that folder (config.json's dataset_path), not a copy
    of the same name in the store; here the home has no copy at all."""
    _, tst, _ = store
    elsewhere = tmp_path / "elsewhere" / "tst" / tst.name
    shutil.copytree(tst, elsewhere)
    home = tmp_path / "home"
    assert cli.main(["--dataset", str(elsewhere), "--home", str(home), "--name", "by-path",
                     *ARGS]) == 0
    run_dir = home / "runs" / "by-path"
    assert json.loads((run_dir / "config.json").read_text())["dataset_path"] == str(elsewhere)
    assert _train_rows(run_dir) == _train_rows(full_run)


def test_cli_stopped_by_ctrl_c_exits_130_with_the_resume_command(store, monkeypatch, capsys):
    import os
    import signal

    def interrupted(*args, stop_request, **kw):
        os.kill(os.getpid(), signal.SIGINT)      # a first Ctrl-C: the run stops unfinished
        assert stop_request.is_set()
        return {"finished": False, "updates": 2, "final_eval": {}, "final_score": None}

    monkeypatch.setattr(loop, "run", interrupted)
    home, _, _ = store
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), "--name", "intr",
                     *ARGS]) == 130
    out, err = capsys.readouterr()
    assert "stopped by Ctrl-C" in err
    assert f"continue with: train_offline --resume {home / 'runs' / 'intr'}" in err
    assert '"final_eval"' not in out and "metrics:" not in out   # no summary of a stopped run


def test_stop_request_stops_after_the_chunk_and_resumes_exactly(store, full_run):
    """A first Ctrl-C (wmx.runs.interrupt) sets the stop request: the run stops after the
    running chunk with a checkpoint and no extra evaluation; resumed, it equals the
    uninterrupted run."""
    import threading
    home, _, _ = store
    run_dir = home / "runs" / "interrupted"
    run_dir.mkdir()
    shutil.copy(full_run / "config.json", run_dir / "config.json")
    rc = OfflineRunConfig.from_json(json.loads((run_dir / "config.json").read_text()))
    stop = threading.Event()
    stop.set()
    s = loop.run(rc, run_dir, home=home, progress=False, stop_request=stop)
    assert not s["finished"] and s["updates"] == 2 and not s["final_eval"]
    assert [int(c.name) for c in list_checkpoints(run_dir)] == [2]
    assert loop.run(rc, run_dir, home=home, progress=False)["finished"]
    assert _metrics(run_dir) == _metrics(full_run)


def test_split_run_equals_uninterrupted(store, full_run, monkeypatch):
    home, _, _ = store
    split = home / "runs" / "split"
    split.mkdir()
    shutil.copy(full_run / "config.json", split / "config.json")
    rc = OfflineRunConfig.from_json(json.loads((split / "config.json").read_text()))
    trims = []                                  # the heap is trimmed before every chunk
    monkeypatch.setattr(loop, "release_free_heap", lambda: trims.append(1))
    s = loop.run(rc, split, home=home, progress=False, stop_after_chunks=2)
    assert not s["finished"] and s["updates"] == 4 and len(trims) == 2
    assert cli.main(["--resume", str(split)]) == 0          # with the progress bar
    assert _metrics(split) == _metrics(full_run)
    (a, ha), (b, hb) = last_offline_checkpoint(split, rc), last_offline_checkpoint(full_run, rc)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert ha["last_eval"] == hb["last_eval"] and ha["eval_index"] == hb["eval_index"] == 2


def test_deadline_stops_after_a_whole_chunk_and_checkpoints(store, full_run):
    """``deadline``: stop after the chunk that ends past it, evaluating there (off the
    schedule) and with a checkpoint even between checkpoint periods; the continued
    run's rows equal the uninterrupted run's, the stop's evaluation rows aside."""
    import time
    home, _, _ = store
    cfg = json.loads((full_run / "config.json").read_text())
    cfg["checkpoint_every"] = 4                      # the stop at 2 is off-period
    rc = OfflineRunConfig.from_json(cfg)
    dl = home / "runs" / "deadline"
    dl.mkdir()
    (dl / "config.json").write_text(json.dumps(cfg))
    s = loop.run(rc, dl, home=home, progress=False, deadline=time.monotonic() - 1)
    assert not s["finished"] and s["updates"] == 2
    assert [int(p.name) for p in list_checkpoints(dl)] == [2]
    stop_eval = [r for r in _metrics(dl) if r["kind"] == "eval"]
    assert {(r["updates"], r["task"]) for r in stop_eval} == {("2", t) for t in [*TASKS, "mean"]}
    assert set(s["final_eval"]) == set(TASKS)
    assert cli.main(["--resume", str(dl), "--no-progress"]) == 0
    rows = [r for r in _metrics(dl) if not (r["kind"] == "eval" and r["updates"] == "2")]
    assert rows == _metrics(full_run)


@pytest.mark.slow
def test_streaming_split_run_equals_uninterrupted(store):
    """--stream: per-seed Grain streams, iterator states checkpointed with the dataset hash
    (one more compile, ~45 s of CPU: slow)."""
    home, tst, _ = store
    base = ["--dataset", f"tst@{tst.name[:8]}", "--home", str(home), "--stream",
            "--skip-validation", *ARGS[:ARGS.index("--updates")], "--updates", "4",
            "--log-every", "2", "--eval-every", "4", "--checkpoint-every", "2",
            "--eval-episodes", "2", "--seeds", "0", "1", "--no-progress"]
    assert cli.main(base + ["--name", "sfull"]) == 0
    sfull = home / "runs" / "sfull"
    rc = OfflineRunConfig.from_json(json.loads((sfull / "config.json").read_text()))
    assert rc.stream
    ssplit = home / "runs" / "ssplit"
    ssplit.mkdir()
    shutil.copy(sfull / "config.json", ssplit / "config.json")
    loop.run(rc, ssplit, home=home, progress=False, stop_after_chunks=1)
    h = json.loads((list_checkpoints(ssplit)[-1] / "host.json").read_text())
    assert [s["dataset"] for s in h["streams"]] == [tst.name] * 2
    assert cli.main(["--resume", str(ssplit), "--no-progress"]) == 0
    assert _metrics(ssplit) == _metrics(sfull)


# ---- data parallel (--devices): emulated CPU devices in a subprocess ----------------------
DP_CHECK = Path(__file__).with_name("data_parallel_check.py")
REPO = Path(__file__).resolve().parents[2]
# float32 reordering of the gradient reduction over the devices (measured after 4 updates:
# summed losses differ by <= 1.9e-6, state leaves by <= 1.2e-7; docs/datasets.md section 7)
DP_RTOL, DP_ATOL = 1e-5, 1e-5


def _dp_check(*args, timeout=1200):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    r = subprocess.run([sys.executable, str(DP_CHECK), *map(str, args)], env=env, cwd=REPO,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    return json.loads(lines[-1][len("RESULT "):]) if lines else None


def _dp_compare(store, full_run, tmp_path, stream: bool):
    """4 emulated devices (subprocess) vs this process's one device: two chunks of 2 updates
    from the same initial states at global batch 16; losses and parameters compared."""
    home, _, _ = store
    rc = OfflineRunConfig.from_json(json.loads((full_run / "config.json").read_text()))
    agent, cfg = rc.agent_module, rc.agent_config
    spec = agent.batch_spec(cfg)
    init = program.init_carries(agent, cfg, rc.seeds)
    saved = {f"leaf{i:04d}": np.asarray(x)
             for i, x in enumerate(jax.tree.leaves(program.checkpoint_items(init)))}
    idx = [np.arange(0, 2, dtype=np.int32), np.arange(2, 4, dtype=np.int32)]
    ds = loop.open_run_dataset(rc, home)
    if stream:
        import dataclasses
        feed = loop._Feed(dataclasses.replace(rc, stream=True), ds, None)
        data = [feed.next_batches(2) for _ in idx]
        saved.update({f"batch{c}/{k}": v for c, b in enumerate(data) for k, v in b.items()})
        fn = program.make_stream_chunk_fn(agent, cfg)
    else:
        from wmx.datasets.readers import load_numpy
        data = [program.device_dataset(load_numpy(ds), spec)] * 2
        fn = program.make_chunk_fn(agent, cfg)      # the module's runs compiled it already
    np.savez(tmp_path / "init.npz", **saved)
    facts = _dp_check("chunk", 4, full_run, home, tmp_path / "init.npz", tmp_path / "out.npz",
                      *(["--stream"] if stream else []))
    four = np.load(tmp_path / "out.npz")

    carries = jax.device_put(init, jax.devices()[0])           # as loop.run places them
    for c in (0, 1):
        carries, sums = fn(carries, data[c], agent.task_context(cfg, rc.task_set), idx[c])
        for k, v in sums.items():
            np.testing.assert_allclose(four[f"sums{c}/{k}"], np.asarray(v), rtol=DP_RTOL,
                                       atol=DP_ATOL, err_msg=f"chunk {c} {k}")
    one = jax.tree.leaves(program.checkpoint_items(carries))
    assert len(one) == sum(k.startswith("leaf") for k in four.files)
    for i, x in enumerate(one):
        np.testing.assert_allclose(four[f"leaf{i:04d}"], np.asarray(x), rtol=DP_RTOL,
                                   atol=DP_ATOL, err_msg=f"leaf {i}")
    np.testing.assert_array_equal(four[f"leaf{len(one) - 1:04d}"], [4, 4])   # n_updates
    # the 4-device program really shards: obs [S, H+1, B/4, O] per device, gradients reduced
    assert facts["devices"] == facts["mesh"] == 4 and facts["carries_replicated"]
    assert facts["per_device_obs"] and not facts["global_obs"] and facts["all_reduces"] > 0
    return facts


def test_four_devices_compute_the_updates_of_one(store, full_run, tmp_path):
    """--devices 4 on emulated CPU devices: the batch of each update sharded over a 4-device
    mesh, parameters replicated; after 4 updates the summed losses and every parameter and
    optimiser leaf equal the 1-device program's within float32 reordering tolerance."""
    _dp_compare(store, full_run, tmp_path, stream=False)


@pytest.mark.slow
def test_four_devices_streaming_feed(store, full_run, tmp_path):
    """The streaming feed's host batches placed sharded (`shard_batches`) on 4 devices vs one
    device (the streaming chunk compiles on both sides: slow)."""
    facts = _dp_compare(store, full_run, tmp_path, stream=True)
    assert facts["batch_sharding"] == str(jax.sharding.PartitionSpec(None, None, None, "data"))


@pytest.mark.slow
def test_four_devices_end_to_end_and_resume_on_another_count(store, full_run):
    """`train_offline --devices 4` through the CLI (subprocess, stand-in envs): config.json
    records 4 devices and the same training hash; the train rows equal the 1-device run's
    within tolerance. Resumes across device counts continue: the 1-device run's checkpoint
    at 4 updates finished on 4 devices, and the 4-device run's checkpoint finished here
    on one device."""
    home, tst, _ = store
    base = ["--dataset", f"tst@{tst.name[:8]}", "--home", str(home), "--skip-validation",
            *ARGS]
    one_to_four = home / "runs" / "one-to-four"
    one_to_four.mkdir()
    shutil.copy(full_run / "config.json", one_to_four / "config.json")
    shutil.copy(full_run / "metrics.csv", one_to_four / "metrics.csv")
    (one_to_four / "checkpoints").mkdir()
    shutil.copytree(full_run / "checkpoints" / f"{4:012d}",
                    one_to_four / "checkpoints" / f"{4:012d}")
    _dp_check("cli", 4, "--", *base, "--name", "dp4", "--devices", "4",
              "--", "--resume", one_to_four, "--no-progress")
    dp4 = home / "runs" / "dp4"
    cfg, cfg1 = (json.loads((d / "config.json").read_text()) for d in (dp4, full_run))
    assert cfg["devices"] == 4 and cfg1["devices"] == 1
    assert cfg["training_hash"] == cfg1["training_hash"]

    def close(rows, ref):
        assert [(r["seed"], r["updates"]) for r in rows] == [(r["seed"], r["updates"])
                                                            for r in ref]
        for r, q in zip(rows, ref):
            for k in rc.agent_module.METRIC_KEYS:
                assert float(r[k]) == pytest.approx(float(q[k]), rel=DP_RTOL, abs=DP_ATOL), k

    rc = OfflineRunConfig.from_json(cfg)
    close(_train_rows(dp4), _train_rows(full_run))
    close(_train_rows(one_to_four), _train_rows(full_run))
    evals = [r for r in _metrics(dp4) if r["kind"] == "eval" and r["task"] != "mean"]
    assert {(r["updates"], r["task"]) for r in evals} == {(u, t) for u in ("4", "6")
                                                          for t in TASKS}
    assert json.loads((dp4 / "summary.json").read_text())["finished"]

    four_to_one = home / "runs" / "four-to-one"
    four_to_one.mkdir()
    for f in ("config.json", "metrics.csv"):
        shutil.copy(dp4 / f, four_to_one / f)
    (four_to_one / "checkpoints").mkdir()
    shutil.copytree(dp4 / "checkpoints" / f"{4:012d}", four_to_one / "checkpoints" / f"{4:012d}")
    assert cli.main(["--resume", str(four_to_one), "--no-progress"]) == 0
    close(_train_rows(four_to_one), _train_rows(full_run))


@pytest.mark.slow
def test_two_processes_of_two_devices(store, full_run):
    """`--coordinator/--num-processes/--process-id` on one machine: 2 processes x 2 emulated
    CPU devices (jax.distributed, gloo collectives), one run directory. Process 0 writes the
    run (metrics, checkpoints, summary), process 1 its own metrics under processes/1/; both
    equal the 1-device run's within tolerance, and the checkpoint process 0 wrote resumes
    here on one device."""
    import socket
    home, tst, _ = store
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    procs = [subprocess.Popen(
        [sys.executable, str(DP_CHECK), "cli", "2", "--", "--dataset", f"tst@{tst.name[:8]}",
         "--home", str(home), "--skip-validation", *ARGS, "--name", "mp",
         "--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)],
        env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in (0, 1)]
    outs = [p.communicate(timeout=2400)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outs)
    mp = home / "runs" / "mp"
    cfg = json.loads((mp / "config.json").read_text())
    assert cfg["devices"] == 4
    rc = OfflineRunConfig.from_json(cfg)
    ref = _train_rows(full_run)
    for rows in (_train_rows(mp), _train_rows(mp / "processes" / "1")):
        assert [(r["seed"], r["updates"]) for r in rows] == [(r["seed"], r["updates"])
                                                            for r in ref]
        for r, q in zip(rows, ref):
            for k in rc.agent_module.METRIC_KEYS:
                assert float(r[k]) == pytest.approx(float(q[k]), rel=DP_RTOL, abs=DP_ATOL), k
    assert [p.name for p in list_checkpoints(mp)] == [f"{4:012d}", f"{6:012d}"]
    assert (mp / "processes" / "1" / "checkpoints").is_symlink()
    resumed = home / "runs" / "mp-resumed"
    resumed.mkdir()
    for f in ("config.json", "metrics.csv"):
        shutil.copy(mp / f, resumed / f)
    (resumed / "checkpoints").mkdir()
    shutil.copytree(mp / "checkpoints" / f"{4:012d}", resumed / "checkpoints" / f"{4:012d}")
    assert cli.main(["--resume", str(resumed), "--no-progress"]) == 0
    for r, q in zip(_train_rows(resumed), ref):
        assert float(r["total_loss"]) == pytest.approx(float(q["total_loss"]), rel=DP_RTOL,
                                                       abs=DP_ATOL)


def test_bad_device_count_is_an_error(store, capsys):
    """More devices than exist, a batch that does not split evenly, an incomplete set of host
    flags or several processes without --name: a one-line error naming the flags, nothing
    written."""
    home, tst, _ = store
    before = _listing(home)
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), *ARGS,
                     "--devices", str(jax.device_count() + 1)]) == 2
    assert "--devices" in capsys.readouterr().err
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), *ARGS,
                     "--coordinator", "localhost:9876"]) == 2
    assert "--num-processes and --process-id go together" in capsys.readouterr().err
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), *ARGS, "--coordinator",
                     "localhost:9876", "--num-processes", "2", "--process-id", "0"]) == 2
    assert "the same --name" in capsys.readouterr().err
    assert _listing(home) == before
    from wmx.datasets.readers import open_dataset
    ds = open_dataset(tst)
    with pytest.raises(ValueError, match="--batch-size 16 is not divisible by --devices 3"):
        OfflineRunConfig(dataset=f"tst@{ds.content_hash}", taskset=ds.taskset.to_dict(),
                         preset="tiny", batch_size=16, devices=3)


# ---- bad input: a clear error, nothing written -------------------------------------------
def _listing(home):
    return sorted(str(p.relative_to(home)) for p in Path(home).rglob("*"))


def test_unresolvable_dataset_is_an_error(store, tmp_path, capsys):
    home, _, _ = store
    before = _listing(home)
    assert cli.main(["--dataset", "tst@0123456789", "--home", str(home), *ARGS]) == 2
    assert "0123456789" in capsys.readouterr().err
    assert cli.main(["--dataset", "nope@latest", "--home", str(tmp_path / "empty"), *ARGS]) == 2
    assert "nope" in capsys.readouterr().err
    assert _listing(home) == before and not (tmp_path / "empty" / "runs").exists()


def test_failing_validation_is_an_error(store, tmp_path, capsys):
    _, tst, _ = store
    home = tmp_path / "bad"
    dest = home / "datasets" / "tst" / tst.name
    shutil.copytree(tst, dest)
    shard = sorted(dest.glob("shard-*"))[0]
    raw = bytearray(shard.read_bytes())
    raw[-40] ^= 0xFF
    shard.write_bytes(bytes(raw))
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), *ARGS]) == 2
    err = capsys.readouterr().err
    assert "failed validation" in err and "shard_digest" in err and shard.name in err
    assert not (home / "runs").exists()


def test_unknown_task_is_an_error(store, capsys):
    home, _, _ = store
    before = _listing(home)
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), "--tasks", "walker-run",
                     *ARGS]) == 2
    err = capsys.readouterr().err
    assert "walker-run" in err and "cartpole-balance" in err and "cheetah-run" in err
    assert _listing(home) == before


@pytest.mark.parametrize("flag", ["--log-every", "--checkpoint-every"])
def test_zero_period_is_an_error_not_the_default(store, flag, capsys):
    """--log-every 0 / --checkpoint-every 0 are refused in one line naming the flag (they
    once fell back silently to the defaults), nothing written."""
    home, _, _ = store
    before = _listing(home)
    args = list(ARGS)
    args[args.index(flag) + 1] = "0"
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), *args]) == 2
    assert f"{flag} must be > 0, got 0" in capsys.readouterr().err
    assert _listing(home) == before


@pytest.mark.parametrize("change", ["config", "taskset"])
def test_checkpoint_of_another_run_is_refused(store, full_run, change, capsys):
    home, _, one = store
    cfg = json.loads((full_run / "config.json").read_text())
    if change == "config":
        cfg["batch_size"] = 8
    else:
        from wmx.datasets.readers import open_dataset
        ds = open_dataset(one)
        cfg["dataset"], cfg["taskset"] = f"one@{ds.content_hash}", ds.taskset.to_dict()
    other = home / "runs" / f"other-{change}"
    other.mkdir()
    (other / "config.json").write_text(json.dumps(cfg))
    shutil.copytree(full_run / "checkpoints", other / "checkpoints")
    before = _listing(other)
    assert cli.main(["--resume", str(other), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "belongs to another run" in err and "checkpoint" in err
    assert _listing(other) == before


def test_resume_with_another_dataset_is_refused(store, full_run, capsys):
    home, _, one = store
    before = _listing(full_run)
    assert cli.main(["--resume", str(full_run), "--dataset", "one@latest"]) == 2
    assert "trains on tst@" in capsys.readouterr().err
    assert _listing(full_run) == before


def test_dry_run_prints_counts_and_writes_nothing(store, capsys):
    home, _, _ = store
    before = _listing(home)
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), "--dry-run", *ARGS]) == 0
    out = capsys.readouterr().out
    assert "task_emb" in out and "total" in out and "2 tasks" in out
    assert "192" in out   # task_emb: 2 tasks x task_dim 96
    assert _listing(home) == before


def test_dry_run_counts_one_task_and_one_episode_in_the_singular(store, capsys):
    """TD-MPC2 on one task is still a multi-task model: "multi-task on 1 task", and one
    evaluation episode reads "1 episode per task and seed"."""
    home, _, _ = store
    args = list(ARGS)
    args[args.index("--eval-episodes") + 1] = "1"
    assert cli.main(["--dataset", "tst@latest", "--home", str(home), "--dry-run", "--tasks",
                     "cartpole-balance", *args]) == 0
    out = capsys.readouterr().out
    assert "tdmpc2 multi-task on 1 task, obs_dim" in out
    assert "(1 episode per task and seed)" in out and "1 tasks" not in out


@pytest.mark.slow
def test_real_playground_evaluation(store):
    """Unpatched CLI: evaluation on the real Playground tasks (one MJX compile each)."""
    home, tst, _ = store
    assert cli.main(["--dataset", f"tst@{tst.name[:8]}", "--home", str(home), "--name", "real",
                     *ARGS[:ARGS.index("--updates")], "--updates", "2", "--log-every", "2",
                     "--eval-every", "2", "--eval-episodes", "2", "--seeds", "0",
                     "--no-progress"]) == 0
    summary = json.loads((home / "runs" / "real" / "summary.json").read_text())
    rets = summary["final_eval_episodes"]
    assert set(rets) == set(TASKS)
    # DMC rewards are in [0, 1] per simulator step; T=20 agent steps at action repeat 2
    for task in TASKS:
        assert all(0 <= r <= 2 * T for r in rets[task]["0"])
    # an upright cartpole earns ~1 per step: well above zero even for an untrained model
    assert min(rets["cartpole-balance"]["0"]) > 10
