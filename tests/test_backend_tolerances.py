"""parity_tolerance: the identity on the CPU and a GPU, the W-D9 / T34 rule on a TPU.

The parity tests route their tolerances through `parity_tolerance`; on the CPU (CI) and
a GPU they must get exactly the values written in the tests, whatever the family.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import parity_tolerance as pt
import pytest

TOLS = [(0.0, 0.0), (1e-5, 1e-6), (1e-4, 1e-5), (2e-6, 5e-5), (0, 1e-4), (1e-5, 0), (5e-5, 1e-5),
        (1e-4, 1e-13), (1e-3, 1e-5), (2e-5, 2e-5)]
REF = np.array([[0.5, -3.0], [1e-9, 2.0]])


@pytest.fixture(params=["cpu", "gpu"])
def not_tpu(request, monkeypatch):
    monkeypatch.setattr(pt, "backend", lambda: request.param)
    return request.param


@pytest.fixture
def tpu(monkeypatch):
    monkeypatch.setattr(pt, "backend", lambda: "tpu")


@pytest.mark.parametrize("family", sorted(pt.FAMILIES))
def test_identity_off_the_tpu(not_tpu, family):
    assert not pt.on_tpu()
    for rtol, atol in TOLS:
        got = pt.tol(family, REF, rtol=rtol, atol=atol)
        assert got == {"rtol": rtol, "atol": atol}
        assert got["rtol"] is rtol and got["atol"] is atol      # the very objects passed
        assert pt.tol(family, None, rtol=rtol, atol=atol) == {"rtol": rtol, "atol": atol}
        assert pt.bound(family, rtol, scale=123.0) is rtol
    assert pt.tpu_or(3, 6) == 3
    assert pt.renorm_ulp_bound(1) == 1


def test_default_backend_is_read_at_call_time(monkeypatch):
    import jax
    assert pt.backend() == jax.default_backend()
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert pt.on_tpu()


@pytest.mark.parametrize("family", sorted(pt.FAMILIES))
def test_tpu_rule(tpu, family):
    f = pt.FAMILIES[family]
    e = f.c * pt.TPU_REL[f.op]
    s = {"tensor": 3.0, "unit": 1.0, "none": None}[f.scale]
    for rtol, atol in TOLS:
        got = pt.tol(family, REF, rtol=rtol, atol=atol)
        assert got["rtol"] == max(rtol, e)
        assert got["atol"] == (atol if s is None else max(atol, e * s))
        assert got["rtol"] >= rtol and got["atol"] >= atol     # never tighter than the CPU's
    assert pt.bound(family, 1e-7, scale=2.0) == max(1e-7, 2.0 * e)
    if f.scale == "tensor":
        with pytest.raises(ValueError):
            pt.tol(family, None, rtol=1e-5, atol=1e-6)


def test_tpu_counts(tpu):
    assert pt.tpu_or(3, 6) == 6
    assert pt.renorm_ulp_bound(1) == 1 + 4      # sqrt 2.51 + reciprocal 1.47 ulp


def test_constants_cover_the_measurement():
    """TPU_REL / TPU_ULP are the chip's measured worst errors, rounded up by < 1%."""
    path = Path(__file__).resolve().parents[1] / "benchmarks/results/backend_arithmetic_tpu.json"
    ops = json.loads(path.read_text())["ops"]
    measured = {"log": max(ops["log"]["max_rel"], ops["log_unit_interval"]["max_rel"]),
                "log1p": max(ops["log1p"]["max_rel"], ops["softplus"]["max_rel"],
                             ops["symlog"]["max_rel"]),
                "tanh": ops["tanh"]["max_rel"], "expm1": ops["expm1"]["max_rel"],
                "exp": ops["exp"]["max_rel"], "sigmoid": ops["sigmoid"]["max_rel"]}
    assert set(measured) == set(pt.TPU_REL)
    for op, m in measured.items():
        assert m <= pt.TPU_REL[op] <= 1.01 * m, op
    for op in ("sqrt", "reciprocal"):
        assert ops[op]["max_ulp"] <= pt.TPU_ULP[op] <= 1.01 * ops[op]["max_ulp"], op
    assert {f.op for f in pt.FAMILIES.values()} <= set(pt.TPU_REL)


def test_flips_are_allowed_only_where_flippable_and_within_the_bound():
    want = np.array([0.1, -0.1, 0.1, 0.3])
    t = {"rtol": 0.0, "atol": 1e-4}
    flippable = np.array([True, False, False, False])
    got = want.copy()
    got[0] = -0.1                                   # a flipped step: 0.2 apart
    assert pt.assert_close_allowing_flips(got, want, t, flippable, 0.2 + 1e-12) == 1
    with pytest.raises(AssertionError):             # beyond the bound
        pt.assert_close_allowing_flips(got, want, t, flippable, 0.1)
    got[1] = 0.1                                    # a non-flippable element moved
    with pytest.raises(AssertionError):
        pt.assert_close_allowing_flips(got, want, t, flippable, 1.0)


def test_near_zero_and_ties():
    t = {"rtol": 0.0, "atol": 1e-3}
    np.testing.assert_array_equal(pt.near_zero([5e-4, -2e-3, 0.0], t), [True, False, True])
    v = np.array([10.0, 9.999, 9.9, 9.9985])
    vt = {"rtol": 1e-4, "atol": 0.0}                # 2 x (1e-4 x 10) = 2e-3 around 10
    np.testing.assert_array_equal(pt.ties(v, [1, 2, 3], 10.0, vt), [True, False, True])
