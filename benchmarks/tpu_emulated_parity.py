"""tpu_emulated_parity: the parity suite on the CPU with the TPU v5e's transcendental error.

Runs the parity tests (pytest, this file as a plugin) with every float32 exp, log,
log1p, expm1, tanh, logistic and pow (lax level, so jnp and jax.nn go through them)
perturbed by an error of the size measured on the chip
(`benchmarks/results/backend_arithmetic_tpu.json`), and with the tests' tolerance
module (`tests/parity_tolerance.py`) answering as on a TPU. Every
`np.testing.assert_allclose` is recorded instead of raising, with its tolerance family
and the smallest propagation factor c under which the family's rule would pass it;
the summary gives the largest c per family (the "emulated" figure next to each family
in parity_tolerance.FAMILIES and in docs/deviations.md W-D9 / T34).

The error model, per operation, with a sign drawn from a hash of the input's bits
(deterministic, like a polynomial approximation's error; `--salt` draws another
pattern): exp 1.2e-7 + 4.0e-7 |x| relative (70 ulp at x = 13.8, the chip's worst);
logistic 5.5e-6 relative; log, log1p, tanh, expm1 their worst relative error, capped at
the absolute error the chip shows at that worst input (1.07e-4, 7.0e-5, 1.3e-6, 1.6e-6:
a range-reduced function's error does not grow with |y|; expm1 above |x| = 1 as exp);
pow x^y as exp(y log x) with log's error. It is a model: the chip's tanh error at
|x| ~ 1 is larger than the cap (its policy actions move by 2.9e-4), which the chip's
own run covers.

    python benchmarks/tpu_emulated_parity.py --out DIR [--salt N] [pytest paths...]
        # writes DIR/tpu_emulated_parity_salt<N>.json (about 4 minutes on 2 CPU cores)

Source: docs/deviations.md (W-D9 / T34, the TPU parity tolerances).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

import numpy as np

REL = {"log": 3.71e-4, "log1p": 2.65e-4, "expm1": 1.19e-4, "tanh": 8.12e-5,
       "logistic": 5.52e-6}
ABS = {"log": 1.07e-4, "log1p": 7.0e-5, "tanh": 1.3e-6, "expm1": 1.6e-6}
EXP_A, EXP_B = 1.2e-7, 4.0e-7
SALT = {"log": 1, "log1p": 2, "expm1": 3, "tanh": 4, "logistic": 5, "exp": 6, "pow": 7}
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PATHS = ["tests/agents/dreamerv3", "tests/agents/tdmpc2"]


# ---- the plugin (active only when pytest loads this module with -p) ---------------------
def _install_error_model(salt: int):
    import jax._src.lax as lax_pkg
    import jax._src.lax.lax as L
    import jax.numpy as jnp
    from jax import lax

    orig = {n: getattr(L, n) for n in ("exp", "log", "log1p", "expm1", "tanh", "logistic", "pow")}

    def sign(x, k):
        b = lax.bitcast_convert_type(x, np.uint32)
        h = b * np.uint32(2654435761) + np.uint32((k + 97 * salt) * 40503)
        h = h ^ (h >> np.uint32(15))
        h = h * np.uint32(2246822519)
        h = h ^ (h >> np.uint32(13))
        return jnp.where((h & np.uint32(1 << 20)) != 0, 1.0, -1.0).astype(x.dtype)

    def f32(x):
        return getattr(x, "dtype", None) == np.float32

    def wrap(name):
        f = orig[name]

        def g(x, *a, **k):
            y = f(x, *a, **k)
            if not (f32(x) and f32(y)) or np.shape(x) != np.shape(y):
                return y
            xs, ys = lax.stop_gradient(x), lax.stop_gradient(y)
            if name == "exp":
                rel = EXP_A + EXP_B * jnp.abs(xs)
            elif name in ABS:
                rel = jnp.minimum(REL[name], ABS[name] / jnp.maximum(jnp.abs(ys), 1e-30))
                if name == "expm1":
                    rel = jnp.where(jnp.abs(xs) > 1, EXP_A + EXP_B * jnp.abs(xs), rel)
            else:
                rel = REL[name]
            return y * lax.stop_gradient(1 + rel * sign(xs, SALT[name]))
        return g

    def pow_(x, y):
        out = orig["pow"](x, y)
        if not f32(out):
            return out
        xs = lax.stop_gradient(jnp.broadcast_to(jnp.asarray(x, out.dtype), out.shape))
        ys = lax.stop_gradient(jnp.broadcast_to(jnp.asarray(y).astype(out.dtype), out.shape))
        arg = jnp.abs(ys * orig["log"](jnp.abs(xs) + (xs == 0)))
        rel = (jnp.minimum(REL["log"] * arg, ABS["log"] * jnp.abs(ys)) * sign(xs, SALT["log"])
               + (EXP_A + EXP_B * arg) * sign(ys, SALT["pow"]))
        return out * lax.stop_gradient(1 + rel)

    for n in ("exp", "log", "log1p", "expm1", "tanh", "logistic"):
        for mod in (L, lax, lax_pkg):
            setattr(mod, n, wrap(n))
    for mod in (L, lax, lax_pkg):
        setattr(mod, "pow", pow_)


def _c_needed(stash, a, d):
    """The smallest c under which the family's TPU rule passes |a - d|."""
    import parity_tolerance as pt
    kind, family, x, _ = stash
    f = pt.FAMILIES[family]
    e = pt.TPU_REL[f.op]
    diff = np.abs(a - d)
    if not diff.size:
        return 0.0
    m = float(np.max(np.abs(d)))
    if kind == "bound":                      # close_rel_max: atol = bound(frac) * max|ref|
        return float(np.max(diff)) / (e * max(m, 1e-30))
    rtol, atol = x, stash[3]
    s = {"tensor": m, "unit": 1.0, "none": None}[f.scale]

    def ok(c):
        at = atol if s is None else max(atol, c * e * s)
        return bool(np.all(diff <= at + max(rtol, c * e) * np.abs(d)))
    if ok(0.0):
        return 0.0
    lo, hi = 0.0, 1.0
    while not ok(hi):
        hi *= 2
        if hi > 1e7:
            return float("inf")
    for _ in range(40):
        lo, hi = (lo, (lo + hi) / 2) if ok((lo + hi) / 2) else ((lo + hi) / 2, hi)
    return hi


def pytest_configure(config):
    salt = int(os.environ.get("WMX_TPU_EMULATION_SALT", "0"))
    _install_error_model(salt)
    import parity_tolerance as pt
    pt.backend = lambda: "tpu"
    stash = {"v": None, "test": None}
    tol, bound = pt.tol, pt.bound

    def tol_(family, ref=None, *, rtol=0, atol=0):
        stash["v"] = ("tol", family, rtol, atol)
        return tol(family, ref, rtol=rtol, atol=atol)

    def bound_(family, cpu_value, scale=1.0):
        if sys._getframe(1).f_code.co_name == "close_rel_max":
            stash["v"] = ("bound", family, cpu_value, scale)
        return bound(family, cpu_value, scale)
    pt.tol, pt.bound = tol_, bound_
    out = open(os.environ["WMX_TPU_EMULATION_RECORD"], "w")

    def allclose(actual, desired, rtol=1e-7, atol=0, equal_nan=True, err_msg="", **kw):
        a, d = np.broadcast_arrays(np.asarray(actual, np.float64), np.asarray(desired, np.float64))
        st, stash["v"] = stash["v"], None
        diff = np.abs(a - d)
        ok = bool(np.all((diff <= atol + rtol * np.abs(d)) | (np.isnan(a) & np.isnan(d))))
        frame = traceback.extract_stack(limit=2)[0]
        out.write(json.dumps({
            "test": stash["test"], "where": f"{Path(frame.filename).name}:{frame.lineno}",
            "msg": str(err_msg)[:80], "family": st[1] if st else None,
            "c_needed": _c_needed(st, a, d) if st else None, "pass": ok,
            "max_abs": float(np.nanmax(diff)) if diff.size else 0.0,
            "max_abs_ref": float(np.nanmax(np.abs(d))) if d.size else 0.0}) + "\n")
        out.flush()
    np.testing.assert_allclose = allclose

    class Hooks:
        @staticmethod
        def pytest_runtest_setup(item):
            stash["test"] = item.nodeid
    config.pluginmanager.register(Hooks())


# ---- the driver ---------------------------------------------------------------------
def summarize(record: Path) -> dict:
    fams: dict[str, dict] = {}
    for line in record.read_text().splitlines():
        r = json.loads(line)
        if r["family"] is None:
            continue
        f = fams.setdefault(r["family"], {"asserts": 0, "fail": 0, "max_c": 0.0, "where": ""})
        f["asserts"] += 1
        f["fail"] += not r["pass"]
        c = r["c_needed"] or 0.0
        if c > f["max_c"]:
            f["max_c"], f["where"] = c, f"{r['test']} {r['msg']}".strip()
    return fams


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--salt", type=int, default=0, help="another sign pattern of the errors")
    ap.add_argument("paths", nargs="*", default=DEFAULT_PATHS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    record = args.out / f"tpu_emulated_parity_salt{args.salt}.jsonl"
    env = dict(os.environ, JAX_PLATFORMS="cpu", WMX_TPU_EMULATION_SALT=str(args.salt),
               WMX_TPU_EMULATION_RECORD=str(record),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "benchmarks"),
                                                        os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                           "-p", "tpu_emulated_parity", "-m", "parity", *args.paths],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    tail = proc.stdout.strip().splitlines()[-40:]
    res = {"salt": args.salt, "pytest_exit": proc.returncode, "pytest_tail": tail,
           "families": summarize(record)}
    path = args.out / f"tpu_emulated_parity_salt{args.salt}.json"
    path.write_text(json.dumps(res, indent=1) + "\n")
    for name, f in sorted(res["families"].items()):
        print(f"{name:26s} max c {f['max_c']:8.3g}  ({f['fail']} of {f['asserts']} asserts over "
              f"the current c)  {f['where'][:90]}")
    print("\n".join(tail[-8:]))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
