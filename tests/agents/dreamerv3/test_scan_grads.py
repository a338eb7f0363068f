"""The observe scan with its kernels' gradients summed after the loop (`scan_grads`,
`DreamerV3Config.scan_weight_grads` "outside"): the world-model loss's gradients, vmapped
over two seeds, against the plain scan's ("inside") and against an oracle of the same
sum from plain autodiff; and the backward loop's jaxpr no longer contracts one step's
rows into a kernel."""
from __future__ import annotations

import contextlib
import dataclasses
import math

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
import pytest

from wmx.agents.dreamerv3 import agent, nets, scan_grads
from wmx.agents.dreamerv3.config import auto_scan_weight_grads
from wmx.agents.dreamerv3.multitask import task_inputs
from wmx.agents.dreamerv3.rssm import initial_carry
from wmx.agents.dreamerv3.wm_loss import world_model_loss
from wmx.envs.registry import get_task
from wmx.schemas.taskset import TaskInfo, TaskSet

SEEDS = 2
B = 5   # rows per step: no width of the tiny config is 5 (a contraction of size 5 is over rows)
RSSM_KERNELS = ("in_deter", "in_stoch", "in_action", "hid0", "gates", "post0", "post_logit")
"""The kernels the observe step uses (prior0, prior_logit are outside the scan)."""


def _setup(dtype: str, multitask: bool):
    """(cfg with scan_weight_grads "inside", task context or None, params and batch
    with a leading axis of SEEDS)."""
    if multitask:
        infos = tuple(TaskInfo.from_spec(get_task(t).replace(T=20))
                      for t in ("cartpole-balance", "cheetah-run"))
        ts = TaskSet("mt", infos, (None, None), "none")
        cfg = agent.make_config("tiny", {"compute_dtype": dtype, "batch_size": B}, taskset=ts)
        ctx = agent.task_context(cfg, ts)
    else:
        cfg = agent.make_config("tiny", {"compute_dtype": dtype, "batch_size": B},
                                task=get_task("probe-action").replace(T=12))
        ctx = None
    cfg = dataclasses.replace(cfg, scan_weight_grads="inside")
    T, O, A = cfg.batch_length, cfg.obs_dim, cfg.action_dim
    keys = jax.random.split(jax.random.key(0), SEEDS)
    params = jax.jit(jax.vmap(lambda k: agent.init(k, cfg).params))(keys)
    k = jax.random.split(jax.random.key(1), 8)
    batch = {"obs": jax.random.normal(k[0], (SEEDS, B, T, O)),
             "action": jnp.tanh(jax.random.normal(k[1], (SEEDS, B, T, A))),
             "reward": jax.random.normal(k[2], (SEEDS, B, T)),
             "is_first": jax.random.uniform(k[3], (SEEDS, B, T)) < 0.15,
             "is_terminal": jax.random.uniform(k[4], (SEEDS, B, T)) < 0.05,
             "noise": jax.random.uniform(k[5], (SEEDS, B, T, cfg.stoch)),
             "deter": jax.random.normal(k[6], (SEEDS, B, cfg.deter)),
             "task": jax.random.randint(k[7], (SEEDS, B, T), 0, 2)}
    return cfg, ctx, params, batch


def _loss(params, batch, cfg, ctx):
    """The world-model loss of one seed (every term, scale 1)."""
    carry = initial_carry(cfg, (B,))._replace(deter=batch["deter"])
    task = None if ctx is None else task_inputs(params, ctx, batch["task"])
    out = world_model_loss(params, cfg, carry, batch["obs"], batch["action"],
                           batch["reward"], batch["is_first"], batch["is_terminal"],
                           batch["noise"], task)
    return sum(jnp.mean(v) for v in out.losses.values())


def _grad(cfg, ctx, mode):
    """The loss's gradient of one seed with scan_weight_grads = mode."""
    c = dataclasses.replace(cfg, scan_weight_grads=mode)
    return jax.grad(lambda p, b: _loss(p, b, c, ctx))


@contextlib.contextmanager
def _scan_replaced(fn):
    old = scan_grads.scan
    scan_grads.scan = fn
    try:
        yield
    finally:
        scan_grads.scan = old


def _oracle(cfg, ctx):
    """(params, batch) of one seed -> {kernel name: gradient}: each RSSM kernel's
    gradient as Σ_t (Σ_rows u_tᵀ g_t in float32), from plain autodiff: `scan_grads.scan`
    replaced by a plain `lax.scan` whose layers add zero taps (`nets.Tap`) to their
    products; g_t = the taps' gradient, u_t the recorded inputs. The plain scan's sum
    without its per-step rounding of the product to the compute dtype."""
    c = dataclasses.replace(cfg, scan_weight_grads="outside")
    T = cfg.batch_length
    eqs, shapes = {}, {}

    def tapped_scan(taps, record):
        def scan(body, layers, init, xs):
            def step(carry, x_tap):
                x, tap = x_tap
                ks = {n: nets.Tap(layers[n]["kernel"], None if tap is None else tap[n])
                      for n in RSSM_KERNELS}
                lay = {n: {**layer, "kernel": ks.get(n, layer["kernel"])}
                       for n, layer in layers.items()}
                carry, y = body(lay, carry, x)
                for n, t in ks.items():
                    eqs[n], shapes[n] = t.grads, t.out
                return carry, (y, {n: t.inputs for n, t in ks.items()})
            carry, (ys, inputs) = jax.lax.scan(step, init, (xs, taps))
            record.append(inputs)
            return carry, ys
        return scan

    def one_seed(p, b):
        with _scan_replaced(tapped_scan(None, [])):          # the products' shapes
            jax.eval_shape(lambda p, b: _loss(p, b, c, ctx), p, b)
        taps0 = {n: jnp.zeros((T, *s.shape), s.dtype) for n, s in shapes.items()}

        def f(taps):
            record = []
            with _scan_replaced(tapped_scan(taps, record)):
                return _loss(p, b, c, ctx), record[0]
        g, inputs = jax.grad(f, has_aux=True)(taps0)
        out = {}
        for n in RSSM_KERNELS:
            steps = [jnp.concatenate([jnp.einsum(eq, u[t], g[n][t],
                                                 preferred_element_type=jnp.float32)
                                      for u, eq in zip(inputs[n], eqs[n])], -2)
                     for t in range(T)]
            out[n] = sum(steps[1:], steps[0])
        return out
    return one_seed


def _rel(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


@pytest.fixture(scope="module")
def setups():
    """`_setup` of each (dtype, multitask), made once."""
    cache = {}

    def get(dtype, multitask):
        if (dtype, multitask) not in cache:
            cache[dtype, multitask] = _setup(dtype, multitask)
        return cache[dtype, multitask]
    return get


_SLOW = pytest.mark.slow


@pytest.mark.parametrize("dtype,multitask", [
    ("float32", False), ("bfloat16", True),
    pytest.param("float32", True, marks=_SLOW), pytest.param("bfloat16", False, marks=_SLOW)],
    ids=["float32-single", "bfloat16-multitask", "float32-multitask", "bfloat16-single"])
def test_gradients_match_the_plain_scan(dtype, multitask, setups):
    """Each case compiles its own program (10-20 s on 2 cores). The default run takes
    float32 single-task and bfloat16 multi-task, so each dtype and each of the single-
    and multi-task inputs is covered there; the other two pairings (float32-multitask,
    bfloat16-single) are `slow`."""
    cfg, ctx, params, batch = setups(dtype, multitask)
    fns = [_grad(cfg, ctx, "inside"), _grad(cfg, ctx, "outside")]
    if dtype == "bfloat16":
        fns.append(_oracle(cfg, ctx))
    # one program (one compilation), vmapped over the seeds as the trainers run them
    plain, outside, *oracle = jax.jit(jax.vmap(lambda p, b: [f(p, b) for f in fns]))(
        params, batch)
    kernels = {("rssm", n, "kernel") for n in RSSM_KERNELS}
    worst = {}
    for path, a in jax.tree_util.tree_leaves_with_path(outside):
        keys = tuple(k.key for k in path)
        b = plain
        for k in keys:
            b = b[k]
        assert a.dtype == b.dtype == jnp.float32 and a.shape == b.shape, keys
        assert np.all(np.isfinite(np.asarray(a))), keys
        worst[keys] = _rel(a, b)
        if keys not in kernels:      # not summed by the scan: the same ops as the plain scan's
            assert worst[keys] <= 1e-6, (keys, worst[keys])
        elif dtype == "float32":     # summation order only
            assert worst[keys] <= 2e-6, (keys, worst[keys])
        else:                        # the plain scan rounds each step's product to bfloat16
            assert worst[keys] <= 2 ** -6, (keys, worst[keys])
    assert kernels <= set(worst)
    if dtype == "bfloat16":          # the same sum without that rounding: summation order only
        for n in RSSM_KERNELS:
            assert _rel(outside["rssm"][n]["kernel"], oracle[0][n]) <= 2e-6, n
        assert max(worst[k] for k in kernels) > 1e-4     # the rounding is there to be found


def _dots(jaxpr, in_scan=False, out=None):
    """(inside a scan body, contraction size, output dtype) of every dot_general."""
    out = [] if out is None else out
    for e in jaxpr.eqns:
        if e.primitive.name == "dot_general":
            (lc, _), _ = e.params["dimension_numbers"]
            size = math.prod(e.invars[0].aval.shape[d] for d in lc)
            out.append((in_scan, size, e.outvars[0].aval.dtype))
        for sub in jex.core.jaxprs_in_params(e.params):
            _dots(sub, in_scan or e.primitive.name == "scan", out)
    return out


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_backward_scan_has_no_per_step_kernel_products(dtype, setups):
    cfg, ctx, params, batch = setups(dtype, False)
    T = cfg.batch_length
    found = {}
    for mode in ("inside", "outside"):
        c = dataclasses.replace(cfg, scan_weight_grads=mode)
        fn = jax.vmap(jax.grad(lambda p, b: _loss(p, b, c, ctx)))
        found[mode] = _dots(jax.make_jaxpr(fn)(params, batch).jaxpr)
    per_step = {m: [d for s, n, d in f if s and n == B] for m, f in found.items()}
    assert len(per_step["inside"]) >= len(RSSM_KERNELS)     # the plain scan has them
    assert per_step["outside"] == []
    # after the loop: one float32-accumulated contraction over all T·B rows per kernel part
    # (hid0 has two in float32 compute: its own block inputs and the shared embeddings)
    after = [d for s, n, d in found["outside"] if not s and n == T * B and d == jnp.float32]
    before = [d for s, n, d in found["inside"] if not s and n == T * B and d == jnp.float32]
    parts = len(RSSM_KERNELS) + 1
    assert len(after) - len(before) == parts


def test_auto_resolves_by_backend():
    assert auto_scan_weight_grads("cpu") == "inside"
    assert {auto_scan_weight_grads(b) for b in ("tpu", "gpu", "cuda", "rocm")} == {"outside"}
    with pytest.raises(ValueError, match="scan_weight_grads"):
        agent.make_config("tiny", {"scan_weight_grads": "middle"},
                          task=get_task("probe-action"))


def test_a_layer_used_twice_in_a_step_raises():
    """Its tap's cotangent would be the sum of both uses' while its inputs differ."""
    layer = nets.init_linear(lambda s: jnp.ones(s), 3, 3)

    def body(layers, c, x):
        y = nets.linear(layers["a"], nets.linear(layers["a"], c + x))
        return y, y

    def loss(layers):
        c, _ = scan_grads.scan(body, layers, jnp.zeros((2, 3)), jnp.ones((4, 2, 3)))
        return jnp.sum(c)

    with pytest.raises(ValueError, match="used twice in one step"):
        jax.grad(loss)({"a": layer})
