"""The comparison of `env_compare.py`'s two halves: the CPU decomposition of the dynamics
difference, the wrist-limit split, the result's entries (`compare`) and the printed table.
"""
from __future__ import annotations

import numpy as np
from env_compare_common import (REPEAT, TARGET_RADIUS, WRIST_RANGE, cpu_rollout, ks_critical,
                                ks_two, max_abs_over_steps, paired_diff, polar,
                                returns_summary, sample_summary, tolerance)

def cpu_decomposition(req, pg_arr, dm_arr, dm_model: dict) -> dict:
    """CPU MuJoCo on Playground's model at Playground's settings, at them with dm_control's
    solver iterations, and at dm_control's settings: MJX vs MuJoCo, the solver iterations'
    own effect (the wrist limit is the only constraint), the settings' whole effect, and
    what is left against dm_control."""
    import copy

    import mujoco

    from wmx.envs.playground import make_env
    m_pg = make_env("reacher-easy").mj_model
    m_it, m_dm = copy.deepcopy(m_pg), copy.deepcopy(m_pg)
    for m in (m_it, m_dm):
        m.opt.iterations, m.opt.ls_iterations = dm_model["iterations"], dm_model["ls_iterations"]
    m_dm.opt.timestep = dm_model["timestep"]
    m_dm.opt.disableflags = sum(int(getattr(mujoco.mjtDisableBit, f))
                                for f in dm_model["disabled_flags"])
    args = (req["dyn_qpos"], req["dyn_qvel"], req["dyn_actions"])
    n_pg = int(round(0.02 / m_pg.opt.timestep))
    a_q, a_v = cpu_rollout(m_pg, *args, n_sub=n_pg)
    i_q, i_v = cpu_rollout(m_it, *args, n_sub=n_pg)
    b_q, b_v = cpu_rollout(m_dm, *args, n_sub=1)
    steps = (1, 5, 10, req["dyn_actions"].shape[1])
    pair = lambda q1, v1, q2, v2: {"qpos": max_abs_over_steps(q1, q2, steps),  # noqa: E731
                                   "qvel": max_abs_over_steps(v1, v2, steps)}
    return {
        "mjx_vs_cpu_at_playground_settings": pair(pg_arr["dyn_qpos"], pg_arr["dyn_qvel"], a_q, a_v),
        "cpu_playground_settings_vs_dm_solver_iterations": pair(a_q, a_v, i_q, i_v),
        "cpu_playground_settings_vs_cpu_dm_settings": pair(a_q, a_v, b_q, b_v),
        "cpu_dm_settings_vs_dm_control": pair(b_q, b_v, dm_arr["dyn_qpos"], dm_arr["dyn_qvel"]),
        "dm_settings_applied": {k: dm_model[k] for k in
                                ("timestep", "iterations", "ls_iterations", "disabled_flags")},
    }


def wrist_limit_split(req, pg_arr, dm_arr, deg: float = 155.0) -> dict:
    """Largest |qvel| difference (MJX vs dm_control, whole rollout) over the rollouts whose
    wrist comes within 160 − deg degrees of its limit in either env, and over the others."""
    wrist = np.abs(np.concatenate([req["dyn_qpos"][:, None, 1], pg_arr["dyn_qpos"][..., 1],
                                   dm_arr["dyn_qpos"][..., 1]], 1)).max(1)
    near = wrist > np.radians(deg)
    err = np.abs(pg_arr["dyn_qvel"] - dm_arr["dyn_qvel"]).max(axis=(1, 2))
    return {"threshold_deg": deg, "n_near_limit": int(near.sum()),
            "qvel_max_abs_diff_near_limit": float(err[near].max()) if near.any() else None,
            "qvel_max_abs_diff_others": float(err[~near].max()) if (~near).any() else None,
            "qvel_max_abs_in_rollouts": {"playground": float(np.abs(pg_arr["dyn_qvel"]).max()),
                                         "dm_control": float(np.abs(dm_arr["dyn_qvel"]).max())},
            "qvel_mean_abs_in_rollouts": {"playground": float(np.abs(pg_arr["dyn_qvel"]).mean()),
                                          "dm_control": float(np.abs(dm_arr["dyn_qvel"]).mean())}}


def compare(req, pg_meta, pg, dm_meta, dm, decomposition) -> dict:
    """The JSON record: both sides' values and the differences."""
    n = int(req["n_resets"])
    static_diff = sorted(k for k in pg_meta["model"] if pg_meta["model"][k] != dm_meta["model"][k])
    agent_diff = sorted(k for k in dm_meta["agent"] if k in pg_meta["agent"]
                        and pg_meta["agent"][k] != dm_meta["agent"][k])
    dist = req["grid_dist"]
    radius = pg_meta["model"]["reward_radius"]

    def start_dist(a):
        return np.linalg.norm(a["reset_target"] - a["reset_finger"], axis=-1)

    def init(a):
        r, ang = polar(a["reset_target"])
        return {"start_finger_target_dist": sample_summary(start_dist(a)),
                "p_start_within_reward_radius": float((start_dist(a) <= radius).mean()),
                "target_radius": sample_summary(r, *TARGET_RADIUS),
                "target_angle": sample_summary(ang, 0, 2 * np.pi),
                "shoulder": sample_summary(a["reset_qpos"][:, 0], -np.pi, np.pi),
                "wrist": sample_summary(a["reset_qpos"][:, 1], *WRIST_RANGE),
                "qvel_max_abs": float(np.abs(a["reset_qvel"]).max()),
                "reset_obs_to_target_err_max": float(a["reset_obs_err"].max())}

    def grid(a):
        r = a["grid_reward"]
        return {"reward": r.tolist(),
                "mismatch_vs_tolerance_transcription": int(
                    (r != tolerance(a["grid_dist_measured"], (0, radius))).sum()),
                "largest_dist_paid": float(dist[r > 0].max()),
                "smallest_dist_unpaid": float(dist[r == 0].min()),
                "dist_measured_err_max": float(np.abs(a["grid_dist_measured"] - dist).max())}

    returns = {}
    for policy in ("scripted", "random"):
        returns[policy] = {
            "playground_own_resets": returns_summary(pg[f"ret_{policy}_own"]),
            "dm_control_own_resets": returns_summary(dm[f"ret_{policy}_own"]),
            "dm_control_from_playground_starts": returns_summary(dm[f"ret_{policy}_paired"]),
            "paired_playground_minus_dm_control": paired_diff(pg[f"ret_{policy}_own"],
                                                              dm[f"ret_{policy}_paired"]),
            "playground_returns": pg[f"ret_{policy}_own"].tolist(),
            "dm_control_returns_paired": dm[f"ret_{policy}_paired"].tolist(),
            "dm_control_returns_own": dm[f"ret_{policy}_own"].tolist(),
            "zero_return_episodes": {
                "playground": int((pg[f"ret_{policy}_own"] == 0).sum()),
                "dm_control_own": int((dm[f"ret_{policy}_own"] == 0).sum()),
                "dm_control_paired": int((dm[f"ret_{policy}_paired"] == 0).sum())},
            "dm_control_episode_agent_steps": sorted(set(dm[f"len_{policy}_own"].tolist())),
        }
    steps = (1, 2, 5, 10, 25, req["dyn_actions"].shape[1])
    return {
        "static": {"playground": pg_meta["model"], "dm_control": dm_meta["model"],
                   "differ": static_diff},
        "agent_interface": {"playground": pg_meta["agent"], "dm_control": dm_meta["agent"],
                            "differ": agent_diff},
        "observation": {
            "same_state_obs_max_abs_diff": float(np.abs(pg["state_obs"] - dm["state_obs"]).max()),
            "same_state_obs_max_abs_diff_per_dim":
                np.abs(pg["state_obs"] - dm["state_obs"]).max(0).tolist(),
            "same_state_reward_mismatch": int((pg["state_reward"] != dm["state_reward"]).sum()),
            "n_states": int(pg["state_obs"].shape[0]),
            "playground_reset_obs_err_without_wmx_forward":
                float(pg["reset_obs_err_unwrapped"].max())},
        "initial_state": {
            "n_resets": n, "ks_critical_1pct_one_sample": ks_critical(n),
            "ks_critical_1pct_two_sample": ks_critical(n, n),
            "playground": init(pg), "dm_control": init(dm),
            "ks_two_sample": {
                "target_radius": ks_two(polar(pg["reset_target"])[0], polar(dm["reset_target"])[0]),
                "target_angle": ks_two(polar(pg["reset_target"])[1], polar(dm["reset_target"])[1]),
                "shoulder": ks_two(pg["reset_qpos"][:, 0], dm["reset_qpos"][:, 0]),
                "wrist": ks_two(pg["reset_qpos"][:, 1], dm["reset_qpos"][:, 1]),
                "start_finger_target_dist": ks_two(start_dist(pg), start_dist(dm))},
            "playground_mocap_vs_target_geom_max_abs":
                float(np.abs(pg["reset_target"] - pg["reset_target_geom"]).max())},
        "reward": {
            "source_line": {"playground": pg_meta["reward_source"],
                            "dm_control": dm_meta["reward_source"]},
            "reward_radius": {"playground": radius,
                              "dm_control": dm_meta["model"]["reward_radius"]},
            "grid_dist": dist.tolist(),
            "playground": grid(pg), "dm_control": grid(dm),
            "grid_mismatch_between_envs": int((pg["grid_reward"] != dm["grid_reward"]).sum()),
            "grid_dists_where_envs_differ": sorted(set(
                dist[pg["grid_reward"] != dm["grid_reward"]].tolist())),
            "agent_step_rewards_seen": {"playground": pg_meta["agent_step_rewards_seen"],
                                        "dm_control": dm_meta["agent_step_rewards_seen"]}},
        "returns": returns,
        "dynamics": {
            "n_states": int(req["dyn_actions"].shape[0]),
            "agent_steps": int(req["dyn_actions"].shape[1]),
            "qpos_max_abs_diff": max_abs_over_steps(pg["dyn_qpos"], dm["dyn_qpos"], steps),
            "qvel_max_abs_diff": max_abs_over_steps(pg["dyn_qvel"], dm["dyn_qvel"], steps),
            "qpos_rms_diff_last": float(np.sqrt(
                ((pg["dyn_qpos"] - dm["dyn_qpos"])[:, -1] ** 2).mean())),
            "wrist_limit_split": wrist_limit_split(req, pg, dm),
            "decomposition_cpu_mujoco": decomposition},
    }


def _num(v: float | None, spec: str) -> str:
    """``v`` formatted by ``spec``; "-" for None (a split with no rollout on one side)."""
    return "-" if v is None else format(v, spec)


def table(res: dict) -> list[tuple[str, str, str]]:
    """(quantity, Playground via wmx, dm_control) rows for stdout."""
    s, a = res["static"], res["agent_interface"]
    P, D = s["playground"], s["dm_control"]
    pa, da = a["playground"], a["dm_control"]
    i, rw, ret, dy = res["initial_state"], res["reward"], res["returns"], res["dynamics"]
    fmt = lambda r: f"{r['mean']:.1f} ± {r['sem']:.1f}"  # noqa: E731
    rows = [
        ("physics timestep (s) x substeps", f"{P['timestep']} x {pa['n_substeps']}",
         f"{D['timestep']} x {da['n_substeps']}"),
        ("control dt / agent dt (s)", f"{pa['control_dt']} / {pa['agent_dt']}",
         f"{da['control_dt']} / {da['control_dt'] * REPEAT}"),
        ("episode: control / agent steps", f"{pa['episode_control_steps']} / {pa['T_agent_steps']}",
         f"{da['episode_control_steps']} / {da['T_agent_steps']}"),
        ("action bounds", f"{pa['action_low']}..{pa['action_high']}",
         f"{da['action_low']}..{da['action_high']}"),
        ("integrator, solver iters/ls",
         f"{P['integrator']}, {P['iterations']}/{P['ls_iterations']}",
         f"{D['integrator']}, {D['iterations']}/{D['ls_iterations']}"),
        ("disabled flags", ",".join(f[7:] for f in P["disabled_flags"]),
         ",".join(f[7:] for f in D["disabled_flags"])),
        ("gear, damping", f"{P['actuator_gear']}, {P['dof_damping']}",
         f"{D['actuator_gear']}, {D['dof_damping']}"),
        ("arm/hand/finger mass", str([round(v, 5) for v in P["body_mass"].values()]),
         str([round(v, 5) for v in D["body_mass"].values()])),
        ("target size / reward radius", f"{P['target_size']} / {P['reward_radius']}",
         f"{D['target_size']} / {D['reward_radius']}"),
        ("obs layout", " ".join(f"{k}:{n}" for k, n in pa["obs_layout"]),
         " ".join(f"{k}:{n}" for k, n in da["obs_layout"])),
        ("same state: max |obs diff|", f"{res['observation']['same_state_obs_max_abs_diff']:.2e}",
         f"{res['observation']['n_states']} states"),
        ("reward on grid: paid up to / unpaid from",
         f"{rw['playground']['largest_dist_paid']} / {rw['playground']['smallest_dist_unpaid']}",
         f"{rw['dm_control']['largest_dist_paid']} / {rw['dm_control']['smallest_dist_unpaid']}"),
        ("reward grid mismatches (envs; vs tolerance)",
         f"{rw['grid_mismatch_between_envs']}; "
         f"{rw['playground']['mismatch_vs_tolerance_transcription']}",
         f"{rw['dm_control']['mismatch_vs_tolerance_transcription']}"),
        ("agent-step rewards seen", str(rw["agent_step_rewards_seen"]["playground"]),
         str(rw["agent_step_rewards_seen"]["dm_control"])),
    ]
    crit = i["ks_critical_1pct_two_sample"]
    for q in ("target_radius", "target_angle", "shoulder", "wrist"):
        p, d = i["playground"][q], i["dm_control"][q]
        rows.append((f"{q}: mean [min,max] KS-U (2-sample KS)",
                     f"{p['mean']:.3f} [{p['min']:.3f},{p['max']:.3f}] {p['ks_vs_uniform']:.3f}",
                     f"{d['mean']:.3f} [{d['min']:.3f},{d['max']:.3f}] {d['ks_vs_uniform']:.3f}"
                     f" ({i['ks_two_sample'][q]:.3f}; 1% crit {crit:.3f})"))
    rows.append(("start dist finger-target: mean; P(paid) (2-sample KS)",
                 f"{i['playground']['start_finger_target_dist']['mean']:.3f}; "
                 f"{i['playground']['p_start_within_reward_radius']:.3f}",
                 f"{i['dm_control']['start_finger_target_dist']['mean']:.3f}; "
                 f"{i['dm_control']['p_start_within_reward_radius']:.3f} "
                 f"({i['ks_two_sample']['start_finger_target_dist']:.3f})"))
    rows.append(("initial max |qvel|", str(i["playground"]["qvel_max_abs"]),
                 str(i["dm_control"]["qvel_max_abs"])))
    for pol in ("scripted", "random"):
        r = ret[pol]
        pd = r["paired_playground_minus_dm_control"]
        rows.append((f"{pol} return, own resets", fmt(r["playground_own_resets"]),
                     fmt(r["dm_control_own_resets"])))
        rows.append((f"{pol} return, same starts+actions", fmt(r["playground_own_resets"]),
                     f"{fmt(r['dm_control_from_playground_starts'])} (paired diff "
                     f"{pd['mean']:.1f} ± {pd['sem']:.1f})"))
    for k in dict.fromkeys(("1", "5", str(dy["agent_steps"]))):   # those the rollouts reach
        if k in dy["qpos_max_abs_diff"]:
            rows.append((f"dynamics max |dqpos| / |dqvel| after {k} agent steps",
                         f"{dy['qpos_max_abs_diff'][k]:.2e} / {dy['qvel_max_abs_diff'][k]:.2e}",
                         ""))
    wl = dy["wrist_limit_split"]
    rows.append((f"  max |dqvel|: wrist near limit ({wl['n_near_limit']}) / others",
                 f"{_num(wl['qvel_max_abs_diff_near_limit'], '.2f')} / "
                 f"{_num(wl['qvel_max_abs_diff_others'], '.2f')}",
                 f"max |qvel| {wl['qvel_max_abs_in_rollouts']['dm_control']:.1f}"))
    dec = dy["decomposition_cpu_mujoco"]
    for name, v in dec.items():
        if name.endswith("applied"):
            continue
        last = max(v["qpos"], key=int)
        rows.append((f"  {name} (after 1 / {last})",
                     f"qpos {v['qpos']['1']:.1e} / {v['qpos'][last]:.1e}",
                     f"qvel {v['qvel']['1']:.1e} / {v['qvel'][last]:.1e}"))
    return rows


