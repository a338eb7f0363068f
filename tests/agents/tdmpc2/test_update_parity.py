"""Reference parity of one TD-MPC2 update against the 5f6fade recordings.

fixtures/tdmpc2/README.md: update_q5.npz (num_q 5, reference init) and
update_q2_warm.npz (num_q 2, warm heads), 3 calls each, every draw injected,
dropout 0. Each call is checked (a) in isolation from the file's state and
(b) chained through wmx's own state. Tolerances are the README's
(`parity_helpers.check_update_call`). The isolated calls run twice on the CPU: with
XLA's default dot path and with TD-MPC2's trainers' CPU options (`wmx.xla_cpu.XLA_DOTS`,
XLA's own dots, and `NATIVE_ROW_REDUCTIONS`). The chained calls pass ``cfg`` by keyword
like the isolated ones: jit keys its cache on how the arguments are passed, so both
share one compiled program per file.
"""
from __future__ import annotations

import jax
import numpy as np
import pytest
from parity_helpers import check_update_call, file_state, load_fixture, update_inputs

from wmx import xla_cpu
from wmx.agents.tdmpc2.config import TDMPC2Config
from wmx.agents.tdmpc2.update import update_with_aux

# TD-MPC2's trainers' options on the CPU (XLA's dots, native row reductions)
TRAINERS_CPU = xla_cpu.training_options(True, native_row_reductions=True,
                                        choice="xla", backend="cpu")

FILES = ["update_q5.npz", "update_q2_warm.npz"]
NCALLS = 3


@pytest.fixture(scope="module", params=FILES)
def fx(request):
    data = load_fixture("tdmpc2", request.param)
    c = {k[len("meta/cfg/"):]: data[k].item() for k in data if k.startswith("meta/cfg/")}
    cfg = TDMPC2Config(obs_dim=c["obs_dim"], action_dim=c["action_dim"],
                       episode_length=c["episode_length"], enc_dim=c["enc_dim"],
                       mlp_dim=c["mlp_dim"], latent_dim=c["latent_dim"],
                       num_enc_layers=c["num_enc_layers"], num_q=c["num_q"],
                       dropout=c["dropout"], horizon=c["horizon"],
                       batch_size=c["batch_size"]).resolved()
    assert np.float32(cfg.discount) == data["meta/discount"]
    return request.param, data, cfg


@pytest.mark.parametrize("dots", ["default", "xla"])
def test_each_call_in_isolation(fx, dots):
    _, data, cfg = fx
    if dots == "default":
        run = update_with_aux
    elif jax.default_backend() != "cpu":
        pytest.skip("XLA's CPU dot option")
    else:
        run = jax.jit(update_with_aux.__wrapped__, static_argnames=("cfg",),
                      compiler_options=TRAINERS_CPU)
    with jax.default_matmul_precision("highest"):
        for k in range(NCALLS):
            state = file_state(data, k, cfg)
            batch, noise = update_inputs(data, k)
            new_state, metrics, aux = run(state, batch, noise, cfg=cfg)
            check_update_call(data, k, cfg, state, new_state, metrics, aux, NCALLS)


def test_three_calls_chained(fx):
    _, data, cfg = fx
    with jax.default_matmul_precision("highest"):
        state = file_state(data, 0, cfg)
        for k in range(NCALLS):
            batch, noise = update_inputs(data, k)
            new_state, metrics, aux = update_with_aux(state, batch, noise, cfg=cfg)
            flips = check_update_call(data, k, cfg, state, new_state, metrics, aux, NCALLS,
                                      chained=True)
            assert int(new_state.step) == int(state.step) + 1
            if flips and k + 1 < NCALLS:   # only on a TPU (T34)
                pytest.skip(f"call {k} took {flips} Adam step(s) with the other sign at "
                            f"gradients within the chip's tolerance of 0 (<= 2 lr = "
                            f"{2 * cfg.lr:.1e} apart): calls {k + 1}.. start from a state "
                            "that differs there by design")
            state = new_state
