"""The arithmetic of `model_bias.py`: the real and imagined H-step reward sums aligned, the
reward head's, the decoder's and the reward ensemble's fields, and the run's bias summary.
NumPy only (the test suite runs it without a trained run).
"""
from __future__ import annotations

import numpy as np

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


