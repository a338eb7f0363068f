"""Lineage: a dataset's source episode sets and their agents' final returns."""
import numpy as np
import pytest

from store_fixtures import (N_EPISODES, task_info, write_dataset, write_source_run,
                            write_source_set)
from wmx.datasets.store import Store
from wmx.evaluate import lineage as lin

T = 20


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """cartpole-balance from run src-0 (whose run dir exists), cheetah-run from src-1 (gone)."""
    home = tmp_path_factory.mktemp("home")
    cart = write_source_set(home, task_info("cartpole-balance", T), seed=0)
    cheetah = write_source_set(home, task_info("cheetah-run", T), seed=1)
    ds = write_dataset(home, "tst", [cart, cheetah])
    write_source_run(home, "src-0", [
        {"seed": 0, "kind": "eval", "env_steps": 400, "return": 100.0},
        {"seed": 5, "kind": "eval", "env_steps": 400, "return": 110.0},
        {"seed": 0, "kind": "train", "env_steps": 800, "return": 1.0},
        {"seed": 0, "kind": "eval", "env_steps": 800, "return": 321.5},
        {"seed": 5, "kind": "eval", "env_steps": 800, "return": 500.0},
    ])
    return home, cart, cheetah, ds


def test_source_with_a_run_dir_reads_the_producer_seeds_last_eval_row(home):
    h, cart, _, _ = home
    s = lin.resolve_source(Store(h), cart.content_hash)
    assert (s.task, s.seed, s.run_id, s.basis) == ("cartpole-balance", 0, "src-0", lin.BASIS_RUN)
    assert (s.final_return, s.env_steps) == (321.5, 800)
    assert s.episodes == N_EPISODES and s.code_version == "abc1234"


def test_a_prefix_set_reads_the_eval_row_where_its_episodes_end(home):
    """The first 10 of the run's 12 episodes (an offline check's RUN_DIR@400) end at env
    step 400 = 10 x T x action repeat: the seed's eval row there, not its last one."""
    from wmx.episode_sets.episode_set import write_prefix_set
    h, cart, _, _ = home
    store = Store(h)
    prefix = write_prefix_set(store, lin.find_episode_set(store, cart.content_hash), 10)
    s = lin.resolve_source(store, prefix.name)
    assert (s.run_id, s.seed, s.episodes, s.basis) == ("src-0", 0, 10, lin.BASIS_RUN)
    assert (s.final_return, s.env_steps) == (100.0, 400)
    five = write_prefix_set(store, prefix, 5)               # 200: no eval row there
    s5 = lin.resolve_source(store, five.name)
    assert (s5.final_return, s5.env_steps) == (321.5, 800)


def test_source_without_a_run_dir_uses_the_last_ten_episodes(home):
    h, _, cheetah, _ = home
    s = lin.resolve_source(Store(h), cheetah.content_hash)
    assert s.basis == lin.BASIS_EPISODE_SET and s.run_id == "src-1"
    rets = np.asarray(cheetah.episode_returns)
    assert rets[-1] > rets[0]                               # the fixture's returns grow
    assert s.final_return == pytest.approx(rets[-10:].mean())
    assert s.final_return != pytest.approx(rets.mean())
    assert s.env_steps == N_EPISODES * T * 2               # episodes x T x action repeat


def test_dataset_sources_follow_the_manifest(home):
    h, cart, cheetah, ds = home
    manifest, path, sources = lin.dataset_sources(Store(h), f"tst@{ds.content_hash}")
    assert manifest.content_hash == ds.content_hash and path.name == ds.content_hash
    assert [(s.task, s.content_hash) for s in sources] == [
        ("cartpole-balance", cart.content_hash), ("cheetah-run", cheetah.content_hash)]
    # a prefix ref resolves too
    assert lin.dataset_sources(Store(h), f"tst@{ds.content_hash[:10]}")[0] is not None


def test_missing_dataset_and_missing_episode_set_are_reported_not_raised(home, tmp_path):
    h, _, _, ds = home
    assert lin.dataset_sources(Store(tmp_path), f"tst@{ds.content_hash}") == (None, None, [])
    s = lin.resolve_source(Store(h), "f" * 64)
    assert s.basis == "missing" and s.final_return is None and s.task == "?"


def test_last_eval_return_falls_back_to_every_seeds_last_rows(home):
    h, _, _, _ = home
    metrics = Store(h).run_path("src-0") / "metrics.csv"
    assert lin.last_eval_return(metrics, 5) == (500.0, 800)
    assert lin.last_eval_return(metrics, 9) == (pytest.approx((321.5 + 500.0) / 2), 800)
    assert lin.last_eval_return(metrics.parent / "nope.csv", 0) is None
