"""Runners of the pooled build: `--runner` short names, Dask option errors,
and (slow) the DaskRunner on a 2-worker local cluster against the DirectRunner.

Default run: name resolution and every error path that needs no cluster (an
unknown runner through `beam run`, Dask options without the dask runner, an
unreachable scheduler address), each checked to leave nothing written.
`slow`: real `distributed` clusters (about 10-15 s each on 2 cores): the same
episode sets built with the DirectRunner and with `--runner=dask` give the
same content hash and byte-identical shards, written by the worker processes.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import synthetic_episode, taskset_of, write_set  # noqa: E402

import wmx.pipelines.runners as runners  # noqa: E402
from wmx.cli.beam import main as beam_main  # noqa: E402
from wmx.cli.main import main as wmx_main  # noqa: E402
from wmx.datasets.store import Store  # noqa: E402
from wmx.datasets.validate import validate_dataset  # noqa: E402
from wmx.pipelines.runners import (RUNNERS, RunnerError, check_dask_cluster,  # noqa: E402
                                   parse_runner_args, resolve_runner)
from wmx.pipelines.sources import make_plan, run_build, run_build_result  # noqa: E402
from wmx.schemas.taskset import TaskInfo  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
T = 20
TASKS = (TaskInfo("task-a", 5, 1, T, 2, 0.9), TaskInfo("task-b", 7, 2, T, 2, 0.95))


def _write_store(home: Path) -> None:
    """3 sets per task, 4 episodes each (24 episodes), synthetic rows."""
    rng = np.random.default_rng(3)
    for i, info in enumerate(TASKS):
        for j in range(3):
            write_set(home, info, [synthetic_episode(rng, T, info.obs_dim, info.action_dim)
                                   for _ in range(4)], seed=10 * i + j)


@pytest.fixture
def home(tmp_path):
    _write_store(tmp_path)
    return tmp_path


def _nothing_written(home: Path) -> bool:
    d = home / "datasets"
    return Store(home).list_datasets() == [] and (
        not d.exists() or all(not any(p.iterdir()) for p in d.glob(".staging")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("name, cls", [
    ("dask", "DaskRunner"), ("DaskRunner", "DaskRunner"), ("daskrunner", "DaskRunner"),
    (RUNNERS["dask"], "DaskRunner"), ("direct", "DirectRunner"),
    ("DirectRunner", "DirectRunner"), ("flink", "FlinkRunner"), ("spark", "SparkRunner"),
    ("dataflow", "DataflowRunner"), ("my_pkg.runners.FancyRunner", "FancyRunner")])
def test_runner_names_resolve(name, cls):
    got_cls, path = resolve_runner(name)
    assert got_cls == cls
    assert path == (RUNNERS["direct"] if cls == "DirectRunner" else path[:-len(cls)] + cls)
    ra = parse_runner_args([f"--runner={name}", "--direct_num_workers=2"]
                           if cls != "DaskRunner" else ["--runner", name])
    assert ra.name == cls and ra.beam_args[0] == f"--runner={path}"
    assert ra.is_dask == (cls == "DaskRunner")


def test_dask_runner_class_imports():
    """The path `dask` resolves to is Beam's DaskRunner, importable here."""
    import importlib
    mod, cls = RUNNERS["dask"].rsplit(".", 1)
    runner = getattr(importlib.import_module(mod), cls)
    assert runner.__name__ == "DaskRunner"


def test_direct_runner_is_the_fnapi_runner_and_never_tries_prism(home, monkeypatch, capsys):
    """`direct` runs Beam's FnApiRunner (wmx.pipelines.direct_runner), never Prism (which
    Beam's own DirectRunner tries first, downloading it where the network allows), in
    memory and with multi_processing SDK workers; the manifest records the class that ran.
    Beam's switching DirectRunner stays reachable by its dotted path."""
    from apache_beam.runners.direct import direct_runner
    from apache_beam.runners.direct.direct_runner import SwitchingDirectRunner
    from apache_beam.runners.portability import prism_runner
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from wmx.pipelines.direct_runner import FnApiDirectRunner
    tried = []
    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline",
                        lambda self, *a, **k: tried.append(1) or 1 / 0)
    assert issubclass(FnApiDirectRunner, FnApiRunner)
    assert RUNNERS["direct"] == f"{FnApiDirectRunner.__module__}.FnApiDirectRunner"
    for args in ([], ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]):
        r = run_build_result(make_plan(home, taskset_of("tst", TASKS), num_shards=2), args)
        builder = json.loads((r.path / "manifest.json").read_text())["builder"]
        assert (r.runner, builder["runner"]) == ("DirectRunner", "DirectRunner")
        assert builder["runner_class"] == RUNNERS["direct"]
        me = f"{socket.gethostname()}:{os.getpid()}"
        assert (me in r.writers) != bool(args) and validate_dataset(r.path).ok
        capsys.readouterr()
        assert wmx_main(["dataset", "info", f"tst@{r.path.name[:10]}", "--home",
                         str(home)]) == 0
        assert f"runner=DirectRunner ({RUNNERS['direct']})" in capsys.readouterr().out
        shutil.rmtree(r.path)
    assert tried == []
    beams = "apache_beam.runners.direct.direct_runner.DirectRunner"
    assert parse_runner_args([f"--runner={beams}"]).path == beams
    assert direct_runner.DirectRunner is SwitchingDirectRunner


def test_multi_processing_workers_start_quietly_and_stop_on_terminate(home, capfd):
    """The multi_processing workers run wmx.pipelines.sdk_worker: Beam's worker without its
    start-up lines on standard error (their process's, not captured by capsys), and the
    build's SIGTERM to the workers (`interrupt.terminate_sdk_workers`) finds them by it."""
    import subprocess
    import time

    from wmx.pipelines import sdk_worker
    from wmx.pipelines.interrupt import terminate_sdk_workers
    r = run_build_result(make_plan(home, taskset_of("tst", TASKS), num_shards=2),
                         ["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    assert validate_dataset(r.path).ok
    err = capfd.readouterr().err
    for line in ("Logging handler created", "semi_persistent_directory",
                 "Discarding unparseable args", "apitools not found"):
        assert line not in err, err
    assert sdk_worker.command().endswith(" -m wmx.pipelines.sdk_worker")

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                              "wmx.pipelines.sdk_worker"])
    try:
        time.sleep(0.5)
        assert terminate_sdk_workers() == 1
        assert child.wait(timeout=10) == -15
    finally:
        child.kill()


def test_multi_processing_workers_import_the_launchers_wmx_from_a_checkout(home, tmp_path):
    """``python <checkout>/pipelines/build_taskset.py`` run from another folder by a Python
    with Beam but without wmx installed (the job puts its checkout on its own sys.path):
    the multi_processing workers, started as ``python -m wmx.pipelines.sdk_worker``, import
    wmx from where the launcher did and the build completes, instead of the workers
    exiting at start and the build waiting for them forever."""
    import site
    import subprocess
    import venv
    bare = tmp_path / "bare-python"
    venv.EnvBuilder(with_pip=False).create(bare)
    py = str(bare / "bin" / "python")
    purelib = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    # this interpreter's packages without their .pth files (an editable wmx is one)
    Path(purelib, "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["JAX_PLATFORMS"] = "cpu"
    assert subprocess.run([py, "-c", "import wmx"], cwd=tmp_path, env=env,
                          capture_output=True).returncode != 0
    spec = tmp_path / "ts.json"
    spec.write_text(taskset_of("tst", TASKS).to_json())
    r = subprocess.run([py, str(REPO / "pipelines" / "build_taskset.py"), "--taskset", str(spec),
                        "--home", str(home), "--num_shards", "2", "--direct_num_workers=2",
                        "--direct_running_mode=multi_processing"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr[-3000:]
    (ds,) = Store(home).list_datasets()
    assert "No module named" not in r.stderr


def test_the_quiet_worker_adds_its_handler_unless_beam_logs_are_asked(
        monkeypatch):
    import logging

    from apache_beam.runners.worker import sdk_worker_main
    from wmx.pipelines import sdk_worker
    ran = []
    monkeypatch.setattr(sdk_worker_main, "main", lambda argv: ran.append(list(argv)))
    root = logging.getLogger()
    for asked, added in (("", 1), ("1", 0)):
        monkeypatch.setattr(root, "handlers", [])
        monkeypatch.setenv("WMX_BEAM_LOGS", asked)
        sdk_worker.main()
        assert len(root.handlers) == added and len(ran) == 1 + (asked == "1")
        assert all(h.level == logging.WARNING for h in root.handlers)


def test_the_quiet_worker_prints_warnings_but_not_beams_start_up_lines(monkeypatch, capsys):
    """A worker's warnings (a step's, Beam's about a stuck bundle) and errors print on its
    standard error as ``LEVEL:logger:message``: the launcher drops the forwarded copies
    below ERROR (`options.quiet_beam_logs`), so the worker's own line is the only one.
    Beam's start-up lines do not print."""
    import logging

    from apache_beam.runners.worker import sdk_worker_main
    from wmx.pipelines import sdk_worker

    def worker_main(argv):
        logging.getLogger().warning("apitools not found, and bigquery client libraries are "
                                    "not available")
        beam_main = logging.getLogger("apache_beam.runners.worker.sdk_worker_main")
        beam_main.info("Logging handler created.")
        beam_main.warning("No semi_persistent_directory found: ...")
        logging.getLogger("apache_beam.options.pipeline_options").warning(
            "Discarding unparseable args: %s", ["--pipeline_type_check"])
        logging.getLogger("wmx.pipelines").warning("a step's warning")
        logging.getLogger("apache_beam.runners.worker.sdk_worker").warning(
            "Operation ongoing in step s for at least 300.00 seconds")
        logging.getLogger("apache_beam.runners.common").error("a step failed")
    monkeypatch.setattr(sdk_worker_main, "main", worker_main)
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(root, "level", logging.INFO)
    monkeypatch.delenv("WMX_BEAM_LOGS", raising=False)
    sdk_worker.main()
    err = capsys.readouterr().err
    assert "WARNING:wmx.pipelines:a step's warning" in err, err
    assert "WARNING:apache_beam.runners.worker.sdk_worker:Operation ongoing" in err
    assert "ERROR:apache_beam.runners.common:a step failed" in err
    for line in ("apitools", "Logging handler", "semi_persistent", "Discarding"):
        assert line not in err, err


def test_default_runner_is_direct_and_args_pass_through():
    ra = parse_runner_args(["--direct_num_workers=2", "--direct_running_mode=multi_processing"])
    assert ra.name == "DirectRunner" and ra.dask_workers is None
    assert ra.beam_args[1:] == ("--direct_num_workers=2",
                                "--direct_running_mode=multi_processing")
    ra = parse_runner_args(["--runner=dask"], dask_workers=3)
    assert (ra.dask_workers, ra.dask_address, ra.partitions_given) == (3, None, False)


@pytest.mark.parametrize("argv,said", [
    (["run"], "`beam run` needs a job file, e.g. beam run pipelines/build_mt19.py"),
    (["build"], "unknown command 'build'; the command is `beam run JOB.py`"),
    (["run", "no/such/job.py"], "job file no/such/job.py not found")])
def test_beam_command_errors_name_the_fix(argv, said, capsys):
    assert beam_main(argv) == 2
    assert said in capsys.readouterr().err


def test_beam_run_from_another_folder_names_the_repository_job(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert beam_main(["run", "pipelines/build_mt19.py"]) == 2
    err = capsys.readouterr().err
    assert "relative path is taken from the current folder" in err
    assert f"beam run {REPO / 'pipelines' / 'build_mt19.py'}" in err


def test_unknown_runner_through_beam_run_is_one_line_and_writes_nothing(home, capsys):
    job = str(REPO / "pipelines" / "build_taskset.py")
    spec = home / "ts.json"
    spec.write_text(taskset_of("tst", TASKS).to_json())
    assert beam_main(["run", job, "--taskset", str(spec), "--home", str(home),
                      "--runner=daks"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown runner 'daks'" in err
    for short in RUNNERS:
        assert short in err
    assert _nothing_written(home)


@pytest.mark.parametrize("args, workers, match", [
    (["--dask_client_address=127.0.0.1:8786"], None, "--dask_client_address applies to "
                                                     "the Dask runner only"),
    (["--runner=direct"], 2, "--dask_workers applies to the Dask runner only"),
    (["--runner=dask", "--dask_client_address=127.0.0.1:8786"], 2, "not both"),
    (["--runner=dask"], 0, r"--dask_workers must be >= 1"),
    (["--runner=dask", "--dask_connection_timeout=soon"], None, "must be seconds"),
])
def test_bad_dask_options(home, args, workers, match):
    plan = make_plan(home, taskset_of("tst", TASKS))
    with pytest.raises(RunnerError, match=match):
        run_build(plan, args, workers)
    assert _nothing_written(home)


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:{port}", "127.0.0.1:{port}",
                                     "127.0.0.1:notaport"])
def test_unreachable_dask_scheduler_names_it_and_the_fix(home, address):
    pytest.importorskip("distributed")
    address = address.format(port=_free_port())
    plan = make_plan(home, taskset_of("tst", TASKS))
    with pytest.raises(RunnerError) as e:
        run_build(plan, ["--runner=dask", f"--dask_client_address={address}",
                         "--dask_connection_timeout=3"])
    msg = str(e.value)
    assert "\n" not in msg
    assert f"cannot reach the Dask scheduler at {address}" in msg
    assert "dask scheduler" in msg and "--dask_workers" in msg
    assert _nothing_written(home)


# ----------------------------------------------------------------------- slow


_REAL_MAKE_PROBE = runners._make_probe


def _probe_with_other_code_off_this_process():
    """runners' probe, reporting a different source digest in any other process."""
    real, here = _REAL_MAKE_PROBE(), os.getpid()

    def probe(paths, subpackages):
        out = real(paths, subpackages)
        if os.getpid() != here:
            out["code"] = "0" * 64
        return out
    return probe


def _same_build(a: Path, b: Path) -> None:
    assert a.name == b.name  # the content hash
    files = sorted(p.name for p in a.glob("shard-*"))
    assert files == sorted(p.name for p in b.glob("shard-*")) and len(files) == 3
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f
    ma, mb = (json.loads((d / "manifest.json").read_text()) for d in (a, b))
    assert ma["shards"] == mb["shards"] and ma["episode_digests"] == mb["episode_digests"]
    assert ma["content_hash"] == mb["content_hash"] == a.name


@pytest.mark.slow
def test_dask_build_equals_direct_build_byte_for_byte(tmp_path, capsys):
    """`beam run ... --runner=dask --dask_workers 2` vs the DirectRunner on
    the same episode sets: same hash, identical shards, shards written by
    processes other than this one, and the local cluster stopped after."""
    pytest.importorskip("distributed")
    ts = taskset_of("tst", TASKS)
    direct_home, dask_home = tmp_path / "direct", tmp_path / "dask"
    _write_store(direct_home)
    shutil.copytree(direct_home / "episodes", dask_home / "episodes")
    d = run_build_result(make_plan(direct_home, ts, num_shards=3))
    assert d.runner == "DirectRunner" and d.writers == (f"{socket.gethostname()}:{os.getpid()}",)

    spec = tmp_path / "ts.json"
    spec.write_text(ts.to_json())
    job = str(REPO / "pipelines" / "build_taskset.py")
    assert beam_main(["run", job, "--taskset", str(spec), "--home", str(dask_home),
                      "--num_shards", "3", "--runner=dask", "--dask_workers", "2"]) == 0
    out = capsys.readouterr().out
    assert "DaskRunner on a local Dask cluster of 2 worker processes" in out
    (entry,) = Store(dask_home).list_datasets()
    _same_build(d.path, entry.path)
    man = json.loads((entry.path / "manifest.json").read_text())
    assert man["builder"]["runner"] == "DaskRunner"
    assert validate_dataset(entry.path).ok

    # the DoFns ran in the workers: run it again through the API to see the writers
    shutil.rmtree(entry.path)
    r = run_build_result(make_plan(dask_home, ts, num_shards=3), ["--runner=dask"],
                         dask_workers=2)
    assert r.runner == "DaskRunner" and r.path == entry.path
    me = f"{socket.gethostname()}:{os.getpid()}"
    assert r.writers and me not in r.writers
    _same_build(d.path, r.path)


@pytest.mark.slow
def test_dask_build_on_an_existing_cluster_and_a_failing_build(tmp_path):
    """--dask_client_address: the build runs on a cluster it did not start
    (left running); a worker that does not see the data root, or runs other
    wmx sources, is named; a source corrupted after planning fails the build on
    the workers with the source named, leaving no dataset and no staging."""
    distributed = pytest.importorskip("distributed")
    ts = taskset_of("tst", TASKS)
    _write_store(tmp_path)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, host="127.0.0.1") as cluster:
        args = ["--runner=dask", f"--dask_client_address={cluster.scheduler_address}"]
        r = run_build_result(make_plan(tmp_path, ts, num_shards=3), args)
        assert len(r.writers) >= 1 and f"{socket.gethostname()}:{os.getpid()}" not in r.writers
        ref = run_build(make_plan(tmp_path, ts, num_shards=3, runner="DirectRunner"))
        assert ref == r.path  # same content hash: the existing dataset is kept
        with distributed.Client(cluster.scheduler_address) as c:
            assert len(c.nthreads()) == 2  # still up
        with pytest.raises(RunnerError, match=r"does not see /no/such/root; the wmx data "
                                              "root must be on a filesystem every worker"):
            check_dask_cluster(cluster.scheduler_address, [str(tmp_path), "/no/such/root"], 5)
        with pytest.MonkeyPatch.context() as mp:  # workers with other wmx sources
            mp.setattr(runners, "_make_probe", _probe_with_other_code_off_this_process)
            with pytest.raises(RunnerError, match=r"Dask worker .* runs another wmx .* start "
                                                  "the scheduler and the workers from the same"):
                check_dask_cluster(cluster.scheduler_address, [str(tmp_path)], 5)
        shutil.rmtree(r.path)
        plan = make_plan(tmp_path, ts, num_shards=3)
        src = Path(plan.sources[0].path)
        shard = next(src.glob("*.array_record"))
        shard.write_bytes(shard.read_bytes()[:-7])
        with pytest.raises(Exception, match="sha256"):
            run_build(plan, args)
    assert _nothing_written(tmp_path)


def test_beam_imports_quietly_and_leaves_the_root_logger_bare():
    """Importing the build (hence Beam) prints nothing and adds no root log handler, so the
    CLIs' own logging setup still takes effect (Beam's BigQuery stub warned on stderr and
    installed one)."""
    import subprocess
    probe = ("import logging, wmx.pipelines.transforms, apache_beam; "
             "print(len(logging.getLogger().handlers))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0" and "apitools" not in out.stderr, out.stderr


def test_build_quiets_beam_info_logs_unless_asked(monkeypatch):
    """Builds add the SDK workers' WARNING level and raise the apache_beam loggers to
    WARNING (restored after); $WMX_BEAM_LOGS=1 leaves both as Beam has them."""
    import logging
    from wmx.pipelines.options import quiet_beam_logs, with_quiet_workers
    monkeypatch.delenv("WMX_BEAM_LOGS", raising=False)
    assert with_quiet_workers(["--direct_num_workers=2"]) == [
        "--direct_num_workers=2", "--default_sdk_harness_log_level=WARNING"]
    given = ["--default_sdk_harness_log_level=DEBUG"]
    assert with_quiet_workers(given) == given
    log = logging.getLogger("apache_beam.typehints.native_type_compatibility")
    monkeypatch.setattr(logging.getLogger(), "level", logging.INFO)  # a CLI at INFO
    forwarded = logging.getLogger("apache_beam.runners.portability.local_job_service")
    repeat = logging.LogRecord(forwarded.name, logging.WARNING, "", 0, "Worker: %s",
                               ("x",), None)
    with quiet_beam_logs():
        assert logging.getLogger("apache_beam").level == logging.WARNING
        assert log.getEffectiveLevel() == logging.WARNING
        assert not forwarded.filter(repeat)
    assert logging.getLogger("apache_beam").level == logging.NOTSET
    assert forwarded.filter(repeat)
    monkeypatch.setenv("WMX_BEAM_LOGS", "1")
    assert with_quiet_workers(["--direct_num_workers=2"]) == ["--direct_num_workers=2"]
    with quiet_beam_logs():
        assert logging.getLogger("apache_beam").level == logging.NOTSET


@pytest.mark.parametrize("job", ["build_mt19.py", "build_taskset.py"])
def test_build_help_lists_the_beam_options_that_pass_through(job):
    import subprocess
    out = subprocess.run([sys.executable, str(REPO / "pipelines" / job), "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for opt in ("--runner=", "--direct_num_workers=", "--direct_running_mode=",
                "--dask_client_address=", "WMX_BEAM_LOGS=1"):
        assert opt in out.stdout, opt


def test_empty_dataset_ls_hint_names_the_tasks_that_have_sets(tmp_path, capsys):
    from wmx.schemas.taskset import mt19
    assert wmx_main(["dataset", "ls", "--home", str(tmp_path)]) == 0
    assert "needs sets of all 19 tasks" in capsys.readouterr().out
    ts, rng = mt19(), np.random.default_rng(0)
    info = ts.tasks[ts.task_id("cheetah-run")]
    write_set(tmp_path, info, [synthetic_episode(rng, info.episode_length, info.obs_dim,
                                                   info.action_dim)])
    assert wmx_main(["dataset", "ls", "--home", str(tmp_path)]) == 0
    assert (f"beam run pipelines/build_mt19.py --home {tmp_path} --tasks cheetah-run\n"
            in capsys.readouterr().out)
