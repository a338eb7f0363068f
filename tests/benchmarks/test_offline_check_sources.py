"""The offline checks' sources as they stood at N env steps (``RUN_DIR@N``,
benchmarks/learning/offline_sources.py): parsing, the prefix episode sets, the final
return at N, and a prepared, packed and resumed check run on such a source."""
import csv
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

_REPO = Path(__file__).resolve().parents[2]
_DIR = _REPO / "benchmarks" / "learning"
sys.path.insert(0, str(_DIR))
sys.path.insert(0, str(_REPO / "tests" / "pipelines"))
_SPEC = importlib.util.spec_from_file_location("dreamerv3_offline", _DIR / "dreamerv3_offline.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)
import offline_sources  # noqa: E402
from offline_sources import (pooled_sources, source_episode_sets, source_run,  # noqa: E402
                             split_source)

T, EPISODES, EVAL_EVERY = 20, 6, 80
"""The source run: reacher-easy with T=20 (action repeat 2: 40 env steps an episode),
one env, 6 episodes per seed (240 env steps), evaluated every 80 env steps."""
EVAL = {0: {80: 10.0, 160: 30.0, 240: 50.0}, 1: {80: 20.0, 160: 40.0, 240: 70.0}}


def _source(home: Path, name: str = "src") -> Path:
    """A finished train_online run of reacher-easy (T=20) in ``home``: config.json, its two
    seeds' episode sets (synthetic episodes, in collection order) listed in summary.json,
    and metrics.csv with a train row per episode and eval rows at 80, 160 and 240."""
    from episode_fixtures import playground_info, synthetic_episode
    from wmx.datasets.store import Store
    from wmx.episode_sets.episode_set import write_episode_set
    from wmx.schemas.manifest import Producer
    info = playground_info("reacher-easy", T)
    per = T * info.action_repeat
    run = home / "runs" / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"task": "reacher-easy", "episode_length": T}))
    sets = {}
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        eps = [synthetic_episode(rng, T, info.obs_dim, info.action_dim) for _ in range(EPISODES)]
        sets[str(seed)] = str(write_episode_set(
            Store(home), info, eps, Producer(run_id=name, agent="tdmpc2", config_hash="c",
                                             seed=seed, code_version="test"),
            versions={"test": "0"}))
    (run / "summary.json").write_text(json.dumps({"finished": True, "episode_sets": sets}))
    with (run / "metrics.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["seed", "kind", "agent_steps", "env_steps", "episodes", "return"])
        for k in range(1, EPISODES + 1):
            for seed in (0, 1):
                w.writerow([seed, "train", k * T, k * per, k, 9.0])
            if k * per % EVAL_EVERY == 0:
                for seed in (0, 1):
                    w.writerow([seed, "eval", k * T, k * per, 10, EVAL[seed][k * per]])
    return run


def _digests(path) -> tuple:
    from wmx.schemas.manifest import EpisodeSetManifest
    return EpisodeSetManifest.load(Path(path)).episode_digests


def test_a_source_names_its_run_and_env_steps():
    assert split_source("H/runs/a@50000") == ("H/runs/a", 50000)
    assert split_source("H/runs/a@50000/") == ("H/runs/a", 50000)
    assert split_source(Path("H/runs/a")) == ("H/runs/a", None)
    assert split_source("H@2/runs/a") == ("H@2/runs/a", None)    # an @ above the run's folder
    for bad in ("0", "-5", "5k", ""):
        with pytest.raises(ValueError, match=f"whole number > 0, got '{bad}'"):
            split_source(f"H/runs/a@{bad}")
    assert offline_sources.source_entry(Path("/h"), "/h/runs/a@800") == "runs/a@800"


def test_the_final_return_at_n_and_its_refusals(tmp_path):
    run = _source(tmp_path / "home")
    whole = source_run(run)
    assert whole["final_return_per_seed"] == {"0": 50.0, "1": 70.0}
    assert whole["env_steps"] == 240 and whole["episodes_at"] is None
    assert whole["source"] == str(run)
    at = source_run(f"{run}@160")
    assert at["source"] == f"{run}@160" and at["run_dir"] == str(run)
    assert at["final_return_per_seed"] == {"0": 30.0, "1": 40.0}
    assert at["final_return"] == 35.0 and at["env_steps"] == 160
    assert at["episodes_at"] == {"0": 4, "1": 4}
    assert at["episode_sets"] == whole["episode_sets"]     # the run's own; not read here
    with pytest.raises(ValueError, match=r"@120: no eval row at env step 120 for every seed; "
                       r"its eval rows are at env steps 80, 160, 240: give one"):
        source_run(f"{run}@120")
    with pytest.raises(ValueError, match="@280: beyond the run's last env step 240"):
        source_run(f"{run}@280")
    tasks = pooled_sources([at, whole])
    assert tasks["reacher-easy"]["runs"] == [f"{run}@160", str(run)]
    assert tasks["reacher-easy"]["env_steps"] == [160, 240]
    assert tasks["reacher-easy"]["final_return"] == np.mean([30.0, 40.0, 50.0, 70.0])


def test_prefix_sets_hold_the_first_episodes_and_are_written_once(tmp_path):
    from wmx.datasets.store import Store
    home = tmp_path / "home"
    run = _source(home)
    originals = source_run(run)["episode_sets"]
    before = {p: _digests(p) for p in originals}
    at = source_run(f"{run}@80")
    sets = source_episode_sets(at, home)
    assert len(sets) == 2 and not set(sets) & set(originals)
    for prefix, full in zip(sets, originals):
        assert len(_digests(prefix)) == 2                  # 80 env steps: 2 episodes of 40
        assert _digests(prefix) == _digests(full)[:2]
    assert source_episode_sets(at, home) == sets           # content-addressed: written once
    assert {p: _digests(p) for p in originals} == before   # the run's sets untouched
    assert len(Store(home).list_episode_sets("reacher-easy")) == 4
    assert source_episode_sets(source_run(f"{run}@240"), home) == originals
    assert source_episode_sets(source_run(run), home) == originals
    bad = dict(at, episodes_at={"0": 3, "1": 2})           # a train row counting otherwise
    with pytest.raises(ValueError, match="env step 80 is not the end of an episode of 40 env "
                       r"steps \(20 agent steps x action repeat 2; seed 0's train row counts 3"):
        source_episode_sets(bad, home)
    with pytest.raises(ValueError, match="seed 0's episode set reacher-easy/.* is not in"):
        source_episode_sets(at, tmp_path / "elsewhere")    # a home without the run's sets


def test_a_prefix_source_prepares_packs_and_resumes_elsewhere(tmp_path, monkeypatch, capsys):
    """--sources RUN@160 --prepare-only --pack: the dataset pools each seed's first 4
    episodes, benchmark.json keeps the @160, and the packed home (no episode sets)
    reports the run with the source's return at 160."""
    import offline_check
    monkeypatch.setattr(offline_check, "random_policy_return",
                        lambda task, T: {"mean": 1.0, "std": 0.0, "episodes": 16})
    home = tmp_path / "home"
    run = _source(home)
    out, dest = str(tmp_path / "out"), tmp_path / "pack"
    with pytest.raises(SystemExit, match="@120: no eval row at env step 120"):
        bench.main(["--home", str(home), "--sources", f"{run}@120", "--prepare-only",
                    "--out", out])
    with pytest.raises(SystemExit):
        bench.main(["--home", str(home), "--sources", f"{run}@x", "--prepare-only",
                    "--out", out])
    assert "--sources: source " in capsys.readouterr().err
    assert not (home / "datasets").exists()                 # refused before any build
    assert bench.main(["--home", str(home), "--sources", f"{run}@160", "--preset", "tiny",
                       "--updates", "4", "--eval-every", "2", "--prepare-only",
                       "--pack", str(dest), "--out", out]) == 0
    (check,) = [r for r in (home / "runs").iterdir() if r.name.startswith("dv3-")]
    recorded = json.loads((check / "benchmark.json").read_text())
    assert recorded["sources"] == ["runs/src@160"]
    name, _, full = recorded["dataset"].partition("@")
    manifest = json.loads((home / "datasets" / name / full / "manifest.json").read_text())
    prefix = source_episode_sets(source_run(f"{run}@160"), home)
    assert sorted(manifest["sources"]) == sorted(Path(p).name for p in prefix)
    assert sorted(manifest["episode_digests"]) == sorted(
        d for p in source_run(run)["episode_sets"] for d in _digests(p)[:4])
    assert not (dest / "episodes").exists()
    assert sorted(p.name for p in (dest / "runs" / "src").iterdir()) == [
        "config.json", "metrics.csv", "summary.json"]
    packed = dest / "runs" / check.name
    (packed / "metrics.csv").write_text(                # trained on the other machine
        "kind,task,seed,updates,return\neval,reacher-easy,0,2,20.0\ntrain,,0,4,\n")
    assert bench.main(["--resume", str(packed), "--report-only", "--out", out]) == 0
    task = json.loads((Path(out) / "dreamerv3_offline.json").read_text())["tasks"][
        "reacher-easy"]
    assert task["source_runs"] == ["runs/src@160"] and task["source_env_steps"] == [160]
    assert task["source_final_return"] == 35.0
    assert task["source_final_return_per_seed"] == [30.0, 40.0]


def test_a_run_given_twice_is_refused_before_anything_is_written(tmp_path, monkeypatch,
                                                                  capsys):
    """The same run twice (whole, or at two env steps, or whole and at N) would pool its
    episodes once but average its returns at both points: refused before any prefix set,
    dataset or run is written."""
    import offline_check
    monkeypatch.setattr(offline_check, "random_policy_return",
                        lambda task, T: {"mean": 1.0, "std": 0.0, "episodes": 16})
    home = tmp_path / "home"
    run = _source(home)
    before = sorted(p.name for p in (home / "episodes" / "reacher-easy").iterdir())
    for given in ([f"{run}@80", f"{run}@160"], [f"{run}@160", f"{run}/"], [str(run), str(run)]):
        with pytest.raises(SystemExit):
            bench.main(["--home", str(home), "--sources", *given, "--prepare-only",
                        "--out", str(tmp_path / "out")])
        err = capsys.readouterr().err
        assert "--sources: run runs/src given more than once" in err, err
        assert "give each run once" in err
    assert sorted(p.name for p in (home / "episodes" / "reacher-easy").iterdir()) == before
    assert not (home / "datasets").exists()
    assert sorted(p.name for p in (home / "runs").iterdir()) == ["src"]


def test_a_whole_source_pools_its_sets_from_the_home_store(tmp_path):
    """summary.json names the sets where the run wrote them: a home moved (or a run whose
    sets were copied into another home) pools them from the home given, and a set absent
    there is a one-line error, as for RUN_DIR@N, not a traceback in the build."""
    import shutil
    run = _source(tmp_path / "old")
    shutil.move(str(tmp_path / "old"), str(tmp_path / "home"))
    home = tmp_path / "home"
    whole = source_run(home / "runs" / run.name)
    assert all(p.startswith(str(tmp_path / "old")) for p in whole["episode_sets"])
    sets = source_episode_sets(whole, home)
    assert sets == [str(home / "episodes" / "reacher-easy" / Path(p).name)
                    for p in whole["episode_sets"]]
    assert pooled_sources([whole], home)["reacher-easy"]["episode_sets"] == sets
    with pytest.raises(ValueError, match="seed 0's episode set reacher-easy/.* is not in"):
        source_episode_sets(whole, tmp_path / "elsewhere")


def test_a_missing_tdmpc2_run_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    """dreamerv3_offline --tdmpc2-run naming no run (or not a TD-MPC2 one) is refused before
    the prefix sets and the dataset are written, not after the build."""
    import offline_check
    monkeypatch.setattr(offline_check, "random_policy_return",
                        lambda task, T: {"mean": 1.0, "std": 0.0, "episodes": 16})
    home = tmp_path / "home"
    run = _source(home)
    before = sorted(p.name for p in (home / "episodes" / "reacher-easy").iterdir())
    with pytest.raises(SystemExit, match="--tdmpc2-run .*nope: no such offline run"):
        bench.main(["--home", str(home), "--sources", f"{run}@80", "--tdmpc2-run",
                    str(home / "runs" / "nope"), "--prepare-only", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--tdmpc2-run .*src is agent None on None; give "
                       "the TD-MPC2 offline check's run"):
        bench.main(["--home", str(home), "--sources", f"{run}@80", "--tdmpc2-run",
                    str(run), "--prepare-only", "--out", str(tmp_path)])
    assert sorted(p.name for p in (home / "episodes" / "reacher-easy").iterdir()) == before
    assert not (home / "datasets").exists()
    assert sorted(p.name for p in (home / "runs").iterdir()) == ["src"]


def test_a_source_without_metrics_or_named_with_an_at_is_one_line(tmp_path):
    run = _source(tmp_path / "home")
    (run / "metrics.csv").unlink()
    with pytest.raises(ValueError, match="has no metrics.csv; copy the run's metrics.csv"):
        source_run(run)
    odd = _source(tmp_path / "home", name="exp@3")      # a folder whose name holds '@'
    assert odd.is_dir()
    with pytest.raises(SystemExit, match=r"read as exp@3; a run folder whose name holds '@' "
                       r"must be renamed"):
        source_run(odd)
