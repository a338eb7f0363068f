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
from wmx.agents.api import BatchSpec  # noqa: E402
from wmx.datasets.samplers import batch_axes, sample, sample_slices, sample_windows  # noqa: E402
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


@pytest.mark.parametrize("spec", [BatchSpec("slices", 4, 5), BatchSpec("windows", 6, 5, True)])
def test_batch_axes_name_the_batch_axis_of_every_key(spec):
    """What a data-parallel trainer shards: the axis of size B of each array of a batch."""
    shapes = jax.eval_shape(lambda d: sample(d, jax.random.PRNGKey(0), spec), _toy(rows=10))
    axes = batch_axes(spec)
    assert set(axes) == set(shapes)
    for k, a in axes.items():
        assert shapes[k].shape[a] == spec.batch and spec.batch not in shapes[k].shape[:a], k


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


def test_stream_matches_the_dataset_rows(ds):
    """Every streamed slice is H+1 consecutive rows of one stored episode."""
    from wmx.datasets.readers import load_numpy
    data = load_numpy(ds)
    b = next(stream_slices(ds, batch=8, H=3, seed=3, slices_per_episode=2))
    assert b["obs"].shape == (4, 8, 24) and b["reward"].shape == (3, 8)
    for j in range(8):
        k = int(np.flatnonzero((data["obs"][:, :, :] == b["obs"][0, j][None, None]).all(-1)
                               .any(-1))[0])
        s = int(np.flatnonzero((data["obs"][k] == b["obs"][0, j]).all(-1))[0])
        np.testing.assert_array_equal(b["obs"][:, j], data["obs"][k, s:s + 4])
        np.testing.assert_array_equal(b["action"][:, j], data["action"][k, s:s + 3])
        np.testing.assert_array_equal(b["reward"][:, j], data["reward"][k, s + 1:s + 4])
        assert b["task"][j] == data["task"][k]


def test_stream_rejects_a_bad_record():
    from wmx.datasets.readers import _CropBatch
    from wmx.schemas.episode import EpisodeFormatError, pad_episode, serialize_episode
    rec = serialize_episode(pad_episode(synthetic_episode(np.random.default_rng(0), T, 5, 1),
                                        0, 24, 6))
    crop = _CropBatch(4, 2, seed=0)
    out = crop(0, [rec, rec])
    assert out["obs"].shape == (2, 2, 4, 24) and out["task"].shape == (2, 2)
    with pytest.raises(EpisodeFormatError, match="bytes"):
        crop(0, [rec[:-3]])
    with pytest.raises(EpisodeFormatError, match="bytes"):
        crop(0, [rec, rec[:-3]])
    with pytest.raises(EpisodeFormatError, match="magic"):
        crop(0, [b"X" + rec[1:]])
    unpadded = serialize_episode(synthetic_episode(np.random.default_rng(0), T, 5, 1))
    with pytest.raises(EpisodeFormatError, match="not a pooled record"):
        crop(0, [unpadded])


@pytest.mark.slow  # spawns 2 Python processes that import grain/jax: ~1 min here
def test_stream_with_worker_processes(ds):
    """Grain worker processes (num_workers=2): deterministic for a seed, the
    iterator state restores, and the batches hold real rows."""
    s1 = stream_slices(ds, batch=4, H=3, seed=11, num_workers=2)
    b0 = next(s1); state = s1.get_state(); b1 = next(s1)
    s2 = stream_slices(ds, batch=4, H=3, seed=11, num_workers=2)
    np.testing.assert_array_equal(next(s2)["obs"], b0["obs"])
    s2.set_state(state)
    np.testing.assert_array_equal(next(s2)["obs"], b1["obs"])
    assert b0["obs"].shape == (4, 4, 24) and (b0["reward"] >= 0).all()
