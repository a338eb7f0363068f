"""Which Beam runner a pooled build runs on, and the Dask cluster it uses.

`--runner` takes a short name (`direct`, `dask`, `flink`, `spark`, `dataflow`),
Beam's class name (`DirectRunner`, `DaskRunner`, ...) or a dotted runner class
path; `parse_runner_args` turns it into the path Beam imports. Tested here:
`direct` and `dask` (DESIGN.md §1: "DirectRunner, or Dask on a local or
multi-machine cluster"). `direct` (also `DirectRunner`) is pinned to Beam's
FnApiRunner (`wmx.pipelines.direct_runner`): Beam's own DirectRunner would first
try its Prism runner, downloading it where the network allows; Beam's switching
runner is still there by its dotted path,
``apache_beam.runners.direct.direct_runner.DirectRunner``. `flink` and `spark`
need job-server jars from outside the package registries and `dataflow` a Google
Cloud project; they are documented (docs/datasets.md) and untested.

`dask` runs Beam's own DaskRunner (apache_beam.runners.dask.dask_runner) on a
`distributed` cluster: the scheduler given by `--dask_client_address=HOST:PORT`
(every worker must import wmx and see the data root at the same path; both
are checked before anything is written), or else a `distributed.LocalCluster`
of `dask_workers` processes (one thread each) started for the build and
stopped after it.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
from typing import Iterator, Sequence

RUNNERS = {
    "direct": "wmx.pipelines.direct_runner.FnApiDirectRunner",
    "dask": "apache_beam.runners.dask.dask_runner.DaskRunner",
    "flink": "apache_beam.runners.portability.flink_runner.FlinkRunner",
    "spark": "apache_beam.runners.portability.spark_runner.SparkRunner",
    "dataflow": "apache_beam.runners.dataflow.dataflow_runner.DataflowRunner",
}
"""Short runner name -> the runner class path Beam imports."""

NAMES = {"direct": "DirectRunner"}
"""Short runner name -> the name a build prints and records, where it is not the class's."""

DASK_CONNECT_TIMEOUT_S = 10.0
"""Seconds to reach a Dask scheduler and see one worker (`--dask_connection_timeout`)."""

_DASK_OPTS = ("--dask_client_address", "--dask_connection_timeout",
              "--dask_scheduler_file", "--dask_client_name", "--dask_connection_limit",
              "--dask_npartitions", "--dask_partition_size")


class RunnerError(ValueError):
    """A runner name or runner option is wrong, or the cluster cannot be used."""


def resolve_runner(name: str) -> tuple[str, str]:
    """(name, dotted class path) of a runner given by short name (`dask`), Beam class name
    (`DaskRunner`, any case) or dotted path; the name is the class's, except `direct`'s
    ("DirectRunner", `NAMES`).

    Raises RunnerError listing the known short names for anything else."""
    key = str(name).strip()
    low = key.lower()
    for short, path in RUNNERS.items():
        cls = path.rsplit(".", 1)[1]
        shown = NAMES.get(short, cls)
        if low in (short, cls.lower(), shown.lower(), path.lower()):
            return shown, path
    if "." in key and all(part.isidentifier() for part in key.split(".")):
        return key.rsplit(".", 1)[1], key
    raise RunnerError(
        f"unknown runner {name!r}; known short names: {', '.join(RUNNERS)} (Beam's class "
        "names such as DirectRunner or DaskRunner, or a dotted runner class path, work too)")


@dataclasses.dataclass(frozen=True)
class RunnerArgs:
    """A build's runner, from its Beam arguments.

    name: the runner's name ("DirectRunner", "DaskRunner", ...; `resolve_runner`);
    path: the dotted path of the runner class that runs the build; beam_args:
    the Beam options with `--runner` rewritten to that path;
    dask_address: `--dask_client_address` or None; dask_timeout_s: seconds
    allowed to reach the scheduler; dask_workers: processes of the local
    cluster (None with a client address); partitions_given: whether
    `--dask_npartitions` / `--dask_partition_size` was given."""
    name: str
    beam_args: tuple[str, ...]
    path: str = ""
    dask_address: str | None = None
    dask_timeout_s: float = DASK_CONNECT_TIMEOUT_S
    dask_workers: int | None = None
    partitions_given: bool = False

    @property
    def is_dask(self) -> bool:
        return self.name == "DaskRunner"


def parse_runner_args(beam_args: Sequence[str], dask_workers: int | None = None) -> RunnerArgs:
    """Resolve `--runner` (`--runner=X` or `--runner X`; default DirectRunner)
    in `beam_args` and check the Dask options against it.

    dask_workers: processes of the local Dask cluster (default: the CPU count);
    only with `--runner=dask` and without `--dask_client_address`.
    Raises RunnerError (one line naming the problem and the fix) for an unknown
    runner, Dask options without the dask runner, `dask_workers` < 1 or given
    together with a client address, or a non-numeric connection timeout."""
    ap = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    ap.add_argument("--runner", default=None)
    ap.add_argument("--dask_client_address", default=None)
    ap.add_argument("--dask_connection_timeout", default=None)
    known, _ = ap.parse_known_args(list(beam_args))
    cls, path = resolve_runner(known.runner or "direct")
    rest, skip = [], False
    for a in beam_args:  # everything but --runner, which is re-added as a path
        if skip:
            skip = False
        elif a == "--runner":
            skip = True
        elif not a.startswith("--runner="):
            rest.append(a)
    given = [o for o in _DASK_OPTS if any(a == o or a.startswith(o + "=") for a in rest)]
    if cls != "DaskRunner":
        if given or dask_workers is not None:
            opt = given[0] if given else "--dask_workers"
            raise RunnerError(f"{opt} applies to the Dask runner only; add --runner=dask "
                              f"or drop {opt}")
        return RunnerArgs(cls, tuple([f"--runner={path}"] + rest), path)
    if dask_workers is not None and known.dask_client_address:
        raise RunnerError("give either --dask_client_address (an existing Dask cluster) or "
                          "--dask_workers (a local cluster started for the build), not both")
    if dask_workers is not None and dask_workers < 1:
        raise RunnerError(f"--dask_workers must be >= 1, got {dask_workers}")
    timeout = DASK_CONNECT_TIMEOUT_S
    if known.dask_connection_timeout is not None:
        try:
            timeout = float(known.dask_connection_timeout)
        except ValueError:
            raise RunnerError(f"--dask_connection_timeout must be seconds, got "
                              f"{known.dask_connection_timeout!r}") from None
    workers = None if known.dask_client_address else (dask_workers or os.cpu_count() or 1)
    return RunnerArgs(cls, tuple([f"--runner={path}"] + rest), path,
                      known.dask_client_address, timeout, workers,
                      any(o in given for o in ("--dask_npartitions", "--dask_partition_size")))


def _import_distributed():
    try:
        import distributed
        import apache_beam.runners.dask.dask_runner  # noqa: F401
    except ImportError as e:
        raise RunnerError(f"--runner=dask needs Dask ({e}); install it with "
                          "pip install 'apache-beam[dask]' (pinned in requirements-lock.txt; "
                          "or pip install -e '.[dask]')") from None
    return distributed


BUILD_CODE = ("pipelines", "schemas")
"""wmx subpackages whose functions a build ships to Dask by reference: the
scheduler and every worker must hold the same source files."""


def _make_probe():
    """A function run on the scheduler and every Dask worker: can it import
    wmx, a digest of wmx's BUILD_CODE sources there, and which of `paths` are
    not directories there. Built in a closure so cloudpickle ships it by value
    (a process with another wmx, or none, can still run it)."""
    def probe(paths, subpackages):
        import hashlib
        import importlib
        import os as _os
        import socket
        out = {"host": socket.gethostname(), "wmx": None, "code": None, "where": None,
               "missing": [p for p in paths if not _os.path.isdir(p)]}
        try:
            mod = importlib.import_module("wmx.pipelines.transforms")
        except Exception as e:  # noqa: BLE001 - reported to the user
            out["wmx"] = f"{type(e).__name__}: {e}"
            return out
        root = _os.path.dirname(_os.path.dirname(_os.path.abspath(mod.__file__)))
        h = hashlib.sha256()
        for sub in subpackages:
            d = _os.path.join(root, sub)
            for name in sorted(f for f in _os.listdir(d) if f.endswith(".py")):
                h.update(f"{sub}/{name}\0".encode())
                with open(_os.path.join(d, name), "rb") as f:
                    h.update(f.read())
        out["code"], out["where"] = h.hexdigest(), root
        return out
    return probe


def _tcp_unreachable(address: str, timeout_s: float) -> str | None:
    """Why a TCP connection to a `[tcp://]HOST:PORT` scheduler address fails
    (None when it connects, or for other protocols, which the Client checks)."""
    import socket
    proto, sep, rest = address.rpartition("://")
    if sep and proto != "tcp":
        return None
    host, _, port = rest.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        return "not HOST:PORT, e.g. tcp://10.0.0.5:8786"
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}"
    return None


def check_dask_cluster(address: str, shared_paths: Sequence[str], timeout_s: float) -> int:
    """Connect to the scheduler at `address`, wait up to `timeout_s` for one
    worker, and check on the scheduler and every worker that wmx imports with
    the same BUILD_CODE sources as here (the scheduler unpickles the task
    graph, the workers run it), and on every worker that each path of
    `shared_paths` is a directory. Returns the cluster's total worker threads.

    Raises RunnerError, one line naming the address or worker and the fix,
    when the scheduler cannot be reached, has no worker, or a process lacks
    wmx, runs another wmx, or (a worker) lacks a path."""
    distributed = _import_distributed()
    fix = ("start one there with `dask scheduler`, and `dask worker " + address +
           "` on each machine, or leave out --dask_client_address to run a local "
           "cluster of --dask_workers processes")
    problem = _tcp_unreachable(address, timeout_s)
    if problem:
        raise RunnerError(f"cannot reach the Dask scheduler at {address} ({problem}); {fix}")
    from wmx.pipelines.interrupt import deferred_signals
    try:
        with deferred_signals():          # a Ctrl-C here would leave it half-connected
            client = distributed.Client(address, timeout=timeout_s, set_as_default=False)
    except Exception as e:  # noqa: BLE001 - OSError/TimeoutError/ValueError alike
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise RunnerError(f"cannot reach the Dask scheduler at {address} ({msg}); "
                          f"{fix}") from None
    try:
        try:
            client.wait_for_workers(1, timeout=timeout_s)
        except (TimeoutError, OSError):
            raise RunnerError(f"the Dask scheduler at {address} has no workers after "
                              f"{timeout_s:g} s; start `dask worker {address}` on each "
                              "machine") from None
        probe = _make_probe()
        mine = probe([], BUILD_CODE)
        report = {f"scheduler {address}": client.run_on_scheduler(probe, [], BUILD_CODE)}
        report.update({f"worker {w}": r for w, r in
                       client.run(probe, list(shared_paths), BUILD_CODE).items()})
        for who, r in report.items():
            if r["wmx"]:
                raise RunnerError(f"Dask {who} (host {r['host']}) cannot import wmx "
                                  f"({r['wmx']}); install wmx and its pinned dependencies "
                                  "in the Python environment of the scheduler and every "
                                  "worker")
            if r["code"] != mine["code"]:
                raise RunnerError(
                    f"Dask {who} (host {r['host']}) runs another wmx ({r['where']}) than "
                    f"this machine ({mine['where']}): its wmx/pipelines or wmx/schemas "
                    "sources differ; start the scheduler and the workers from the same "
                    "wmx checkout and version as the launching machine")
            if r["missing"]:
                raise RunnerError(
                    f"Dask {who} (host {r['host']}) does not see {r['missing'][0]}; the "
                    "wmx data root must be on a filesystem every worker mounts at the "
                    "same path as the launching machine")
        return sum(client.nthreads().values())
    finally:
        client.close()


@contextlib.contextmanager
def quiet_dask_logs(level: int = logging.ERROR) -> Iterator[None]:
    """Raise the `distributed` loggers' level to `level` for the block (the
    scheduler and clients log every connection at INFO), restoring it after."""
    names = ("distributed", "distributed.scheduler", "distributed.core",
             "distributed.nanny", "distributed.batched", "distributed.client")
    loggers = [logging.getLogger(n) for n in names]
    old = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(max(level, lg.getEffectiveLevel()))
    try:
        yield
    finally:
        for lg, lvl in zip(loggers, old):
            lg.setLevel(lvl)


@contextlib.contextmanager
def local_dask_cluster(workers: int) -> Iterator[str]:
    """A `distributed.LocalCluster` of `workers` processes (1 thread each, on
    127.0.0.1, no dashboard) for the duration of the block; yields the
    scheduler address. Closed on exit, also on an exception; a SIGINT / SIGTERM while it
    starts stops the build once it has started (`wmx.pipelines.interrupt`)."""
    from wmx.pipelines.interrupt import deferred_signals
    distributed = _import_distributed()
    cluster = None
    try:
        with deferred_signals():          # a Ctrl-C here would leave it half-started
            cluster = distributed.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                scheduler_port=0, dashboard_address=None, silence_logs=logging.ERROR)
        yield cluster.scheduler_address
    finally:
        if cluster is not None:
            cluster.close()


@contextlib.contextmanager
def runner_session(ra: RunnerArgs, shared_paths: Sequence[str] = (),
                   default_partitions: int = 1) -> Iterator[list[str]]:
    """The Beam options to run a pipeline with, inside whatever the runner needs.

    Not Dask: yields `ra.beam_args`. Dask: starts a local cluster (no
    `--dask_client_address`) or checks the given one (check_dask_cluster),
    then yields the options with `--dask_client_address` set and, unless given,
    `--dask_npartitions=default_partitions` (Beam's default puts up to 128
    elements in one Dask partition, i.e. one task, and so would run a small
    build on one worker). The local cluster is stopped on exit."""
    args = list(ra.beam_args)
    if not ra.is_dask:
        yield args
        return
    if not ra.partitions_given:
        args.append(f"--dask_npartitions={max(1, int(default_partitions))}")
    with quiet_dask_logs():
        if ra.dask_address:
            check_dask_cluster(ra.dask_address, shared_paths, ra.dask_timeout_s)
            yield args
            return
        with local_dask_cluster(ra.dask_workers) as address:
            check_dask_cluster(address, shared_paths, ra.dask_timeout_s)
            yield args + [f"--dask_client_address={address}"]
