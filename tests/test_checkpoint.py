"""Run checkpoints: round trip of named items (zero-size leaves included), partial
restore, pruning, mismatch errors, digests (a changed byte, a damaged host.json, the
newest intact checkpoint, a damaged one replaced, a checkpoint written without digests)."""
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.checkpoint import (DIGESTS, CheckpointDamagedError, list_checkpoints,
                            newest_intact, restore_checkpoint, save_checkpoint)


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
    """Truncated data files of a checkpoint written without digests (before wmx wrote
    them): one short line (not TensorStore's spec dump, not "does not match"), naming the
    folder to delete and where a resume continues from."""
    for step in (1, 2):
        save_checkpoint(tmp_path, step, _state(step), {"step": step}, keep=2)
    newest = list_checkpoints(tmp_path)[-1]
    (newest / DIGESTS).unlink()
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


def _data_files(ckpt, item="agent"):
    return sorted(f for f in (ckpt / "items" / item).rglob("*")
                  if f.is_file() and f.parent.name == "d")


def test_a_flipped_byte_is_found_by_its_digest_naming_the_file(tmp_path):
    """orbax restores a data file with a changed byte without a word; its digest does not."""
    for step in (1, 2):
        save_checkpoint(tmp_path, step, _state(step), {"step": step}, keep=2)
    newest = list_checkpoints(tmp_path)[-1]
    f = _data_files(newest)[0]
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.raises(CheckpointDamagedError) as info:
        restore_checkpoint(newest, _state())
    msg = str(info.value)
    assert msg.startswith(f"checkpoint file {f} does not match the digest written with it")
    assert f"delete {newest} (--resume then continues from 000000000001)" in msg
    only, _ = restore_checkpoint(newest, {"replay": _state()["replay"]})   # other items: fine
    np.testing.assert_array_equal(only["replay"], np.full(4, 2.0))


def test_newest_intact_skips_a_damaged_host_json_saying_so(tmp_path, caplog):
    import logging
    for step in (1, 2):
        save_checkpoint(tmp_path, step, _state(step), {"step": step}, keep=2)
    older, newest = list_checkpoints(tmp_path)
    (newest / "host.json").write_text('{"step')
    with caplog.at_level(logging.WARNING):
        path, host = newest_intact(tmp_path)
    assert (path, host) == (older, {"step": 1})
    (rec,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert rec.startswith(f"{newest / 'host.json'} is not valid JSON (Unterminated string")
    assert rec.endswith(": using the older checkpoint 000000000001")
    (older / "host.json").write_text("[]")
    with pytest.raises(CheckpointDamagedError, match=r"host.json is not valid JSON"):
        newest_intact(tmp_path)                            # none intact: the newest's line


def test_a_damaged_checkpoint_is_replaced_when_its_step_is_saved_again(tmp_path):
    for step in (1, 2):
        save_checkpoint(tmp_path, step, _state(step), {"step": step}, keep=2)
    newest = list_checkpoints(tmp_path)[-1]
    _data_files(newest)[0].write_bytes(b"x")
    save_checkpoint(tmp_path, 2, _state(7), {"step": 2}, keep=2)   # a resumed run, again
    state, host = restore_checkpoint(list_checkpoints(tmp_path)[-1], _state())
    np.testing.assert_array_equal(state["replay"], np.full(4, 7.0))
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "000000000001", "000000000002"]


def test_a_checkpoint_without_digests_still_loads(tmp_path):
    save_checkpoint(tmp_path, 1, _state(1), {"step": 1})
    (list_checkpoints(tmp_path)[-1] / DIGESTS).unlink()
    path, host = newest_intact(tmp_path)
    state, _ = restore_checkpoint(path, _state())
    assert host == {"step": 1} and float(state["replay"][0]) == 1.0
