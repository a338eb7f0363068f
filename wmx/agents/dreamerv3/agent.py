"""DreamerV3 through the agent protocol (`wmx.agents.api.Agent`): an adapter over the
package's modules, no new algorithm.

- config: `config.make_config` with the task's dims; for a TaskSet of several
  tasks the multi-task model over the padded widths (`multitask`, a wmx
  extension: deviation W-D8), for a one-task TaskSet the single-task config of
  that task (the online agent's shapes, so an offline checkpoint fine-tunes
  online);
- state: `train.init_train_state` (params, slow critic, LaProp state, retnorm,
  updater count);
- acting: one posterior filter step and a sampled action per env
  (`rssm.obs_step`, `actor_critic.actor_sample`); the carry is (deter, stoch,
  prevact = the raw sampled action);
- training: `train.train_step` on a window batch with `loss.draw_train_noise`;
- online: the per-env stream replay with the online queue, the replay
  context and the latent write-back (`replay`), and the train-ratio schedule
  (`schedule`).

Actions (dreamerv3_spec 7.1-7.4): the policy samples in every mode (the
reference has no deterministic eval action, 7.3), so ``eval_mode`` changes
nothing. The action sent to the env is the sample clipped to [−1, 1] (the
reference's ClipAction wrapper); the carry and the replay keep the unclipped
sample (7.4: "the replay stores the UNCLIPPED sample"; the RSSM divides it by
max(1, |a|)), passed to `replay_add` in the entries, and zeroed on is_last rows
as the reference's driver does (7.2). Episode sets keep the env's action
(the collector's row).

Windows without stored latents (`update` on a dataset batch: offline
training, or replay_context = 0): the spec 5.11 zero-state start. The trained
rows are the window's rows after its replay_context rows (the same T =
batch_length as the online path), the first one marked is_first, the carry
zeros (deviation W-D5). Dataset windows stay inside one episode
(`batch_spec`: cross_episodes False, so the in-memory and the streaming feeds
draw the same windows; W-D5).

Source: dreamerv3_spec 5.1-5.11, 6.1-6.2, 7.1-7.4; reference_design §6;
deviations D1-D3, D26, D27, W-D5, W-D6, W-D8 (docs/deviations.md).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import jax
import jax.numpy as jnp

from wmx import xla_cpu
from wmx.agents.api import BatchSpec, BoundSchedule
from wmx.agents.dreamerv3 import config as config_lib
from wmx.agents.dreamerv3 import nets
from wmx.agents.dreamerv3 import params as params_lib
from wmx.agents.dreamerv3 import replay as replay_lib
from wmx.agents.dreamerv3 import schedule as sched_lib
from wmx.agents.dreamerv3.actor_critic import actor_sample, draw_policy_noise
from wmx.agents.dreamerv3.config import DreamerV3Config
from wmx.agents.dreamerv3.heads import encode, feat
from wmx.agents.dreamerv3.loss import draw_train_noise
from wmx.agents.dreamerv3.multitask import (TaskContext, ac_input, make_task_context,
                                            task_inputs)
from wmx.agents.dreamerv3.replay import Replay, Rows, TrainSequence
from wmx.agents.dreamerv3.rssm import Carry, draw_latent_noise, initial_carry, obs_step
from wmx.agents.dreamerv3.train import TrainState, init_train_state, train_step
from wmx.agents.overrides import check_override_types, refuse_task_fields

NAME = "dreamerv3"
PRESETS = tuple(config_lib.PRESETS)
METRIC_KEYS = ("vector_loss", "reward_loss", "cont_loss", "dyn_loss", "rep_loss",
               "actor_loss", "critic_loss", "replay_critic_loss", "opt_loss", "opt_grad_norm",
               "opt_update_norm", "ret/mean", "ret/std", "adv/mean", "val/mean",
               "weight/mean", "ent/action/mean", "post_ent/mean", "prior_ent/mean",
               "td_error")
"""metrics.csv columns: the unscaled loss means, the optimizer's norms, and the
imagination's return, advantage, value, weight, entropy and latent-entropy means
(the reference's names; `train_metrics` has the full set)."""
LOSS_KEY = "opt_loss"
"""The METRIC_KEYS entry progress bars show (the total scaled loss)."""
MULTITASK = True
METRICS_SINCE_LOG = True
"""metrics.csv shows means over the updates since the previous row (the
reference logs embodied.Agg means over its log period; reference_design §6.5)."""
EVAL_PROTOCOL = ("actions sampled from the actor as in training (the reference has no "
                 "deterministic eval action; dreamerv3_spec 7.3)")
PINNED_FIELDS = {"compute_dtype": "float32", "offline_bc_weight": 0.0, "offline_ensemble": 0,
                 "offline_penalty_weight": 0.0, "scan_weight_grads": "inside"}
"""compute_dtype "auto" (the presets but "paper") resolves by the machine's backend
(`config.auto_compute_dtype`); runs saved before the field existed computed in float32
(deviation D4). A run keeps the value it resolved (`wmx.runs.pins`). The offline
terms' fields (W-D10, W-D11) were added later, off: runs saved before them read them
as 0 and keep their hashes. scan_weight_grads "auto" resolves by the backend too
(`config.auto_scan_weight_grads`); runs saved before it summed in the loop ("inside",
W-D12)."""

_WIDTHS = ("units", "deter", "hidden", "classes")


# ---- configuration ------------------------------------------------------------------
def make_config(preset: str, overrides: Mapping[str, Any], *, task: Any = None,
                taskset: Any = None) -> DreamerV3Config:
    """The resolved `DreamerV3Config` of a preset plus overrides, for one task or a TaskSet.

    task: a registry `TaskSpec` (obs_dim, action_dim, action_repeat). taskset: a
    `TaskSet`; of one task, the single-task config of that task (exactly what
    task= gives: the online agent's shapes); of several, the multi-task model
    (deviation W-D8): num_tasks = len(taskset), obs_dim / action_dim = the
    padded widths, action_repeat of the first task (unused offline). An
    explicit ``model_size`` (a string such as "12m") replaces the preset's
    widths (explicit width overrides still win). Raises ValueError unless
    exactly one of task / taskset is given, and for an unknown preset or
    field, or a bad value (naming the field).
    """
    if (task is None) == (taskset is None):
        raise ValueError("dreamerv3 make_config needs exactly one of task= (a TaskSpec) or "
                         "taskset= (a TaskSet)")
    if taskset is not None:
        infos = list(taskset.tasks)
        task = infos[0]
        if len(infos) > 1:
            overrides = {"num_tasks": len(infos), **overrides}
    elif "num_tasks" in overrides:
        raise ValueError("num_tasks is set by make_config(..., taskset=...); a single-task "
                         "config has none")
    if preset not in config_lib.PRESETS:
        raise ValueError(f"--preset {preset!r} is unknown for dreamerv3; choose one of "
                         f"{sorted(config_lib.PRESETS)}")
    over = dict(overrides)
    refuse_task_fields(over, ("obs_dim", "action_dim"))
    check_override_types(DreamerV3Config, over)
    if "model_size" in over:
        for width in _WIDTHS:
            if width in config_lib.PRESETS[preset] and width not in over:
                over[width] = None
    widths = ({"obs_dim": taskset.max_obs_dim, "action_dim": taskset.max_action_dim}
              if taskset is not None else {"obs_dim": task.obs_dim, "action_dim": task.action_dim})
    over = {"action_repeat": task.action_repeat, **over, **widths}
    return config_lib.make_config(preset, **over)


def param_counts(cfg: DreamerV3Config) -> dict[str, int]:
    """Trained parameters per module (enc, rssm, dec, rew, con, actor, critic, and
    task_emb when multi-task) and "total" (the slow critic is not counted, as the
    reference's opt_param_count)."""
    return params_lib.param_counts(cfg)


# ---- state --------------------------------------------------------------------------
def init(key: jax.Array, cfg: DreamerV3Config) -> TrainState:
    """`train.init_train_state`."""
    return init_train_state(key, cfg)


def policy_params(state: TrainState) -> dict:
    """The trained params (acting reads enc, rssm and actor)."""
    return state.params


def task_context(cfg: DreamerV3Config, taskset: Any) -> TaskContext | None:
    """`multitask.make_task_context` (masks, per-task discounts, dims) for a multi-task
    config; None for a single-task one (W-D8)."""
    return make_task_context(cfg, taskset) if cfg.resolved().multitask else None


# ---- acting -------------------------------------------------------------------------
def init_policy(cfg: DreamerV3Config, n: int) -> Carry:
    """Carry(deter f32[n, D], stoch f32[n, S, C], prevact f32[n, A]) of zeros."""
    return initial_carry(cfg, (n,))


def draw_act_noise(key: jax.Array, cfg: DreamerV3Config, n: int) -> tuple[jax.Array, jax.Array]:
    """(posterior uniforms f32[n, S], policy noise f32[n, A] / f32[n]) from split(key) (W-D6)."""
    k_post, k_act = jax.random.split(key)
    return draw_latent_noise(k_post, cfg, (n,)), draw_policy_noise(k_act, cfg, (n,))


def policy(params: dict, cfg: DreamerV3Config, carry: Carry, obs: jax.Array,
           is_first: jax.Array, key: jax.Array, *, eval_mode: bool, tasks: Any = None,
           task_id: Any = None) -> tuple[Carry, jax.Array, dict]:
    """One filter step and a sampled action per env (spec 7.1; Algorithm B).

    Args: carry from `init_policy` / the previous call (reset inside where
    is_first bool[n]); obs f32[n, O]; key: the step's draws
    (`draw_act_noise`); eval_mode: ignored (the reference samples in every
    mode, 7.3); tasks / task_id: a multi-task config's `task_context` and the
    task's id i32[] (W-D8: its embedding and masks; the padded action dims of
    the returned action are 0), None for a single-task one.
    Returns:
      (Carry(deter, stoch, prevact = the raw sample), action f32[n, A]: the
      sample clipped to [−1, 1] (one-hot f32[n, K] for discrete actions),
      entries {"deter" f32[n, D], "stoch" f32[n, S, C] one-hot, "action"
      f32[n, A] the raw sample} for `replay_add`). The step computes in
      cfg.dtype; the carry and entries are float32 (deter and stoch upcast, exact),
      the action is the float32 sample (spec 1.12). The parts run under the name
      scopes "noise", "encoder", "rssm" and "actor" (op metadata only).
    Source: dreamerv3_spec 7.1-7.4, 1.12; W-D8.
    """
    del eval_mode
    c = cfg.resolved()
    n = obs.shape[0]
    task = None
    if c.multitask:
        if tasks is None or task_id is None:
            raise ValueError("a multi-task dreamerv3 config acts with tasks= (task_context) "
                             "and task_id=")
        task = task_inputs(params, tasks, jnp.full((n,), task_id, jnp.int32))
    with jax.named_scope("noise"):
        post_noise, act_noise = draw_act_noise(key, c, n)
    with jax.named_scope("encoder"):
        embed = encode(params["enc"], c, obs, task)
    with jax.named_scope("rssm"):
        out = obs_step(params["rssm"], c, carry, embed, is_first, post_noise, task)
    with jax.named_scope("actor"):
        raw = actor_sample(params["actor"], c, ac_input(feat(out.deter, out.stoch), task),
                           act_noise)
    raw = jax.lax.stop_gradient(raw)
    action = raw if c.discrete_actions else jnp.clip(raw, -1.0, 1.0)
    if task is not None:
        action = action * task.action_mask
    entries = {"deter": nets.f32(out.deter),
               "stoch": nets.f32(jax.lax.stop_gradient(out.stoch)), "action": raw}
    return Carry(entries["deter"], entries["stoch"], raw), action, entries


# ---- training -----------------------------------------------------------------------
def batch_spec(cfg: DreamerV3Config) -> BatchSpec:
    """B windows of batch_length + replay_context rows (spec 5.1-5.3) inside one
    episode (dataset feeds; deviation W-D5: with the zero-state start a window
    that crossed an episode end would restart at the end anyway, and the
    streaming reader crops within episodes, so both feeds draw uniformly over
    the same windows). The online replay samples its own windows (`replay`)."""
    c = cfg.resolved()
    return BatchSpec("windows", c.seq_length, c.batch_size, False)


def zero_state_sequence(batch: Mapping[str, jax.Array], cfg: DreamerV3Config) -> TrainSequence:
    """A TrainSequence without stored latents (spec 5.11; deviation W-D5).

    The trained rows are ``batch[k][:, replay_context:]`` (T = batch_length),
    the first marked is_first; the carry and the first previous action are
    zeros (masked by is_first anyway). A multi-task config (W-D8) keeps the
    rows' task ids ``batch["task"]`` i32[B, L] as ``task``.
    """
    c = cfg.resolved()
    rc = c.replay_context
    row = {k: jnp.asarray(batch[k])[:, rc:] for k in
           ("obs", "action", "reward", "is_first", "is_last", "is_terminal")}
    B = row["reward"].shape[0]
    act = row["action"].astype(jnp.float32)
    prevact = jnp.concatenate([jnp.zeros_like(act[:, :1]), act[:, :-1]], 1)
    return TrainSequence(
        deter0=jnp.zeros((B, c.deter), jnp.float32),
        stoch0=jnp.zeros((B, c.stoch, c.classes), jnp.float32), prevact=prevact,
        obs=row["obs"].astype(jnp.float32), action=act,
        reward=row["reward"].astype(jnp.float32),
        is_first=row["is_first"].astype(bool).at[:, 0].set(True),
        is_last=row["is_last"].astype(bool), is_terminal=row["is_terminal"].astype(bool),
        task=(jnp.asarray(batch["task"], jnp.int32)[:, rc:] if c.multitask else None))


def window_sequence(batch: Mapping[str, jax.Array], cfg: DreamerV3Config) -> TrainSequence:
    """The TrainSequence of a window batch [B, batch_length + replay_context, ...].

    With replay_context 1 and stored latents (``deter`` f32[B, L, D], ``stoch``
    f32[B, L, S, C] one-hot) the replay context of spec 5.8
    (`replay.replay_context`); otherwise `zero_state_sequence`.
    """
    c = cfg.resolved()
    if c.replay_context and "deter" in batch and "stoch" in batch:
        rows = Rows(*(jnp.asarray(batch[k]) for k in
                      ("obs", "action", "reward", "is_first", "is_last", "is_terminal",
                       "deter", "stoch")))
        return replay_lib.replay_context(rows)
    return zero_state_sequence(batch, c)


def update(state: TrainState, batch: Mapping[str, jax.Array], key: jax.Array,
           cfg: DreamerV3Config, tasks: Any = None) -> tuple[TrainState, dict, dict]:
    """`train.train_step` on a window batch (`window_sequence`) with
    `draw_train_noise(key, cfg, B, batch_length)`.

    tasks: a multi-task config's `task_context` (the batch's ``task`` i32[B, L]
    gives each row's task; W-D8), None for a single-task one.
    Returns (state, {METRIC_KEYS: f32[]}, {"deter" f32[B, T, D], "stoch"
    f32[B, T, S, C]}: the posterior latents of the trained rows).
    Raises ValueError when ``tasks`` does not fit the config.
    """
    c = cfg.resolved()
    if c.multitask != (tasks is not None):
        raise ValueError(f"dreamerv3 update: a {'multi' if c.multitask else 'single'}-task "
                         f"config needs tasks={'task_context(cfg, taskset)' if c.multitask else 'None'}")
    seq = window_sequence(batch, c)
    B, T = seq.reward.shape
    state, metrics, outs = train_step(state, seq, draw_train_noise(key, c, B, T), c, tasks)
    return (state, {k: jnp.asarray(metrics[k], jnp.float32) for k in METRIC_KEYS},
            {"deter": outs.deter, "stoch": outs.stoch})


def compiler_options(cfg: DreamerV3Config) -> dict[str, str]:
    """XLA's own dots instead of YNNPACK fusions on the CPU (`wmx.xla_cpu`; training
    step 4-20% faster on AVX-512, ~10% on AVX2, docs/performance.md "Dot backend")."""
    del cfg
    return xla_cpu.training_options(prefer_xla_dots=True)


# ---- online -------------------------------------------------------------------------
def schedule(cfg: DreamerV3Config, episode_length: int, n_envs: int) -> BoundSchedule:
    """The train-ratio schedule of n_envs lockstep envs (D3, D26; episode_length plays
    no part: the stream replay takes any episode boundary)."""
    del episode_length
    c = cfg.resolved()
    return BoundSchedule(sched_lib.make_schedule(n_envs, batch_size=c.batch_size,
                                                 batch_length=c.batch_length,
                                                 replay_context=c.replay_context,
                                                 train_ratio=c.train_ratio),
                         sched_lib.action_mode, sched_lib.n_updates, sched_lib.first_update_tick)


def init_replay(cfg: DreamerV3Config, n_envs: int, episode_length: int,
                total_agent_steps: int) -> Replay:
    """Per-env rings of `replay.ring_rows` rows for a run of total_agent_steps agent
    steps over all envs (T + 1 rows per episode of T steps; D27)."""
    c = cfg.resolved()
    episodes = math.ceil(total_agent_steps / (episode_length * n_envs))
    capacity = replay_lib.ring_rows(c.replay_capacity, n_envs, episodes * (episode_length + 1),
                                    c.batch_size, c.seq_length)
    return replay_lib.init_replay(n_envs, capacity, c.obs_dim, c.action_dim, c.deter, c.stoch,
                                  c.classes)


def replay_add(replay: Replay, tick, row, entries: dict, cfg: DreamerV3Config) -> Replay:
    """Append the tick's row of every env with the policy's latents and raw action
    (zeroed on is_last rows, spec 7.2); rows are appended in tick order, so
    ``tick`` itself is not needed."""
    del tick, cfg
    last = row.is_last[:, None]
    action = jnp.where(last, 0.0, entries["action"]).astype(jnp.float32)
    return replay_lib.add(replay, Rows(row.obs, action, row.reward, row.is_first, row.is_last,
                                       row.is_terminal, entries["deter"], entries["stoch"]))


def init_metrics(cfg: DreamerV3Config) -> dict:
    """Sums of METRIC_KEYS over the updates since the last log, and their count."""
    return {**{k: jnp.zeros((), jnp.float32) for k in METRIC_KEYS},
            "updates": jnp.zeros((), jnp.float32)}


def read_metrics(metrics: dict) -> dict:
    """Means since the last log ("" for every key when no update ran)."""
    n = float(metrics["updates"])
    return {k: (float(metrics[k]) / n if n else "") for k in METRIC_KEYS}


def replay_train(state: TrainState, replay: Replay, tick, key: jax.Array, cfg: DreamerV3Config,
                 metrics: dict) -> tuple[TrainState, Replay, dict]:
    """The schedule's updates after ``tick`` (Algorithm J, synchronous: D1).

    Update j: ``k_sample, k_noise = split(fold_in(key, j))``; sample B windows
    (online queue first, `replay.sample`), split off the replay context
    (stored latents, 29eb964 previous action), `train.train_step` with
    `draw_train_noise(k_noise, ...)`, write the posteriors back
    (`replay.write_back`; with replay_context 0 the zero-state start, nothing
    written back). Each update's METRIC_KEYS values are added to the metrics
    carry's sums (`init_metrics`), its "updates" count incremented. The sampling
    runs under the name scope "sample_batch" (op metadata only).
    """
    c = cfg.resolved()
    n = schedule(c, 0, replay.reward.shape[0]).n_updates(tick)

    def body(j, carry):
        st, rp, _ = carry
        k_sample, k_noise = jax.random.split(jax.random.fold_in(key, j))
        with jax.named_scope("sample_batch"):
            rp, rows, positions = replay_lib.sample(rp, k_sample, c.batch_size, c.seq_length)
            if c.replay_context:
                seq = replay_lib.replay_context(rows)
            else:
                seq = zero_state_sequence(rows._asdict(), c)
        B, T = seq.reward.shape
        st, m, outs = train_step(st, seq, draw_train_noise(k_noise, c, B, T), c)
        if c.replay_context:
            rp = replay_lib.write_back(rp, positions, outs.deter, outs.stoch)
        acc = {k: carry[2][k] + jnp.asarray(m[k], jnp.float32) for k in METRIC_KEYS}
        return st, rp, {**acc, "updates": carry[2]["updates"] + 1.0}

    return jax.lax.fori_loop(0, n, body, (state, replay, metrics))
