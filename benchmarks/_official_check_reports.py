"""The reports of ``official_dreamerv3.py --check-finite`` (`_official_check.check_finite`).

Which parameters and copies are non-finite (`param_report`, `finite_report`, `bad_keys`),
which JAX primitives misbehave on the machine (`primitive_report`), and where the official
train step first makes a NaN (`train_nan_report`, `train_debug_nans_report`,
`train_highest_report`). They need JAX, and the train probes the official code.
"""
from __future__ import annotations

import time
import traceback
from pathlib import Path

def _to_float_np(value):
    """``value`` (an array of any backend) as a numpy array, bfloat16 as float32."""
    import numpy as np
    a = np.asarray(value)
    if a.dtype.name == "bfloat16":
        a = a.astype(np.float32)
    return a


def param_report(params: dict, limit: int = 12) -> dict:
    """Finiteness of every floating parameter of ``params`` (name -> array).

    Returns:
      (an entry that is a tree of arrays counts each leaf, named ``name[path]``)
      {"params", "values", "nonfinite_params", "nonfinite_values", "nan_values",
      "inf_values", "first": [{"name", "nonfinite", "nan", "size", "dtype", "shape"}] (at
      most ``limit``, in name order), "by_module": {module: non-finite values},
      "by_kind": {last name part (kernel, bias, scale, ...): [non-finite, all values]}, "absmax":
      the largest finite magnitude, "absmax_name"}.
    """
    import jax
    import numpy as np
    host = jax.device_get(params)
    leaves = []
    for name in sorted(host):   # an entry may be a tree of arrays (optimizer states)
        for path, leaf in jax.tree_util.tree_leaves_with_path(host[name]):
            leaves.append((name + jax.tree_util.keystr(path), leaf))
    out = {"params": 0, "values": 0, "nonfinite_params": 0, "nonfinite_values": 0,
           "nan_values": 0, "inf_values": 0, "first": [], "by_module": {}, "by_kind": {},
           "absmax": 0.0, "absmax_name": None}
    for name, leaf in leaves:
        a = _to_float_np(leaf)
        if not np.issubdtype(a.dtype, np.floating):
            continue
        out["params"] += 1
        out["values"] += int(a.size)
        finite = np.isfinite(a)
        bad = int(a.size - finite.sum())
        kind = out["by_kind"].setdefault(name.split("[")[0].split("/")[-1], [0, 0])
        kind[0] += bad
        kind[1] += int(a.size)
        if finite.any():
            m = float(np.abs(a[finite]).max())
            if m > out["absmax"]:
                out["absmax"], out["absmax_name"] = m, name
        if not bad:
            continue
        nan = int(np.isnan(a).sum())
        out["nonfinite_params"] += 1
        out["nonfinite_values"] += bad
        out["nan_values"] += nan
        out["inf_values"] += bad - nan
        module = "/".join(name.split("/")[:2])
        out["by_module"][module] = out["by_module"].get(module, 0) + bad
        if len(out["first"]) < limit:
            out["first"].append({"name": name, "nonfinite": bad, "nan": nan,
                                 "size": int(a.size), "dtype": str(np.asarray(leaf).dtype),
                                 "shape": list(a.shape)})
    return out


def primitive_report(seed: int = 0) -> dict:
    """The random and special functions the official initialisers use, jitted on JAX's
    default device at a 12m kernel's shape, each: {"nonfinite", "min", "max"} (the
    ``Initializer("normal")`` chain: ``truncated_normal(-2, 2)`` from an ``nj.seed()``-style
    split key, and its parts ``uniform``, ``erf_inv``, ``nextafter``; ``normal``)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    shape = (1024, 256)

    def fns(key):
        key = jax.random.split(key, 16)[1]
        u = jax.random.uniform(key, shape, jnp.float32, -0.9545, 0.9545)
        return {"truncated_normal": jax.random.truncated_normal(key, -2, 2, shape),
                "uniform": u, "erf_inv": jax.lax.erf_inv(u),
                "nextafter": jax.lax.nextafter(jnp.full(shape, -2.0, jnp.float32),
                                               jnp.full(shape, jnp.inf, jnp.float32)),
                "normal": jax.random.normal(key, shape, jnp.float32),
                "bf16_matmul": (u.astype(jnp.bfloat16) @ u.T.astype(jnp.bfloat16))}
    key = jax.device_put(np.array([seed, 0], np.uint32))
    with jax.transfer_guard("allow"):
        host = jax.device_get(jax.jit(fns)(key))
    out = {}
    for name, v in host.items():
        a = _to_float_np(v)
        out[name] = {"nonfinite": int(a.size - np.isfinite(a).sum()),
                     "min": float(np.nanmin(a)) if np.isfinite(a).any() else None,
                     "max": float(np.nanmax(a)) if np.isfinite(a).any() else None}
    out["device"] = str(jax.devices()[0])
    return out


def _copies_differ(params: dict, policy_params: dict) -> dict:
    """How far the policy's copies of the parameters are from the parameters themselves
    (they are ``.copy()`` of them before any training): {"compared", "differ": names of
    those not bitwise equal (at most 12), "n_differ"}."""
    import jax
    import numpy as np
    keys = sorted(policy_params)
    a = jax.device_get({k: params[k] for k in keys})
    b = jax.device_get(dict(policy_params))
    differ = [k for k in keys if not np.array_equal(np.asarray(a[k]), np.asarray(b[k]),
                                                    equal_nan=True)]
    return {"compared": len(keys), "n_differ": len(differ), "differ": differ[:12]}


def finite_report(finite: dict) -> dict:
    """The official policy's ``finite`` output (key -> (isfinite per env, min, max)) as
    {key: {"finite_envs", "envs", "min", "max"}} (min and max over the envs, NaN as
    null)."""
    import numpy as np
    out = {}
    for key, (isfinite, lo, hi) in sorted(finite.items()):
        isfinite, lo, hi = (np.asarray(x) for x in (isfinite, lo, hi))
        lo = np.asarray(lo, np.float64)
        hi = np.asarray(hi, np.float64)
        out[key] = {"finite_envs": int(isfinite.sum()), "envs": int(isfinite.size),
                    "min": None if np.isnan(lo).all() else float(np.nanmin(lo)),
                    "max": None if np.isnan(hi).all() else float(np.nanmax(hi))}
    return out


def bad_keys(report: dict) -> list[str]:
    """The keys of a `finite_report` with a non-finite env."""
    return [k for k, v in report.items() if v["finite_envs"] < v["envs"]]


def _official_frames(tb, src: Path, limit: int = 8) -> list[str]:
    """The last ``limit`` frames of a traceback that lie in the official source, as
    "file:line function: code"."""
    src = str(Path(src).resolve())
    frames = [f for f in traceback.extract_tb(tb) if str(Path(f.filename).resolve())
              .startswith(src)]
    return [f"{Path(f.filename).resolve().relative_to(src)}:{f.lineno} {f.name}: "
            f"{(f.line or '').strip()}" for f in frames[-limit:]]


def _pure_train(agent):
    """The official train step as a pure function ``fn(params, data, carry, seed) ->
    params`` (``nj.pure`` of the agent's ``train``, as ``JAXAgent._transform`` wraps it)."""
    from dreamerv3 import ninjax as nj
    pure = nj.pure(agent.agent.train)

    def fn(params, data, carry, seed):
        return pure(params, data, carry, seed=seed)[0]
    return fn


def _train_inputs(first: dict) -> tuple:
    """(params, data without its seed, carry, seed) of the first train call."""
    data = dict(first["data"])
    seed = data.pop("seed")
    return first["params"], data, first["carry"], seed


def _source_lines(text: str, src: Path, limit: int) -> list[str]:
    """The words of ``text`` that name a file of the official source (``src``)."""
    root = str(Path(src).resolve())
    lines = []
    for part in text.split():
        if root in part or "dreamerv3/" in part or "embodied/" in part:
            lines.append(part.replace(root + "/", ""))
    return lines[:limit]


def train_nan_report(fn, first: dict, src: Path, limit: int = 6) -> dict:
    """Where a train step first makes a NaN, by ``jax.experimental.checkify``'s NaN checks:
    every primitive of the jitted step, the backward pass included, is instrumented, and
    the first whose output is NaN is reported with the user frame that made it.

    Args:
      fn: the pure train step, ``fn(params, data, carry, seed) -> params``
        (`_pure_train`).
      first: the first train call's ``params``, ``data`` (with its ``seed``), ``carry``.
      src: the official source folder, to pick its lines out of the message.

    Returns:
      ``nan_at`` (checkify's message; None when the checked step stays finite),
      ``official_lines``, ``compile_and_run_s`` and the parameters' finiteness after
      the checked step.
    """
    import jax
    from jax.experimental import checkify
    checked = jax.jit(checkify.checkify(fn, errors=checkify.nan_checks))
    with jax.transfer_guard("allow"):
        t = time.monotonic()
        err, params = checked(*_train_inputs(first))
        jax.block_until_ready(params)
        wall = time.monotonic() - t
        message = err.get()
        after = param_report(jax.device_get(params))
    return {"nan_at": message[:3000] if message else None,
            "official_lines": _source_lines(message or "", src, limit),
            "compile_and_run_s": round(wall, 2),
            "params_after": {k: after[k] for k in ("nonfinite_values", "first")}}


def train_debug_nans_report(fn, first: dict, src: Path) -> dict:
    """The first train call again (``fn`` jitted, same inputs) under ``jax_debug_nans``:
    when the compiled step returns a NaN, JAX reruns it op by op and raises at the first
    primitive whose output is NaN, backward pass included; the official frames of that
    traceback say which line made it. Much cheaper to build than `train_nan_report` (no
    instrumented program), slower to run. Same arguments as `train_nan_report`.

    Returns:
      ``raised`` ("FloatingPointError" with its ``message`` and ``official_frames``, or
      None with the parameters' finiteness after the step)."""
    import jax
    step = jax.jit(fn)
    try:
        with jax.debug_nans(True), jax.transfer_guard("allow"):
            params = jax.device_get(step(*_train_inputs(first)))
    except FloatingPointError as e:
        return {"raised": "FloatingPointError", "message": str(e)[:3000],
                "official_frames": _official_frames(e.__traceback__, src, limit=12)}
    after = param_report(params)
    return {"raised": None, "params_after": {k: after[k] for k in ("nonfinite_values",)}}


def train_highest_report(fn, first: dict) -> dict:
    """The first train call again (``fn`` jitted, same inputs) with every float32 matmul
    at full precision (``jax.default_matmul_precision("highest")``; on a TPU the default
    is one bfloat16 pass): whether the parameters after it are finite."""
    import jax
    with jax.default_matmul_precision("highest"), jax.transfer_guard("allow"):
        params = jax.device_get(jax.jit(fn)(*_train_inputs(first)))
    after = param_report(params)
    return {"params_after": {k: after[k] for k in ("nonfinite_values", "first")}}


