"""The RSSM: block-GRU core, prior and posterior heads, observe and imagine
steps and their scans, and the KL loss (dreamerv3_spec 2.1-2.8, 2.14,
Algorithms A-C and E; 2411f7d nets.RSSM with cell 'blockgru').

Params (a dict of `nets` layers; reference names of 2411f7d/29eb964 in
brackets, see `reference_params`):
  in_deter [dynin0], in_stoch [dynin1], in_action [dynin2]   Linear -> RMSNorm -> SiLU
  hid0.. [dyn0..]   BlockLinear(deter, g) -> RMSNorm(full deter) -> SiLU
  gates [dyncore]   BlockLinear(3 deter, g), no norm, per-block layout [r | c | u]
  prior0.. [img0..], prior_logit [imglogit]   the prior p(z | h) from deter
  post0.. [obs0..], post_logit [obslogit]     the posterior q(z | h, e) from (deter, embed)

Latent state: deter h [..., D], stoch z [..., S, C] (a straight-through
one-hot). Logits are stored after the 1% unimix (`categorical`, 2411f7d).

Actions enter as f32[..., A] vectors (continuous values; one-hots for discrete
actions). Randomness enters as explicit arrays post_noise / prior_noise: class
indices int32[..., S] (the fixtures inject the reference's this way) or uniforms
f32[..., S] from `draw_latent_noise` (inverse-CDF sampling, `categorical`).

Precision (spec 1.12; 2411f7d rssm asserts COMPUTE_DTYPE): every step casts
its carry, action and embedding to the compute dtype cfg.dtype (written
"cdt" below: float32 or bfloat16), so deter, stoch, the gate maths, the
logits and their unimix (2411f7d `_logit`: before the float32 cast) are in
it; the distributions (sampling, KL, entropy) cast the logits to float32,
and the straight-through sample is cast back to cdt. Carries given in
float32 are cast on entry; callers that keep a latent across calls
(acting, the replay) upcast it to float32, which is exact.

Multi-task (deviation W-D8, `multitask`): the steps take an optional
``task`` (`multitask.TaskInputs` of each row); the core's action input is then
concat(a / max(1, |a|) * action_mask, e), in_action widened by task_dim. With
``task=None`` every function is the reference's.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

from wmx.agents.dreamerv3 import nets, scan_grads
from wmx.agents.dreamerv3.categorical import (KLTerms, draw_uniform, entropy, kl_terms,
                                              onehot_sample, unimix_logits)
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.multitask import TaskInputs

sg = jax.lax.stop_gradient
Params = dict


class Carry(NamedTuple):
    """Filter carry: deter [..., D], stoch [..., S, C] (one-hot), and prevact
    [..., A], the action taken after the latest observation (29eb964: from the
    replay context when training, the previous sampled action when acting).
    float32 or cdt (the steps cast it); `observe` returns deter and stoch in cdt."""

    deter: jnp.ndarray
    stoch: jnp.ndarray
    prevact: jnp.ndarray


class Feat(NamedTuple):
    """RSSM outputs of a step, all in cdt: deter [..., D], stoch [..., S, C]
    (straight-through one-hot sample), logit [..., S, C] (the sampled
    distribution's mixed logits: posterior in observe, prior in imagine)."""

    deter: jnp.ndarray
    stoch: jnp.ndarray
    logit: jnp.ndarray


class RSSMLoss(NamedTuple):
    """`rssm_loss` outputs, f32[B, T] each (prior_logit f32[B, T, S, C])."""

    dyn: jnp.ndarray
    rep: jnp.ndarray
    kl: KLTerms
    prior_logit: jnp.ndarray
    prior_ent: jnp.ndarray
    post_ent: jnp.ndarray


# ---- params ------------------------------------------------------------------
def init_rssm(draw: nets.Draw, cfg: DreamerV3Config) -> Params:
    """RSSM params (shapes in the module docstring; embed width = cfg.units).

    `draw`: see `nets.sample_kernels` (or use `params.init_params`).
    Source: dreamerv3_spec 1.5, 2.4-2.6 (logit outscale cfg.rssm_outscale = 1).
    """
    c = cfg.resolved()
    D, H, g, SC = c.deter, c.hidden, c.blocks, c.stoch * c.classes
    p = {"in_deter": nets.init_linear(draw, D, H, norm=True),
         "in_stoch": nets.init_linear(draw, SC, H, norm=True),
         "in_action": nets.init_linear(draw, c.action_dim + c.task_width, H, norm=True)}
    for i in range(c.dyn_layers):
        width = D + g * 3 * H if i == 0 else D
        p[f"hid{i}"] = nets.init_block_linear(draw, width, D, g, norm=True)
    p["gates"] = nets.init_block_linear(draw, D, 3 * D, g)
    for i in range(c.img_layers):
        p[f"prior{i}"] = nets.init_linear(draw, D if i == 0 else H, H, norm=True)
    p["prior_logit"] = nets.init_linear(draw, H, SC, outscale=c.rssm_outscale)
    for i in range(c.obs_layers):
        p[f"post{i}"] = nets.init_linear(draw, D + c.units if i == 0 else H, H, norm=True)
    p["post_logit"] = nets.init_linear(draw, H, SC, outscale=c.rssm_outscale)
    return p


def initial_carry(cfg: DreamerV3Config, batch_shape: tuple[int, ...] = ()) -> Carry:
    """Zeros: deter f32[*b, D], stoch f32[*b, S, C], prevact f32[*b, A] (not learned; 2.2)."""
    c = cfg.resolved()
    z = lambda *s: jnp.zeros((*batch_shape, *s), jnp.float32)  # noqa: E731
    return Carry(z(c.deter), z(c.stoch, c.classes), z(c.action_dim))


def draw_latent_noise(key: jax.Array, cfg: DreamerV3Config,
                      batch_shape: tuple[int, ...]) -> jnp.ndarray:
    """Uniform sampling noise f32[*batch_shape, S] for posterior or prior samples
    ([B, T] for `observe`, [N, H] for imagination)."""
    return draw_uniform(key, (*batch_shape, cfg.stoch))


def context_carry(cfg: DreamerV3Config, deter: jnp.ndarray, stoch_idx: jnp.ndarray,
                  prevact: jnp.ndarray) -> Carry:
    """The training carry rebuilt from the replay context step (spec 5.8, 29eb964).

    Args: deter f32[B, D] and stoch_idx int[B, S] stored at window index 0;
    prevact f32[B, A] = the action stored at index 0 (29eb964's fix).
    Returns Carry with stoch = one_hot(stoch_idx, C).
    """
    c = cfg.resolved()
    stoch = jax.nn.one_hot(stoch_idx, c.classes, dtype=jnp.float32)
    return Carry(deter.astype(jnp.float32), stoch, prevact.astype(jnp.float32))


# ---- components --------------------------------------------------------------
def core(p: Params, cfg: DreamerV3Config, deter: jnp.ndarray, stoch: jnp.ndarray,
         action: jnp.ndarray, task: TaskInputs | None = None) -> jnp.ndarray:
    """One block-GRU step h' = f(h, z, a), cdt[..., D].

    Args: deter [..., D], stoch [..., S, C], action [..., A], each cast to cdt
    (the action then divided by sg(max(1, |a|))); task: multi-task inputs with
    leaves [...] (the action is masked to the task's dims and the embedding
    appended, W-D8) or None.
    The input embeddings of deter, stoch and action are
    fed to every block next to the block's own deter slice (hid0 as
    `nets.block_linear_shared`, no repeated copy in float32; the block layers work in the
    block-major layout [g, R, .] of `nets.to_groups`); the reset gate
    scales the whole candidate pre-activation; u = sigmoid(u_pre - 1);
    h' = u cand + (1 - u) h.
    Source: dreamerv3_spec Algorithm A, 2.3, 2.4, 1.12.
    """
    c = cfg.resolved()
    g, eps, dt = c.blocks, c.rms_eps, c.dtype
    lead = deter.shape[:-1]
    deter, stoch, action = (nets.cast(x, dt) for x in (deter, stoch, action))
    action = action / sg(jnp.maximum(1.0, jnp.abs(action)))
    if task is not None:
        action = jnp.concatenate([action * nets.cast(task.action_mask, dt),
                                  nets.cast(task.emb, dt)], -1)
    x = jnp.concatenate([nets.linear(p["in_deter"], deter, eps),
                         nets.linear(p["in_stoch"], stoch.reshape(*lead, -1), eps),
                         nets.linear(p["in_action"], action, eps)], -1)
    h = nets.to_groups(deter, g)                                   # [g, R, D/g]
    x = nets.block_linear_shared(p["hid0"], h, x.reshape(-1, x.shape[-1]), eps)
    for i in range(1, c.dyn_layers):
        x = nets.block_linear(p[f"hid{i}"], x, eps)
    x = nets.block_linear(p["gates"], x, eps)                      # [g, R, 3 D/g]
    reset, cand, update = jnp.split(x, 3, -1)
    reset = jax.nn.sigmoid(reset)
    cand = jnp.tanh(reset * cand)
    update = jax.nn.sigmoid(update - 1.0)
    return nets.from_groups(update * cand + (1.0 - update) * h, lead)


def _logits(p: nets.Layer, x: jnp.ndarray, cfg: DreamerV3Config) -> jnp.ndarray:
    c = cfg.resolved()
    out = nets.linear(p, x, c.rms_eps).reshape(*x.shape[:-1], c.stoch, c.classes)
    return unimix_logits(out, c.unimix)     # in cdt, as 2411f7d's _logit


def _sample(logit: jnp.ndarray, noise: jnp.ndarray) -> jnp.ndarray:
    """Straight-through one-hot sample of cdt logits, drawn from their float32 cast and
    cast back to cdt (2411f7d: `cast(OneHotDist(logit.astype(f32)).sample())`)."""
    return nets.cast(onehot_sample(nets.f32(logit), noise), logit.dtype)


def prior_logits(p: Params, cfg: DreamerV3Config, deter: jnp.ndarray) -> jnp.ndarray:
    """Prior p(z | h): mixed logits cdt[..., S, C] from deter [..., D] (cast to cdt).

    Source: dreamerv3_spec 2.5 (img layers, then the logit Linear, then 1% unimix), 1.12.
    """
    c = cfg.resolved()
    x = nets.cast(deter, c.dtype)
    for i in range(c.img_layers):
        x = nets.linear(p[f"prior{i}"], x, c.rms_eps)
    return _logits(p["prior_logit"], x, c)


def post_logits(p: Params, cfg: DreamerV3Config, deter: jnp.ndarray,
                embed: jnp.ndarray) -> jnp.ndarray:
    """Posterior q(z | h, e): mixed logits cdt[..., S, C] from deter [..., D] and
    the encoder's embedding [..., units] (both cast to cdt; absolute = False).

    Source: dreamerv3_spec 2.6, 1.12.
    """
    c = cfg.resolved()
    x = jnp.concatenate([nets.cast(deter, c.dtype), nets.cast(embed, c.dtype)], -1)
    for i in range(c.obs_layers):
        x = nets.linear(p[f"post{i}"], x, c.rms_eps)
    return _logits(p["post_logit"], x, c)


# ---- steps -------------------------------------------------------------------
def obs_step(p: Params, cfg: DreamerV3Config, carry: Carry, embed: jnp.ndarray,
             is_first: jnp.ndarray, post_noise: jnp.ndarray,
             task: TaskInputs | None = None) -> Feat:
    """One filter step (Algorithm B): reset, core, posterior, sample.

    Args: carry (deter [..., D], stoch [..., S, C], prevact [..., A] = the action
    taken before this observation; each cast to cdt); embed [..., units];
    is_first bool[...] (zeroes deter, stoch and prevact first: x * (1 - is_first));
    post_noise int32[..., S] class indices or f32[..., S] uniforms (the posterior
    sample; `categorical.sample_indices`); task: multi-task inputs [...] or None
    (`core`).
    Returns Feat(deter h_t, stoch z_t (straight-through), logit (posterior, mixed)),
    in cdt.
    Source: dreamerv3_spec 2.2, 2.7, Algorithm B, 1.12.
    """
    dt = cfg.dtype
    keep = 1.0 - is_first.astype(dt)
    deter = nets.cast(carry.deter, dt) * keep[..., None]
    stoch = nets.cast(carry.stoch, dt) * keep[..., None, None]
    prevact = nets.cast(carry.prevact, dt) * keep[..., None]
    deter = core(p, cfg, deter, stoch, prevact, task)
    logit = post_logits(p, cfg, deter, embed)
    return Feat(deter, _sample(logit, post_noise), logit)


def img_step(p: Params, cfg: DreamerV3Config, deter: jnp.ndarray, stoch: jnp.ndarray,
             action: jnp.ndarray, prior_noise: jnp.ndarray,
             task: TaskInputs | None = None) -> Feat:
    """One imagination step (Algorithm C, prior only; never resets).

    Args: deter [..., D], stoch [..., S, C], action [..., A] taken at
    (deter, stoch) (cast to cdt by `core`); prior_noise int32[..., S] indices or
    f32[..., S] uniforms; task: multi-task inputs [...] or None (`core`).
    Returns Feat(deter', stoch' (prior sample, straight-through), logit (prior,
    mixed)), in cdt.
    Source: dreamerv3_spec 2.8, Algorithm C, 1.12.
    """
    deter = core(p, cfg, deter, stoch, action, task)
    logit = prior_logits(p, cfg, deter)
    return Feat(deter, _sample(logit, prior_noise), logit)


# ---- sequences -----------------------------------------------------------------
def _time_major(x):
    return jnp.swapaxes(x, 0, 1)


def observe(p: Params, cfg: DreamerV3Config, carry: Carry, embed: jnp.ndarray,
            action: jnp.ndarray, is_first: jnp.ndarray, post_noise: jnp.ndarray,
            task: TaskInputs | None = None) -> tuple[Carry, Feat]:
    """Filter a batch of sequences with `lax.scan` over time (BPTT through it).

    Args:
      carry: Carry with leaves [B, ...] (float32 or cdt); carry.prevact is the
        action before embed[:, 0].
      embed: [B, T, units] encoder outputs (cdt).
      action: f32[B, T, A], action[:, t] taken AFTER observation t (the replay's
        obs-aligned rows); step t's previous action is carry.prevact for t = 0
        and action[:, t - 1] after.
      is_first: bool[B, T]; post_noise: int32[B, T, S] indices or f32[B, T, S] uniforms.
      task: multi-task inputs with leaves [B, T, ...] (each row's task) or None.
    Returns:
      (carry after the last step: (deter, stoch) of step T-1 in cdt, prevact =
       action[:, -1]; Feat with leaves [B, T, ...] in cdt).
    Gradients: with cfg.scan_weight_grads "outside" the scan is `scan_grads.scan`
    (each kernel's gradient summed after the loop; the same values up to float
    summation order in float32, W-D12); "inside" is the plain `lax.scan`.
    Source: dreamerv3_spec 2.7, 2.15 (prevacts = concat(carry.prevact, action[:, :-1])).
    """
    c = cfg.resolved()
    dt = c.dtype
    prevacts = jnp.concatenate([carry.prevact[:, None], action[:, :-1]], 1)

    def step(layers, state, xs):
        deter, stoch = state
        e, a, f, idx, tk = xs
        out = obs_step(layers, c, Carry(deter, stoch, a), e, f, idx, tk)
        return (out.deter, out.stoch), out

    xs = tuple(map(_time_major, (embed, prevacts, is_first, post_noise)))
    xs = (*xs, None if task is None else jax.tree.map(_time_major, task))
    init = (nets.cast(carry.deter, dt), nets.cast(carry.stoch, dt))
    if c.scan_weight_grads == "outside":
        (deter, stoch), feats = scan_grads.scan(step, p, init, xs)
    else:
        (deter, stoch), feats = jax.lax.scan(lambda s, x: step(p, s, x), init, xs)
    return Carry(deter, stoch, action[:, -1]), Feat(*map(_time_major, feats))


def imagine(p: Params, cfg: DreamerV3Config, deter: jnp.ndarray, stoch: jnp.ndarray,
            actions: jnp.ndarray, prior_noise: jnp.ndarray) -> Feat:
    """Open-loop imagination of a given action sequence (scan over img_step).

    Args: start deter [N, D], stoch [N, S, C] (cast to cdt); actions f32[N, H, A]
    (actions[:, h] taken at state h); prior_noise int32[N, H, S] or f32[N, H, S].
    Returns Feat with leaves [N, H, ...] in cdt: states 1..H (the start is not
    repeated).
    Source: dreamerv3_spec 2.8.
    """
    def step(state, xs):
        a, idx = xs
        out = img_step(p, cfg, *state, a, idx)
        return (out.deter, out.stoch), out

    start = (nets.cast(deter, cfg.dtype), nets.cast(stoch, cfg.dtype))
    _, feats = jax.lax.scan(step, start, (_time_major(actions), _time_major(prior_noise)))
    return Feat(*map(_time_major, feats))


Policy = Callable[[jnp.ndarray, jnp.ndarray, jnp.ndarray], jnp.ndarray]


def imagine_with_policy(p: Params, cfg: DreamerV3Config, deter: jnp.ndarray,
                        stoch: jnp.ndarray, action: jnp.ndarray, policy: Policy,
                        prior_noise: jnp.ndarray, eps: jnp.ndarray,
                        task: TaskInputs | None = None) -> tuple[Feat, jnp.ndarray]:
    """Actor-critic imagination: H steps from the start states with the policy.

    For h = 1..H: state h = img_step(state h-1, action h-1, prior_noise[:, h-1]),
    then action h = policy(sg(deter_h), sg(stoch_h), eps[:, h-1]), cast to cdt
    (2411f7d imgstep: `cast(sample(actor(...)))`).
    Args: start deter [N, D], stoch [N, S, C] and action [N, A] (the start
    action, sampled by the caller with the start noise), each cast to cdt;
    policy(deter, stoch, noise) -> f32[N, A]; prior_noise int32[N, H, S] or f32[N, H, S]; eps
    [N, H, ...] the policy's noise per step (f32[N, H, A] normal noise for the
    bounded normal; `actor_critic.draw_policy_noise`); task: multi-task inputs
    with leaves [N, ...] (each trajectory's task, for `core`) or None.
    Returns (Feat [N, H, ...] of states 1..H, actions cdt[N, H, A] sampled at
    them), all in cdt and stop-gradiented: with ac_grads = none no gradient leaves
    imagination (spec 2.8, 3.4); the losses re-evaluate heads on sg features.
    Source: dreamerv3_spec 2.8, 3.2, 3.3 (2411f7d agent.py imgstep).
    """
    dt = cfg.dtype

    def step(state, xs):
        deter, stoch, act = state
        idx, e = xs
        out = img_step(p, cfg, deter, stoch, act, idx, task)
        act = nets.cast(policy(sg(out.deter), sg(out.stoch), e), dt)
        return (out.deter, out.stoch, act), (out, act)

    start = sg(tuple(nets.cast(x, dt) for x in (deter, stoch, action)))
    _, (feats, acts) = jax.lax.scan(step, start, (_time_major(prior_noise), _time_major(eps)))
    return sg(Feat(*map(_time_major, feats))), sg(_time_major(acts))


# ---- loss ----------------------------------------------------------------------
def rssm_loss(p: Params, cfg: DreamerV3Config, deter: jnp.ndarray,
              post_logit: jnp.ndarray) -> RSSMLoss:
    """Free-bits dyn and rep losses of an observed sequence (Algorithm E).

    Args: deter [B, T, D] and post_logit [B, T, S, C] (mixed) from `observe`
    (cdt). The prior is recomputed from the same deter (not stop-gradiented: dyn
    also trains the core, spec 2.14). KL and entropies are computed from the
    float32 casts of the logits (2411f7d `_dist`). Returns RSSMLoss (dyn, rep =
    max(KL, free_nats) f32[B, T]; the raw KLs; the prior logits f32; prior and
    posterior entropies).
    Source: dreamerv3_spec 2.14, 1.12.
    """
    c = cfg.resolved()
    prior = nets.f32(prior_logits(p, c, deter))
    post_logit = nets.f32(post_logit)
    terms = kl_terms(post_logit, prior, c.free_nats)
    return RSSMLoss(terms.dyn, terms.rep, terms, prior, entropy(prior), entropy(post_logit))
