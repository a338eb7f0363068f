"""The CPU matmul path of training programs (`wmx.xla_cpu`, docs/performance.md "Dot backend")."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from wmx import xla_cpu
from wmx.agents.registry import get_agent


@pytest.mark.parametrize("prefer, choice, backend, want", [
    (True, "auto", "cpu", xla_cpu.XLA_DOTS),
    (False, "auto", "cpu", {}),
    (False, "xla", "cpu", xla_cpu.XLA_DOTS),
    (True, "ynnpack", "cpu", {}),
    (True, " XLA ", "cpu", xla_cpu.XLA_DOTS),
    (True, "xla", "gpu", {}),
    (True, "auto", "gpu", {}),
])
def test_training_options(prefer, choice, backend, want):
    assert xla_cpu.training_options(prefer, choice=choice, backend=backend) == want
    native = xla_cpu.training_options(prefer, native_row_reductions=True, choice=choice,
                                      backend=backend)
    assert native == ({**want, **xla_cpu.NATIVE_ROW_REDUCTIONS} if backend == "cpu" else {})


def test_bad_choice_names_the_variable_and_the_values(monkeypatch):
    monkeypatch.setenv(xla_cpu.ENV_VAR, "onednn")
    with pytest.raises(ValueError, match=r"WMX_CPU_DOTS='onednn' is not one of auto, ynnpack, xla"):
        xla_cpu.training_options(True, backend="cpu")


@pytest.mark.parametrize("trainer", ["train_online", "train_offline"])
def test_trainers_refuse_a_bad_choice_before_writing(trainer, tmp_path, monkeypatch, capsys):
    """A bad WMX_CPU_DOTS is the trainers' one-line error (exit 2) before any run
    directory, lock or store exists, not an error at the first program's compile."""
    import importlib
    main = importlib.import_module(f"wmx.{trainer}.cli").main
    monkeypatch.setenv(xla_cpu.ENV_VAR, "onednn")
    home = tmp_path / "home"
    argv = (["--task", "cartpole-balance", "--env-steps", "1000"] if trainer == "train_online"
            else ["--dataset", "mt19@0123456789"])
    assert main([*argv, "--home", str(home), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "WMX_CPU_DOTS='onednn' is not one of" in err[0], err
    assert not home.exists()

def test_agents_preferences(monkeypatch):
    """Both agents take XLA's dots on the CPU unless asked otherwise, TD-MPC2 native row
    reductions whatever the dots; off the CPU neither option."""
    dv3, td = get_agent("dreamerv3"), get_agent("tdmpc2")
    native = xla_cpu.NATIVE_ROW_REDUCTIONS
    monkeypatch.setattr(xla_cpu.jax, "default_backend", lambda: "cpu")
    monkeypatch.delenv(xla_cpu.ENV_VAR, raising=False)
    assert dv3.compiler_options(None) == xla_cpu.XLA_DOTS
    assert td.compiler_options(None) == {**xla_cpu.XLA_DOTS, **native}
    monkeypatch.setenv(xla_cpu.ENV_VAR, "ynnpack")
    assert dv3.compiler_options(None) == {}
    assert td.compiler_options(None) == native
    monkeypatch.setenv(xla_cpu.ENV_VAR, "xla")
    assert td.compiler_options(None) == {**xla_cpu.XLA_DOTS, **native}
    monkeypatch.setattr(xla_cpu.jax, "default_backend", lambda: "gpu")
    monkeypatch.setenv(xla_cpu.ENV_VAR, "xla")
    assert dv3.compiler_options(None) == td.compiler_options(None) == {}


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA's CPU backend option")
def test_the_option_takes_ynnpack_out_of_the_program():
    """This jaxlib knows the option, and it turns the YNNPACK dot fusions into XLA dots
    (a renamed or removed option would fail here, not silently in a trainer)."""
    def f(x, w):
        return jnp.tanh(x @ w) @ w.T

    x, w = jnp.ones((64, 128)), jnp.ones((128, 96))
    default = jax.jit(f).lower(x, w).compile().as_text()
    xla = jax.jit(f, compiler_options=xla_cpu.XLA_DOTS).lower(x, w).compile().as_text()
    assert "__ynn_fusion" in default
    assert "__ynn_fusion" not in xla and " dot(" in xla


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="XLA's CPU backend option")
def test_native_row_reductions_take_the_tree_rewrite_out_of_the_program():
    """This jaxlib knows the pass name: a row sum wider than 32 stays one reduce
    instead of a reduce-window over blocks of 32 and a second reduce."""
    x = jnp.ones((64, 384))
    rewritten = jax.jit(lambda x: x.sum(-1), compiler_options=xla_cpu.XLA_DOTS
                        ).lower(x).compile().as_text()
    native = jax.jit(lambda x: x.sum(-1),
                     compiler_options={**xla_cpu.XLA_DOTS, **xla_cpu.NATIVE_ROW_REDUCTIONS}
                     ).lower(x).compile().as_text()
    assert "reduce-window(" in rewritten
    assert "reduce-window(" not in native and " reduce(" in native


def test_trainer_program_caches_follow_the_choice(monkeypatch):
    """The trainers' cached chunk programs are keyed by the compile options, so a process
    that changes WMX_CPU_DOTS gets a program built with the new options."""
    from wmx.train_offline import program as offline
    monkeypatch.setattr(xla_cpu.jax, "default_backend", lambda: "cpu")
    from wmx.agents.dreamerv3.config import make_config
    dv3, cfg = get_agent("dreamerv3"), make_config("tiny", obs_dim=4, action_dim=2)
    built = []
    monkeypatch.setattr(offline, "_jit", lambda fn, mesh, options: built.append(options) or fn)
    offline._chunk_fn.cache_clear()
    try:
        for choice in ("ynnpack", "xla", "ynnpack"):
            monkeypatch.setenv(xla_cpu.ENV_VAR, choice)
            offline.make_chunk_fn(dv3, cfg)
    finally:
        offline._chunk_fn.cache_clear()          # no stand-in program left for other tests
    assert built == [{}, xla_cpu.XLA_DOTS]      # the third call is the first's, cached
    assert xla_cpu.options_key({"b": "1", "a": ""}) == (("a", ""), ("b", "1"))


def test_evaluation_program_takes_the_agents_options(monkeypatch):
    """`make_evaluate_fn` compiles with `Agent.compiler_options` (the policy computed as
    in the training chunk) and caches per options, like the trainers' programs."""
    from wmx import acting
    from wmx.agents.dreamerv3.config import make_config
    from wmx.envs.probes import make_probe_env
    monkeypatch.setattr(xla_cpu.jax, "default_backend", lambda: "cpu")
    env = make_probe_env("probe-action")
    dv3 = get_agent("dreamerv3")
    cfg = make_config("tiny", obs_dim=env.obs_dim, action_dim=env.action_dim)
    built = []
    monkeypatch.setattr(acting.jax, "jit", lambda fn, **kw: built.append(kw) or fn)
    acting._evaluate_fn.cache_clear()
    try:
        for choice in ("xla", "ynnpack", "xla"):
            monkeypatch.setenv(xla_cpu.ENV_VAR, choice)
            acting.make_evaluate_fn(dv3, cfg, 2, env)
    finally:
        acting._evaluate_fn.cache_clear()        # no stand-in program left for other tests
    assert [kw.get("compiler_options") for kw in built] == [xla_cpu.XLA_DOTS, {}]
