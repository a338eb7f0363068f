"""`wmx.datasets.task_view`: a run's tasks of a pooled dataset at the model's widths, read
the same way by the in-memory and the streaming feeds (DreamerV3 offline, issue 14).

The tiny offline dataset (cartpole-balance O=5 A=1, cheetah-run O=17 A=6, T=20;
conftest's session fixture). No JAX program is compiled.
"""
from __future__ import annotations

import jax
import numpy as np
import pytest

from wmx.agents.api import BatchSpec
from wmx.datasets.readers import load_numpy, open_dataset, stream
from wmx.datasets.samplers import sample
from wmx.datasets.task_view import (make_view, record_indices, select_episodes, view_batch)


@pytest.fixture(scope="module")
def data(tiny_offline_dataset):
    _, path = tiny_offline_dataset
    ds = open_dataset(path)
    return ds, load_numpy(ds)


def test_identity_view_changes_nothing(data):
    ds, arrays = data
    ts = ds.taskset
    view = make_view(ts, ts.names, ts.max_obs_dim, ts.max_action_dim)
    assert view.identity and select_episodes(arrays, view) is arrays
    assert record_indices(ds, view) is None


@pytest.mark.parametrize("task, widths", [("cartpole-balance", (5, 1)),
                                          ("cheetah-run", (17, 6))])
def test_single_task_view_in_memory_and_streamed(data, task, widths):
    """One task at its own widths (DreamerV3's single-task model): in memory, exactly that
    task's episodes with task id 0 and the padding cut; streamed, windows of those
    episodes only, cut the same way, each window rows of one in-memory episode."""
    ds, arrays = data
    ts = ds.taskset
    tid = ts.task_id(task)
    view = make_view(ts, [task], *widths)
    sel = select_episodes(arrays, view)
    mine = arrays["task"] == tid
    assert sel["obs"].shape == (int(mine.sum()), arrays["obs"].shape[1], widths[0])
    assert sel["action"].shape[-1] == widths[1]
    np.testing.assert_array_equal(sel["task"], 0)
    np.testing.assert_array_equal(sel["obs"], arrays["obs"][mine][..., :widths[0]])
    np.testing.assert_array_equal(arrays["obs"][mine][..., widths[0]:], 0.0)   # cut = padding
    np.testing.assert_array_equal(arrays["action"][mine][..., widths[1]:], 0.0)
    np.testing.assert_array_equal(record_indices(ds, view), np.flatnonzero(mine))

    spec = BatchSpec("windows", 7, 12, False)
    win = sample({k: jax.numpy.asarray(v) for k, v in sel.items()}, jax.random.PRNGKey(0), spec)
    assert win["obs"].shape == (12, 7, widths[0])
    streamed = stream(ds, spec, seed=3, num_threads=1, episodes=record_indices(ds, view))
    b = next(streamed)
    np.testing.assert_array_equal(b["task"], tid)            # the task's records only
    cut = view_batch(b, view)
    assert cut["obs"].shape == win["obs"].shape and cut["action"].shape == win["action"].shape
    np.testing.assert_array_equal(cut["task"], 0)
    for j in range(spec.batch):                # every window: 7 consecutive rows of an episode
        hits = [(e, s) for e in range(sel["obs"].shape[0])
                for s in range(sel["obs"].shape[1] - 6)
                if np.array_equal(sel["obs"][e, s:s + 7], cut["obs"][j])]
        assert hits, j
        e, s = hits[0]
        np.testing.assert_array_equal(sel["action"][e, s:s + 7], cut["action"][j])
        np.testing.assert_array_equal(sel["reward"][e, s:s + 7], cut["reward"][j])


def test_subset_view_renumbers_tasks_in_the_runs_order(data):
    ds, arrays = data
    ts = ds.taskset
    view = make_view(ts, ["cheetah-run", "cartpole-balance"], 17, 6)   # run order differs
    sel = select_episodes(arrays, view)
    expect = np.where(arrays["task"] == ts.task_id("cheetah-run"), 0, 1)
    np.testing.assert_array_equal(sel["task"], expect)
    remap = view.remap()
    assert (remap[ts.task_id("cheetah-run")], remap[ts.task_id("cartpole-balance")]) == (0, 1)


def test_bad_views_are_errors(data):
    ds, _ = data
    ts = ds.taskset
    with pytest.raises(ValueError, match="distinct task names"):
        make_view(ts, ["cartpole-balance", "cartpole-balance"], 5, 1)
    with pytest.raises(ValueError, match=r"need at least \(17, 6\)"):
        make_view(ts, ["cheetah-run"], 5, 1)
    with pytest.raises(ValueError, match=r"holds \(17, 6\)"):
        make_view(ts, ["cartpole-balance"], 18, 1)
    with pytest.raises((ValueError, KeyError)):
        make_view(ts, ["walker-walk"], 24, 6)
