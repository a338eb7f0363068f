"""JAX's persistent compilation cache under <home>/cache/jax: used by default, off with
--no-compile-cache or WMX_NO_COMPILE_CACHE=1, and wired into the CLIs."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from wmx.train_online import cli as online_cli

PROBE = """
import sys, jax, jax.numpy as jnp
from wmx.runs.cli_common import enable_compile_cache
path = enable_compile_cache(sys.argv[1], sys.argv[2] == "on")
print(jax.config.jax_persistent_cache_min_compile_time_secs)
# the threshold is printed above and checked by the test; below it is 0 so that f is
# cached however fast this machine compiles it (an idle machine took < 0.2 s)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
@jax.jit
def f(x):
    for i in range(30):
        x = jnp.tanh(x @ x.T) + i
    return x
f(jnp.ones((32, 32))).block_until_ready()
print(path)
"""


def _probe(home, mode, line=-1, **env):
    e = {k: v for k, v in os.environ.items() if k != "WMX_NO_COMPILE_CACHE"}
    e.update(env, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "-c", PROBE, str(home), mode], env=e,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[line]


def test_cache_folder_is_used_and_can_be_turned_off(tmp_path):
    from wmx.runs.cli_common import COMPILE_CACHE_MIN_SECONDS
    cache = tmp_path / "on" / "cache" / "jax"
    assert _probe(tmp_path / "on", "on") == str(cache)
    assert float(_probe(tmp_path / "on2", "on", line=-2)) == COMPILE_CACHE_MIN_SECONDS
    entries = sorted(p.name for p in cache.iterdir())
    assert any(name.startswith("jit_f") for name in entries)
    _probe(tmp_path / "on", "on")                       # a second process reuses them
    assert sorted(p.name for p in cache.iterdir()) == entries



def test_cache_off_touches_nothing(tmp_path, monkeypatch):
    from wmx.runs.cli_common import enable_compile_cache
    monkeypatch.delenv("WMX_NO_COMPILE_CACHE", raising=False)
    assert enable_compile_cache(tmp_path / "off", False) is None
    monkeypatch.setenv("WMX_NO_COMPILE_CACHE", "1")
    assert enable_compile_cache(tmp_path / "env", True) is None
    assert not (tmp_path / "off").exists() and not (tmp_path / "env").exists()


@pytest.mark.parametrize("flag,enabled", [([], True), (["--no-compile-cache"], False)])
def test_trainer_cli_turns_the_cache_on_unless_told(tmp_path, monkeypatch, flag, enabled):
    calls = []
    monkeypatch.setattr(online_cli, "enable_compile_cache",
                        lambda home, on: calls.append((home, on)))
    (tmp_path / "runs" / "taken").mkdir(parents=True)
    # stops at the existing run directory, after the cache was set up
    assert online_cli.main(["--task", "probe-action", "--preset", "tiny", "--home",
                            str(tmp_path), "--name", "taken", *flag]) == 2
    assert calls == [(tmp_path.resolve(), enabled)]
