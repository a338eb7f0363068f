"""backend_arithmetic: float32 error of the elementwise operations wmx's agents use, on this backend.

Each operation runs jitted in float32 on JAX's default backend over a fixed grid of
inputs (log-spaced magnitudes of both signs, and a dense uniform band where the
agents' values live), and is compared with the same operation in float64 NumPy on
the float32 inputs. The error is reported in units in the last place of the float32
result (ULP: |y - y64| / spacing(float32(y64))) and as relative error, maximum and
99.9th percentile, per operation, with the largest absolute error (over all inputs
and over those with |y| >= 1: whether an error stays absolute, as a range-reduced log's
does, or grows with |y|). Division, reciprocal and the square roots are included: on a
TPU they are not IEEE-exact. So are optax's bias corrections 1 - beta^t over the step
count (XLA's pow of a float exponent).

Why: the parity tests compare wmx with recordings of the official code made on a
CPU. On an accelerator the elementwise arithmetic itself differs; this script
measures by how much, so a parity tolerance on that backend can cite a number.

    python benchmarks/backend_arithmetic.py --out DIR      # writes DIR/backend_arithmetic_<platform>.json

Source: docs/deviations.md (W-D9, the TPU parity tolerances).
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np


def _grid() -> dict[str, np.ndarray]:
    """Float32 inputs: wide (log-spaced, both signs), unit band, positive and (0, 1) sets."""
    mags = np.logspace(-8, 6, 200_001, dtype=np.float64)
    wide = np.concatenate([-mags[::-1], [0.0], mags]).astype(np.float32)
    band = np.linspace(-20.0, 20.0, 400_001, dtype=np.float64).astype(np.float32)
    pos = np.logspace(-6, 6, 400_001, dtype=np.float64).astype(np.float32)
    unit = np.linspace(1e-6, 1 - 1e-6, 400_001, dtype=np.float64).astype(np.float32)
    count = np.arange(1, 100_001, dtype=np.float64).astype(np.float32)
    return {"wide": wide, "band": band, "pos": pos, "unit": unit, "count": count}


def _ops():
    import jax.numpy as jnp
    from jax import nn
    sig = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    return {
        # name: (jax fn, numpy float64 fn, input set, second operand or None)
        "exp": (jnp.exp, np.exp, "band"),
        "expm1": (jnp.expm1, np.expm1, "band"),
        "log": (jnp.log, np.log, "pos"),
        "log1p": (jnp.log1p, np.log1p, "pos"),
        "tanh": (jnp.tanh, np.tanh, "band"),
        "sigmoid": (nn.sigmoid, sig, "band"),
        "softplus": (nn.softplus, lambda x: np.logaddexp(0, x), "band"),
        "sqrt": (jnp.sqrt, np.sqrt, "pos"),
        "rsqrt": (lambda x: 1 / jnp.sqrt(x), lambda x: 1 / np.sqrt(x), "pos"),
        "reciprocal": (lambda x: 1 / x, lambda x: 1 / x, "pos"),
        "divide_by_3": (lambda x: x / jnp.float32(3.0), lambda x: x / np.float64(np.float32(3.0)), "wide"),
        "symlog": (lambda x: jnp.sign(x) * jnp.log1p(jnp.abs(x)),
                   lambda x: np.sign(x) * np.log1p(np.abs(x)), "wide"),
        "log_unit_interval": (jnp.log, np.log, "unit"),
        # optax's bias corrections 1 - beta^t over the step count t (LaProp, Adam)
        "bias_correction_0.9": (lambda t: 1 - jnp.float32(0.9) ** t,
                                lambda t: 1 - np.float64(np.float32(0.9)) ** t, "count"),
        "bias_correction_0.999": (lambda t: 1 - jnp.float32(0.999) ** t,
                                  lambda t: 1 - np.float64(np.float32(0.999)) ** t, "count"),
    }


def measure(name, fn, ref, x) -> dict:
    import jax
    y = np.asarray(jax.jit(fn)(x), dtype=np.float64)
    y64 = ref(x.astype(np.float64))
    ok = np.isfinite(y64) & (np.abs(y64) < np.finfo(np.float32).max) & (np.abs(y64) > 1e-30)
    y, y64 = y[ok], y64[ok]
    spacing = np.spacing(np.abs(y64).astype(np.float32)).astype(np.float64)
    ulp = np.abs(y - y64) / spacing
    rel = np.abs(y - y64) / np.abs(y64)
    i = int(np.argmax(ulp))
    err = np.abs(y - y64)
    return {"max_ulp": float(ulp.max()), "p999_ulp": float(np.quantile(ulp, 0.999)),
            "max_rel": float(rel.max()), "p999_rel": float(np.quantile(rel, 0.999)),
            "max_abs": float(err.max()), "max_abs_where_abs_y_ge_1": float(
                err[np.abs(y64) >= 1].max()) if (np.abs(y64) >= 1).any() else None,
            "worst_input": float(x[ok][i]), "n": int(ok.sum())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=None, help="folder for the JSON (default: print only)")
    args = ap.parse_args(argv)
    import jax
    dev = jax.devices()[0]
    grid = _grid()
    res = {}
    t0 = time.time()
    for name, (fn, ref, which) in _ops().items():
        res[name] = measure(name, fn, ref, grid[which])
        r = res[name]
        print(f"{name:18s} max {r['max_ulp']:10.1f} ulp  p99.9 {r['p999_ulp']:8.1f} ulp  "
              f"max rel {r['max_rel']:.2e}  at x={r['worst_input']:.6g}")
    out = {"platform": dev.platform, "device_kind": dev.device_kind, "jax": jax.__version__,
           "wall_s": round(time.time() - t0, 1), "ops": res,
           "float32_eps": float(np.finfo(np.float32).eps)}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / f"backend_arithmetic_{dev.platform}.json"
        path.write_text(json.dumps(out, indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
