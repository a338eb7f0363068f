"""Canonical episode records: bytes, round trip, errors, row invariants."""
import hashlib
import struct

import numpy as np
import pytest

from wmx.schemas.episode import (EPISODE_KEYS, MAGIC, POOLED_KEYS, SCHEMA_VERSION,
                                 EpisodeFormatError, deserialize_episode,
                                 episode_digest, episode_return, make_episode,
                                 pad_episode, serialize_episode, unpad_episode,
                                 validate_episode_rows)

T = 4


def fixed_episode():
    """Small fixed episode: T=4, O=3, A=2 with exactly representable values."""
    k = np.arange(T + 1)
    obs = np.arange((T + 1) * 3).reshape(T + 1, 3) * 0.5 - 1.0
    action = np.stack([k * 0.25 - 0.5, -k * 0.125], -1)
    action[-1] = 0
    reward = k * 0.5
    return make_episode(obs, action, reward, k == 0, k == T, np.zeros(T + 1))


def random_episode(seed, T=T, O=3, A=2):
    r = np.random.default_rng(seed)
    a = r.uniform(-1, 1, (T + 1, A))
    a[-1] = 0
    rew = r.uniform(0, 1, T + 1)
    rew[0] = 0
    k = np.arange(T + 1)
    return make_episode(r.normal(size=(T + 1, O)), a, rew, k == 0, k == T,
                        np.zeros(T + 1))


# sha256 of the canonical bytes of fixed_episode() under schema version 1.
# Changing it means the on-disk format changed: bump SCHEMA_VERSION.
GOLDEN_SHA256 = "cebfde5b8a8a5bf3d0ecddbf2cc02d020404c1c20ef4e6b0664d853c9f5f3ccd"


def test_golden_digest_of_fixed_episode():
    assert episode_digest(fixed_episode()) == GOLDEN_SHA256


def test_layout_prefix_and_payload():
    ep = fixed_episode()
    b = serialize_episode(ep)
    magic, version, hlen = struct.unpack_from("<8sII", b, 0)
    assert magic == MAGIC and version == SCHEMA_VERSION == 1
    header = b[16:16 + hlen]
    assert header.startswith(b'{"fields":[{"dtype":"<f4","name":"obs","shape":[5,3]}')
    payload = b[16 + hlen:]
    # obs bytes first, little-endian float32 in C order
    assert payload[:15 * 4] == ep["obs"].astype("<f4").tobytes()
    assert len(payload) == 4 * (15 + 10 + 5) + 3 * 5


def test_same_episode_same_bytes_independent_of_key_order_and_copies():
    ep = fixed_episode()
    rev = {k: ep[k].copy() for k in reversed(EPISODE_KEYS)}
    assert serialize_episode(rev) == serialize_episode(ep)
    # non-contiguous and big-endian inputs give the same canonical bytes
    be = dict(ep, obs=ep["obs"].astype(">f4"))
    assert serialize_episode(be) == serialize_episode(ep)
    nc = dict(ep, obs=np.asfortranarray(ep["obs"]))
    assert serialize_episode(nc) == serialize_episode(ep)
    assert episode_digest(ep) == hashlib.sha256(serialize_episode(ep)).hexdigest()


def test_round_trip_bit_identical():
    ep = random_episode(0)
    ep["obs"][1, 0] = -0.0
    back = deserialize_episode(serialize_episode(ep))
    assert list(back) == list(EPISODE_KEYS)
    for k in EPISODE_KEYS:
        assert back[k].dtype == ep[k].dtype and back[k].shape == ep[k].shape
        assert back[k].tobytes() == ep[k].tobytes()
        assert back[k].flags.writeable
    assert np.signbit(back["obs"][1, 0])
    assert serialize_episode(back) == serialize_episode(ep)


def test_different_content_different_digest():
    a, b = random_episode(0), random_episode(0)
    b["obs"][2, 1] = np.nextafter(b["obs"][2, 1], np.float32(10))
    assert episode_digest(a) != episode_digest(b)


@pytest.mark.parametrize("key,bad", [("obs", np.float64), ("reward", np.float16),
                                      ("is_first", np.int8), ("action", np.int32)])
def test_wrong_dtype_is_refused(key, bad):
    ep = fixed_episode()
    ep[key] = ep[key].astype(bad)
    with pytest.raises(EpisodeFormatError, match=key):
        serialize_episode(ep)


def test_shape_and_key_errors():
    ep = fixed_episode()
    with pytest.raises(EpisodeFormatError, match="rows"):
        serialize_episode(dict(ep, reward=ep["reward"][:-1]))
    with pytest.raises(EpisodeFormatError, match="rank"):
        serialize_episode(dict(ep, obs=ep["obs"].ravel()))
    with pytest.raises(EpisodeFormatError, match="missing"):
        serialize_episode({k: v for k, v in ep.items() if k != "is_terminal"})
    with pytest.raises(EpisodeFormatError, match="unexpected"):
        serialize_episode(dict(ep, extra=np.zeros(5, np.float32)))
    with pytest.raises(EpisodeFormatError, match="numpy"):
        serialize_episode(dict(ep, reward=list(ep["reward"])))


def test_deserialize_rejects_corrupt_records():
    b = serialize_episode(fixed_episode())
    with pytest.raises(EpisodeFormatError, match="magic"):
        deserialize_episode(b"XXXXXXXX" + b[8:])
    wrong_version = b[:8] + struct.pack("<I", 2) + b[12:]
    with pytest.raises(EpisodeFormatError, match="schema version 2"):
        deserialize_episode(wrong_version)
    with pytest.raises(EpisodeFormatError, match="truncated"):
        deserialize_episode(b[:-1])
    with pytest.raises(EpisodeFormatError, match="trailing"):
        deserialize_episode(b + b"\0")
    f4_as_f8 = b.replace(b'"dtype":"<f4","name":"obs"', b'"dtype":"<f8","name":"obs"')
    with pytest.raises(EpisodeFormatError, match="dtype"):
        deserialize_episode(f4_as_f8)
    bad_bool = bytearray(b)
    bad_bool[-1] = 7  # last is_terminal byte
    with pytest.raises(EpisodeFormatError, match="bool"):
        deserialize_episode(bytes(bad_bool))


def test_valid_episode_has_no_problems():
    assert validate_episode_rows(fixed_episode(), T=T, obs_dim=3, action_dim=2) == []


def _problems(mutate, **kw):
    ep = fixed_episode()
    mutate(ep)
    return validate_episode_rows(ep, **kw)


@pytest.mark.parametrize("mutate,needle", [
    (lambda e: e["is_first"].__setitem__(0, False), "is_first is False on row 0"),
    (lambda e: e["is_first"].__setitem__(2, True), "is_first set on rows"),
    (lambda e: e["reward"].__setitem__(0, 1.0), "reward on row 0"),
    (lambda e: e["action"].__setitem__((T, 1), 0.5), "last row is not 0"),
    (lambda e: e["is_last"].__setitem__(T, False), "is_last is False"),
    (lambda e: e["is_last"].__setitem__(1, True), "is_last set on rows"),
    (lambda e: e["is_terminal"].__setitem__(1, True), "is_terminal set on rows"),
    (lambda e: e["obs"].__setitem__((1, 1), np.nan), "obs holds NaN"),
    (lambda e: e["reward"].__setitem__(2, np.inf), "reward holds NaN or inf"),
    (lambda e: e["action"].__setitem__((1, 0), 1.5), "outside [-1, 1]"),
])
def test_row_invariant_faults_are_caught(mutate, needle):
    problems = _problems(mutate)
    assert len(problems) == 1 and needle in problems[0], problems


def test_length_and_dims_checked():
    assert "expected T+1 = 6" in _problems(lambda e: None, T=5)[0]
    assert "obs dim 3, expected 4" in _problems(lambda e: None, obs_dim=4)[0]
    assert "action dim 2, expected 1" in _problems(lambda e: None, action_dim=1)[0]
    assert "float64" in _problems(
        lambda e: e.__setitem__("obs", e["obs"].astype(np.float64)))[0]


def test_pooled_record_round_trip_and_padding():
    ep = random_episode(3)
    pooled = pad_episode(ep, task_id=7, max_obs_dim=5, max_action_dim=4)
    assert list(pooled) == list(POOLED_KEYS)
    assert pooled["obs"].shape == (T + 1, 5) and pooled["action"].shape == (T + 1, 4)
    assert np.all(pooled["obs"][:, 3:] == 0) and np.all(pooled["action"][:, 2:] == 0)
    assert pooled["task_id"].dtype == np.int32 and pooled["task_id"].shape == ()
    assert validate_episode_rows(pooled, T=T, obs_dim=3, action_dim=2) == []
    back = deserialize_episode(serialize_episode(pooled))
    tid, un = unpad_episode(back)
    assert tid == 7 and serialize_episode(un) == serialize_episode(ep)
    bad = dict(pooled, obs=pooled["obs"].copy())
    bad["obs"][1, 4] = 1.0
    assert any("padding" in p for p in validate_episode_rows(bad))
    with pytest.raises(ValueError, match="exceed"):
        pad_episode(ep, 0, max_obs_dim=2, max_action_dim=4)


def test_episode_return_sums_rewards():
    assert episode_return(fixed_episode()) == 0.5 * (1 + 2 + 3 + 4)
