"""--end-env-steps: a run ended early is exactly the first part of the run of its
--env-steps (metrics, final evaluation, episode sets as a prefix of the full run's, the
producer's config hash), set on --resume through the CLI; the config keeps it out of the
hash and out of config.json when unset; the listing's total is the end; an end that is not
beyond what the run trained, a finished run and an end beyond --env-steps are refused in
one line. TINY_RC's programs (the session's tiny run) serve both runs."""
from __future__ import annotations

import csv
import dataclasses
import json
import logging
from pathlib import Path

import pytest

from tiny_runs import T, TINY_RC

from wmx.datasets.store import Store
from wmx.episode_sets.episode_set import EpisodeSetReader, write_prefix_set
from wmx.runs.listing import FINISHED, progress_text, read_run
from wmx.runs.online_config import OnlineRunConfig
from wmx.train_online import cli as online_cli
from wmx.train_online import loop as online_loop


def _rows(run_dir: Path) -> list[dict]:
    with (run_dir / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in csv.DictReader(f)]


def test_the_config_keeps_the_end_out_of_the_hash_and_of_config_json():
    ended = dataclasses.replace(TINY_RC, end_env_steps=3 * T + 1)   # rounds up: 4 T
    assert ended.end_rounds == 4 and ended.end_total_env_steps == 4 * T
    assert ended.rounds == TINY_RC.rounds == 6 and ended.total_env_steps == 6 * T
    assert ended.config_hash() == TINY_RC.config_hash()
    assert "end_env_steps" not in TINY_RC.to_json()
    assert "end_total_env_steps" not in TINY_RC.to_json()["derived"]
    d = ended.to_json()
    assert d["end_env_steps"] == 3 * T + 1 and d["derived"]["end_total_env_steps"] == 4 * T
    assert OnlineRunConfig.from_json(d) == ended
    assert TINY_RC.end_rounds == TINY_RC.rounds and TINY_RC.end_total_env_steps == 6 * T
    with pytest.raises(ValueError, match=r"--end-env-steps 121 is beyond the run's "
                                         r"--env-steps 120"):
        dataclasses.replace(TINY_RC, end_env_steps=6 * T + 1)
    with pytest.raises(ValueError, match="--end-env-steps must be > 0"):
        dataclasses.replace(TINY_RC, end_env_steps=0)


def test_a_run_ended_on_resume_is_the_first_part_of_the_full_run(tiny_online_run, tmp_path,
                                                                 capsys, caplog):
    _, _, full_dir, full = tiny_online_run
    store = Store(tmp_path).ensure_layout()
    run_dir = store.runs_dir / "ended"
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(TINY_RC.to_json()))
    online_loop.run(TINY_RC, run_dir, online_cli.make_export(store, TINY_RC, run_dir),
                    progress=False, stop_after_chunks=2)          # 2 rounds: 2 T env steps
    assert read_run(run_dir).total == 6 * T
    # not beyond what it trained: refused, the config unchanged
    before = (run_dir / "config.json").read_text()
    assert online_cli.main(["--resume", str(run_dir), "--end-env-steps", str(2 * T),
                            "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--end-env-steps 40 ends at 40 env steps (whole rounds), but the run has trained " \
        "40: give an end above that, up to its --env-steps 120" in err
    assert len(err.strip().splitlines()) == 1
    assert (run_dir / "config.json").read_text() == before
    with caplog.at_level(logging.INFO, logger=online_loop.log.name):
        assert online_cli.main(["--resume", str(run_dir), "--end-env-steps", str(4 * T),
                                "--no-progress"]) == 0
    assert "(40 env steps per seed; tick 42)" in caplog.text    # 2 rounds of T + 1 ticks
    info = read_run(run_dir)
    assert info.status == FINISHED and info.done == info.total == 4 * T
    assert progress_text(info) == "80/80 env steps (ended early; --env-steps 120)"
    assert progress_text(read_run(full_dir)) == "120/120 env steps"
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["end_env_steps"] == 4 * T and saved["env_steps"] == 6 * T
    # its rows are the full run's up to 4 T, its final evaluation the full run's there
    want = [r for r in _rows(full_dir) if int(r["env_steps"]) <= 4 * T]
    assert _rows(run_dir) == want and want[-1]["kind"] == "eval"
    got = json.loads((run_dir / "summary.json").read_text())
    assert got["env_steps"] == 4 * T and got["finished"]
    # each seed's episode set is the full run's first 4 T's episodes: the same content hash
    # (producer and config hash included) as that prefix of the full run's set
    for seed, path in got["episode_sets"].items():
        with EpisodeSetReader(full["episode_sets"][seed]) as r:
            assert len(r) == 6 * TINY_RC.n_envs                 # a round: one per env
        prefix = write_prefix_set(Store(tmp_path / "prefix"), full["episode_sets"][seed],
                                  4 * TINY_RC.n_envs)
        assert Path(path).name == prefix.name
    # a finished run's end cannot move
    assert online_cli.main(["--resume", str(run_dir), "--end-env-steps", str(5 * T),
                            "--no-progress"]) == 2
    assert "the run has finished (an ended run too: it cannot go on towards its --env-steps " \
        "120); start a new run" in capsys.readouterr().err


def _stopped(store: Store, name: str, rc: OnlineRunConfig, chunks: int) -> Path:
    run_dir = store.runs_dir / name
    run_dir.mkdir()
    (run_dir / "config.json").write_text(json.dumps(rc.to_json()))
    online_loop.run(rc, run_dir, online_cli.make_export(store, rc, run_dir), progress=False,
                    stop_after_chunks=chunks)
    return run_dir


def test_an_end_off_the_evaluation_schedule_adds_its_final_evaluation(tiny_online_run,
                                                                      tmp_path):
    _, _, full_dir, full = tiny_online_run
    store = Store(tmp_path).ensure_layout()
    run_dir = _stopped(store, "off", TINY_RC, 2)
    assert online_cli.main(["--resume", str(run_dir), "--end-env-steps", str(3 * T),
                            "--no-progress"]) == 0
    rows, want = _rows(run_dir), [r for r in _rows(full_dir) if int(r["env_steps"]) <= 3 * T]
    assert rows[:len(want)] == want                   # the full run's rows up to 3 T, then
    assert [(r["kind"], r["env_steps"]) for r in rows[len(want):]] == \
        [("eval", str(3 * T))] * len(TINY_RC.seeds)  # its final evaluation at 3 T
    got = json.loads((run_dir / "summary.json").read_text())
    for seed, path in got["episode_sets"].items():  # the sets: still the full run's prefix
        prefix = write_prefix_set(Store(tmp_path / "prefix"), full["episode_sets"][seed],
                                  3 * TINY_RC.n_envs)
        assert Path(path).name == prefix.name


def test_a_checkpoint_on_the_held_tick_of_a_round_may_still_end_in_that_round(tmp_path,
                                                                              capsys):
    """--chunk-ticks T: the first part stops at tick T, before the round's held tick, with
    all T agent steps of the round done; an end at that round is still ahead."""
    store = Store(tmp_path).ensure_layout()
    rc = dataclasses.replace(TINY_RC, chunk_ticks=T)
    run_dir = _stopped(store, "held", rc, 1)
    assert read_run(run_dir).done == T
    from wmx.train_online.cli import check_end
    check_end(dataclasses.replace(rc, end_env_steps=T), run_dir)     # ahead: no error
    assert online_cli.main(["--resume", str(run_dir), "--end-env-steps", str(T),
                            "--no-progress"]) == 0
    info = read_run(run_dir)
    assert info.status == FINISHED and info.done == info.total == T
    assert [r["kind"] for r in _rows(run_dir)] == ["train", "train", "eval", "eval"]


def test_the_dry_run_counts_the_rounds_to_the_end(capsys):
    from tiny_runs import TINY_ONLINE_ARGV
    assert online_cli.main([*TINY_ONLINE_ARGV, "--end-env-steps", str(T), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"--end-env-steps {T}: the run ends at {T} env steps per seed (1 round of 6; its " \
           f"replay sized for {6 * T})" in out
    assert f"1 round x 1 env = {T} env steps per seed" in out
    assert "note: the run ends before its first update" in out and \
        "raise --end-env-steps or lower --seed-steps" in out


def test_the_seed_phase_note_of_a_resumed_run_names_no_flag_resume_refuses(capsys):
    """--resume keeps a run's seed phase (--seed-steps is refused there), so the note of a
    resumed run that ends before its first update names only the end to raise."""
    from tiny_runs import TINY_ONLINE_ARGV
    from wmx.train_online.cli import _plan_notes, build_parser, config_from_args
    rc = config_from_args(build_parser().parse_args([*TINY_ONLINE_ARGV,
                                                     "--end-env-steps", str(T)]))
    _plan_notes(rc, resumed=True)
    out = capsys.readouterr().out
    assert "note: the run ends before its first update" in out
    assert out.rstrip().endswith(f"raise --end-env-steps (at most the run's --env-steps, "
                                 f"{6 * T})") and "--seed-steps" not in out
    _plan_notes(rc)
    assert "raise --end-env-steps or lower --seed-steps" in capsys.readouterr().out


def test_a_resumed_run_all_seed_phase_to_its_end_is_told_to_start_anew(capsys):
    """A resumed TD-MPC2 run whose whole --env-steps is seed phase: --env-steps cannot
    extend it (its replay is sized for the run: `_check_extension` refuses), nor can
    --end-env-steps, which stops at --env-steps; the note says to start a new run."""
    from tiny_runs import TINY_ONLINE_ARGV
    from wmx.train_online.cli import _plan_notes, build_parser, config_from_args
    argv = [*TINY_ONLINE_ARGV, "--seed-steps", str(20 * T)]
    for extra in ([], ["--end-env-steps", str(T)]):
        rc = config_from_args(build_parser().parse_args([*argv, *extra]))
        _plan_notes(rc, resumed=True)
        out = capsys.readouterr().out
        assert "note: the run ends before its first update" in out
        assert out.rstrip().endswith("; start a new run with more --env-steps or fewer "
                                     "--seed-steps (a resumed run keeps its seed phase, and "
                                     "--env-steps extends it only while its replay keeps its "
                                     "size)"), out
