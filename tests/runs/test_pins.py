"""Machine-dependent agent fields (`wmx.runs.pins`; DreamerV3's compute_dtype, deviation
D4): a run keeps the value it resolved when it was created on any machine, a run saved
before the field existed loads as float32 with its old hashes, and ``--resume`` /
``--set`` check the field as any other."""
from __future__ import annotations

import argparse
import copy
import hashlib
import json

import pytest

from wmx.agents.dreamerv3 import config as dv3_config
from wmx.agents.dreamerv3.agent import PINNED_FIELDS
from wmx.envs.registry import get_task
from wmx.runs.cli_common import resume_changes
from wmx.runs.offline_config import OfflineRunConfig
from wmx.runs.online_config import OnlineRunConfig
from wmx.schemas.taskset import TaskInfo, TaskSet
from wmx.train_online import cli as online


OFFLINE_FIELDS = tuple(k for k in PINNED_FIELDS if k.startswith("offline_"))


@pytest.fixture
def backend(monkeypatch):
    """backend(name): make JAX's default backend read as ``name`` for config building."""
    def set_backend(name):
        monkeypatch.setattr(dv3_config.jax, "default_backend", lambda: name)
    return set_backend


def _online(**kw):
    return OnlineRunConfig(task="probe-action", agent="dreamerv3", preset="tiny", **kw)


def _old(d):
    """``d`` as the code before compute_dtype (and the later offline_* and
    scan_weight_grads fields) wrote it: no such key anywhere."""
    d = copy.deepcopy(d)
    for k in ("compute_dtype", "scan_weight_grads", *OFFLINE_FIELDS):
        del d["resolved_agent_config"][k]
        d["agent_overrides"].pop(k, None)
    return d


def _sha(d):
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def test_a_run_keeps_its_compute_dtype_on_another_machine(backend):
    backend("tpu")
    tpu = _online()
    d_tpu, h_tpu = tpu.to_json(), tpu.config_hash()
    assert tpu.agent_config.compute_dtype == d_tpu["resolved_agent_config"]["compute_dtype"] \
        == "bfloat16"
    backend("cpu")
    cpu = _online()
    d_cpu, h_cpu = cpu.to_json(), cpu.config_hash()
    assert d_cpu["resolved_agent_config"]["compute_dtype"] == "float32"
    back = OnlineRunConfig.from_json(d_tpu)                     # the TPU run, on a CPU
    assert back.agent_config.compute_dtype == "bfloat16"
    # scan_weight_grads "auto" resolved by the machine too (W-D12)
    assert back.agent_overrides == {"compute_dtype": "bfloat16", "scan_weight_grads": "outside"}
    assert back.to_json()["resolved_agent_config"] == d_tpu["resolved_agent_config"]
    assert OnlineRunConfig.from_json(d_cpu) == cpu              # nothing to restore here
    assert back.config_hash() == h_tpu                          # the same run, the same hash
    backend("tpu")
    moved = OnlineRunConfig.from_json(d_cpu)                    # the CPU run, on a TPU
    assert moved.agent_config.compute_dtype == "float32"
    assert moved.config_hash() == h_cpu != h_tpu


@pytest.mark.parametrize("preset", ["tiny", "paper"])
def test_a_run_saved_before_the_field_computes_in_float32(backend, preset):
    backend("cpu")
    rc = OnlineRunConfig(task="probe-action", agent="dreamerv3", preset=preset,
                         agent_overrides={"compute_dtype": "float32"})
    old = _old(rc.to_json())
    for where in ("cpu", "tpu"):
        backend(where)
        loaded = OnlineRunConfig.from_json(old)
        assert loaded.agent_config.compute_dtype == "float32"
        assert loaded.config_hash() == _sha(old)                # the hash it was made with
    bf16 = OnlineRunConfig(task="probe-action", agent="dreamerv3", preset=preset,
                           agent_overrides={"compute_dtype": "bfloat16"})
    assert bf16.config_hash() != _sha(old)


def _offline(**kw):
    infos = tuple(TaskInfo.from_spec(get_task(t).replace(T=12))
                  for t in ("probe-action", "probe-constant"))
    ts = TaskSet("pins", infos, (None,) * 2, "none")
    return OfflineRunConfig(dataset="pins@" + "a" * 64, taskset=ts.to_dict(),
                            agent="dreamerv3", preset="tiny", **kw)


def test_offline_runs_too(backend):
    backend("tpu")
    tpu = _offline()
    d_tpu, h_tpu = tpu.to_json(), tpu.training_hash()
    backend("cpu")
    back = OfflineRunConfig.from_json(d_tpu)
    assert back.agent_config.compute_dtype == "bfloat16"
    assert back.training_hash() == h_tpu
    old = _old(_offline().to_json())
    backend("tpu")
    loaded = OfflineRunConfig.from_json(old)
    assert loaded.agent_config.compute_dtype == "float32"
    keep = {k: old[k] for k in ("dataset", "taskset", "agent", "seeds", "stream",
                                "stream_chunk", "resolved_agent_config")}
    assert loaded.training_hash() == _sha(keep) != h_tpu


def test_resume_checks_compute_dtype_as_any_setting(backend):
    backend("cpu")
    args = argparse.Namespace(given=set())
    for saved in (_online().to_json(), _old(_online().to_json())):
        resume_changes(args, saved, {}, overrides={"compute_dtype": "float32"})   # no change
        with pytest.raises(ValueError, match="compute_dtype=bfloat16 conflicts with the run's "
                                             "saved compute_dtype=float32"):
            resume_changes(args, saved, {}, overrides={"compute_dtype": "bfloat16"})
    with pytest.raises(ValueError, match="no field 'compute_dtyp'; did you mean "
                                         "'compute_dtype'"):
        resume_changes(args, _online().to_json(), {}, overrides={"compute_dtyp": "float32"})


def test_set_compute_dtype_on_the_command_line(capsys, tmp_path):
    base = ["--agent", "dreamerv3", "--task", "probe-action", "--preset", "tiny",
            "--home", str(tmp_path), "--dry-run"]
    assert online.main([*base, "--set", "compute_dtype=bfloat16"]) == 0
    assert online.main([*base, "--set", "compute_dtype=float16"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "compute_dtype='float16': must be one of float32, bfloat16, auto" in err


def test_an_explicit_auto_is_restored_too(backend):
    """A run made with ``--set compute_dtype=auto`` on a TPU keeps bfloat16 (and its hash)
    when it is loaded on a CPU, as one that left the field to the preset."""
    backend("tpu")
    tpu = _online(agent_overrides={"compute_dtype": "auto"})
    d, h = tpu.to_json(), tpu.config_hash()
    assert d["resolved_agent_config"]["compute_dtype"] == "bfloat16"
    backend("cpu")
    back = OnlineRunConfig.from_json(d)
    assert back.agent_config.compute_dtype == "bfloat16" and back.config_hash() == h


def _from_file(path, *typed, offline=False):
    from wmx.runs.config_file import parse_with_config
    if offline:                 # config_from_args opens the dataset: the same step, alone
        from wmx.runs.config_file import with_file_pins
        from wmx.train_offline import cli as offline_cli
        args = parse_with_config(offline_cli.build_parser(), ["--config", str(path), *typed])
        return with_file_pins(_offline(), args)
    return online.config_from_args(parse_with_config(online.build_parser(),
                                                     ["--config", str(path), *typed]))


def test_config_of_a_saved_run_computes_as_the_run_did(backend, tmp_path):
    """``--config <config.json of a run whose "auto" became bfloat16 on a TPU>`` on a CPU:
    bfloat16, explicit in the new run's overrides; a file or a flag that says auto, or
    another preset, lets this machine choose; a CPU run's file on a TPU stays float32."""
    backend("tpu")
    tpu, tpu_off = _online(), _offline()
    h_tpu = tpu.config_hash()
    path, path_off = tmp_path / "config.json", tmp_path / "offline.json"
    path.write_text(json.dumps(tpu.to_json()))
    saved_off = tpu_off.to_json()
    for k in ("stream_chunk", "train_tasks"):    # no flag reads them back (at their defaults)
        del saved_off[k]
    path_off.write_text(json.dumps(saved_off))
    backend("cpu")
    assert _online().agent_config.compute_dtype == "float32"           # this machine's own
    rc = _from_file(path)
    assert rc.agent_config.compute_dtype == "bfloat16"
    assert rc.agent_overrides["compute_dtype"] == "bfloat16"
    assert rc.config_hash() == h_tpu                                   # the same run config
    assert _from_file(path_off, offline=True).agent_config.compute_dtype == "bfloat16"
    for typed in (["--set", "compute_dtype=auto"], ["--preset", "cpu"]):
        assert _from_file(path, *typed).agent_config.compute_dtype == "float32", typed
    assert _from_file(path, "--set", "compute_dtype=bfloat16").agent_config.dtype == "bfloat16"
    says_auto = json.loads(path.read_text())
    says_auto["agent_overrides"]["compute_dtype"] = "auto"
    path.write_text(json.dumps(says_auto))
    assert _from_file(path).agent_config.compute_dtype == "float32"
    written = {k: v for k, v in says_auto.items() if k != "resolved_agent_config"}
    del written["agent_overrides"]["compute_dtype"]
    path.write_text(json.dumps(written))                              # not a saved run's
    assert _from_file(path).agent_config.compute_dtype == "float32"
    path.write_text(json.dumps(_online().to_json()))                  # a CPU run, on a TPU
    backend("tpu")
    assert _from_file(path).agent_config.compute_dtype == "float32"
    path.write_text(json.dumps(_old(_online().to_json())))            # saved before the field
    assert _from_file(path).agent_config.compute_dtype == "float32"
    assert _from_file(path).agent_overrides == {"compute_dtype": "float32",
                                                "scan_weight_grads": "inside"}
