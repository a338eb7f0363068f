"""The speed benchmarks (benchmarks/tdmpc2_speed.py, dreamerv3_speed.py): the matmul FLOP
counter, the timing helpers, the one-process rule on a TPU, and the online throughput at
several seed counts (--online-seeds: parsing, the records' rates, one worker per preset;
the real tiny runs are in the slow tests)."""
import argparse
import importlib.util
import re
import shlex
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
_SPEC = importlib.util.spec_from_file_location("tdmpc2_speed", BENCH / "tdmpc2_speed.py")
speed = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(speed)
_DV_SPEC = importlib.util.spec_from_file_location("dreamerv3_speed", BENCH / "dreamerv3_speed.py")
dv = importlib.util.module_from_spec(_DV_SPEC)
_DV_SPEC.loader.exec_module(dv)


def test_plain_and_batched_dots():
    assert speed.program_flops(jnp.matmul, jnp.ones((8, 16)), jnp.ones((16, 4))) == 2 * 8 * 16 * 4
    f = lambda a, b: jnp.einsum("bij,bjk->bik", a, b)
    assert speed.program_flops(f, jnp.ones((3, 8, 16)), jnp.ones((3, 16, 4))) == 3 * 2 * 8 * 16 * 4


def test_scan_body_counted_length_times_and_inside_jit():
    w = jnp.ones((16, 16))

    @jax.jit
    def f(x):
        return jax.lax.scan(lambda c, _: (c @ w, None), x, None, length=5)[0]

    assert speed.program_flops(f, jnp.ones((4, 16))) == 5 * 2 * 4 * 16 * 16


def test_gradient_counts_the_backward_dots():
    loss = lambda w, x: jnp.sum((x @ w) ** 2)
    fwd = 2 * 4 * 16 * 8
    # forward, plus d/dw = x^T g (the d/dx product is not needed and not formed)
    assert speed.program_flops(jax.grad(loss), jnp.ones((16, 8)), jnp.ones((4, 16))) == 2 * fwd


def test_cond_counts_its_dearest_branch_and_while_its_body_once():
    w = jnp.ones((16, 16))
    f = lambda p, x: jax.lax.cond(p, lambda y: (y @ w) @ w, lambda y: y @ w, x)
    assert speed.program_flops(f, True, jnp.ones((4, 16))) == 2 * (2 * 4 * 16 * 16)
    g = lambda x: jax.lax.while_loop(lambda c: c[1] < 3, lambda c: (c[0] @ w, c[1] + 1), (x, 0))[0]
    assert speed.program_flops(g, jnp.ones((4, 16))) == 2 * 4 * 16 * 16


def test_median_ms_times_only_the_calls_after_the_warm_up():
    calls = []

    def fn():
        calls.append(None)

    med, wall, cpu = speed.median_ms(fn, repeats=3, warmup=2)
    assert len(calls) == 5 and len(wall) == 3 and med == sorted(wall)[1] and cpu >= 0
    t = speed.time_calls(fn, 4)
    assert len(calls) == 9 and len(t["wall_ms"]) == len(t["cpu_ms"]) == 4
    assert all(w > 0 for w in t["wall_ms"])


@pytest.mark.slow
def test_seeds_multiply_the_matmul_work():
    """--seeds N: one call runs N seeds' programs, N times the matmul work (~1-2 min on
    2 cores: four inits and traces)."""
    for make in (speed.wmx_update, speed.wmx_plan):
        _, one = make(1)
        _, three = make(1, seeds=3)
        assert three == 3 * one > 0, make.__name__


def test_dreamerv3_speed_refuses_two_workers_on_a_tpu():
    p = argparse.ArgumentParser()
    many = argparse.Namespace(sizes=["1m", "12m"], online_presets=[], reference_dir=None)
    one = argparse.Namespace(sizes=["12m"], online_presets=["paper"], online_seeds=[2, 5],
                             reference_dir=None)
    dv._one_process_on_a_tpu(p, "cpu", many)          # the CPU takes several processes
    dv._one_process_on_a_tpu(p, "tpu", one)           # seed counts share the preset's worker
    with pytest.raises(SystemExit) as e:
        dv._one_process_on_a_tpu(p, "tpu", many)
    assert e.value.code == 2
    two = argparse.Namespace(sizes=["12m"], online_presets=["paper", "cpu"], reference_dir=None)
    with pytest.raises(SystemExit):
        dv._one_process_on_a_tpu(p, "tpu", two)
    assert dv._item_name("train", "12m", 1) == "train_12m"
    assert dv._item_name("policy", "12m", 5) == "policy_12m_seeds5"


# ---- --online-seeds -----------------------------------------------------------------
def _refused(parse, argv, capsys) -> str:
    """The last stderr line of a command line ``parse`` refuses with status 2."""
    with pytest.raises(SystemExit) as e:
        parse(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


def test_tdmpc2_online_seeds_parse_with_todays_defaults():
    assert speed.parse_args([]).online_seeds == [1, 4]
    assert speed.parse_args(["--quick"]).online_seeds == [1]
    assert speed.parse_args(["--online-seeds", "5", "1", "2", "2"]).online_seeds == [1, 2, 5]
    assert speed.parse_args(["--quick", "--online-seeds", "2"]).online_seeds == [2]
    assert speed.parse_args(["--no-online"]).online_seeds == []
    args = speed.parse_args(["--preset", "paper", "--online-seeds", "1", "2", "5"])
    assert args.preset == "paper" and args.online_seeds == [1, 2, 5]


@pytest.mark.parametrize("flag", ["--online-seeds", "--seeds"])
@pytest.mark.parametrize("bad", ["0", "-1", "65", "two", "1.5"])
def test_seed_counts_refuse_a_bad_count_in_one_line(flag, bad, capsys):
    """--online-seeds and --seeds (the single programs vmapped) take the same seed counts."""
    msg = "is not a seed count: give an integer from 1 to 64"
    line = _refused(speed.parse_args, [flag, "1", bad], capsys)
    assert line.endswith(f"argument {flag}: {bad!r} {msg}"), line
    line = _refused(dv.parse_args, [flag, bad], capsys)
    assert line.endswith(f"argument {flag}: {bad!r} {msg}"), line
    assert getattr(speed.parse_args([flag, "64"]), flag[2:].replace("-", "_")) == [64]


def test_online_seeds_refused_where_no_online_run_would_use_them(capsys):
    line = _refused(speed.parse_args, ["--no-online", "--online-seeds", "2"], capsys)
    assert "--online-seeds with --no-online" in line
    for argv in (["--quick", "--online-seeds", "2"], ["--online-presets", "--online-seeds", "2"]):
        line = _refused(dv.parse_args, argv, capsys)
        assert "--online-seeds: no online preset runs" in line, argv


def test_dreamerv3_online_seeds_parse():
    _, args = dv.parse_args([])
    assert args.online_presets == ["paper", "cpu"] and args.online_seeds == [1]
    _, args = dv.parse_args(["--sizes", "12m", "--online-presets", "paper",
                             "--online-seeds", "5", "2"])
    assert args.online_presets == ["paper"] and args.online_seeds == [2, 5]
    _, args = dv.parse_args(["--quick"])
    assert args.online_presets == [] and args.online_seeds == [1] and args.rounds == 3


def test_device_check_speed_stages_parse_as_before(tmp_path):
    """The check's speed stages (default and --force-cpu) parse with the benchmarks' own
    parsers, and still run no online throughput."""
    spec = importlib.util.spec_from_file_location("device_check", BENCH / "device_check.py")
    dc = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("device_check", dc)       # its dataclass looks its module up
    spec.loader.exec_module(dc)
    for smoke in (False, True):
        plan = {st.name: st for st in dc.stages(tmp_path / "raw", tmp_path / "home", smoke)}
        assert speed.parse_args(plan["tdmpc2_speed"].argv[2:]).online_seeds == []
        for name in ("dreamerv3_speed_f32", "dreamerv3_speed_bf16"):
            _, args = dv.parse_args(plan[name].argv[2:])
            assert args.online_presets == [] and args.compile_cache == "", name


@pytest.mark.parametrize("doc", ["performance.md", "accelerators.md"])
def test_the_docs_tpu_online_commands_parse_and_keep_one_process(doc, tmp_path):
    """The pages' TPU commands: TD-MPC2 paper online at 1, 2, 5 seeds; DreamerV3 paper
    online at 2 and 5 seeds in one worker (the TPU check lets it start)."""
    text = (BENCH.parent / "docs" / doc).read_text().replace("\\\n", " ")
    out = str(tmp_path)
    td = re.findall(r"^python benchmarks/tdmpc2_speed\.py (.*--online-seeds.*)$", text, re.M)
    dvs = re.findall(r"^python benchmarks/dreamerv3_speed\.py (.*--online-seeds.*)$", text,
                     re.M)
    assert len(td) == len(dvs) == 1, (td, dvs)
    a = speed.parse_args(shlex.split(td[0].replace("DIR", out)))
    assert (a.preset, a.online_seeds, a.no_online) == ("paper", [1, 2, 5], False)
    p, a = dv.parse_args(shlex.split(dvs[0].replace("DIR", out)))
    assert (a.online_presets, a.online_seeds, a.compute_dtype) == (["paper"], [2, 5],
                                                                    "bfloat16")
    dv._one_process_on_a_tpu(p, "tpu", a)         # refuses (SystemExit) a second process


def test_tdmpc2_bench_online_rates_per_seed_and_in_total(monkeypatch):
    """bench_online on a stand-in program: seeds 0..N-1, whole rounds of T + 1 ticks in
    order, and env steps/s = T x N x action repeat / the median round."""
    import wmx.envs.playground as playground
    from wmx.train_online import program
    seen: dict = {"ticks": []}
    monkeypatch.setattr(playground, "cached_env", lambda task, T: SimpleNamespace(action_repeat=2))

    def init_carries(rc, env):
        seen["seeds"] = rc.seeds
        return SimpleNamespace(n_updates=jnp.zeros(len(rc.seeds)))

    def make_chunk_fn(rc, env):
        def chunk(carries, ticks):
            seen["ticks"].append(ticks.tolist())
            time.sleep(0.002)
            return carries, None
        return chunk

    monkeypatch.setattr(program, "init_carries", init_carries)
    monkeypatch.setattr(program, "make_chunk_fn", make_chunk_fn)
    r = speed.bench_online(3, "probe-action", "tiny", 2, episode_length=4)
    assert seen["seeds"] == (0, 1, 2)
    assert seen["ticks"] == [list(range(5 * i, 5 * i + 5)) for i in range(5)]
    assert r["n_seeds"] == 3 and len(r["round_s"]) == 2 and r["device_memory"] is None
    assert r["env_steps_per_s"] == pytest.approx(4 * 3 * 2 / r["round_s_median"])
    assert r["env_steps_per_s_per_seed"] == pytest.approx(r["env_steps_per_s"] / 3)
    assert "3 seed(s)" in speed.online_line(r) and "per seed" in speed.online_line(r)


class _FakeOnlineWorker:
    """A `_worker.Worker` stand-in answering setup_online as `WmxWorker.setup_online`."""

    live: list = []

    def __init__(self, name):
        self.name, self.sent, self.n = name, [], None
        _FakeOnlineWorker.live.append(self)
        self.most_live = len(_FakeOnlineWorker.live)

    def send(self, cmd, **kw):
        self.sent.append((cmd, kw))
        self.n = kw["n_seeds"]

    def recv(self):
        kw = self.sent[-1][1]
        seeds = list(range(kw["seed"], kw["seed"] + kw["n_seeds"]))
        return {"n_seeds": kw["n_seeds"], "seeds": seeds,
                "env_steps_per_chunk": kw["ticks"] * kw["n_envs"] * 2, "updates_per_chunk": 32}


def test_dreamerv3_run_online_times_seed_counts_in_one_worker_per_preset():
    _FakeOnlineWorker.live = []
    started, stopped = [], []

    def start(preset):
        started.append(_FakeOnlineWorker(f"wmx_online_{preset}"))
        return started[-1]

    def stop(w):
        stopped.append(w.name)
        _FakeOnlineWorker.live.remove(w)

    class Blocks:        # a chunk takes 1 s per seed
        def run(self, w, item, calls):
            assert item == "online" and calls == 1 and len(_FakeOnlineWorker.live) == len(started)
            return {"median_ms": 1000.0 * w.n, "loaded": w.n == 5}

    out = dv.run_online(start, stop, Blocks(), ["paper"], [2, 5], task="walker-walk",
                        n_envs=16, ticks=4, rounds=3, compute_dtype="bfloat16")
    assert [w.name for w in started] == ["wmx_online_paper"] and stopped == ["wmx_online_paper"]
    assert max(w.most_live for w in started) == 1       # one process on the chip
    sent = started[0].sent
    assert [(c, kw["n_seeds"], kw["seed"], kw["compute_dtype"]) for c, kw in sent] == [
        ("setup_online", 2, 0, "bfloat16"), ("setup_online", 5, 0, "bfloat16")]
    assert [(o["preset"], o["n_seeds"], o["seeds"]) for o in out] == [
        ("paper", 2, [0, 1]), ("paper", 5, [0, 1, 2, 3, 4])]
    for o in out:        # 128 env steps per seed per chunk of n_seeds s
        n = o["n_seeds"]
        assert o["chunk_s_median"] == n and len(o["blocks"]) == 3
        assert o["env_steps_per_s_per_seed"] == pytest.approx(128 / n)
        assert o["env_steps_per_s"] == pytest.approx(128) and o["updates_per_s"] == 32 / n
        assert o["loaded"] == (n == 5)
        line = dv._online_line(o)
        assert f"{n} seed(s): {128 / n:.1f} env steps/s per seed, 128.0 in total" in line
    _FakeOnlineWorker.live, started[:], stopped[:] = [], [], []
    out = dv.run_online(start, stop, Blocks(), ["paper", "cpu"], [1, 2], task="walker-walk",
                        n_envs=16, ticks=4, rounds=3, compute_dtype="float32")
    assert [(o["n_seeds"], o["preset"]) for o in out] == [(1, "paper"), (1, "cpu"),
                                                          (2, "paper"), (2, "cpu")]
    assert len(started) == 2 and sorted(stopped) == ["wmx_online_cpu", "wmx_online_paper"]


@pytest.mark.slow
def test_tdmpc2_bench_online_tiny_two_seeds():
    """The real chunk: tiny preset, probe-action, T = 4, 2 seeds (~3 min on 2 cores)."""
    r = speed.bench_online(2, "probe-action", "tiny", 2, episode_length=4)
    assert r["n_seeds"] == 2 and r["env_steps_per_s"] > 0
    assert r["env_steps_per_s_per_seed"] == pytest.approx(r["env_steps_per_s"] / 2)


@pytest.mark.slow
def test_dreamerv3_setup_online_tiny_replaces_its_program():
    """The real worker: tiny preset, probe-action, 2 seeds then 1 (~4.5 min on 2 cores)."""
    w = dv.WmxWorker()
    two = w.setup_online("probe-action", "tiny", n_envs=4, ticks=2, n_seeds=2)
    assert two["n_seeds"] == 2 and two["seeds"] == [0, 1] and two["updates_per_chunk"] > 0
    assert jax.tree.leaves(w.items["online"].carries)[0].shape[0] == 2
    t = w.time("online", 1)
    assert len(t["wall_ms"]) == 1
    one = w.setup_online("probe-action", "tiny", n_envs=4, ticks=2, seed=3, n_seeds=1)
    assert one["seeds"] == [3] and jax.tree.leaves(w.items["online"].carries)[0].shape[0] == 1
