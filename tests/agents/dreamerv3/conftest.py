"""Shared fixtures of the DreamerV3 tests: the reference recordings and the
tiny config built from their meta/config (fixtures/dreamerv3/README.md)."""
from __future__ import annotations

import json
from collections.abc import Mapping

import jax
import numpy as np
import pytest

from wmx.agents.dreamerv3.config import DreamerV3Config, make_config
from wmx.agents.dreamerv3.params import init_params
from wmx.paths import shared_dir


class _LazyNpz(Mapping):
    """Read-only mapping over an .npz that decompresses each array on first use."""

    def __init__(self, path):
        self._file = np.load(path)
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._cache:
            self._cache[key] = self._file[key]
        return self._cache[key]

    def __iter__(self):
        return iter(self._file.files)

    def __len__(self) -> int:
        return len(self._file.files)


def _load(name: str) -> Mapping[str, np.ndarray]:
    return _LazyNpz(shared_dir() / "fixtures/dreamerv3" / name)


@pytest.fixture(scope="session")
def components() -> Mapping[str, np.ndarray]:
    """components.npz as a dict of arrays."""
    return _load("components.npz")


@pytest.fixture(scope="session")
def train_fx() -> Mapping[str, np.ndarray]:
    """train.npz as a dict of arrays."""
    return _load("train.npz")


def config_from_reference(config_json: str, obs_dim: int, action_dim: int) -> DreamerV3Config:
    """A DreamerV3Config with the sizes and hyperparameters of a reference run
    (the flat 29eb964 config of train.npz['meta/config_json']), in float32: the
    recordings were made with `jax.compute_dtype: float32` (spec 1.12, D4), whatever
    backend the tests run on."""
    c = json.loads(config_json)
    return DreamerV3Config(
        obs_dim=obs_dim, action_dim=action_dim,
        units=c["actor.units"], hidden=c["dyn.rssm.hidden"], deter=c["dyn.rssm.deter"],
        stoch=c["dyn.rssm.stoch"], classes=c["dyn.rssm.classes"], blocks=c["dyn.rssm.blocks"],
        enc_layers=c["enc.simple.layers"], dec_layers=c["dec.simple.layers"],
        rew_layers=c["rewhead.layers"], con_layers=c["conhead.layers"],
        actor_layers=c["actor.layers"], critic_layers=c["critic.layers"],
        img_layers=c["dyn.rssm.imglayers"], obs_layers=c["dyn.rssm.obslayers"],
        dyn_layers=c["dyn.rssm.dynlayers"], bins=c["rewhead.bins"],
        unimix=c["dyn.rssm.unimix"], free_nats=c["rssm_loss.free"],
        minstd=c["actor.minstd"], maxstd=c["actor.maxstd"],
        batch_size=c["batch_size"], batch_length=c["batch_length"] - c["replay_context"],
        replay_context=c["replay_context"], imag_horizon=c["imag_length"],
        compute_dtype="float32",
    ).resolved()


@pytest.fixture(scope="session")
def ref_cfg(train_fx) -> DreamerV3Config:
    """The fixtures' tiny config (obs 5, action 2, units 10, hidden 14, deter 24,
    stoch 4, classes 3)."""
    obs_dim = train_fx["batch0/vector"].shape[-1]
    action_dim = train_fx["batch0/action"].shape[-1]
    return config_from_reference(str(train_fx["meta/config_json"]), obs_dim, action_dim)


@pytest.fixture(scope="session")
def tiny_cfg() -> DreamerV3Config:
    """make_config("tiny") for a 5-dim observation and a 2-dim action."""
    return make_config("tiny", obs_dim=5, action_dim=2)


@pytest.fixture(scope="session")
def tiny_params(tiny_cfg):
    """init_params(key(0), tiny_cfg), jitted once per session."""
    return jax.jit(init_params, static_argnums=1)(jax.random.key(0), tiny_cfg)


@pytest.fixture(autouse=True)
def _highest_precision():
    """Parity needs full float32 matmuls (deviation W-D3)."""
    with jax.default_matmul_precision("highest"):
        yield


@pytest.fixture(scope="session")
def train_step_jit():
    """`train.train_step_full` jitted once per session (cfg static): every parity case
    of the training step reuses this one compiled program. Calls run under
    "highest" matmul precision also from module-scoped fixtures (which set up
    before the autouse precision fixture; the precision is part of jit's cache
    key, so mixing contexts would compile twice)."""
    from wmx.agents.dreamerv3.train import train_step_full
    step = jax.jit(train_step_full, static_argnums=3)

    def run(*args):
        with jax.default_matmul_precision("highest"):
            return step(*args)

    return run
