"""Run checkpoints: round trip of named items (zero-size leaves included), partial
restore, pruning, mismatch errors."""
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.checkpoint import (CheckpointDamagedError, list_checkpoints, restore_checkpoint,
                            save_checkpoint)


def _state(x=0.0):
    return {"agent": {"a": jnp.arange(3.0) + x, "empty": jnp.zeros((2, 0)),
                      "n": (jnp.int32(4), jnp.ones((2, 2)))},
            "replay": jnp.full((4,), x)}


def test_round_trip_and_prune(tmp_path):
    for step in (1, 2, 3):
        save_checkpoint(tmp_path, step, _state(step), {"step": step}, keep=2)
    ckpts = list_checkpoints(tmp_path)
    assert [int(p.name) for p in ckpts] == [2, 3]
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".tmp")]
    state, host = restore_checkpoint(ckpts[-1], _state())
    assert host == {"step": 3}
    np.testing.assert_array_equal(state["agent"]["a"], np.arange(3.0) + 3)
    assert state["agent"]["empty"].shape == (2, 0) and int(state["agent"]["n"][0]) == 4
    np.testing.assert_array_equal(state["replay"], np.full(4, 3.0))
    # one item alone: the others are not read
    only, _ = restore_checkpoint(ckpts[-1], {"agent": _state()["agent"]})
    assert set(only) == {"agent"}
    np.testing.assert_array_equal(only["agent"]["a"], np.arange(3.0) + 3)


def test_existing_step_refused_and_mismatch_is_clear(tmp_path):
    save_checkpoint(tmp_path, 1, _state(), {})
    with pytest.raises(FileExistsError):
        save_checkpoint(tmp_path, 1, _state(), {})
    other = {"agent": {"a": jnp.arange(5.0), "empty": jnp.zeros((2, 0)),
                       "n": (jnp.int32(4), jnp.ones((2, 2)))}}
    with pytest.raises(ValueError, match="does not match"):
        restore_checkpoint(list_checkpoints(tmp_path)[-1], other)
    with pytest.raises(ValueError, match="has no item 'loop'"):
        restore_checkpoint(list_checkpoints(tmp_path)[-1], {"loop": jnp.zeros(2)})


# orbax's other reads of the damaged files report to an event loop already closed: that
# report alone is ignored (pyproject.toml, filterwarnings), in this test or a later one
def test_damaged_checkpoint_names_the_folder_to_delete_and_the_one_before(tmp_path):
    """Truncated data files: one short line (not TensorStore's spec dump, not "does not
    match"), naming the folder to delete and where a resume continues from."""
    for step in (1, 2):
        save_checkpoint(tmp_path, step, _state(step), {"step": step}, keep=2)
    newest = list_checkpoints(tmp_path)[-1]
    for f in (newest / "items" / "agent").rglob("*"):
        if f.is_file() and f.parent.name == "d":
            f.write_bytes(f.read_bytes()[:10])
    with pytest.raises(CheckpointDamagedError) as info:
        restore_checkpoint(newest, _state())
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 600 and "does not match" not in msg
    assert "cannot be read" in msg and f"delete {newest}" in msg
    assert "--resume then continues from 000000000001" in msg
    restore_checkpoint(list_checkpoints(tmp_path)[0], _state())      # the older one is intact


def test_save_and_restore_log_nothing_below_warning(tmp_path, caplog):
    """Orbax's INFO lines (tens per restore) stay out of the trainers' and evaluate's logs."""
    import logging
    with caplog.at_level(logging.INFO):
        save_checkpoint(tmp_path, 1, _state(1), {"step": 1})
        restore_checkpoint(list_checkpoints(tmp_path)[-1], _state())
    assert [r for r in caplog.records if r.name == "absl"] == []
