"""Timing worker for the official DreamerV3 (danijar/dreamerv3), driven by
`dreamerv3_speed.py`; runs under the reference's own virtual environment.

It imports the official code from a checkout (``--reference-dir``; nothing of
it is copied into wmx), builds ``dreamerv3.Agent(obs_space, act_space,
config)`` for the benchmark's sizes and times, on request (`_worker.serve`):

- ``train``: one training step, ``jax.jit(nj.pure(agent.train))(state, batch,
  carry, seed)``, the call shape of the wmx parity fixtures'
  recording (../shared/fixtures/dreamerv3/README.md: the function the
  JAXAgent wrapper jits, without sharding, donation or the wrapper's one-call
  delay of outputs); the new state is fed to the next call, as in training;
- ``policy``: one policy step for ``n_envs`` envs, the wrapper's own jitted
  policy program (``mode="train"``), its carry fed back.

Config: the commit's ``defaults`` plus the size preset (``12m``: the
commit's ``size12m``; ``1m``: the widths of the reference's later
``size1m``, deter 512 / hidden 64 / classes 4 / units 64, which 29eb964 does
not have; ``debug``: the commit's tiny debug block, for smoke tests),
``jax.platform=cpu`` and ``jax.compute_dtype=float32`` (``setup``'s defaults;
`official_dreamerv3.py --time-train` passes the chip and bfloat16),
``jax.prealloc=False``, ``jax.transfer_guard=False``, ``batch_size`` 16,
``batch_length`` 65 (= 64 trained steps + ``replay_context`` 1, as the
reference counts it). Observations: one vector key of the task's obs dim;
actions: a continuous vector in [−1, 1]. The wrapper's own lowering of
train and report at construction is skipped (not needed: the timed programs
are jitted here), as in the fixtures' recording.

Getting the checkout (the commit the wmx fixtures were recorded from):

    git clone https://github.com/danijar/dreamerv3 ~/ref/dreamerv3
    git -C ~/ref/dreamerv3 checkout 29eb964
    # or, from a bare mirror: git --git-dir=MIRROR archive 29eb964 | tar -x -C ~/ref/dreamerv3
    python3.11 -m venv ~/refenv/dreamerv3
    ~/refenv/dreamerv3/bin/pip install jax==0.4.28 jaxlib==0.4.28 numpy==1.26.4 \\
        scipy==1.13.1 ml_dtypes==0.4.0 optax==0.2.2 chex==0.1.86 einops==0.8.0 \\
        tensorflow-probability==0.24.0 cloudpickle msgpack psutil ruamel.yaml pyzmq

    ~/refenv/dreamerv3/bin/python benchmarks/dreamerv3_reference_driver.py \\
        --reference-dir ~/ref/dreamerv3      # then JSON lines on stdin (see _worker.py)

Source: danijar/dreamerv3 29eb964 (dreamerv3/agent.py Agent.train / policy,
jaxagent.py JAXAgent); fixtures/dreamerv3/README.md "How the reference was run".
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _worker import protect_stdout, serve, synthetic_obs, synthetic_windows  # noqa: E402,I001

# The 1m widths: the reference's later size1m (HEAD configs.yaml), absent at 29eb964.
SIZE_1M = {r".*\.rssm": {"deter": 512, "hidden": 64, "classes": 4},
           r".*\.depth": 4, r".*\.units": 64}


def check_reference_dir(path: str) -> Path:
    """The checkout's root; raises SystemExit with a one-line message when it is not one."""
    root = Path(path).expanduser().resolve()
    if not root.is_dir():
        raise SystemExit(f"--reference-dir {path}: no such directory")
    for need in ("dreamerv3/agent.py", "dreamerv3/configs.yaml", "dreamerv3/jaxagent.py",
                 "embodied/__init__.py"):
        if not (root / need).is_file():
            raise SystemExit(f"--reference-dir {path}: not a danijar/dreamerv3 checkout "
                             f"(no {need})")
    return root


class Reference:
    """The official agent at one size, with its jitted train and policy programs."""

    def __init__(self, root: Path):
        sys.path.insert(0, str(root))
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        import embodied  # noqa: F401 - the reference's package
        import jax
        import dreamerv3
        from dreamerv3 import jaxagent
        from dreamerv3 import ninjax as nj
        self.jax, self.embodied, self.dreamerv3, self.nj = jax, embodied, dreamerv3, nj
        self.jaxagent = jaxagent
        self.agent = None

    def _skip_wrapper_compilation(self) -> None:
        """Make the JAXAgent wrapper's constructor skip lowering and compiling its own
        train and report programs (the fixtures' recording did the same)."""
        class _Uncompiled:
            def __init__(self, fn):
                self.fn = fn

            def compile(self):
                return self.fn

        def lower_train(agent):
            agent._train = _Uncompiled(agent._train)

        def lower_report(agent):
            agent._report = _Uncompiled(agent._report)

        self.jaxagent.JAXAgent._lower_train = lower_train
        self.jaxagent.JAXAgent._lower_report = lower_report

    def setup(self, size: str, obs_dim: int, action_dim: int, batch_size: int,
              batch_length: int, n_envs: int, seed: int = 0, platform: str = "cpu",
              compute_dtype: str = "float32") -> dict:
        """Build the agent and compile both programs (the first calls).

        ``platform`` and ``compute_dtype`` are the official ``jax.platform`` and
        ``jax.compute_dtype`` (the speed benchmark's: cpu, float32;
        `official_dreamerv3.py --time-train` passes the chip's and bfloat16).

        Returns {"compile_s": {train, policy}, "gflop": {train, policy} (matmul
        FLOPs, `_machine.program_flops`), "memory": {train, policy}
        (`_machine.compiled_memory`), "params": trained parameter count,
        "widths", "compute_dtype", "versions"}.
        """
        import numpy as np
        from _machine import compiled_memory, program_flops
        jax, embodied, nj = self.jax, self.embodied, self.nj
        Agent = self.dreamerv3.Agent
        config = embodied.Config(Agent.configs["defaults"])
        if size == "12m":
            config = config.update(Agent.configs["size12m"])
        elif size == "1m":
            config = config.update(SIZE_1M)
        elif size == "debug":   # the commit's tiny debug block (smoke tests of the timing)
            config = config.update(Agent.configs["debug"])
        else:
            raise ValueError(f"size {size!r}: the driver knows 1m, 12m and debug")
        self.logdir = tempfile.mkdtemp(prefix="dv3ref_")
        config = config.update({
            "seed": seed, "logdir": self.logdir,
            "jax.platform": platform, "jax.compute_dtype": compute_dtype, "jax.prealloc": False,
            "jax.transfer_guard": False,
            "batch_size": batch_size, "batch_length": batch_length + 1,
            "batch_length_eval": batch_length + 1, "replay_context": 1,
            "run.num_envs": n_envs})
        S = embodied.Space
        obs_space = {"vector": S(np.float32, (obs_dim,)), "reward": S(np.float32),
                     "is_first": S(bool), "is_last": S(bool), "is_terminal": S(bool)}
        act_space = {"action": S(np.float32, (action_dim,), -1.0, 1.0), "reset": S(bool)}
        self._skip_wrapper_compilation()
        agent = Agent(obs_space, act_space, config)
        self.agent = agent
        rssm = config.dyn.rssm
        data = synthetic_windows(batch_size, batch_length + 1, obs_dim, action_dim,
                                 rssm.deter, rssm.stoch, rssm.classes, seed=seed)
        self.data = jax.device_put(data)
        self.carry = agent.init_train(batch_size)

        pure_train = nj.pure(agent.agent.train)

        def train_fn(state, batch, carry, seed):
            return pure_train(state, batch, carry, seed=seed)

        def policy_fn(params, obs, carry, seed):
            return agent._policy(params, obs, carry, seed, "train")

        def seeds():   # a fresh u32[2] seed per call, the wrapper's own host RNG
            return agent._next_seeds(agent.train_sharded)

        self.state = agent.params
        obs = jax.device_put(synthetic_obs(n_envs, obs_dim))
        self.pcarry = agent._init_policy(agent.policy_params, seeds(), n_envs)
        train_args = (self.state, self.data, self.carry, seeds())
        policy_args = (agent.policy_params, obs, self.pcarry, seeds())
        compile_s, memory = {}, {}
        t = time.perf_counter()
        train = jax.jit(train_fn).lower(*train_args).compile()
        compile_s["train"] = time.perf_counter() - t
        memory["train"] = compiled_memory(train)
        t = time.perf_counter()
        policy = agent._policy.lower(*policy_args, "train").compile()
        compile_s["policy"] = time.perf_counter() - t
        memory["policy"] = compiled_memory(policy)
        gflop = {"train": program_flops(train_fn, *train_args) / 1e9,
                 "policy": program_flops(policy_fn, *policy_args) / 1e9}

        def train_step():
            self.state, (outs, carry, mets) = train(self.state, self.data, self.carry, seeds())
            jax.block_until_ready((self.state, outs, mets))

        def policy_step():
            acts, outs, self.pcarry = policy(agent.policy_params, obs, self.pcarry, seeds())
            jax.block_until_ready((acts, self.pcarry))

        self.items = {"train": train_step, "policy": policy_step}
        for fn in self.items.values():   # warm-up call
            fn()
        trained = sum(int(np.prod(v.shape)) for k, v in agent.params.items()
                      if "/slowcritic/" not in k and "/opt/" not in k
                      and hasattr(v, "shape") and v.dtype == np.float32
                      and "/retnorm/" not in k and "/valnorm/" not in k
                      and "/advnorm/" not in k and "/updater/" not in k)
        import jaxlib
        return {"compile_s": compile_s, "gflop": gflop, "memory": memory,
                "params": trained,
                "widths": {"deter": rssm.deter, "hidden": rssm.hidden, "classes": rssm.classes,
                           "units": config.actor.units}, "compute_dtype": compute_dtype,
                "versions": {"jax": jax.__version__, "jaxlib": jaxlib.__version__,
                             "numpy": np.__version__, "python": sys.version.split()[0]}}

    def time(self, item: str, repeats: int) -> dict:
        """`_machine.time_calls` of one item ("train" or "policy")."""
        from _machine import time_calls
        return time_calls(self.items[item], repeats)

    def stats(self) -> dict:
        """{"peak_rss_mib": this process's peak RSS, "device_memory": CPU device stats or None}."""
        from _machine import peak_rss_mib
        dev = self.jax.devices("cpu")[0]
        try:
            mem = dev.memory_stats()
        except Exception:  # noqa: BLE001 - not every backend reports
            mem = None
        return {"peak_rss_mib": peak_rss_mib(), "device_memory": mem}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-dir", required=True,
                   help="a danijar/dreamerv3 checkout at 29eb964 (see the module docstring)")
    args = p.parse_args()
    root = check_reference_dir(args.reference_dir)
    protect_stdout()     # embodied prints at import time
    ref = Reference(root)
    serve({"setup": ref.setup, "time": ref.time, "stats": ref.stats})


if __name__ == "__main__":
    main()
