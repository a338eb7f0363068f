"""train_online on a probe env: exact resume, episode export, CLI errors.

One tiny configuration is used throughout (conftest.py's `tiny_online_run`,
shared with tests/evaluate), so the chunk and evaluation programs compile
once for the session (they are cached per config and env).
"""
import csv
import json
import logging
import signal
import time

import numpy as np
import pytest

from tiny_runs import T, TINY_RC as RC
from wmx.episode_sets.episode_set import read_episode_set
from wmx.train_online import cli
from wmx.train_online.loop import run


def _metrics(run_dir):
    with (run_dir / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def full_run(tiny_online_run):
    _, store, run_dir, summary = tiny_online_run
    return store, run_dir, summary


def test_run_finishes_with_metrics_and_evals(full_run):
    _, run_dir, summary = full_run
    assert summary["finished"] and summary["agent_steps"] == 6 * T
    rows = _metrics(run_dir)
    train = [r for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    assert len(train) == 6 * 2                              # one row per chunk and seed
    assert [int(r["env_steps"]) for r in evals[::2]] == [2 * T, 4 * T, 6 * T]
    # updates: burst of seed_steps (40) after agent step 40, then 1 per step: 40 + 79 = 119
    assert int(train[-1]["updates"]) == 2 * T + (6 * T - 2 * T - 1)
    assert summary["n_offschedule_dones"] == [0, 0]


def test_episode_sets_hold_every_episode_with_correct_rows(full_run):
    store, run_dir, summary = full_run
    sets = summary["episode_sets"]
    assert set(sets) == {"0", "3"}
    rows = _metrics(run_dir)
    for seed, path in sets.items():
        manifest, episodes = read_episode_set(path)
        eps = list(episodes)
        assert len(eps) == 6
        train_returns = [float(r["return"]) for r in rows
                         if r["kind"] == "train" and r["seed"] == seed]
        np.testing.assert_allclose([e["reward"].sum() for e in eps], train_returns, rtol=1e-5)
        for e in eps:
            assert e["obs"].shape == (T + 1, 2) and e["action"].shape == (T + 1, 2)
            assert e["is_first"][0] and not e["is_first"][1:].any()
            assert e["is_last"][-1] and not e["is_last"][:-1].any()
            assert e["reward"][0] == 0 and not e["action"][-1].any()
            # probe-action: reward of row k+1 = first action dim at row k
            np.testing.assert_allclose(e["reward"][1:], np.clip(e["action"][:-1, 0], -1, 1),
                                       atol=1e-6)
        assert manifest.producer.seed == int(seed)


def test_split_run_equals_uninterrupted(full_run, tmp_path, monkeypatch):
    store, full_dir, _ = full_run
    run_dir = tmp_path / "split"
    run_dir.mkdir()
    trims = []                                  # the heap is trimmed before every chunk
    monkeypatch.setattr("wmx.train_online.loop.release_free_heap", lambda: trims.append(1))
    first = run(RC, run_dir, None, progress=False, stop_after_chunks=3)
    assert not first["finished"] and len(trims) == 3
    second = run(RC, run_dir, None, progress=False)      # restores the newest checkpoint
    assert second["finished"] and len(trims) == 6
    a, b = _metrics(full_dir), _metrics(run_dir)
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        for k in ("seed", "kind", "agent_steps", "updates", "return", "total_loss", "pi_scale"):
            assert ra[k] == rb[k], (k, ra, rb)


def test_the_evaluation_compiles_ahead_and_equals_the_plain_call(tmp_path, caplog,
                                                                 compile_ahead_calls):
    """The run hands its evaluation program to wmx.compile_ahead with its first chunk; the
    evaluation runs that executable (no fallback said) and returns the plain call's bits."""
    run_dir = tmp_path / "ahead"
    run_dir.mkdir()
    with caplog.at_level(logging.INFO, logger="wmx.compile_ahead"):
        first = run(RC, run_dir, None, progress=False, deadline=time.monotonic() - 1)
    assert first["agent_steps"] == T and set(first["final_eval"]) == {"0", "3"}
    assert compile_ahead_calls == [("eval", True)] and caplog.records == []


def test_deadline_stop_evaluates_and_resume_keeps_the_schedule(full_run, tmp_path):
    """A deadline stop off the evaluation schedule evaluates there; the resumed
    run's scheduled evaluations and training rows equal the uninterrupted run's."""
    _, full_dir, _ = full_run
    run_dir = tmp_path / "budget"
    run_dir.mkdir()
    first = run(RC, run_dir, None, progress=False, deadline=time.monotonic() - 1)
    assert not first["finished"] and first["agent_steps"] == T    # one chunk, off schedule
    stop_evals = [r for r in _metrics(run_dir) if r["kind"] == "eval"]
    assert [int(r["env_steps"]) for r in stop_evals] == [T, T]    # both seeds
    assert set(first["final_eval"]) == {"0", "3"}
    assert run(RC, run_dir, None, progress=False)["finished"]
    a = _metrics(full_dir)
    b = [r for r in _metrics(run_dir) if not (r["kind"] == "eval" and int(r["env_steps"]) == T)]
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        for k in ("seed", "kind", "agent_steps", "updates", "return", "total_loss"):
            assert ra[k] == rb[k], (k, ra, rb)


def test_stop_request_stops_after_the_chunk_without_evaluating_and_resumes_exactly(
        full_run, tmp_path):
    """A first Ctrl-C (wmx.runs.interrupt) sets the stop request: the run stops after the
    running chunk with its checkpoint and no off-schedule evaluation; resumed, it equals
    the uninterrupted run row for row."""
    import threading

    from wmx.checkpoint import list_checkpoints
    _, full_dir, _ = full_run
    run_dir = tmp_path / "interrupted"
    run_dir.mkdir()
    stop = threading.Event()
    stop.set()
    first = run(RC, run_dir, None, progress=False, stop_request=stop)
    assert not first["finished"] and first["agent_steps"] == T        # one chunk
    assert [r["kind"] for r in _metrics(run_dir)] == ["train", "train"]  # no eval row
    assert [int(c.name) for c in list_checkpoints(run_dir)] == [T + 1]
    assert run(RC, run_dir, None, progress=False)["finished"]
    a, b = _metrics(full_dir), _metrics(run_dir)
    assert [{k: v for k, v in r.items() if k != "wall_s"} for r in a] == \
           [{k: v for k, v in r.items() if k != "wall_s"} for r in b]


def test_cli_errors_write_nothing(tmp_path, capsys):
    home = tmp_path / "h"
    assert cli.main(["--task", "walker-wlak", "--home", str(home), "--no-progress"]) == 2
    assert "unknown task" in capsys.readouterr().err
    assert cli.main(["--task", "probe-action", "--preset", "huge", "--home", str(home)]) == 2
    assert cli.main(["--task", "probe-action", "--env-steps", "0", "--home", str(home)]) == 2
    assert cli.main(["--task", "probe-action", "--agent", "sac", "--home", str(home)]) == 2
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    (home / "runs" / "taken").mkdir(parents=True)
    assert cli.main(["--task", "probe-action", "--preset", "tiny", "--home", str(home),
                     "--name", "taken"]) == 2
    assert "exists already" in capsys.readouterr().err
    assert cli.main(["--resume", str(tmp_path / "nope")]) == 2


def test_dry_run_prints_parameter_counts(capsys):
    assert cli.main(["--task", "probe-action", "--preset", "tiny", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "total" in out and "encoder" in out


def test_the_rounded_up_env_steps_are_said(capsys):
    """--env-steps rounds up to whole rounds of the lockstep envs' episodes, said in one line
    (probe-action: T = 20, action repeat 1); nothing is said of an exact count."""
    assert cli.main(["--task", "probe-action", "--preset", "tiny", "--env-steps", "30",
                     "--envs", "2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ("--env-steps 30 rounds up to 40 per seed: 1 round of 2 envs x one "
            "20-env-step episode") in out
    assert "env " in out and "; 1 round x 2 envs = 40 env steps per seed" in out
    assert cli.main(["--task", "probe-action", "--preset", "tiny", "--env-steps", "80",
                     "--envs", "2", "--dry-run"]) == 0
    assert "rounds up" not in capsys.readouterr().out
    # a run that ends before TD-MPC2's first update trains nothing: said before it starts.
    # The burst waits for a whole first round (T = 20): a one-round run never updates, even
    # with 5 seed steps; the seed steps past the run's steps likewise
    for env_steps, seed in ((20, 5), (40, 40)):
        assert cli.main(["--task", "probe-action", "--preset", "tiny", "--env-steps",
                         str(env_steps), "--seed-steps", str(seed), "--dry-run"]) == 0
        assert "note: the run ends before its first update" in capsys.readouterr().out
    assert cli.main(["--task", "probe-action", "--preset", "tiny", "--env-steps", "60",
                     "--seed-steps", "40", "--dry-run"]) == 0
    assert "first update" not in capsys.readouterr().out


def test_dry_run_walker_model_size_5_counts_paper_parameters(capsys):
    # spec 1.24: walker S=24, A=6 at model size 5 -> 4,960,618 (the preset's widths yield)
    assert cli.main(["--agent", "tdmpc2", "--task", "walker-walk", "--model-size", "5",
                     "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "4,960,618" in out
    assert "139,520" in out and "2,911,225" in out        # encoder, Q ensemble


def test_set_overrides_reach_the_config_and_foreign_flags_are_refused(capsys):
    assert cli.main(["--task", "probe-action", "--preset", "tiny", "--dry-run"]) == 0
    base = capsys.readouterr().out
    assert cli.main(["--task", "probe-action", "--preset", "tiny", "--set", "mlp_dim=48",
                     "--dry-run"]) == 0
    wider = capsys.readouterr().out
    total = [int(line.split()[-1].replace(",", "")) for out in (base, wider)
             for line in out.splitlines() if line.strip().startswith("total")]
    assert total[1] > total[0]
    assert cli.main(["--task", "probe-action", "--set", "no_such_field=1", "--dry-run"]) == 2
    assert "no_such_field" in capsys.readouterr().err


def test_parts_of_rounds_equal_whole_rounds_and_resume_inside_a_round(full_run):
    """--chunk-ticks: each round runs in parts of 8 ticks (21 = 8 + 8 + 5, the last part
    padded), a checkpoint after each; a run stopped inside a round and resumed equals
    the whole-round run: every metrics value, every exported episode."""
    import dataclasses
    import json as json_lib

    from wmx.checkpoint import list_checkpoints
    from wmx.train_online.cli import make_export
    store, full_dir, full = full_run
    rc = dataclasses.replace(RC, chunk_ticks=8)
    assert rc.config_hash() == RC.config_hash()            # the split changes no result
    run_dir = store.runs_dir / "parts"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json_lib.dumps(rc.to_json()))
    first = run(rc, run_dir, make_export(store, rc, run_dir), progress=False,
                stop_after_chunks=5)                        # round 0 (3 parts), 2 parts of 1
    assert not first["finished"]
    newest = list_checkpoints(run_dir)[-1]
    assert int(newest.name) == 21 + 16 and (newest / "items" / "pending").is_dir()
    # the stopped run's summary counts the steps inside round 1 too (T = 20)
    assert first["env_steps"] == (20 + 16) * rc.n_envs * rc.task_spec.action_repeat
    assert first["agent_steps"] == (20 + 16) * rc.n_envs
    assert len(_metrics(run_dir)) == 2                      # round 0's train rows only
    with pytest.raises(ValueError, match="inside a round"):   # a config without the parts
        run(RC, run_dir, None, progress=False)
    assert len(_metrics(run_dir)) == 2 and list_checkpoints(run_dir)[-1] == newest
    second = run(rc, run_dir, make_export(store, rc, run_dir), progress=False)
    assert second["finished"]
    a, b = _metrics(full_dir), _metrics(run_dir)
    assert len(a) == len(b)
    for ra, rb in zip(a, b):
        assert {k: v for k, v in ra.items() if k != "wall_s"} == \
               {k: v for k, v in rb.items() if k != "wall_s"}
    for seed in ("0", "3"):
        _, eps_a = read_episode_set(full["episode_sets"][seed])
        _, eps_b = read_episode_set(second["episode_sets"][seed])
        eps_a, eps_b = list(eps_a), list(eps_b)
        assert len(eps_a) == len(eps_b) == 6
        for ea, eb in zip(eps_a, eps_b):
            for k in ("obs", "action", "reward", "is_first", "is_last", "is_terminal"):
                np.testing.assert_array_equal(ea[k], eb[k])


def _signalled_run(signum):
    """Stands in for the loop's run: a first Ctrl-C (SIGINT) or SIGTERM arrives, the run stops
    unfinished."""
    def run(*args, stop_request, **kw):
        import os
        os.kill(os.getpid(), signum)
        assert stop_request.is_set()
        return {"finished": False, "env_steps": 0, "updates": 0, "final_eval": {},
                "final_score": None}
    return run


@pytest.mark.parametrize("signum,status,said", [(signal.SIGINT, 130, "Ctrl-C"),
                                                (signal.SIGTERM, 143, "SIGTERM")])
def test_cli_stopped_by_ctrl_c_or_sigterm_exits_128_plus_signal_with_the_resume_command(
        tmp_path, monkeypatch, capsys, signum, status, said):
    """A run stopped by Ctrl-C exits 130 (SIGTERM: 143), not 0 (`train_online ... && beam run
    ...` must not go on), and says how to continue."""
    from wmx.train_online import loop
    monkeypatch.setattr(loop, "run", _signalled_run(signum))
    home = tmp_path / "home"
    assert cli.main(["--task", "probe-action", "--preset", "tiny", "--env-steps", "48",
                     "--home", str(home), "--name", "intr", "--no-progress"]) == status
    out, err = capsys.readouterr()
    assert f"stopped by {said}" in err
    assert f"continue with: train_online --resume {home / 'runs' / 'intr'}" in err
    assert '"final_eval"' not in out and "metrics:" not in out   # no summary of a stopped run


def test_resume_may_change_chunk_ticks_and_keeps_the_config_hash(tmp_path):
    """--chunk-ticks is no result setting (parts of a round equal whole rounds, above): a
    resumed run may change it; the new value is saved for later resumes, a dry run saves
    nothing, and every other flag is still compared."""
    import contextlib

    from wmx.runs.cli_common import given_flags
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps(RC.to_json()))
    parser = cli.build_parser()

    def resumed(*flags):
        argv = ["--resume", str(run_dir), *flags]
        args = parser.parse_args(argv)
        args.given = given_flags(parser, argv)
        with contextlib.ExitStack() as args.cleanup:
            return cli.resumed_config(args, run_dir, json.loads(
                (run_dir / "config.json").read_text()))

    assert resumed("--chunk-ticks", "8", "--dry-run").chunk_ticks == 8
    assert "chunk_ticks" not in json.loads((run_dir / "config.json").read_text())
    rc = resumed("--chunk-ticks", "8")
    assert rc.chunk_ticks == 8 and rc.config_hash() == RC.config_hash()
    assert json.loads((run_dir / "config.json").read_text())["chunk_ticks"] == 8
    assert resumed().chunk_ticks == 8
    with pytest.raises(ValueError, match="--eval-episodes 3 conflicts"):
        resumed("--chunk-ticks", "4", "--eval-episodes", "3")
