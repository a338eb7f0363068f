"""benchmarks/learning/model_bias.py's arithmetic (the rollout itself needs a trained run)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "learning" / "model_bias.py"
_SPEC = importlib.util.spec_from_file_location("model_bias", _PATH)
mb = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(mb)


def test_horizon_sums_are_the_next_h_rewards_cut_at_the_episode_end():
    x = np.arange(1.0, 7.0)[None]                         # rewards after steps 0..5: 1..6
    sums, counts = mb.real_future(x, 3)
    # a literal loop: start t sums x[t], x[t+1], x[t+2] while they exist
    want = [sum(x[0, t:t + 3]) for t in range(6)]
    assert sums[0].tolist() == want == [6.0, 9.0, 12.0, 15.0, 11.0, 6.0]
    assert counts.tolist() == [3, 3, 3, 3, 2, 1]


def test_bias_counts_only_full_horizons_and_splits_the_reward_head_by_payment():
    H = 2
    real, counts = mb.real_future(np.array([[0.0, 2.0, 2.0, 0.0]]), H)      # [2, 4, 2, 0]
    pred = np.array([[4.0, 4.0, 4.0, 1.0]])
    s = mb.bias_summary(pred, real, counts, np.array([[1.5, 2.0, 0.5]]),
                        np.array([[0.0, 2.0, 0.0]]), H)
    assert s["starts"] == 3                                 # the last start has 1 step left
    assert s["pred_h_sum_mean"] == 4.0 and s["real_h_sum_mean"] == pytest.approx(8 / 3)
    assert s["bias_mean"] == pytest.approx(4.0 - 8 / 3)
    assert s["optimism_ratio"] == pytest.approx(1.5)
    rh = s["reward_head_on_policy"]
    assert rh["pred_mean_where_env_paid_0"] == 1.0 and rh["pred_mean_where_env_paid"] == 2.0
    assert rh["rows_env_paid_0"] == 2 and rh["rows"] == 3
    assert rh["bias_mean"] == pytest.approx((1.5 + 0.0 + 0.5) / 3)


def test_the_bias_standard_error_is_over_episodes():
    real, counts = mb.real_future(np.zeros((3, 4)), 1)
    pred = np.array([[1.0] * 4, [2.0] * 4, [6.0] * 4])       # per-episode bias 1, 2, 6
    s = mb.bias_summary(pred, real, counts, np.zeros((3, 3)), np.zeros((3, 3)), 1)
    assert s["bias_mean"] == 3.0
    assert s["bias_stderr"] == pytest.approx(np.std([1.0, 2.0, 6.0], ddof=1) / np.sqrt(3))


def test_the_model_and_the_env_are_lined_up_step_by_step():
    """`aligned` on hand-built arrays: from start t, imagined step h is compared with the
    env's reward for the action at step t+h (0-based h), cut at the episode's end; the
    reward head at step t with the reward of arriving at t."""
    E, T, H = 1, 4, 2
    r_img = np.arange(E * T * H, dtype=float).reshape(E, T, H)      # r_img[0, t, h] = 2t + h
    reward_after = np.array([[10.0, 20.0, 30.0, 40.0]])
    r_now = np.array([[0.5, 1.5, 2.5, 3.5]])
    pred, real, counts, head, paid = mb.aligned(r_img, reward_after, r_now)
    # literal: start t sums r_img[t, h] and reward_after[t + h] for h < H with t + h < T
    want_pred = [sum(2 * t + h for h in range(H) if t + h < T) for t in range(T)]
    want_real = [sum(reward_after[0, t + h] for h in range(H) if t + h < T) for t in range(T)]
    assert pred[0].tolist() == want_pred == [1.0, 5.0, 9.0, 6.0]
    assert real[0].tolist() == want_real == [30.0, 50.0, 70.0, 40.0]
    assert counts.tolist() == [2, 2, 2, 1]
    assert head[0].tolist() == [1.5, 2.5, 3.5] and paid[0].tolist() == [10.0, 20.0, 30.0]


def test_false_successes_are_unpaid_rows_the_head_calls_paid():
    paid = np.array([[0.0, 2.0, 0.0, 0.0]])
    head = np.array([[1.0, 2.0, 0.9, 1.8]])                  # half the top payment: 1.0
    assert mb.false_successes(head, paid).tolist() == [[True, False, False, True]]
    assert not mb.false_successes(head, np.zeros_like(paid)).any()   # never paid: none


def test_the_decoder_is_read_against_the_obs_and_the_target_distance():
    """Two rows: one paid, one false success; obs [q, q, dx, dy]: the distance is the
    norm of dims 2..3, real and decoded, per group."""
    obs = np.array([[[0.0, 0.0, 0.03, 0.04], [0.0, 0.0, 0.6, 0.8]]])     # |d| 0.05, 1.0
    decoded = np.array([[[0.1, 0.0, 0.03, 0.04], [0.0, -0.2, 0.06, 0.08]]])  # 0.05, 0.1
    head, paid = np.array([[2.0, 2.0]]), np.array([[2.0, 0.0]])
    d = mb.decoder_fields(obs, decoded, head, paid, (2, 4))
    assert d["false_success_rows"] == 1 and d["rows"] == 2
    assert d["abs_error_per_dim"] == pytest.approx([0.05, 0.1, 0.27, 0.36])
    assert d["abs_error_per_dim_false_successes"] == pytest.approx([0.0, 0.2, 0.54, 0.72])
    td = d["target_distance"]
    assert td["false_successes"]["real"]["median"] == pytest.approx(1.0)
    assert td["false_successes"]["decoded"]["median"] == pytest.approx(0.1)
    assert td["env_paid"]["real"]["mean"] == pytest.approx(0.05)
    assert td["other_unpaid"]["rows"] == 0 and td["other_unpaid"]["real"] is None
    assert "target_distance" not in mb.decoder_fields(obs, decoded, head, paid, None)


def test_decoded_distances_are_binned_by_the_real_one(tmp_path):
    real = np.array([0.01, 0.015, 0.05, 0.13, 0.135, 0.139])
    dec = np.array([0.0, 0.02, 0.04, 0.03, 0.05, 0.10])
    b = mb.binned_medians(real, dec, np.array([0.0, 0.02, 0.04, 0.06, 0.08]))
    assert b["rows"] == [2, 0, 1, 0]                  # 0.13.. fall past the last edge
    assert b["decoded_median"] == [pytest.approx(0.01), None, 0.04, None]
    obs = np.zeros((1, 6, 4))
    obs[0, :, 2] = real
    decoded = np.zeros((1, 6, 4))
    decoded[0, :, 2] = dec
    d = mb.decoder_fields(obs, decoded, np.full((1, 6), 2.0),
                          np.array([[2.0, 2.0, 2.0, 0.0, 0.0, 0.0]]), (2, 4))
    assert d["paid_distance_max"] == pytest.approx(0.05)
    assert d["distance_curve"]["rows"][6] == 3          # [0.12, 0.14): the false successes
    assert d["distance_curve"]["decoded_median"][6] == pytest.approx(0.05)
    result = {"horizon": 2, "bias_mean": 0.5, "episode_return_mean": 1.0,
              "per_step": {"pred": [1.0, 2.0], "real": [0.5, 1.0]},
              "decoder_on_policy": d, "reward_head_on_data": {"decoder": d},
              "held_short": {"all": {"decoder": d}},
              "refiltered": {k: {"pred_mean_where_env_paid_0": v} for k, v in
                             (("policy_actions", 1.5), ("zero_actions", 0.7),
                              ("scripted_actions", None))}}
    mb.plot({"a": result}, tmp_path / "p.png")        # all three panels draw
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_the_policys_rewards_in_the_datasets_row_layout():
    assert mb.obs_aligned_reward(np.array([[1.0, 2.0, 3.0]])).tolist() == [[0.0, 1.0, 2.0]]


def test_the_held_short_controller_aims_short_of_the_target():
    """Offset 0 is the scripted controller itself; offset 0.02 aims at the point 0.02 short
    of the target on the line from the finger (d = (0.03, 0.04), |d| = 0.05 -> (0.018,
    0.024)); unsaturated torques, so the two differ."""
    import jax.numpy as jnp
    from scripted_reacher import jacobian_policy
    obs = jnp.array([0.3, -0.7, 0.03, 0.04, 0.1, -0.2])
    assert np.allclose(mb.held_short_action(obs, 0.0), jacobian_policy(obs, 60.0, 0.6))
    aimed = obs.at[2:4].set(jnp.array([0.018, 0.024]))
    assert np.allclose(mb.held_short_action(obs, 0.02), jacobian_policy(aimed, 60.0, 0.6))
    assert np.abs(np.asarray(mb.held_short_action(obs, 0.02))).max() < 0.99
    assert not np.allclose(mb.held_short_action(obs, 0.02), mb.held_short_action(obs, 0.0))


def test_held_short_distances_are_finite_metres():
    import argparse
    assert mb._offsets("0,0.04, 0.08") == [0.0, 0.04, 0.08]
    for bad in ("", "-0.1", "nan", "inf", "abc"):
        with pytest.raises(argparse.ArgumentTypeError):
            mb._offsets(bad)


def test_the_ensembles_disagreement_is_read_where_the_head_is_wrong():
    """`ensemble_fields` (runs with a reward ensemble, W-D11): the heads' std at the
    posteriors split by the reward head's false successes, and the penalised H-step bias
    (r̂ − λ std) over full horizons."""
    E, T, H = 1, 4, 2
    r_img = np.ones((E, T, H))
    std_img = np.full((E, T, H), 0.25)
    reward_after = np.array([[0.0, 2.0, 0.0, 0.0]])
    r_now = np.array([[9.0, 1.5, 2.0, 0.1]])     # head[t] = r_now[t + 1]: 1.5, 2.0, 0.1
    std_now = np.array([[9.0, 0.8, 0.1, 0.2]])
    f = mb.ensemble_fields(std_img, std_now, r_img, reward_after, r_now, 3, 2.0)
    assert f["heads"] == 3 and f["penalty_weight"] == 2.0
    # rows 1..3: paid 0, 2, 0; the head called row 1 paid (1.5 >= 1): a false success
    assert f["std_on_policy_where_false_success"] == pytest.approx(0.8)
    assert f["std_on_policy_where_env_paid"] == pytest.approx(0.1)
    assert f["std_on_policy_mean"] == pytest.approx((0.8 + 0.1 + 0.2) / 3)
    # full horizons (starts 0..2): each imagined step 1 − 2 · 0.25 = 0.5, two steps
    assert f["penalised_pred_h_sum_mean"] == pytest.approx(1.0)
    real = [2.0, 2.0, 0.0]
    assert f["penalised_bias_mean"] == pytest.approx(1.0 - np.mean(real))
    assert f["std_imagined_mean"] == 0.25
