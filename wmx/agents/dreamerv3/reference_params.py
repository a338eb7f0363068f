"""Name map between wmx's DreamerV3 params and the reference's flat state names
(29eb964/2411f7d, e.g. `agent/dyn/dynin0/kernel`; fixtures/dreamerv3/README.md
"Parameters").

The map is one to one: every wmx leaf has exactly one reference name with the
same shape, and every trained reference parameter (plus `agent/slowcritic/*`
for the slow critic) has one wmx leaf.

    enc/h{i}            agent/enc/mlp{i}
    rssm/in_deter       agent/dyn/dynin0        rssm/hid{i}      agent/dyn/dyn{i}
    rssm/in_stoch       agent/dyn/dynin1        rssm/gates       agent/dyn/dyncore
    rssm/in_action      agent/dyn/dynin2        rssm/prior{i}    agent/dyn/img{i}
    rssm/prior_logit    agent/dyn/imglogit      rssm/post{i}     agent/dyn/obs{i}
    rssm/post_logit     agent/dyn/obslogit
    dec/h{i}            agent/dec/mlp{i}        dec/out          agent/dec/out_{obs_key}/out
    rew|con|critic/h{i} agent/<same>/h{i}       .../out          agent/<same>/dist/out
    actor/h{i}          agent/actor/h{i}        actor/mean|logits agent/actor/{act_key}/out
    actor/std           agent/actor/{act_key}/std
    slow critic         agent/slowcritic/...    (as critic)
    leaves: kernel -> kernel, bias -> bias, norm_scale -> norm/scale
"""
from __future__ import annotations

import re
from typing import Mapping

import jax.numpy as jnp
import numpy as np

from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.params import MODULES, Params, param_shapes

_RSSM = {"in_deter": "dynin0", "in_stoch": "dynin1", "in_action": "dynin2",
         "gates": "dyncore", "prior_logit": "imglogit", "post_logit": "obslogit"}
_RSSM_INDEXED = {"hid": "dyn", "prior": "img", "post": "obs"}
_LEAF = {"kernel": "kernel", "bias": "bias", "norm_scale": "norm/scale"}


def _layer_name(module: str, layer: str, obs_key: str, act_key: str) -> str:
    if module == "rssm":
        if layer in _RSSM:
            return f"dyn/{_RSSM[layer]}"
        m = re.fullmatch(r"(hid|prior|post)(\d+)", layer)
        if m:
            return f"dyn/{_RSSM_INDEXED[m.group(1)]}{m.group(2)}"
    elif re.fullmatch(r"h\d+", layer):
        return f"{module}/mlp{layer[1:]}" if module in ("enc", "dec") else f"{module}/{layer}"
    elif module == "dec" and layer == "out":
        return f"dec/out_{obs_key}/out"
    elif module == "actor" and layer in ("mean", "logits"):
        return f"actor/{act_key}/out"
    elif module == "actor" and layer == "std":
        return f"actor/{act_key}/std"
    elif layer == "out":
        return f"{module}/dist/out"
    raise ValueError(f"no reference name for wmx layer {module}/{layer}")


def reference_names(params: Params, *, prefix: str = "agent/", obs_key: str = "vector",
                    act_key: str = "action") -> dict[tuple[str, str, str], str]:
    """{(module, layer, leaf): reference name} for every leaf of a params tree
    (or of any tree with the same layout, e.g. `param_shapes(cfg)`)."""
    out = {}
    for module, layers in params.items():
        for layer, leaves in layers.items():
            base = _layer_name(module, layer, obs_key, act_key)
            for leaf in leaves:
                out[(module, layer, leaf)] = f"{prefix}{base}/{_LEAF[leaf]}"
    return out


def to_reference_params(params: Params, *, slow_critic: Params | None = None,
                        prefix: str = "agent/", obs_key: str = "vector",
                        act_key: str = "action") -> dict[str, np.ndarray]:
    """Flat {reference name: np.ndarray} of params (and the slow critic under
    `{prefix}slowcritic/...` when given)."""
    names = reference_names(params, prefix=prefix, obs_key=obs_key, act_key=act_key)
    out = {n: np.asarray(params[m][l][f]) for (m, l, f), n in names.items()}
    if slow_critic is not None:
        slow = reference_names({"critic": slow_critic}, prefix=prefix)
        out.update({n.replace(f"{prefix}critic/", f"{prefix}slowcritic/", 1):
                    np.asarray(slow_critic[l][f]) for (_, l, f), n in slow.items()})
    return out


def from_reference_params(ref: Mapping[str, np.ndarray], cfg: DreamerV3Config, *,
                          modules: tuple[str, ...] = MODULES, prefix: str = "agent/",
                          obs_key: str = "vector", act_key: str = "action") -> Params:
    """The wmx params of `modules` from a flat reference dict (other entries, e.g.
    optimizer or normaliser state, are ignored).

    Raises KeyError naming a missing reference parameter, ValueError naming one
    whose shape differs from `cfg`'s.
    """
    shapes = {m: s for m, s in param_shapes(cfg).items() if m in modules}
    names = reference_names(shapes, prefix=prefix, obs_key=obs_key, act_key=act_key)
    out: Params = {m: {l: {} for l in shapes[m]} for m in shapes}
    for (m, l, f), n in names.items():
        if n not in ref:
            raise KeyError(f"reference parameter {n!r} (wmx {m}/{l}/{f}) is missing")
        x = np.asarray(ref[n])
        want = shapes[m][l][f].shape
        if x.shape != want:
            raise ValueError(f"reference parameter {n!r} has shape {x.shape}; "
                             f"wmx {m}/{l}/{f} for this config needs {want}")
        out[m][l][f] = jnp.asarray(x, jnp.float32)
    return out


def slow_critic_from_reference(ref: Mapping[str, np.ndarray], cfg: DreamerV3Config, *,
                               prefix: str = "agent/") -> Params:
    """The slow critic's params (critic layout) from `{prefix}slowcritic/...` entries."""
    renamed = {k.replace(f"{prefix}slowcritic/", f"{prefix}critic/", 1): v
               for k, v in ref.items() if k.startswith(f"{prefix}slowcritic/")}
    return from_reference_params(renamed, cfg, modules=("critic",), prefix=prefix)["critic"]


def trained_reference_names(ref: Mapping[str, np.ndarray], *,
                            prefix: str = "agent/") -> set[str]:
    """The trained-parameter names of a reference state: every `{prefix}` entry that
    is not the slow critic, the optimizer step, the normalisers or the updater."""
    skip = ("slowcritic/", "opt/", "retnorm/", "valnorm/", "advnorm/", "updater/")
    return {k for k in ref if k.startswith(prefix)
            and not k[len(prefix):].startswith(skip)}
