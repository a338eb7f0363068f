"""The CPU matmul path of training programs (`wmx.xla_cpu`, docs/performance.md "Dot backend")."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from wmx import xla_cpu
from wmx.agents.registry import get_agent

AVX512 = frozenset({"avx2", "fma", "avx512f", "avx512bw"})
AVX2 = frozenset({"avx2", "fma"})


def test_cpu_flags_reads_the_first_flags_line(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512f\n\n"
                    "processor\t: 1\nflags\t\t: fpu\n")
    assert xla_cpu.cpu_flags(info) == {"fpu", "avx2", "avx512f"}
    assert xla_cpu.cpu_flags(tmp_path / "missing") == frozenset()
    (tmp_path / "empty").write_text("processor\t: 0\n")
    assert xla_cpu.cpu_flags(tmp_path / "empty") == frozenset()


@pytest.mark.parametrize("prefer, flags, choice, backend, want", [
    (True, AVX512, "auto", "cpu", xla_cpu.XLA_DOTS),
    (True, AVX2, "auto", "cpu", {}),
    (False, AVX512, "auto", "cpu", {}),
    (False, AVX2, "xla", "cpu", xla_cpu.XLA_DOTS),
    (True, AVX512, "ynnpack", "cpu", {}),
    (True, AVX512, " XLA ", "cpu", xla_cpu.XLA_DOTS),
    (True, AVX512, "xla", "gpu", {}),
    (True, AVX512, "auto", "gpu", {}),
])
def test_training_options(prefer, flags, choice, backend, want):
    assert xla_cpu.training_options(prefer, flags=flags, choice=choice, backend=backend) == want


def test_bad_choice_names_the_variable_and_the_values(monkeypatch):
    monkeypatch.setenv(xla_cpu.ENV_VAR, "onednn")
    with pytest.raises(ValueError, match=r"WMX_CPU_DOTS='onednn' is not one of auto, ynnpack, xla"):
        xla_cpu.training_options(True, flags=AVX512, backend="cpu")


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
    """DreamerV3 takes XLA's dots on AVX-512 CPUs only; TD-MPC2 only when asked."""
    dv3, td = get_agent("dreamerv3"), get_agent("tdmpc2")
    monkeypatch.setattr(xla_cpu.jax, "default_backend", lambda: "cpu")
    monkeypatch.delenv(xla_cpu.ENV_VAR, raising=False)
    for flags, want_dv3 in ((AVX512, xla_cpu.XLA_DOTS), (AVX2, {})):
        monkeypatch.setattr(xla_cpu, "cpu_flags", lambda flags=flags: flags)
        assert dv3.compiler_options(None) == want_dv3
        assert td.compiler_options(None) == {}
    monkeypatch.setenv(xla_cpu.ENV_VAR, "xla")
    assert td.compiler_options(None) == xla_cpu.XLA_DOTS
    monkeypatch.setenv(xla_cpu.ENV_VAR, "ynnpack")
    monkeypatch.setattr(xla_cpu, "cpu_flags", lambda: AVX512)
    assert dv3.compiler_options(None) == {}


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="CPU backend option")
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
