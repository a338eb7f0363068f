"""TD-MPC2 world model: parameters and pure forward functions (tdmpc2_spec §1).

Params = {"encoder", "dynamics", "reward", "pi", "qs", "target_qs"}; each is a
`wmx.nn.mlp.normed_mlp_init` tree ({"layer{i}": {"kernel" (in, out), "bias",
["ln_scale", "ln_bias"]}}); "qs" and "target_qs" carry a leading Nq axis on
every leaf. Hidden layers are Linear -> LayerNorm(eps 1e-5) -> Mish; the
encoder and dynamics end with Linear -> LN -> SimNorm(8); reward, Q and pi end
with a plain Linear. Only the first layer of each Q member has dropout, and at
PE it is active in every Q pass (spec §0.5 item 10): pass a `dropout_key`.

Multi-task hook (spec 1.22-1.23): every function takes an optional task
embedding `e` f32[..., task_dim] (broadcast against the input's leading axes),
concatenated as [obs, e] (encoder), [z, e, a] (dynamics, reward, Q), [z, e]
(pi). `pi_forward` takes an optional action mask f32[..., A].
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from wmx.agents.tdmpc2.config import TDMPC2Config
from wmx.nn.init import zeros_init
from wmx.nn.mlp import normed_mlp_apply, normed_mlp_apply_from, normed_mlp_init
from wmx.nn.rbg_bits import rbg_bernoulli
from wmx.nn.simnorm import simnorm
from wmx.nn.tanh_gaussian import bound_log_std, pe_log_prob, squash
from wmx.nn.twohot import TwoHot

Params = dict
MODULES = ("encoder", "dynamics", "reward", "pi", "qs")


class PolicyOut(NamedTuple):
    """Policy prior outputs (spec 1.9, PE form).

    mean f32[..., A] = tanh(mu); action f32[..., A] = tanh(mu + eps * std);
    log_pi f32[..., 1] (PE log-prob); log_std f32[..., A] (bounded, masked).
    """

    mean: jnp.ndarray
    action: jnp.ndarray
    log_pi: jnp.ndarray
    log_std: jnp.ndarray


def twohot(cfg: TDMPC2Config) -> TwoHot:
    """The reward/value two-hot spec: 101 bins over [-10, 10] in symlog space (T24)."""
    return TwoHot.tdmpc2(cfg.num_bins, cfg.vmax)


# ---- architecture ----------------------------------------------------------
def _dims(cfg: TDMPC2Config) -> dict[str, list[int]]:
    c = cfg.resolved()
    S, A, L, T, M = c.obs_dim, c.action_dim, c.latent_dim, c.task_dim, c.mlp_dim
    return {
        "encoder": [S + T] + [c.enc_dim] * max(c.num_enc_layers - 1, 1) + [L],
        "dynamics": [L + T + A, M, M, L],
        "reward": [L + T + A, M, M, c.num_bins],
        "pi": [L + T, M, M, 2 * A],
        "qs": [L + T + A, M, M, c.num_bins],
    }


def init_params(key: jax.Array, cfg: TDMPC2Config) -> Params:
    """Initial parameters (spec 1.13; multi-task: plus "task_emb", spec 1.22).

    Weights N(0, 0.02^2) (torch's absolute +-2 truncation is a no-op), biases 0,
    LayerNorm scale 1 / bias 0; the final weight of the reward head and of every
    Q member is 0; each Q member draws from its own key; "target_qs" is an exact
    copy of "qs". Multi-task configs (num_tasks > 0) add "task_emb"
    f32[num_tasks, task_dim] (`init_task_embedding`, from fold_in(key, 0x7A5C)).
    Pure; jit with `cfg` static.
    """
    d = _dims(cfg)
    nq = cfg.resolved().num_q
    k_enc, k_dyn, k_rew, k_pi, k_q = jax.random.split(key, 5)
    params = {
        "encoder": normed_mlp_init(k_enc, d["encoder"], last_normed=True),
        "dynamics": normed_mlp_init(k_dyn, d["dynamics"], last_normed=True),
        "reward": normed_mlp_init(k_rew, d["reward"], last_normed=False,
                                  last_kernel_init=zeros_init),
        "pi": normed_mlp_init(k_pi, d["pi"], last_normed=False),
    }
    params["qs"] = jax.vmap(lambda k: normed_mlp_init(k, d["qs"], last_normed=False,
                                                      last_kernel_init=zeros_init))(
        jax.random.split(k_q, nq))
    params["target_qs"] = jax.tree.map(lambda x: x, params["qs"])
    c = cfg.resolved()
    if c.num_tasks > 0:
        # Own key stream, so the single-task draws above are unchanged (spec 1.22).
        params["task_emb"] = init_task_embedding(jax.random.fold_in(key, 0x7A5C), c)
    return params


def init_task_embedding(key: jax.Array, cfg: TDMPC2Config) -> jnp.ndarray:
    """Task-embedding table f32[num_tasks, task_dim], U(-0.02, 0.02) (spec 1.22, T14).

    Rows are task ids. Max-norm 1 is enforced lazily at look-up time
    (`wmx.agents.tdmpc2.multitask.renorm_rows`), not here. Raises ValueError
    for a single-task config (num_tasks == 0).
    """
    c = cfg.resolved()
    if c.num_tasks <= 0:
        raise ValueError("init_task_embedding needs a multi-task config (num_tasks > 0)")
    return jax.random.uniform(key, (c.num_tasks, c.task_dim), jnp.float32, -0.02, 0.02)


def param_count(params: Params) -> dict[str, int]:
    """Parameter counts per module (encoder, dynamics, reward, pi, qs) and "total".

    The target Q ensemble is excluded (spec 1.24). Extra top-level entries
    (the multi-task "task_emb" table) are counted under their own name and in
    "total" (MT reference S=39, A=6, 80 tasks, task_dim 96: 5,389,930).
    """
    out = {k: int(sum(np.size(x) for x in jax.tree.leaves(v)))
           for k, v in params.items() if k != "target_qs"}
    out["total"] = sum(out.values())
    return out


# ---- forward functions -------------------------------------------------------
def _cat(*xs):
    """Concatenate on the last axis, broadcasting leading axes; None entries skipped."""
    xs = [x for x in xs if x is not None]
    lead = jnp.broadcast_shapes(*(x.shape[:-1] for x in xs))
    return jnp.concatenate([jnp.broadcast_to(x, lead + x.shape[-1:]) for x in xs], axis=-1)


def encode(params: Params, obs: jnp.ndarray, cfg: TDMPC2Config,
           e: jnp.ndarray | None = None) -> jnp.ndarray:
    """z = h([obs, e]): f32[..., S] -> f32[..., L] on the SimNorm simplices (spec 1.4)."""
    return normed_mlp_apply(params["encoder"], _cat(obs, e),
                            last_act=lambda x: simnorm(x, cfg.simnorm_dim))


def next_latent(params: Params, z: jnp.ndarray, a: jnp.ndarray, cfg: TDMPC2Config,
                e: jnp.ndarray | None = None) -> jnp.ndarray:
    """z' = d([z, e, a]): f32[..., L], f32[..., A] -> f32[..., L] (spec 1.5)."""
    return normed_mlp_apply(params["dynamics"], _cat(z, e, a),
                            last_act=lambda x: simnorm(x, cfg.simnorm_dim))


def reward_logits(params: Params, z: jnp.ndarray, a: jnp.ndarray, cfg: TDMPC2Config,
                  e: jnp.ndarray | None = None) -> jnp.ndarray:
    """Reward logits f32[..., K] of R([z, e, a]) (spec 1.6); decode with `twohot(cfg)`."""
    return normed_mlp_apply(params["reward"], _cat(z, e, a))


class DynRewLayer0(NamedTuple):
    """The first Linear layers of dynamics and reward side by side (both read [z, e, a]).

    kernel_z f32[L, 2M], kernel_e f32[T, 2M] (T = task_dim, 0 single task),
    kernel_a f32[A, 2M], kernel_za f32[L+A, 2M] (= [kernel_z; kernel_a], for
    inputs [z, a]), bias f32[2M]; columns :M are the dynamics', M: the
    reward's. Built once per decision by `dyn_rew_layer0` (hoisted out of the
    MPPI loop) so that every rollout step runs one matmul for both heads, and
    the rows of shared inputs (the start latent, e) are applied once instead
    of once per sample.
    """

    kernel_z: jnp.ndarray
    kernel_e: jnp.ndarray
    kernel_a: jnp.ndarray
    kernel_za: jnp.ndarray
    bias: jnp.ndarray


def dyn_rew_layer0(params: Params, cfg: TDMPC2Config) -> DynRewLayer0:
    """`DynRewLayer0` of params (concatenated dynamics/reward first kernels and biases)."""
    c = cfg.resolved()
    L, T = c.latent_dim, c.task_dim
    k = jnp.concatenate([params["dynamics"]["layer0"]["kernel"],
                         params["reward"]["layer0"]["kernel"]], axis=-1)
    b = jnp.concatenate([params["dynamics"]["layer0"]["bias"],
                         params["reward"]["layer0"]["bias"]], axis=-1)
    kz, ka = k[:L], k[L + T:]
    return DynRewLayer0(kz, k[L:L + T], ka, jnp.concatenate([kz, ka], axis=0), b)


def dyn_rew_from_layer0(params: Params, h0: jnp.ndarray, cfg: TDMPC2Config
                        ) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(next latent f32[..., L], reward logits f32[..., K]) from the joint first-layer
    output h0 f32[..., 2M] = [z, e, a] @ [W_dyn | W_rew] + [b_dyn | b_rew].

    Equal (up to float rounding of the first matmul's split) to
    (`next_latent`(z, a), `reward_logits`(z, a)).
    """
    M = params["dynamics"]["layer0"]["kernel"].shape[-1]
    z_next = normed_mlp_apply_from(params["dynamics"], h0[..., :M],
                                   last_act=lambda x: simnorm(x, cfg.simnorm_dim))
    r = normed_mlp_apply_from(params["reward"], h0[..., M:])
    return z_next, r


def _q_member(p, x, mask, cfg):
    return normed_mlp_apply(p, x, dropout_rate=cfg.dropout, dropout_mask=mask)


def _q_member_split(p, x_ze, a, mask, cfg):
    # [z, e] @ W[:L+T] + a @ W[L+T:]: the same first layer, but reverse mode
    # only forms the action rows' input gradient when [z, e] is a constant.
    k = p["layer0"]["kernel"]
    h0 = (x_ze @ k[:x_ze.shape[-1]] + a @ k[x_ze.shape[-1]:]) + p["layer0"]["bias"]
    return normed_mlp_apply_from(p, h0, dropout_rate=cfg.dropout, dropout_mask=mask)


def _member_seed(dropout_key: jax.Array, member: jnp.ndarray | int) -> jax.Array:
    """u32[4] rbg key data of member `member`: bits of fold_in(dropout_key, member)."""
    return jax.random.bits(jax.random.fold_in(dropout_key, member), (4,), jnp.uint32)


def q_dropout_mask(dropout_key: jax.Array, member: jnp.ndarray | int, shape: tuple,
                   cfg: TDMPC2Config) -> jnp.ndarray:
    """Keep-mask bool[*shape, mlp_dim] of Q member `member` for one Q pass.

    Bernoulli(1 - cfg.dropout) from the "rbg" key (XLA's Philox RngBitGenerator)
    seeded from fold_in(dropout_key, member): threefry bits for the ~4M
    mask entries of one update cost more than the matmuls on CPU. The bits
    are computed by `wmx.nn.rbg_bits.rbg_bernoulli`, identical to
    `jax.random.bernoulli` on that key on the CPU and the GPU at about half its CPU
    time, and the same bits on a TPU (whose own RngBitGenerator is not Philox; there
    in `rbg_bernoulli`'s "planar_matmul" layout, the same mask).
    """
    c = cfg.resolved()
    return rbg_bernoulli(_member_seed(dropout_key, member), 1.0 - c.dropout,
                         (*shape, c.mlp_dim))


def q_dropout_masks(dropout_key: jax.Array, members: Sequence[int | jax.Array], shape: tuple,
                    cfg: TDMPC2Config) -> jnp.ndarray:
    """bool[len(members), *shape, mlp_dim]: `q_dropout_mask` of each member, in order.

    The members' keys share one `rbg_bernoulli` loop (one loop's overhead per Q pass,
    docs/performance.md "Rows"). Raises ValueError when `members` is empty.
    """
    if len(members) == 0:
        raise ValueError("q_dropout_masks needs at least one Q member index")
    c = cfg.resolved()
    seeds = jnp.stack([_member_seed(dropout_key, m) for m in members])
    return rbg_bernoulli(seeds, 1.0 - c.dropout, (*shape, c.mlp_dim))


def _run_members(q_params, members, x, dropout_key, cfg, a=None):
    """Members' logits; x = [z, e, a], or x = [z, e] and `a` apart (split first layer)."""
    if a is None:
        run = lambda p, mk: _q_member(p, x, mk, cfg)  # noqa: E731
        lead = x.shape[:-1]
    else:
        lead = jnp.broadcast_shapes(x.shape[:-1], a.shape[:-1])
        run = lambda p, mk: _q_member_split(p, x, a, mk, cfg)  # noqa: E731
    if dropout_key is None or cfg.dropout == 0.0:
        return jax.vmap(lambda p: run(p, None))(q_params)
    masks = q_dropout_masks(dropout_key, members, lead, cfg)
    return jax.vmap(run)(q_params, masks)


def q_logits(q_params: Params, z: jnp.ndarray, a: jnp.ndarray, cfg: TDMPC2Config,
             dropout_key: jax.Array | None = None,
             e: jnp.ndarray | None = None) -> jnp.ndarray:
    """All members' Q logits f32[Nq, ..., K] of Q([z, e, a]) (spec 1.10).

    `q_params` is params["qs"] or params["target_qs"]. dropout_key None:
    deterministic; with a key, member k gets its own inverted-dropout mask
    `q_dropout_mask(dropout_key, k, ...)` (p = cfg.dropout) after its first
    Linear, before the LayerNorm.
    """
    x = _cat(z, e, a)
    nq = jax.tree.leaves(q_params)[0].shape[0]
    return _run_members(q_params, list(range(nq)), x, dropout_key, cfg)


def q_pair_values(q_params: Params, pair: jnp.ndarray, z: jnp.ndarray, a: jnp.ndarray,
                  cfg: TDMPC2Config, dropout_key: jax.Array | None = None,
                  e: jnp.ndarray | None = None, split_input: bool = False) -> jnp.ndarray:
    """Decoded values f32[2, ...] of the two members `pair` (i32[2]).

    Runs only those two members (the reference evaluates all Nq and indexes;
    same values). Member k's dropout mask is the one `q_logits` would use.
    `split_input`: the first layer as [z, e] @ W_ze + a @ W_a (same function up
    to float rounding) so that, when [z, e] is a constant of a gradient (the
    policy loss), reverse mode forms only the action rows of the input
    gradient instead of all L + T + A. Reduce with `wmx.nn.ensemble.reduce_pair`.
    """
    sub = jax.tree.map(lambda leaf: leaf[pair], q_params)
    if split_input:
        logits = _run_members(sub, [pair[0], pair[1]], _cat(z, e), dropout_key, cfg, a=a)
    else:
        logits = _run_members(sub, [pair[0], pair[1]], _cat(z, e, a), dropout_key, cfg)
    return twohot(cfg).decode(logits)


def pi_forward(params: Params, z: jnp.ndarray, eps: jnp.ndarray, cfg: TDMPC2Config,
               e: jnp.ndarray | None = None,
               mask: jnp.ndarray | None = None) -> PolicyOut:
    """Policy prior at latents z f32[..., L] with noise eps f32[..., A] (spec 1.8-1.9, PE).

    mu, raw = split(pi([z, e])); log_std = -10 + 6 (tanh(raw) + 1); with a
    mask (f32[..., A] of 0/1, valid dims first) mu, log_std and eps are
    multiplied by it and n = mask.sum(-1) (else n = A); u = mu + eps exp(log_std);
    tanh is `wmx.nn.tanh_gaussian.squash` (1-ulp accurate near +-1, like torch's);
    log_pi = n (sum(-eps^2/2 - log_std) - ln(2pi)/2) - sum log(relu(1 - tanh(u)^2) + 1e-6).
    """
    out = normed_mlp_apply(params["pi"], _cat(z, e))
    A = cfg.action_dim
    mu, raw = out[..., :A], out[..., A:]
    log_std = bound_log_std(raw, cfg.log_std_min, cfg.log_std_max)
    if mask is not None:
        mu, log_std, eps = mu * mask, log_std * mask, eps * mask
        n = jnp.sum(mask, axis=-1, keepdims=True)
    else:
        n = float(A)
    action = squash(mu + eps * jnp.exp(log_std))
    log_pi = pe_log_prob(eps, log_std, action, n)
    return PolicyOut(squash(mu), action, log_pi, log_std)


# ---- reference state dicts ------------------------------------------------------
_REF_MODULES = {"encoder": "_encoder.state", "dynamics": "_dynamics", "reward": "_reward",
                "pi": "_pi"}


def from_reference_state_dict(sd: dict, cfg: TDMPC2Config) -> Params:
    """Params from a reference (5f6fade) torch state dict of numpy arrays.

    Names as in fixtures/tdmpc2/README.md: `_encoder.state.{i}.{weight,bias,
    ln.weight,ln.bias}`, `_dynamics.{i}.*`, `_reward.{i}.*`, `_pi.{i}.*` (weights
    (out, in), transposed here), `_Qs.params.{0..9}` and `_target_Qs.params.{0..9}`
    (stacked members: W1, b1, LN1 w, LN1 b, W2, b2, LN2 w, LN2 b, W3, b3);
    multi-task configs also read `_task_emb.weight` (n_tasks, task_dim).
    Extra keys (e.g. a "model." prefix is not stripped) are ignored; missing
    ones raise KeyError naming the key; shapes are checked against `cfg`.
    """
    ref = jax.eval_shape(lambda: init_params(jax.random.key(0), cfg))
    params: Params = {}
    for mod, prefix in _REF_MODULES.items():
        params[mod] = {}
        for lname, lshape in ref[mod].items():
            i = int(lname[len("layer"):])
            layer = {"kernel": np.asarray(sd[f"{prefix}.{i}.weight"]).T,
                     "bias": np.asarray(sd[f"{prefix}.{i}.bias"])}
            if "ln_scale" in lshape:
                layer["ln_scale"] = np.asarray(sd[f"{prefix}.{i}.ln.weight"])
                layer["ln_bias"] = np.asarray(sd[f"{prefix}.{i}.ln.bias"])
            params[mod][lname] = layer
    if "task_emb" in ref:
        params["task_emb"] = np.asarray(sd["_task_emb.weight"])
    for mod, prefix in (("qs", "_Qs.params"), ("target_qs", "_target_Qs.params")):
        g = lambda j: np.asarray(sd[f"{prefix}.{j}"])  # noqa: E731
        params[mod] = {
            "layer0": {"kernel": np.swapaxes(g(0), 1, 2), "bias": g(1), "ln_scale": g(2),
                       "ln_bias": g(3)},
            "layer1": {"kernel": np.swapaxes(g(4), 1, 2), "bias": g(5), "ln_scale": g(6),
                       "ln_bias": g(7)},
            "layer2": {"kernel": np.swapaxes(g(8), 1, 2), "bias": g(9)},
        }

    def check(path, want, got):
        if tuple(want.shape) != tuple(got.shape):
            raise ValueError(f"reference tensor for {jax.tree_util.keystr(path)} has shape "
                             f"{got.shape}, the config expects {want.shape}")
        return jnp.asarray(got, jnp.float32)

    return jax.tree_util.tree_map_with_path(check, ref, params)


def to_reference_state_dict(params: Params) -> dict[str, np.ndarray]:
    """Inverse of `from_reference_state_dict` (numpy float32, torch layout)."""
    sd: dict[str, np.ndarray] = {}
    for mod, prefix in _REF_MODULES.items():
        for lname, layer in params[mod].items():
            i = int(lname[len("layer"):])
            sd[f"{prefix}.{i}.weight"] = np.asarray(layer["kernel"]).T
            sd[f"{prefix}.{i}.bias"] = np.asarray(layer["bias"])
            if "ln_scale" in layer:
                sd[f"{prefix}.{i}.ln.weight"] = np.asarray(layer["ln_scale"])
                sd[f"{prefix}.{i}.ln.bias"] = np.asarray(layer["ln_bias"])
    if "task_emb" in params:
        sd["_task_emb.weight"] = np.asarray(params["task_emb"])
    for mod, prefix in (("qs", "_Qs.params"), ("target_qs", "_target_Qs.params")):
        if mod not in params:
            continue
        q = params[mod]
        seq = [np.swapaxes(np.asarray(q["layer0"]["kernel"]), 1, 2), q["layer0"]["bias"],
               q["layer0"]["ln_scale"], q["layer0"]["ln_bias"],
               np.swapaxes(np.asarray(q["layer1"]["kernel"]), 1, 2), q["layer1"]["bias"],
               q["layer1"]["ln_scale"], q["layer1"]["ln_bias"],
               np.swapaxes(np.asarray(q["layer2"]["kernel"]), 1, 2), q["layer2"]["bias"]]
        for j, x in enumerate(seq):
            sd[f"{prefix}.{j}"] = np.asarray(x)
    return sd
