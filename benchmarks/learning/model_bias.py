"""Does a DreamerV3 world model over-predict what its own policy earns? Measured on the real env.

For a single-task DreamerV3 run (online, or offline on a one-task dataset) at its newest
checkpoint: the policy plays ``--episodes`` real episodes (sampled actions, fresh resets,
as ``evaluate`` does; seed ``--seed-index`` of the run). At every agent step t the
policy's posterior state s_t (after observing obs_t) is the start of one imagined
rollout of ``--horizon`` H steps with the same policy (the actor-critic's imagination,
dreamerv3_spec 3.1-3.3, one draw of its noise), and the model's predicted rewards
r̂_1..r̂_H (the reward head's two-hot mean at each imagined state, 3.5) are set beside
the rewards the env paid over the next H steps of the real episode, r_{t+1}..r_{t+H}
(steps past the episode's end are left out of both). Both follow the same policy, so
over many starts the mean of (Σ r̂ − Σ r) is the model's bias about its policy's
H-step reward: positive when it is optimistic. The reward head on the real posterior
states (r̂(s_t) against r_t) separates the reward head's error on-policy from the
dynamics' (open-loop imagination) error. The decoder on the same posteriors (its
symexp'd reconstruction against the obs seen) says whether the latent state still knows
where the system is on the rows where the reward head is wrong ("false successes": the
env paid 0, the head predicted at least half the largest per-step reward paid); on the
reacher tasks also as the finger-to-target distance, real and decoded. A run trained with
a reward ensemble (``offline_ensemble``, deviation W-D11) also gets the heads' disagreement
on the policy's and the imagined states and the bias of the penalised reward
(``ensemble``); every run records its offline terms (``offline_terms``).

    python benchmarks/learning/model_bias.py --run H/runs/<run> [--run H/runs/<run2>] \\
        --episodes 16 --horizon 15 --out benchmarks/results/dreamerv3_model_bias.json

With ``--held-short M,...`` (reacher tasks) two controlled readings are added: scripted
episodes aimed M short of the target read by the same model (does an arm held off the
target fool it?), and the policy's own episodes filtered again with its actions, zero
actions and the scripted controller's actions as the RSSM's action input (do the
observations or the actions mislead it?).

Writes the JSON and a plot beside it (``.png``: predicted and real H-step reward over
the episode per run; with a distance, the decoded distance against the real one; with
``--held-short``, the reward head by action input). Refuses a multi-task run (its task
inputs are not wired here) and a TD-MPC2 run. The test suite runs the arithmetic, the
controller and the plot, not the rollouts (they need a trained run).
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))      # scripted_reacher beside
ROLLOUT_TAG = 0xB1A5
"""fold_in tag of this diagnostic's key stream (not an evaluation's or a trainer's)."""


def horizon_sums(x: np.ndarray, H: int) -> tuple[np.ndarray, np.ndarray]:
    """(sums f32[E, T], counts i32[T]): per start t the sum of x[:, t : t+H] (x f32[E, T]),
    cut at the end of the episode; counts[t] is how many steps were summed."""
    E, T = x.shape
    c = np.concatenate([np.zeros((E, 1)), np.cumsum(x, axis=1)], axis=1)   # c[:, k] = sum x[:, :k]
    end = np.minimum(np.arange(T) + H, T)
    return c[:, end] - c[:, np.arange(T)], (end - np.arange(T)).astype(np.int32)


def real_future(reward_after: np.ndarray, H: int) -> tuple[np.ndarray, np.ndarray]:
    """Σ_{h=1..H} r_{t+h} per start t and how many steps it has, from reward_after
    f32[E, T] (reward_after[:, t]: the env's reward for the action at step t, i.e. the
    reward of arriving at step t+1; DreamerV3's reward[t+1])."""
    return horizon_sums(reward_after, H)


def aligned(r_img: np.ndarray, reward_after: np.ndarray, r_now: np.ndarray):
    """Line the model's rewards up with the env's.

    Args:
      r_img: f32[E, T, H]: from the posterior of step t, the imagined reward of step h+1
        (the state after h+1 imagined actions, the first being the policy's at t).
      reward_after: f32[E, T]: the env's reward for the action at step t.
      r_now: f32[E, T]: the reward head on the posterior of step t (the reward of arriving
        at step t).
    Returns:
      (pred f32[E, T]: Σ_h r_img[:, t, h] over the h the episode has left, real f32[E, T]:
      Σ reward_after[:, t : t+H], counts i32[T]: the steps in each sum, head f32[E, T-1]:
      r_now[:, 1:], paid f32[E, T-1]: reward_after[:, :-1], the reward of arriving at step
      t for t >= 1).
    """
    H = r_img.shape[-1]
    real, counts = real_future(reward_after, H)
    mask = np.arange(H)[None, :] < counts[:, None]                    # [T, H]
    return ((r_img * mask[None]).sum(-1), real, counts, r_now[:, 1:], reward_after[:, :-1])


def _mean_where(x: np.ndarray, where: np.ndarray) -> float | None:
    return float(x[where].mean()) if where.any() else None


def reward_head_fields(pred: np.ndarray, real: np.ndarray) -> dict:
    """The reward head's predictions ``pred`` beside the rewards ``real`` of the same rows
    (any shape): means, bias, and the mean prediction where the env paid nothing and where
    it paid (is the error in the head's reading of the state, or only in the dynamics?)."""
    paid = real > 1e-6
    return {"pred_mean": float(pred.mean()), "real_mean": float(real.mean()),
            "bias_mean": float((pred - real).mean()),
            "abs_error_mean": float(np.abs(pred - real).mean()),
            "pred_mean_where_env_paid_0": _mean_where(pred, ~paid),
            "pred_mean_where_env_paid": _mean_where(pred, paid),
            "real_mean_where_env_paid": _mean_where(real, paid),
            "rows_env_paid_0": int((~paid).sum()), "rows": int(real.size)}


DISTANCE_DIMS = {"reacher-easy": (2, 4), "reacher-hard": (2, 4)}
"""Obs dims of a task's finger-to-target vector (Playground's reacher obs: qpos 2,
finger_to_target 2, qvel 2), whose norm the reward thresholds."""


def false_successes(head: np.ndarray, paid: np.ndarray) -> np.ndarray:
    """bool[...]: rows where the env paid nothing (``paid`` <= 1e-6) and the reward head
    ``head`` (same shape) predicted at least half the largest reward ``paid`` holds (no
    row when the env never paid)."""
    top = float(paid.max()) if paid.size else 0.0
    return (paid <= 1e-6) & (head >= 0.5 * top) if top > 1e-6 else np.zeros(paid.shape, bool)


def _dist_fields(d: np.ndarray) -> dict:
    return ({"mean": float(d.mean()), "p10": float(np.quantile(d, 0.1)),
             "median": float(np.median(d)), "p90": float(np.quantile(d, 0.9))}
            if d.size else None)


DISTANCE_EDGES = np.round(np.arange(0.0, 0.52, 0.02), 2)
"""Bins of the real finger-to-target distance for `binned_medians` (the finger reaches
0.24 from the centre, the targets lie within 0.2 of it: at most 0.44 apart)."""


def binned_medians(real: np.ndarray, decoded: np.ndarray,
                   edges: np.ndarray = DISTANCE_EDGES) -> dict:
    """Per bin [edges[i], edges[i+1]) of ``real`` (any shape), the median of ``decoded`` at
    the same rows (None for an empty bin) and the row count."""
    real, decoded = real.ravel(), decoded.ravel()
    idx = np.digitize(real, edges) - 1
    med, n = [], []
    for i in range(len(edges) - 1):
        m = idx == i
        n.append(int(m.sum()))
        med.append(float(np.median(decoded[m])) if m.any() else None)
    return {"edges": [float(e) for e in edges], "decoded_median": med, "rows": n}


def decoder_fields(obs: np.ndarray, decoded: np.ndarray, head: np.ndarray,
                   paid: np.ndarray, dims: tuple[int, int] | None) -> dict:
    """The decoder's reading of the policy's states beside the obs seen.

    Args:
      obs, decoded: f32[E, T-1, O]: the obs of steps 1.. and the decoder's raw-space
        reconstruction from the posterior of the same step.
      head, paid: f32[E, T-1]: the reward head on those posteriors and the reward the env
        paid for arriving there (`aligned`'s last two).
      dims: (lo, hi) obs dims of the task's finger-to-target vector (`DISTANCE_DIMS`), or
        None.
    Returns:
      per-dim mean |decoded - obs| over all rows and over the false successes
      (`false_successes`), their count, and with ``dims`` the real and decoded distances
      (mean, p10, median, p90) where the env paid, on the false successes, on the other
      unpaid rows and on all rows, the decoded distance's median per bin of the real one
      (``distance_curve``, `binned_medians`) and the largest real distance the env paid at
      (``paid_distance_max``: the reward's radius, as far as the rows show it).
    """
    err = np.abs(decoded - obs)
    fs = false_successes(head, paid)
    out = {"abs_error_per_dim": err.reshape(-1, err.shape[-1]).mean(0).tolist(),
           "abs_error_per_dim_false_successes": (err[fs].mean(0).tolist() if fs.any()
                                                 else None),
           "false_success_rows": int(fs.sum()), "rows": int(fs.size)}
    if dims is not None:
        lo, hi = dims
        real_d = np.linalg.norm(obs[..., lo:hi], axis=-1)
        dec_d = np.linalg.norm(decoded[..., lo:hi], axis=-1)
        groups = {"env_paid": paid > 1e-6, "false_successes": fs,
                  "other_unpaid": (paid <= 1e-6) & ~fs, "all": np.ones(paid.shape, bool)}
        out["target_distance"] = {
            g: {"rows": int(m.sum()), "real": _dist_fields(real_d[m]),
                "decoded": _dist_fields(dec_d[m])} for g, m in groups.items()}
        out["distance_curve"] = binned_medians(real_d, dec_d)
        out["paid_distance_max"] = (float(real_d[paid > 1e-6].max()) if (paid > 1e-6).any()
                                    else None)
    return out


def ensemble_fields(std_img: np.ndarray, std_now: np.ndarray, r_img: np.ndarray,
                    reward_after: np.ndarray, r_now: np.ndarray, heads: int,
                    weight: float) -> dict:
    """The reward ensemble's readings of a run trained with one (deviation W-D11).

    Args:
      std_img: f32[E, T, H] the std over the heads' predictions at the imagined states of
        `aligned`'s r_img; std_now: f32[E, T] the same at the real posteriors.
      r_img, reward_after, r_now: as `aligned`.
      heads: K; weight: the run's offline_penalty_weight λ (0: trained, not applied).
    Returns:
      {heads, penalty_weight, std_imagined_mean, std_on_policy_mean, the posterior's std
      where the env paid and at the reward head's false successes (`false_successes`):
      does the disagreement single out the states the head is wrong on?, and the
      penalised model's H-step sum and bias (r̂ − λ std, what the actor's returns used;
      full horizons only, as `bias_summary`)}.
    """
    H = r_img.shape[-1]
    pen, real, counts, head, paid = aligned(r_img - weight * std_img, reward_after, r_now)
    full = counts == H
    s_now = std_now[:, 1:]
    return {"heads": int(heads), "penalty_weight": float(weight),
            "std_imagined_mean": float(std_img.mean()),
            "std_on_policy_mean": float(s_now.mean()),
            "std_on_policy_where_env_paid": _mean_where(s_now, paid > 1e-6),
            "std_on_policy_where_false_success": _mean_where(s_now,
                                                             false_successes(head, paid)),
            "penalised_pred_h_sum_mean": float(pen[:, full].mean()),
            "penalised_bias_mean": float((pen - real)[:, full].mean())}


def bias_summary(pred: np.ndarray, real: np.ndarray, counts: np.ndarray,
                 pred_now: np.ndarray, real_now: np.ndarray, H: int) -> dict:
    """The JSON entries of one run: pred/real f32[E, T] H-step sums (pred cut to the same
    steps as real: ``counts``), the starts with a full horizon only for the headline
    figures; pred_now/real_now f32[E, T] the reward head on the real posteriors and the
    rewards they predict."""
    full = counts == H
    p, r = pred[:, full], real[:, full]
    d = p - r
    return {"horizon": H, "starts": int(p.size),
            "pred_h_sum_mean": float(p.mean()), "real_h_sum_mean": float(r.mean()),
            "bias_mean": float(d.mean()),
            # over episodes (the starts of one episode are far from independent)
            "bias_stderr": (float(d.mean(1).std(ddof=1) / np.sqrt(d.shape[0]))
                            if d.shape[0] > 1 else None),
            "abs_error_mean": float(np.abs(d).mean()),
            "optimism_ratio": float(p.mean() / r.mean()) if r.mean() > 0 else None,
            "reward_head_on_policy": reward_head_fields(pred_now, real_now),
            "per_step": {"pred": pred.mean(0).tolist(), "real": real.mean(0).tolist()}}


def measure(run_dir: Path, episodes: int, H: int, seed_index: int,
            dump: Path | None = None, data_episodes: int = 0,
            held_offsets: list[float] | None = None, held_episodes: int = 8) -> dict:
    """Roll out, imagine and compare for one run (see the module doc); returns its entries.
    ``data_episodes``: for an offline run, also the reward head on the posteriors of that
    many of its dataset's episodes (filtered from the zero state at their first row, as
    the offline trainer's windows start), ``reward_head_on_data``: the same reading of
    states, on the data it was trained on. ``dump``: also save the arrays (obs f32[E, T, O]
    seen at each step, the action taken there, the decoder's reconstruction of it,
    reward_after, the imagined
    rewards f32[E, T, H], the reward head on the posteriors) as an .npz there,
    for task-specific analysis (e.g. the distance to the target where the model is wrong)."""
    import jax
    import jax.numpy as jnp

    from wmx.acting import policy_step
    from wmx.agents.dreamerv3 import outputs
    from wmx.agents.dreamerv3.ac_loss import imagine
    from wmx.agents.dreamerv3.actor_critic import draw_policy_noise
    from wmx.agents.dreamerv3.heads import decode, feat, reward_logits
    from wmx.agents.dreamerv3.offline import ensemble_rewards
    from wmx.agents.dreamerv3.rssm import Feat, draw_latent_noise
    from wmx.evaluate.runs import eval_env, open_run, restore_policy
    from wmx.nn.symlog import symexp
    info = open_run(run_dir)
    if info.rc.agent != "dreamerv3":
        raise SystemExit(f"--run {run_dir}: a {info.rc.agent} run; this measures DreamerV3's "
                         "world model")
    agent, cfg = info.rc.agent_module, info.rc.agent_config
    c = cfg.resolved()
    if c.multitask:
        raise SystemExit(f"--run {run_dir}: a multi-task model; give a single-task run (online, "
                         "or offline on a one-task dataset)")
    if not 0 <= seed_index < len(info.seeds):
        raise SystemExit(f"--seed-index {seed_index}: the run has seeds {list(info.seeds)}")
    task = info.tasks[0]
    env = eval_env(info, task)
    if held_offsets and task not in DISTANCE_DIMS:
        raise SystemExit(f"--held-short: {task} has no finger-to-target distance (the reacher "
                         "tasks have); drop the flag")
    if H > env.T:
        raise SystemExit(f"--horizon {H} is longer than {task}'s episodes (T = {env.T}); "
                         "give at most T")
    params_all, _ = restore_policy(info)
    params = jax.tree_util.tree_map(lambda x: x[seed_index], params_all)
    E, T, A = episodes, env.T, env.action_dim
    key = jax.random.fold_in(jax.random.PRNGKey(info.seeds[seed_index]), ROLLOUT_TAG)
    k_reset, k_act, k_imag = jax.random.split(key, 3)
    spec = outputs.twohot(c)

    @jax.jit
    def rollout(params):
        states = jax.vmap(env.reset)(jax.random.split(k_reset, E))
        carry = agent.init_policy(cfg, E)

        def step(cs, t):
            states, carry = cs
            obs = states.obs
            carry, action, _ = policy_step(agent, params, cfg, carry, states.obs,
                                           jnp.full((E,), t == 0), jax.random.fold_in(k_act, t),
                                           A, eval_mode=True)
            states = jax.vmap(env.step)(states, action)
            return (states, carry), (obs, carry.deter, carry.stoch, states.reward, action)

        _, outs = jax.lax.scan(step, (states, carry), jnp.arange(T))
        return tuple(jnp.moveaxis(x, 0, 1) for x in outs)

    @jax.jit
    def predict(params, deter, stoch):        # [E, T, ...] posteriors
        n = E * T
        kk = jax.random.split(k_imag, 3)
        post = Feat(deter, stoch, jnp.zeros_like(stoch))
        imag = imagine(params, c, post, draw_policy_noise(kk[0], c, (n,)),
                       draw_latent_noise(kk[1], c, (n, H)), draw_policy_noise(kk[2], c, (n, H)))
        r_img = outputs.twohot_mean(reward_logits(params["rew"], c, imag.feat[:, 1:]), spec)
        r_now = outputs.twohot_mean(reward_logits(params["rew"], c, feat(deter, stoch)), spec)
        decoded = symexp(decode(params["dec"], c, deter, stoch))
        ens = None
        if c.offline_ensemble:                 # the run's reward ensemble (W-D11)
            ens = (jnp.std(ensemble_rewards(params["rew_ens"], c, imag.feat[:, 1:]),
                           0).reshape(E, T, H),
                   jnp.std(ensemble_rewards(params["rew_ens"], c, feat(deter, stoch)), 0))
        return r_img.reshape(E, T, H), r_now, decoded, ens

    t0 = time.perf_counter()
    obs, deter, stoch, rew, actions = rollout(params)
    r_img, r_now, decoded, ens = jax.device_get(predict(params, deter, stoch))
    rew = np.asarray(jax.device_get(rew), np.float64)
    obs = np.asarray(jax.device_get(obs), np.float64)
    pred, real, counts, head, paid = aligned(np.asarray(r_img, np.float64), rew,
                                             np.asarray(r_now, np.float64))
    out = bias_summary(pred, real, counts, head, paid, H)
    out["decoder_on_policy"] = decoder_fields(obs[:, 1:], np.asarray(decoded, np.float64)[:, 1:],
                                              head, paid, DISTANCE_DIMS.get(task))
    if ens is not None:
        out["ensemble"] = ensemble_fields(np.asarray(ens[0], np.float64),
                                          np.asarray(ens[1], np.float64),
                                          np.asarray(r_img, np.float64), rew,
                                          np.asarray(r_now, np.float64), c.offline_ensemble,
                                          c.offline_penalty_weight)
    if data_episodes and info.kind == "offline":
        out["reward_head_on_data"] = _head_on_data(info, params, c, data_episodes,
                                                   env.obs_dim, A, task)
    if held_offsets:
        out["held_short"] = held_short(info, params, c, task, held_offsets, held_episodes)
        out["refiltered"] = refiltered(params, c, task, obs, np.asarray(jax.device_get(actions)),
                                       rew)
    if dump is not None:
        np.savez_compressed(dump, obs=obs, action=np.asarray(jax.device_get(actions)),
                            reward_after=rew, decoded_obs=np.asarray(decoded),
                            imagined_reward=np.asarray(r_img), reward_head=np.asarray(r_now))
    out.update({"run_dir": str(info.run_dir), "kind": info.kind, "task": task,
                "checkpoint_step": info.step, "updates": info.updates,
                "seed": info.seeds[seed_index], "episodes": E, "episode_length": T,
                "episode_return_mean": float(rew.sum(1).mean()),
                "episode_returns": rew.sum(1).round(2).tolist(),
                "widths": {k: getattr(c, k) for k in ("units", "hidden", "deter", "classes")},
                "offline_terms": {k: getattr(c, k) for k in ("offline_bc_weight",
                                                             "offline_ensemble",
                                                             "offline_penalty_weight")},
                "params": int(agent.param_counts(cfg)["total"]),
                "wall_s": round(time.perf_counter() - t0, 1)})
    return out


def _filter_heads(params, c, obs, act, first):
    """(reward head f32[E, K], decoder's raw-space reconstruction f32[E, K, O]) on the
    posteriors of obs-aligned rows filtered from the zero state (this diagnostic's latent
    noise). ``c`` (the resolved config) is static: `read_rows` compiles once per shape."""
    import jax

    from wmx.agents.dreamerv3 import outputs
    from wmx.agents.dreamerv3.heads import decode, encode, feat, reward_logits
    from wmx.agents.dreamerv3.rssm import draw_latent_noise, initial_carry, observe
    from wmx.nn.symlog import symexp
    carry = initial_carry(c, (obs.shape[0],))
    _, post = observe(params["rssm"], c, carry, encode(params["enc"], c, obs), act, first,
                      draw_latent_noise(jax.random.PRNGKey(ROLLOUT_TAG), c, obs.shape[:2]))
    return (outputs.twohot_mean(reward_logits(params["rew"], c, feat(post.deter, post.stoch)),
                                outputs.twohot(c)),
            symexp(decode(params["dec"], c, post.deter, post.stoch)))


@functools.cache
def _filter_heads_jit():
    """`_filter_heads` jitted with its config static, made once (on first use: importing
    this module needs no jax)."""
    import jax
    return jax.jit(_filter_heads, static_argnums=1)


def read_rows(params, c, obs: np.ndarray, act: np.ndarray, first: np.ndarray,
              reward: np.ndarray, task: str) -> dict:
    """The reward head and the decoder on the posteriors of obs-aligned episodes (rows k:
    obs_k f32[E, K, O], the action chosen there f32[E, K, A], is_first bool[E, K], the
    reward of entering obs_k f32[E, K]), filtered from the zero state as the offline
    windows start (`_filter_heads`): `reward_head_fields` and ``decoder``
    (`decoder_fields`) of rows 1.., and the episodes' mean return."""
    import jax
    first = np.array(first, bool)
    first[:, 0] = True
    pred, decoded = (np.asarray(x, np.float64) for x in jax.device_get(_filter_heads_jit()(
        params, c, np.asarray(obs, np.float32), np.asarray(act, np.float32), first)))
    paid = np.asarray(reward, np.float64)[:, 1:]
    return {**reward_head_fields(pred[:, 1:], paid),
            "decoder": decoder_fields(np.asarray(obs, np.float64)[:, 1:], decoded[:, 1:],
                                      pred[:, 1:], paid, DISTANCE_DIMS.get(task)),
            "episodes": int(obs.shape[0]),
            "episode_return_mean": float(np.asarray(reward, np.float64).sum(1).mean())}


def _head_on_data(info, params, c, n: int, O: int, A: int, task: str) -> dict:
    """`read_rows` on ``n`` episodes (drawn with numpy seed 0) of the offline run's
    dataset."""
    from wmx.datasets.readers import load_numpy, open_dataset
    arr = load_numpy(open_dataset(info.config["dataset"], home=info.run_dir.parent.parent))
    idx = np.random.default_rng(0).choice(len(arr["reward"]), min(n, len(arr["reward"])),
                                          replace=False)
    return read_rows(params, c, arr["obs"][idx][..., :O], arr["action"][idx][..., :A],
                     arr["is_first"][idx], arr["reward"][idx], task)


def held_short_action(obs, offset: float, kp: float = 60.0, kd: float = 0.6):
    """The scripted reacher controller (`scripted_reacher.jacobian_policy`) aimed at the
    point ``offset`` short of the target on the finger's side: finger-to-target d becomes
    d·(1 - offset/|d|) (f32[6] obs -> f32[2] action in [-1, 1]). The controller is a
    rough one (its episodes settle 0.01-0.17 from where it aims), so readings of its
    episodes go by the real distances, not by ``offset``."""
    import jax.numpy as jnp
    from scripted_reacher import jacobian_policy
    d = obs[2:4]
    aim = d * (1.0 - offset / jnp.maximum(jnp.linalg.norm(d), 1e-6))
    return jacobian_policy(obs.at[2:4].set(aim), kp, kd)


def obs_aligned_reward(reward_after: np.ndarray) -> np.ndarray:
    """f32[E, T]: the reward of entering obs_t (0 at t = 0) from reward_after f32[E, T] (the
    env's reward for the action at step t), the dataset rows' layout."""
    return np.concatenate([np.zeros_like(reward_after[:, :1]), reward_after[:, :-1]], 1)


def refiltered(params, c, task: str, obs: np.ndarray, actions: np.ndarray,
               reward_after: np.ndarray) -> dict:
    """The policy's own episodes (obs f32[E, T, O] before each step, its actions f32[E, T, A],
    reward_after f32[E, T]) filtered again from the zero state as obs-aligned rows
    (`read_rows`), with the policy's actions, with zero actions and with the scripted
    controller's actions at the same observations (`held_short_action`, offset 0) as the
    RSSM's action input: do the observations or the actions put the latent at the
    target?"""
    import jax
    reward = obs_aligned_reward(reward_after)
    scripted = np.asarray(jax.device_get(jax.jit(jax.vmap(jax.vmap(
        lambda o: held_short_action(o, 0.0))))(obs.astype(np.float32))))
    first = np.zeros(reward.shape, bool)
    return {name: read_rows(params, c, obs, a, first, reward, task)
            for name, a in (("policy_actions", actions), ("zero_actions", np.zeros_like(actions)),
                            ("scripted_actions", scripted))}


def held_short(info, params, c, task: str, offsets: list[float], episodes: int) -> dict:
    """Per offset (m): ``episodes`` scripted episodes aimed that far short of the target
    (`held_short_action`, fresh resets with this diagnostic's key), read by
    `read_rows` as obs-aligned rows (and ``all``: every offset's episodes together): does the
    model place an arm it never saw held short?"""
    import jax
    import jax.numpy as jnp

    from wmx.evaluate.runs import eval_env
    env = eval_env(info, task)
    T = env.T

    def episode(key, offset):
        s0 = env.reset(key)

        def step(s, _):
            a = held_short_action(s.obs, offset)
            s2 = env.step(s, a)
            return s2, (s.obs, a, s2.reward)
        last, (obs, act, rew) = jax.lax.scan(step, s0, None, length=T)
        obs = jnp.concatenate([obs, last.obs[None]])                 # rows 0..T
        act = jnp.concatenate([act, jnp.zeros_like(act[:1])])       # 0 on the last row
        rew = jnp.concatenate([jnp.zeros((1,)), rew])               # 0 on the reset row
        return obs, act, rew

    run = jax.jit(jax.vmap(episode, in_axes=(0, None)))
    keys = jax.random.split(jax.random.fold_in(jax.random.PRNGKey(0), ROLLOUT_TAG + 1),
                            episodes)
    out, rows = {}, []
    for off in offsets:
        obs, act, rew = (np.asarray(x) for x in jax.device_get(run(keys, off)))
        rows.append((obs, act, rew))
        out[f"{off:g}"] = read_rows(params, c, obs, act, np.zeros(rew.shape, bool), rew, task)
    obs, act, rew = (np.concatenate(x) for x in zip(*rows))
    out["all"] = read_rows(params, c, obs, act, np.zeros(rew.shape, bool), rew, task)
    return out


def plot(results: dict[str, dict], path: Path) -> None:
    """Predicted (dashed) and real (solid) H-step reward by episode step, one colour a run;
    when the runs' task has a finger-to-target distance, a second panel: the decoded
    distance against the real one (median per bin) on the policy's states (solid), the
    dataset's (dashed) and the scripted held-short episodes' (dotted), with the reward's
    radius as the rows show it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    curves = {label: (i, r) for i, (label, r) in enumerate(results.items())
              if "distance_curve" in r.get("decoder_on_policy", {})}    # colours as panel 1
    refilt = {label: (i, r["refiltered"]) for i, (label, r) in enumerate(results.items())
              if "refiltered" in r}
    n = 1 + bool(curves) + bool(refilt)
    fig, axes = plt.subplots(1, n, figsize=(7.5 + 5.5 * (n - 1), 4.0), squeeze=False)
    ax = axes[0, 0]
    if curves:
        _plot_distances(axes[0, 1], curves)
    if refilt:
        _plot_refiltered(axes[0, n - 1], refilt)
    for i, (label, r) in enumerate(results.items()):
        col = f"C{i}"
        ax.plot(r["per_step"]["real"], color=col, lw=1.5,
                label=f"{label}: real (return {r['episode_return_mean']:.0f})")
        ax.plot(r["per_step"]["pred"], color=col, lw=1.5, ls="--",
                label=f"{label}: model (bias {r['bias_mean']:+.2f})")
    ax.set_xlabel("agent step of the episode (start of the H-step window)")
    ax.set_ylabel(f"reward over the next {next(iter(results.values()))['horizon']} steps")
    ax.legend(fontsize=7)
    ax.set_title("DreamerV3: the model's H-step reward for its own policy vs the env's",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _plot_distances(ax, curves: dict[str, tuple[int, dict]]) -> None:
    """The decoder's finger-to-target distance against the real one, per run (label ->
    (colour index, the run's entries))."""
    top = 0.0
    for label, (i, r) in curves.items():
        held = r.get("held_short", {}).get("all", {})
        for d, ls, who in ((r.get("decoder_on_policy", {}), "-", "policy's states"),
                           (r.get("reward_head_on_data", {}).get("decoder", {}), "--",
                            "dataset's states"),
                           (held.get("decoder", {}), ":", "scripted, held short")):
            c = d.get("distance_curve")
            if not c:
                continue
            e = np.asarray(c["edges"])
            mid = (e[:-1] + e[1:]) / 2
            keep = [j for j, (m, n) in enumerate(zip(c["decoded_median"], c["rows"]))
                    if m is not None and n >= 20]
            ax.plot(mid[keep], [c["decoded_median"][j] for j in keep], color=f"C{i}", ls=ls,
                    marker=".", label=f"{label}: {who}")
            top = max(top, float(e[-1]))
        rad = r["decoder_on_policy"].get("paid_distance_max")
        if rad:
            ax.axvline(rad, color="grey", lw=0.8, ls=":")
            ax.axhline(rad, color="grey", lw=0.8, ls=":")
    ax.plot([0, top], [0, top], color="black", lw=0.8, label="decoded = real")
    ax.set_xlabel("real finger-to-target distance (bin centre; dotted: the reward's radius)")
    ax.set_ylabel("decoded distance (median, bins of 20+ rows)")
    ax.set_title("where the latent state puts the finger", fontsize=9)
    ax.legend(fontsize=7)


def _plot_refiltered(ax, refilt: dict[str, tuple[int, dict]]) -> None:
    """Bars: the reward head where the env paid 0 on the policy's episodes filtered with
    each action input (`refiltered`), one colour a run."""
    names = ("policy_actions", "zero_actions", "scripted_actions")
    width = 0.8 / len(refilt)
    for k, (label, (i, r)) in enumerate(refilt.items()):
        vals = [r[nm]["pred_mean_where_env_paid_0"] or 0.0 for nm in names]
        ax.bar(np.arange(len(names)) + k * width, vals, width, color=f"C{i}", label=label)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2,
                  [nm.replace("_", " ") for nm in names])
    ax.set_ylabel("reward head where the env paid 0 (per step)")
    ax.set_title("the policy's episodes filtered again: which action input", fontsize=9)
    ax.legend(fontsize=7)


def _offsets(text: str) -> list[float]:
    """``0,0.04,0.08`` -> [0.0, 0.04, 0.08] (argparse type: metres, each >= 0)."""
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give distances in metres, e.g. "
                                         "0,0.04,0.08") from None
    if not vals or not all(np.isfinite(v) and v >= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"{text!r}: give distances >= 0 m, e.g. 0,0.04,0.08")
    return vals


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def main(argv=None) -> int:
    from wmx.runs.cli_common import HelpFormatter
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=HelpFormatter)
    p.add_argument("--run", action="append", required=True, metavar="[LABEL=]RUN_DIR",
                   help="a single-task DreamerV3 run (repeatable; LABEL names it in the "
                        "JSON and plot, default the run's name)")
    p.add_argument("--episodes", type=int, default=16, help="real episodes per run")
    p.add_argument("--horizon", type=int, default=15,
                   help="imagined steps per start (the agent's imag_horizon is 15)")
    p.add_argument("--seed-index", type=int, default=0, help="which of the run's seeds")
    p.add_argument("--data-episodes", type=int, default=64,
                   help="offline runs: the reward head and the decoder on this many of the "
                        "dataset's episodes too (0: not)")
    p.add_argument("--held-short", type=_offsets, default=None, metavar="M[,M...]",
                   help="reacher tasks: also read the model on scripted episodes aimed these "
                        "distances (m) short of the target, e.g. 0,0.04,0.08,0.12,0.16 (the "
                        "reward's radius is about 0.06)")
    p.add_argument("--held-short-episodes", type=int, default=8,
                   help="scripted episodes per --held-short distance")
    p.add_argument("--dump", action="store_true",
                   help="also save each run's arrays as <out stem>_<label>.npz")
    p.add_argument("--out", default=str(REPO / "benchmarks/results/dreamerv3_model_bias.json"),
                   help="result JSON (the plot is written beside it, .png)")
    args = p.parse_args(argv)
    if args.episodes < 2 or args.horizon < 1:
        p.error("--episodes must be >= 2 and --horizon >= 1")
    if args.held_short_episodes < 1:
        p.error(f"--held-short-episodes must be >= 1, got {args.held_short_episodes}")
    runs = {}
    for item in args.run:
        label, sep, path = item.partition("=")
        path = path if sep else label
        label = label if sep else Path(path).name
        if label in runs:
            p.error(f"two runs labelled {label!r}: name them, --run LABEL=RUN_DIR")
        runs[label] = Path(path).expanduser().resolve()
    if args.held_short:                                   # before any run is measured
        from wmx.evaluate.runs import open_run
        for label, run_dir in runs.items():
            task = open_run(run_dir).tasks[0]
            if task not in DISTANCE_DIMS:
                p.error(f"--held-short: run {label}'s task {task} has no finger-to-target "
                        "distance (the reacher tasks have); drop the flag or that run")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    results = {}
    for label, run_dir in runs.items():
        print(f"{label}: {run_dir} ...", flush=True)
        dump = (Path(args.out).with_name(f"{Path(args.out).stem}_{label.replace(' ', '_')}.npz")
                if args.dump else None)
        results[label] = measure(run_dir, args.episodes, args.horizon, args.seed_index, dump,
                                 args.data_episodes, args.held_short, args.held_short_episodes)
        r = results[label]
        rh = r["reward_head_on_policy"]
        print(f"{label}: return {r['episode_return_mean']:.1f}; next {args.horizon} steps: "
              f"model {r['pred_h_sum_mean']:.2f}, env {r['real_h_sum_mean']:.2f}, bias "
              f"{r['bias_mean']:+.2f} ± {r['bias_stderr'] or 0:.2f}; reward head on the policy's "
              f"states: {rh['pred_mean']:.3f} for the env's {rh['real_mean']:.3f} per step, "
              f"{_fmt(rh['pred_mean_where_env_paid_0'])} where it paid 0 "
              f"({rh['rows_env_paid_0']}/{rh['rows']} rows)", flush=True)
        if "ensemble" in r:
            en = r["ensemble"]
            print(f"{label}: reward ensemble of {en['heads']} (λ {en['penalty_weight']:g}): "
                  f"std {en['std_on_policy_mean']:.3f} on the policy's states, "
                  f"{_fmt(en['std_on_policy_where_false_success'])} at false successes, "
                  f"{en['std_imagined_mean']:.3f} imagined; penalised {args.horizon}-step "
                  f"bias {en['penalised_bias_mean']:+.2f}", flush=True)
        dec = r["decoder_on_policy"]
        td = dec.get("target_distance", {}).get("false_successes")
        if td and td["real"]:
            print(f"{label}: {dec['false_success_rows']} false successes (env paid 0, head "
                  f"said >= half the top reward): finger-to-target distance real "
                  f"{td['real']['median']:.3f}, decoded {td['decoded']['median']:.3f} "
                  "(medians)", flush=True)
        if "reward_head_on_data" in r:
            rd = r["reward_head_on_data"]
            print(f"{label}: reward head on {rd['episodes']} dataset episodes: "
                  f"{rd['pred_mean']:.3f} for the data's {rd['real_mean']:.3f} per step, "
                  f"{_fmt(rd['pred_mean_where_env_paid_0'])} where it paid 0 "
                  f"({rd['rows_env_paid_0']}/{rd['rows']} rows)", flush=True)
            tu = rd["decoder"].get("target_distance", {}).get("other_unpaid")
            if tu and tu["real"]:
                print(f"{label}: on the dataset's other unpaid rows the finger-to-target "
                      f"distance is {tu['real']['median']:.3f}, decoded "
                      f"{tu['decoded']['median']:.3f} (medians)", flush=True)
        for name, h in r.get("refiltered", {}).items():
            fs = h["decoder"]["target_distance"]["false_successes"]
            print(f"{label}: the policy's episodes filtered again with {name.replace('_', ' ')}: "
                  f"reward head {_fmt(h['pred_mean_where_env_paid_0'])} where the env paid 0; "
                  f"{h['decoder']['false_success_rows']} false successes"
                  + (f", distance real {fs['real']['median']:.3f}, decoded "
                     f"{fs['decoded']['median']:.3f}" if fs["real"] else ""), flush=True)
        for off, h in r.get("held_short", {}).items():
            if off == "all":
                continue
            a = h["decoder"]["target_distance"]["all"]
            print(f"{label}: aimed {off} short of the target (scripted, {h['episodes']} "
                  f"episodes): distance real {a['real']['median']:.3f}, decoded "
                  f"{a['decoded']['median']:.3f} (medians); reward head {h['pred_mean']:.3f} "
                  f"for the env's {h['real_mean']:.3f} per step, "
                  f"{_fmt(h['pred_mean_where_env_paid_0'])} where it paid 0", flush=True)
    from check_run import portable
    doc = {"runs": results, "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "command": " ".join(sys.argv)}
    for run_dir in runs.values():                 # paths relative to each run's data root
        doc = portable(doc, run_dir)
    out.write_text(json.dumps(doc, indent=1))
    plot(results, out.with_suffix(".png"))
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
