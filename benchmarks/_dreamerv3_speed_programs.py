"""The programs `dreamerv3_speed.py` times, built by wmx's own code: the inputs of the
paper config at a size, the jitted training and policy steps (unbatched, or vmapped over
seeds' states), and the online program of a real run past its first update.

Source: issue 13 (DreamerV3 speed benchmark); docs/performance.md.
"""
from __future__ import annotations

import time

from _worker import synthetic_obs, synthetic_windows

OBS_DIM, ACTION_DIM = 24, 6           # walker-walk
BATCH_SIZE, BATCH_LENGTH = 16, 64     # + replay_context 1 = 65 rows per window
N_ENVS = 16
ONLINE_TICKS = 4         # ticks per timed online chunk (--online-ticks)


def wmx_inputs(size: str, obs_dim: int = OBS_DIM, action_dim: int = ACTION_DIM,
               batch_size: int = BATCH_SIZE, batch_length: int = BATCH_LENGTH,
               n_envs: int = N_ENVS, seed: int = 0, compute_dtype: str = "float32",
               scan_weight_grads: str = "auto"):
    """The paper config at ``size`` computing in ``compute_dtype`` (observe-scan gradients
    by ``scan_weight_grads``: auto, inside or outside) and the inputs of its timed
    programs, on the device: (cfg, batch, obs, is_first).

    batch: `_worker.synthetic_windows` of ``batch_size`` windows of ``batch_length`` + 1
    rows (the replay-context row with stored latents; ``stoch`` one-hot) in the layout of
    ``agent.update``; obs f32[n_envs, obs_dim] and is_first bool[n_envs]:
    `_worker.synthetic_obs`.
    """
    import jax
    import numpy as np
    from wmx.agents.dreamerv3.config import make_config
    cfg = make_config("paper", model_size=size, obs_dim=obs_dim, action_dim=action_dim,
                      batch_size=batch_size, batch_length=batch_length, n_envs=n_envs,
                      compute_dtype=compute_dtype, scan_weight_grads=scan_weight_grads)
    data = synthetic_windows(batch_size, batch_length + 1, obs_dim, action_dim, cfg.deter,
                             cfg.stoch, cfg.classes, seed=seed)
    batch = {"obs": data["vector"], "action": data["action"], "reward": data["reward"],
             "is_first": data["is_first"], "is_last": data["is_last"],
             "is_terminal": data["is_terminal"], "deter": data["deter"],
             "stoch": np.eye(cfg.classes, dtype=np.float32)[data["stoch"]]}
    obs = synthetic_obs(n_envs, obs_dim)
    return (cfg, jax.device_put(batch), jax.device_put(obs["vector"]),
            jax.device_put(obs["is_first"]))


def wmx_programs(n: int, cfg, batch: dict, obs_v, first, seed: int,
                 compiler_options: dict, kinds: tuple = ("train", "policy")) -> dict:
    """Compile wmx's training step and policy step (``kinds``: both, or one of them) with
    ``compiler_options`` (the trainers', `agent.compiler_options`), on the inputs of
    `wmx_inputs`.

    ``n`` = 1: items ``train`` (jitted ``agent.update``, the state fed back) and ``policy``
    (jitted ``agent.policy`` on the current state's policy parameters, the carry fed
    back). ``n`` > 1: items ``train_seeds<n>`` and ``policy_seeds<n>``, the same steps
    vmapped over ``n`` seeds, as the trainers run seeds in one program (each seed its own
    state, policy carry and key; the batch and observations repeated; each seed's policy
    parameters taken inside the program). Every call draws fresh raw keys on the host (as
    the reference's seeds) and blocks until its results are ready; a policy step reads
    the state the training steps left.

    Returns {"compile_s", "gflop" (matmul FLOPs per call / 1e9, `_machine.program_flops`),
    "memory" (`_machine.compiled_memory`), "compiled" (the compiled programs), "items"
    (the calls, policy first; not yet called)}, each by item.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np
    from _machine import compiled_memory, program_flops
    from wmx.agents.dreamerv3 import agent as dv3
    suffix = f"_seeds{n}" if n > 1 else ""
    calls = [0]
    if n > 1:
        rep = lambda tree: jax.tree.map(lambda x: jnp.repeat(x[None], n, 0), tree)  # noqa: E731
        state = [jax.jit(jax.vmap(lambda k: dv3.init(k, cfg)))(
            jax.random.split(jax.random.PRNGKey(seed), n))]
        batch, obs_v, first = rep(batch), rep(obs_v), rep(first)
        pcarry = [rep(dv3.init_policy(cfg, obs_v.shape[1]))]

        def key():   # fresh raw keys per call, one per seed, made on the host
            calls[0] += 1
            return np.array([[seed + 1000 * (i + 1), calls[0]] for i in range(n)], np.uint32)

        update_fn = jax.vmap(lambda st, b, k: dv3.update(st, b, k, cfg))
        policy_fn = jax.vmap(lambda st, c, o, f, k: dv3.policy(
            dv3.policy_params(st), cfg, c, o, f, k, eval_mode=False))
        policy_in = lambda st: st  # noqa: E731
    else:
        state = [dv3.init(jax.random.PRNGKey(seed), cfg)]
        pcarry = [dv3.init_policy(cfg, obs_v.shape[0])]

        def key():   # a fresh raw key per call, made on the host (as the reference's seeds)
            calls[0] += 1
            return np.array([seed, calls[0]], np.uint32)

        def update_fn(state, batch, key):
            return dv3.update(state, batch, key, cfg)

        def policy_fn(params, carry, obs, is_first, key):
            return dv3.policy(params, cfg, carry, obs, is_first, key, eval_mode=False)

        policy_in = dv3.policy_params
    out: dict = {"compile_s": {}, "gflop": {}, "memory": {}, "compiled": {}, "items": {}}
    if "policy" in kinds:
        name = "policy" + suffix
        t = time.perf_counter()
        # as wmx runs the policy: the training chunk and the evaluation rollout compile it
        # with the agent's options too (`wmx.acting`, `wmx.train_online.program`)
        policy = jax.jit(policy_fn, compiler_options=compiler_options).lower(
            policy_in(state[0]), pcarry[0], obs_v, first, key()).compile()
        out["compile_s"][name] = time.perf_counter() - t
        out["memory"][name], out["compiled"][name] = compiled_memory(policy), policy
        out["gflop"][name] = program_flops(policy_fn, policy_in(state[0]), pcarry[0], obs_v,
                                           first, key()) / 1e9

        def act():
            pcarry[0], action, entries = policy(policy_in(state[0]), pcarry[0], obs_v, first,
                                                key())
            jax.block_until_ready((pcarry[0], action, entries))

        out["items"][name] = act
    if "train" in kinds:
        name = "train" + suffix
        t = time.perf_counter()
        update = jax.jit(update_fn, compiler_options=compiler_options).lower(
            state[0], batch, key()).compile()
        out["compile_s"][name] = time.perf_counter() - t
        out["memory"][name], out["compiled"][name] = compiled_memory(update), update
        out["gflop"][name] = program_flops(update_fn, state[0], batch, key()) / 1e9

        def train():
            state[0], metrics, outs = update(state[0], batch, key())
            jax.block_until_ready((state[0], metrics, outs))

        out["items"][name] = train
    return out


def online_program(task: str, preset: str, n_envs: int = N_ENVS, ticks: int = ONLINE_TICKS,
                   seed: int = 0, compute_dtype: str = "float32", n_seeds: int = 1,
                   episode_length: int | None = None, chunks: int = 0,
                   scan_weight_grads: str = "auto"):
    """The online program the ``online`` record times, run past its first update
    (`_online.start_online`).

    The run: ``OnlineRunConfig(task, agent="dreamerv3", seeds, preset, n_envs)`` with the
    agent overrides ``compute_dtype`` and ``scan_weight_grads``, at the task's own episode
    length (``episode_length`` overrides it), seeds ``seed`` .. ``seed + n_seeds - 1``
    vmapped in one program (as ``train_online --seeds`` runs them), sized for at least
    one round (``chunks``: the calls to come); chunks of ``ticks`` ticks (the trainer's
    chunk is one round of T + 1 ticks; the tick program is the same). Warm-up: chunks
    (the first compiles) until one has run updates, then one more.

    Returns:
      `_online.OnlineChunk`: calling it runs the next chunk on the carries the last left.

    Raises:
      ValueError: an unknown task or preset, a seed outside [0, 2**32), or an episode
        length under 4 (`OnlineRunConfig`).
    """
    from _online import start_online
    over = {"compute_dtype": compute_dtype, "scan_weight_grads": scan_weight_grads}
    return start_online(task, "dreamerv3", preset, n_seeds=n_seeds, seed=seed, n_envs=n_envs,
                        ticks=ticks, episode_length=episode_length, agent_overrides=over,
                        chunks=chunks)
