"""DreamerV3 parameters: one pytree for the world model, actor and critic,
and its parameter counts (dreamerv3_spec 1.5, 2.1; reference_design 6.6).

    params = {
      "enc":    {"h0".."h2"},                            # heads.init_encoder
      "rssm":   {"in_deter", "in_stoch", "in_action", "hid0", "gates",
                 "prior0", "prior1", "prior_logit", "post0", "post_logit"},
      "dec":    {"h0".."h2", "out"},                     # heads.init_decoder
      "rew":    {"h0", "out"},                           # heads.init_reward
      "con":    {"h0", "out"},                           # heads.init_continue
      "actor":  {"h0".."h2", "mean", "std"} | {"h0".., "logits"},
      "critic": {"h0".."h2", "out"},
      "task_emb": f32[num_tasks, task_dim],                # multi-task only (W-D8)
      "rew_ens": {"e0".."e{K-1}": reward-head layout},     # offline_ensemble K > 0 (W-D11)
    }

Every layer is {"kernel", "bias"[, "norm_scale"]} (`nets`). WORLD_MODEL names
the modules of the world model (the reference's enc, dyn, dec, rew, con). The
slow critic is not here: it is a copy of params["critic"] held by the
training state. `reference_params` maps these names onto the reference's.
"""
from __future__ import annotations

import jax
import numpy as np

from wmx.agents.dreamerv3 import nets
from wmx.agents.dreamerv3.actor_critic import init_actor, init_critic
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.heads import init_continue, init_decoder, init_encoder, init_reward
from wmx.agents.dreamerv3.multitask import init_task_embedding
from wmx.agents.dreamerv3.offline import init_reward_ensemble
from wmx.agents.dreamerv3.rssm import init_rssm

Params = dict
WORLD_MODEL = ("enc", "rssm", "dec", "rew", "con")
MODULES = WORLD_MODEL + ("actor", "critic")

_INITS = {"enc": init_encoder, "rssm": init_rssm, "dec": init_decoder, "rew": init_reward,
          "con": init_continue, "actor": init_actor, "critic": init_critic,
          "task_emb": init_task_embedding, "rew_ens": init_reward_ensemble}


def modules(cfg: DreamerV3Config) -> tuple[str, ...]:
    """The params' modules: MODULES, plus "task_emb" for a multi-task config and then
    "rew_ens" when offline_ensemble > 0 (W-D11)."""
    c = cfg.resolved()
    return (MODULES + (("task_emb",) if c.multitask else ())
            + (("rew_ens",) if c.offline_ensemble else ()))


def init_params(key: jax.Array, cfg: DreamerV3Config) -> Params:
    """Initial parameters of every trained module (layout in the module docstring).

    Kernels: fan-in truncated normal x outscale (D23), biases 0, norm scales 1;
    zero output layers for the reward head and the critic; outscale 0.1 for
    the decoder output, 0.01 for the policy, 1 elsewhere (2411f7d). Every
    kernel is a slice, in MODULES order, of one truncated-normal sample of `key`
    (`nets.sample_kernels`, W-D2); a multi-task config's embedding table is drawn
    after them (unit-variance entries, W-D8), the offline reward ensemble's heads
    last (W-D11).
    Pure; jit with `cfg` static.
    Source: dreamerv3_spec 1.5; W-D8, W-D11.
    """
    c = cfg.resolved()
    return nets.sample_kernels(key, lambda draw: {m: _INITS[m](draw, c) for m in modules(c)})


def param_shapes(cfg: DreamerV3Config) -> Params:
    """The params tree as jax.ShapeDtypeStruct leaves (jax.eval_shape; no compute)."""
    c = cfg.resolved()
    return jax.eval_shape(lambda k: init_params(k, c), jax.random.key(0))


def param_counts(cfg: DreamerV3Config) -> dict[str, int]:
    """Trained-parameter counts per module of `modules(cfg)` and "total" (slow critic
    excluded, as the reference's opt_param_count). Cheap at any size (eval_shape)."""
    shapes = param_shapes(cfg)
    out = {m: int(sum(np.prod(x.shape) for x in jax.tree.leaves(shapes[m])))
           for m in modules(cfg)}
    out["total"] = sum(out.values())
    return out
