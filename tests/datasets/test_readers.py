"""Readers and samplers: in-memory slices (tdmpc2_spec 4.8), windows (dreamerv3 5.3),
streaming determinism and checkpoint refusal for another dataset."""
from __future__ import annotations

import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipelines"))
from episode_fixtures import synthetic_episode, taskset_of, write_set  # noqa: E402

from wmx.datasets.readers import load_in_memory, open_dataset, stream_slices  # noqa: E402
from wmx.datasets.samplers import sample_slices, sample_windows  # noqa: E402
from wmx.pipelines.sources import make_plan, run_build  # noqa: E402
from wmx.schemas.taskset import TaskInfo  # noqa: E402

T = 12


def _toy(n=3, rows=T + 1):
    """obs[e, r, 0] = 100 e + r, action[..., 0] = r, reward = r, task = e."""
    e, r = np.meshgrid(np.arange(n), np.arange(rows), indexing="ij")
    first = r == 0
    return {"obs": (100 * e + r)[..., None].astype(np.float32),
            "action": r[..., None].astype(np.float32), "reward": r.astype(np.float32),
            "is_first": first, "is_last": r == rows - 1, "is_terminal": np.zeros_like(first),
            "task": np.arange(n, dtype=np.int32)}


def test_sample_slices_alignment_and_uniform_starts():
    data, H, B = _toy(), 3, 4096
    out = jax.jit(sample_slices, static_argnums=(2, 3))(data, jax.random.PRNGKey(0), B, H)
    obs = np.asarray(out["obs"][..., 0])
    assert out["obs"].shape == (H + 1, B, 1) and out["action"].shape == (H, B, 1)
    assert out["reward"].shape == (H, B) and out["task"].shape == (B,)
    ep, s = obs[0] // 100, obs[0] % 100
    np.testing.assert_array_equal(np.asarray(out["task"]), ep)
    for h in range(H + 1):
        np.testing.assert_array_equal(obs[h], 100 * ep + s + h)  # within one episode
    for h in range(H):
        np.testing.assert_array_equal(np.asarray(out["action"][h, :, 0]), s + h)
        np.testing.assert_array_equal(np.asarray(out["reward"][h]), s + h + 1)
    assert s.min() == 0 and s.max() == T - H  # starts 0..T-H
    counts = np.bincount(s.astype(int), minlength=T - H + 1)
    assert counts.min() > 0.6 * B / (T - H + 1)


def test_sample_windows_annotation():
    data = _toy(rows=10)
    out = sample_windows(data, jax.random.PRNGKey(1), 64, length=6)
    first, last = np.asarray(out["is_first"]), np.asarray(out["is_last"])
    assert first[:, 0].all()
    obs = np.asarray(out["obs"][..., 0])
    crossing = (obs % 100)[:, 1:] == 0  # a new episode starts mid-window
    np.testing.assert_array_equal(first[:, 1:], crossing)
    np.testing.assert_array_equal(last[:, :-1], crossing)  # row 9 is last, next is first


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    rng = np.random.default_rng(0)
    a, b = TaskInfo("task-a", 5, 1, T, 2, 0.9), TaskInfo("task-b", 24, 6, T, 2, 0.9)
    write_set(home, a, [synthetic_episode(rng, T, 5, 1) for _ in range(5)], 0)
    write_set(home, b, [synthetic_episode(rng, T, 24, 6) for _ in range(3)], 1)
    return open_dataset(run_build(make_plan(home, taskset_of("tst", [a, b]), num_shards=2)),
                        verify=True)


def test_in_memory_load_and_sample(ds):
    data = load_in_memory(ds)
    assert data["obs"].shape == (8, T + 1, 24) and data["action"].shape == (8, T + 1, 6)
    out = jax.jit(sample_slices, static_argnums=(2, 3))(data, jax.random.PRNGKey(0), 16, 3)
    assert out["obs"].shape == (4, 16, 24)


def test_stream_deterministic_and_checkpoint(ds):
    s1 = stream_slices(ds, batch=4, H=3, seed=7)
    b0 = next(s1); state = s1.get_state(); b1 = next(s1)
    assert b0["obs"].shape == (4, 4, 24) and b0["action"].shape == (3, 4, 6)
    s2 = stream_slices(ds, batch=4, H=3, seed=7)
    np.testing.assert_array_equal(next(s2)["obs"], b0["obs"])
    s3 = stream_slices(ds, batch=4, H=3, seed=7)
    s3.set_state(state)
    np.testing.assert_array_equal(next(s3)["obs"], b1["obs"])
    with pytest.raises(ValueError, match="belongs to dataset"):
        s3.set_state({**state, "dataset": "0" * 64})
