"""The --check-finite diagnosis of the official DreamerV3 agent's non-finite outputs.

``official_dreamerv3.py --check-finite N`` runs `check_finite` (its module docstring and
--help describe the mode): it builds the official agent as the training loop does and
reports, into ``--out``, where its policy outputs (the official ``jaxagent.py`` assertion
``isfinite.all()``) and its parameters stop being finite. It needs the official code (the
bundle's source) and takes the driver's settings and builders from `official_dreamerv3`.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from _official_check_reports import (_copies_differ, _official_frames,
                                     _pure_train, bad_keys, finite_report, param_report,
                                     primitive_report, train_debug_nans_report,
                                     train_highest_report, train_nan_report)
from official_dreamerv3 import (CHECK_VARIANTS, HERE, OFFICIAL_COMMIT, _import_official,
                                _make_env_fn, build_config, check_official, fail,
                                resolve_settings)


CHECK_JSON = "official_check_finite.json"
CHECK_LOG = "official_check_finite.log"


class _Uncompiled:
    """Stands in for a lowered program whose ``compile()`` should return the jit itself
    (compiled at its first call, if ever)."""

    def __init__(self, fn):
        self.fn = fn

    def compile(self):
        return self.fn


def _skip_train_compile(jaxagent) -> None:
    """Make the official JAXAgent's constructor run what its ``_lower_train`` and
    ``_lower_report`` execute (``init_train``, ``init_report``) but not lower or compile
    the train and report programs (a train call then compiles at its first call)."""
    def lower_train(self):
        self.init_train(self.config.batch_size)
        self._train = _Uncompiled(self._train)

    def lower_report(self):
        self.init_report(self.config.batch_size)
        self._report = _Uncompiled(self._report)

    jaxagent.JAXAgent._lower_train = lower_train
    jaxagent.JAXAgent._lower_report = lower_report


class _CheckLog:
    """The check's JSON result, rewritten whole after every step (a killed call keeps what
    it found), and its one-line progress messages (stdout)."""

    def __init__(self, out: Path | None, result: dict):
        self.out, self.result, self.t0 = out, result, time.monotonic()
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)

    def say(self, text: str) -> None:
        print(f"[check-finite {time.monotonic() - self.t0:7.1f} s] {text}", flush=True)

    def save(self) -> None:
        self.result["elapsed_s"] = round(time.monotonic() - self.t0, 2)
        text = json.dumps(self.result, indent=1, default=str)
        if self.out is not None:
            tmp = self.out / (CHECK_JSON + ".tmp")
            tmp.write_text(text)
            tmp.replace(self.out / CHECK_JSON)


def _policy_call(agent, obs: dict, carry, mode: str = "train", params=None):
    """One official policy call (``JAXAgent.policy``'s steps, its parameter swap included)
    without its finiteness assertions.

    Returns:
      (acts, outs without "finite", carry, finite) as host arrays (carry: the official
      per-env list).
    """
    import jax
    from dreamerv3.jaxagent import fetch_async
    obs = agent._filter_data(obs)
    with agent.policy_lock:
        carry = agent._stack(carry)
        obs, carry = jax.device_put((obs, carry), agent.policy_sharded)
        seed = agent._next_seeds(agent.policy_sharded)
        acts, outs, carry = agent._policy(
            agent.policy_params if params is None else params, obs, carry, seed, mode)
        if agent.pending_sync and params is None:
            old = agent.policy_params
            agent.policy_params = agent.pending_sync
            jax.tree.map(lambda x: x.delete(), old)
            agent.pending_sync = None
    carry = agent._split(carry)
    acts, outs = agent._take_outs(fetch_async((acts, outs)))
    finite = outs.pop("finite", {})
    return acts, outs, carry, finite


class _Envs:
    """The run's official envs stepped in this process as the official driver steps them
    (reset actions first; each next action the policy's, NaN as 0; reset where an episode
    ended)."""

    def __init__(self, make_env, n: int):
        import numpy as np
        self.np = np
        self.envs = [make_env(i) for i in range(n)]
        self.act_space = self.envs[0].act_space
        self.reset()

    def reset(self) -> None:
        np = self.np
        n = len(self.envs)
        self.acts = {k: np.zeros((n,) + v.shape, v.dtype) for k, v in self.act_space.items()}
        self.acts["reset"] = np.ones(n, bool)

    def step(self) -> dict:
        np = self.np
        acts = [{k: v[i] for k, v in self.acts.items()} for i in range(len(self.envs))]
        obs = [env.step(a) for env, a in zip(self.envs, acts)]
        return {k: np.stack([o[k] for o in obs]) for k in obs[0]}

    def act(self, acts: dict, obs: dict) -> None:
        np = self.np
        new = {}
        for k, v in acts.items():
            v = np.asarray(v)
            if np.issubdtype(v.dtype, np.floating):
                v = np.nan_to_num(v, nan=0.0, posinf=0.0, neginf=0.0)
            if v.ndim:   # the official driver's mask: no action where an episode ended
                mask = ~obs["is_last"].reshape((-1,) + (1,) * (v.ndim - 1))
                v = v * mask.astype(v.dtype)
            new[k] = v
        new["reset"] = obs["is_last"].copy()
        self.acts = new

    def close(self) -> None:
        for env in self.envs:
            try:
                env.close()
            except Exception:   # noqa: BLE001
                pass


def _probe(log: _CheckLog, entry: dict, name: str, fn) -> None:
    """Run one probe ``fn()`` (returns a dict), store its result (or its error) as
    ``entry[name]`` with its wall time, save the JSON."""
    t = time.monotonic()
    log.say(f"{name} ...")
    try:
        value = fn()
    except Exception as e:   # noqa: BLE001 - a probe's failure is a finding
        value = {"error": f"{type(e).__name__}: {e}"[:3000]}
        traceback.print_exc()
    value["wall_s"] = round(time.monotonic() - t, 2)
    entry[name] = value
    log.say(f"{name}: {json.dumps(value, default=str)[:600]}")
    log.save()


def check_finite(args) -> None:
    """The --check-finite mode: build the official agent as the training loop does, then
    report where its outputs stop being finite (JSON `CHECK_JSON` in --out, rewritten
    after every step; progress on stdout, which the supervising process copies to
    `CHECK_LOG`). First ``primitives`` (`primitive_report`: the initialisers' random and
    special functions alone on the default device); then for each agent of
    ``--check-variants`` (`CHECK_VARIANTS`):

    - ``build``: its wall time; ``params`` and ``policy_params``: `param_report` of the
      parameters and of the policy's copies, and whether the copies equal them;
    - ``policy``: ``--check-finite`` N official policy calls on the run's envs (stepped in
      this process as the official driver steps them: reset first, then the policy's
      actions), the `finite_report` of each call's official ``finite`` output (inputs,
      embed, latents, actions: per key the envs where it is finite, min, max) and the
      actions' finiteness;
    - where a call was not finite, on the first such call's inputs: ``fresh_buffers``
      (the same program on a host round trip of the policy parameters), ``cpu_policy``
      (the same policy function jitted on the CPU with the same parameters, inputs and
      seed), ``matmul_highest`` (retraced under ``jax.default_matmul_precision("highest")``)
      and ``debug_nans`` (the call again under ``jax_debug_nans``: JAX reruns it op by op
      and names the first primitive that made a NaN, or says only the compiled program
      does);
    - ``train`` (``--check-train-steps`` K > 0; the ``loop`` variant, and ``nodonate`` and
      ``float32`` only where the loop variant's training left something non-finite or
      did not run):
      K official train calls on the official dummy batch, the parameters' finiteness
      after them, the metrics' finiteness (on the all-zero dummy batch four are NaN by
      construction, means over no positive rewards or terminations: ``rewstats/pos_*``,
      ``constats/neg_*``), and then ``policy_after_train``: N more policy calls with the
      trained parameters (the official swap, after its first call). Where a train call
      left a parameter non-finite, on the first call's inputs: ``train_debug_nans`` or
      ``train_nans`` (``--check-train-probe`` debug_nans or checkify: the first primitive
      that made a NaN) and
      ``train_highest`` (the same step with full-precision float32 matmuls).

    Args:
      args: the parsed flags (task, seed, size, envs, platform, compute dtype of the
        ``loop`` variant, ``--set``, ``--out``, ``--check-*``).
    """
    import numpy as np
    src = check_official(args.official)
    sys.path.insert(0, str(HERE))
    embodied, agt, official_main = _import_official(src)
    import _official_compat
    import jax
    from dreamerv3 import jaxagent
    from dreamerv3 import ninjax as nj
    out = Path(args.out) if args.out else None
    variants = [v.strip() for v in args.check_variants.split(",") if v.strip()]
    for v in variants:
        if v not in CHECK_VARIANTS:
            fail(f"--check-variants {args.check_variants}: {v!r} is not one of "
                 f"{', '.join(CHECK_VARIANTS)}")
    platform = args.platform or jax.default_backend()
    cache = None
    if args.compile_cache and args.compile_cache != "off":
        cache = Path(args.compile_cache)
        cache.mkdir(parents=True, exist_ok=True)
        jax.config.update("jax_compilation_cache_dir", str(cache))
    logdir = Path(args.logdir).expanduser().resolve() if args.logdir else \
        Path(tempfile.mkdtemp(prefix="dv3check_"))
    settings, _ = resolve_settings(args, logdir)
    result = {"official_commit": OFFICIAL_COMMIT, "mode": "check-finite",
              "argv": sys.argv[1:], "platform": platform, "jax": jax.__version__,
              "devices": [str(d) for d in jax.devices()][:4],
              "adapters": list(_official_compat.APPLIED), "settings": settings,
              "calls": args.check_finite, "variants": {}, "summary": {}}
    try:
        import jaxlib
        result["jaxlib"] = jaxlib.__version__
    except ImportError:
        pass
    log = _CheckLog(out, result)
    log.save()
    _probe(log, result, "primitives", primitive_report)
    os.environ.setdefault("MUJOCO_GL", "off")
    make_env_official = _make_env_fn(official_main.make_env, args.render)
    official_main.make_env = make_env_official
    envs = None
    original_lower = (jaxagent.JAXAgent._lower_train, jaxagent.JAXAgent._lower_report)
    loop_train_bad = None   # after the loop variant trained: anything non-finite?
    for index, variant in enumerate(variants):
        entry = result["variants"].setdefault(variant, {})
        vset = dict(settings)
        if variant == "float32":
            vset["compute_dtype"] = "float32"
        config, _ = build_config(embodied, agt, vset, logdir / variant, platform, None,
                                 args.save_every, args.log_every)
        entry["compute_dtype"] = str(config.jax.compute_dtype)
        # nodonate and float32 train only where the loop variant's training left something
        # non-finite (or did not run): donation and the compute dtype act in training too
        train_steps = args.check_train_steps if variant == "loop" or (
            variant in ("nodonate", "float32") and loop_train_bad is not False) else 0
        entry["donation"] = variant != "nodonate"
        entry["train_and_report_compiled_at_build"] = variant == "loop"
        _official_compat.set_donation(variant != "nodonate")
        jaxagent.JAXAgent._lower_train, jaxagent.JAXAgent._lower_report = original_lower
        if variant != "loop":
            _skip_train_compile(jaxagent)
        t = time.monotonic()
        log.say(f"{variant}: building the official agent ({entry['compute_dtype']}, "
                f"donation {'on' if entry['donation'] else 'off'})")
        try:
            agent = official_main.make_agent(config)
        except Exception as e:   # noqa: BLE001
            entry["build"] = {"error": f"{type(e).__name__}: {e}"[:3000]}
            traceback.print_exc()
            log.save()
            continue
        entry["build"] = {"wall_s": round(time.monotonic() - t, 2)}
        log.say(f"{variant}: built in {entry['build']['wall_s']} s")
        _probe(log, entry, "params", lambda: param_report(agent.params))
        _probe(log, entry, "policy_params", lambda: {
            **param_report(agent.policy_params),
            "copies": _copies_differ(agent.params, agent.policy_params)})
        if envs is None:
            envs = _Envs(lambda i: make_env_official(config, i), int(config.run.num_envs))
        else:
            envs.reset()

        first_bad = {}

        def run_policy(n: int, label: str) -> dict:
            carry = agent.init_policy(int(config.run.num_envs))
            calls, bad_calls = [], []
            for i in range(n):
                obs = envs.step()
                inputs = (obs, carry)
                acts, outs, carry, finite = _policy_call(agent, obs, carry)
                rep = finite_report(finite)
                keys = bad_keys(rep)
                act_ok = {k: bool(np.isfinite(np.asarray(v, np.float64)).all())
                          for k, v in acts.items()}
                calls.append({"call": i, "bad_keys": keys, "acts_finite": act_ok,
                              "finite": rep if (i == 0 or keys) and len(calls) < 4 else None})
                if keys:
                    bad_calls.append(i)
                    if "inputs" not in first_bad:
                        first_bad["inputs"] = inputs
                        first_bad["label"] = f"{label} call {i}"
                envs.act(acts, obs)
            return {"calls": n, "nonfinite_calls": bad_calls, "per_call": calls}

        _probe(log, entry, "policy", lambda: run_policy(args.check_finite, "policy"))
        if "inputs" in first_bad:
            obs0, carry0 = first_bad["inputs"]
            entry["probes_on"] = first_bad["label"]

            def fresh():
                fresh_params = jax.device_put(jax.device_get(agent.policy_params),
                                              agent.policy_mirrored)
                _, _, _, finite = _policy_call(agent, obs0, carry0, params=fresh_params)
                return {"bad_keys": bad_keys(finite_report(finite))}

            def on_cpu():
                cpu = jax.devices("cpu")[0]
                pure = nj.pure(agent.agent.policy)

                def fn(params, obs, carry, seed):
                    return pure(params, obs, carry, "train", seed=seed)[1]
                with jax.transfer_guard("allow"):
                    params = jax.device_put(jax.device_get(agent.policy_params), cpu)
                    obs = jax.device_put(agent._filter_data(obs0), cpu)
                    carry = jax.device_put(jax.device_get(agent._stack(carry0)), cpu)
                    seed = jax.device_put(agent._next_seeds(agent.policy_sharded), cpu)
                    _, outs, _ = jax.jit(fn)(params, obs, carry, seed)
                    finite = jax.device_get(outs["finite"])
                return {"device": str(cpu), "bad_keys": bad_keys(finite_report(finite))}

            def highest():
                with jax.default_matmul_precision("highest"):
                    _, _, _, finite = _policy_call(agent, obs0, carry0,
                                                   params=agent.policy_params)
                return {"bad_keys": bad_keys(finite_report(finite))}

            def debug_nans():
                try:
                    with jax.debug_nans(True), jax.transfer_guard("allow"):
                        _, _, _, finite = _policy_call(agent, obs0, carry0,
                                                       params=agent.policy_params)
                except FloatingPointError as e:
                    return {"raised": "FloatingPointError", "message": str(e)[:3000],
                            "official_frames": _official_frames(e.__traceback__, src)}
                return {"raised": None, "bad_keys": bad_keys(finite_report(finite))}

            _probe(log, entry, "fresh_buffers", fresh)
            if platform != "cpu":
                _probe(log, entry, "cpu_policy", on_cpu)
            _probe(log, entry, "matmul_highest", highest)
            _probe(log, entry, "debug_nans", debug_nans)

        if train_steps > 0:
            def train():
                B, T = config.batch_size, config.batch_length
                data = agent._dummy_batch(agent.spaces, (B, T))
                carry = agent.init_train(B)
                mets_bad, steps = [], []
                for i in range(train_steps):
                    batch = {**jax.device_put(data, agent.train_sharded),
                             "seed": agent._next_seeds(agent.train_sharded)}
                    if i == 0:   # the first call's inputs, for train_nans
                        with jax.transfer_guard("allow"):
                            first_train.update(params=jax.device_get(agent.params),
                                               data=jax.device_get(batch),
                                               carry=jax.device_get(carry))
                    t1 = time.monotonic()
                    _, carry, mets = agent.train(batch, carry)
                    jax.block_until_ready(agent.params)
                    steps.append(round(time.monotonic() - t1, 3))
                    for k, v in mets.items():
                        a = np.asarray(v, np.float64) if np.asarray(v).dtype.kind == "f" \
                            else None
                        if a is not None and not np.isfinite(a).all():
                            mets_bad.append(k)
                return {"steps": train_steps, "step_s": steps,
                        "nonfinite_metrics": sorted(set(mets_bad))[:20],
                        "params_after": param_report(agent.params)}
            first_train = {}
            _probe(log, entry, "train", train)
            bad = entry["train"].get("params_after", {}).get("nonfinite_values")
            if first_train and (bad or args.check_train_probe == "checkify"):
                if args.check_train_probe == "checkify":
                    _probe(log, entry, "train_nans",
                           lambda: train_nan_report(_pure_train(agent), first_train, src))
                elif args.check_train_probe == "debug_nans":
                    _probe(log, entry, "train_debug_nans",
                           lambda: train_debug_nans_report(_pure_train(agent), first_train,
                                                           src))
            if first_train and bad:
                _probe(log, entry, "train_highest",
                       lambda: train_highest_report(_pure_train(agent), first_train))
            if "error" not in entry["train"]:
                envs.reset()
                first_bad.clear()
                _probe(log, entry, "policy_after_train",
                       lambda: run_policy(args.check_finite, "after train"))
        if variant == "loop" and "train" in entry:
            loop_train_bad = bool(entry["train"].get("error")
                                  or entry["train"].get("params_after", {})
                                  .get("nonfinite_values")
                                  or entry.get("policy_after_train", {})
                                  .get("nonfinite_calls", True))
        nonfinite = {
            "params": entry.get("params", {}).get("nonfinite_values"),
            "policy_params": entry.get("policy_params", {}).get("nonfinite_values"),
            "policy_calls": entry.get("policy", {}).get("nonfinite_calls"),
            "first_bad_keys": next((c["bad_keys"] for c in entry.get("policy", {})
                                    .get("per_call", []) if c["bad_keys"]), []),
        }
        for probe in ("fresh_buffers", "cpu_policy", "matmul_highest", "debug_nans"):
            if probe in entry:   # the output keys still non-finite, or what went wrong
                p = entry[probe]
                nonfinite[probe] = p.get("error") or p.get("message") or p.get("bad_keys")
        if "train" in entry:
            p = entry["train"]
            nonfinite["train"] = p.get("error") or {
                "params_after": p["params_after"]["nonfinite_values"],
                "metrics": p["nonfinite_metrics"]}
        if "policy_after_train" in entry:
            p = entry["policy_after_train"]
            nonfinite["policy_after_train"] = p.get("error") or p["nonfinite_calls"]
        result["summary"][variant] = nonfinite
        log.say(f"{variant}: {json.dumps(nonfinite, default=str)[:800]}")
        log.save()
        agent = None            # the variant's agent freed before the next one is built
        import gc
        gc.collect()
    if envs is not None:
        envs.close()
    _official_compat.set_donation(True)
    log.say("done")
    log.save()
