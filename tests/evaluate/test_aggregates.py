"""Normalised scores and aggregates against literal formulas."""
import numpy as np
import pytest

from wmx.evaluate import aggregates as agg


def test_normalised_score_is_return_over_ten():
    assert agg.normalised_score(873.0) == pytest.approx(87.3)
    assert agg.normalised_score(None) is None
    np.testing.assert_allclose(agg.normalised_score([0.0, 1000.0, 55.5]), [0.0, 100.0, 5.55])


def test_is_score_rejects_none_nan_and_inf():
    assert agg.is_score(0.0) and agg.is_score(-3) and agg.is_score(np.float32(2.5))
    for bad in (None, float("nan"), float("inf"), -float("inf"), np.float32("nan")):
        assert not agg.is_score(bad)


def test_iqm_of_known_vectors():
    # n = 8: floor(8/4) = 2 dropped at each end of the sorted values -> mean(3, 4, 5, 6)
    assert agg.iqm([1, 2, 3, 4, 100, 5, 6, 7]) == pytest.approx(4.5)
    # n = 5: floor(5/4) = 1 dropped at each end -> mean(2, 3, 4)
    assert agg.iqm([50, 2, 3, 4, -40]) == pytest.approx(3.0)
    # n < 4: nothing dropped, the plain mean
    assert agg.iqm([1.0, 2.0, 9.0]) == pytest.approx(4.0)


def test_aggregates_point_estimates_and_intervals():
    x = np.array([12.0, 85.0, 40.0, 3.0, 97.0, 55.0, 61.0, 20.0, 74.0])
    got = {a.statistic: a for a in agg.aggregate_all(x)}
    assert got["mean"].value == pytest.approx(x.mean())
    assert got["median"].value == pytest.approx(55.0)
    assert got["iqm"].value == pytest.approx(np.mean(np.sort(x)[2:-2]))
    for a in got.values():
        assert a.n_tasks == 9
        assert a.ci_low <= a.value <= a.ci_high
        assert a.ci_low < a.ci_high          # a genuine interval
        assert x.min() <= a.ci_low and a.ci_high <= x.max()
    # the mean's 95% interval is roughly mean +- 1.96 standard errors
    se = x.std() / np.sqrt(len(x))
    assert got["mean"].ci_low == pytest.approx(x.mean() - 1.96 * se, abs=0.35 * se * 1.96)
    assert got["mean"].ci_high == pytest.approx(x.mean() + 1.96 * se, abs=0.35 * se * 1.96)


def test_aggregates_are_deterministic_and_seeded():
    x = [12.3, 85.1, 40.7, 3.2, 97.9, 55.4, 61.8, 20.6]
    for stat in ("mean", "median", "iqm"):
        assert agg.aggregate(x, stat) == agg.aggregate(list(x), stat)
    a = agg.aggregate(x, "mean")
    c = agg.aggregate(x, "mean", seed=agg.BOOTSTRAP_SEED + 1)
    assert c.value == a.value and (c.ci_low, c.ci_high) != (a.ci_low, a.ci_high)


def test_degenerate_and_bad_inputs():
    one = agg.aggregate([42.0], "mean")
    assert (one.value, one.ci_low, one.ci_high, one.n_tasks) == (42.0, 42.0, 42.0, 1)
    same = agg.aggregate([7.0, 7.0, 7.0], "median")
    assert (same.ci_low, same.ci_high) == (7.0, 7.0)
    with pytest.raises(ValueError, match="unknown statistic"):
        agg.aggregate([1.0, 2.0], "max")
    with pytest.raises(ValueError, match="at least one"):
        agg.aggregate([], "mean")
    with pytest.raises(ValueError, match="finite"):
        agg.aggregate([1.0, float("nan")], "mean")
