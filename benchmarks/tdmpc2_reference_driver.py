"""Driver of the official TD-MPC2 (PyTorch) for `benchmarks/tdmpc2_speed.py`.

Runs in the reference's own Python environment (torch, tensordict, omegaconf,
hydra-core; never wmx's), as a child process of the benchmark, and answers
one JSON command per stdin line with one JSON line on stdout:

    {"cmd": "info"}                                   versions, threads, checkout check
    {"cmd": "setup", "model_size": 5, ...}            build the agent, warm up (compile)
    {"cmd": "time", "kind": "update"|"plan", "model_size": 5, "n": 7}
    {"cmd": "matmul", "n": 2048, "repeats": 9}        torch float32 n^3 matmul rate
    {"cmd": "quit"}

The checkout (`--reference-dir`, the root of a nicklashansen/tdmpc2 tree at
e9f5932) is never edited: its `tdmpc2/` folder is copied to a temporary
directory and the CPU device patch is applied to the copy (the string
'cuda:0' -> 'cpu' in `tdmpc2.py`, the agent's device and the multi-task
discount tensor, and in `common/scale.py`, the RunningScale buffers), the
change fixtures/tdmpc2/README.md "What had to change" describes. The git
blob ids of the files read are compared with e9f5932's and the result is
reported by "info".

The agent is built from the checkout's `config.yaml` through its own
`parse_cfg` (hydra's working-directory look-up stubbed; it only forms a log
path), with the fields `make_env` would fill set by hand (state obs of
`obs_dim`, `action_dim`, `episode_length`). `update()` draws from a stand-in
buffer whose `sample()` returns one fixed batch (obs ~ N(0, 1), action ~
U(-1, 1), reward ~ N(0, 1), not terminated); `act()` plans one decision
(t0=False, eval_mode=False) from a fixed observation. Times are wall
milliseconds (torch on the CPU is synchronous) and process CPU milliseconds
per call, after the warm-up calls of "setup".

    <reference venv>/bin/python benchmarks/tdmpc2_reference_driver.py --reference-dir DIR
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

COMMIT = "e9f59321933cbc8e11a002b842adc7d4ffae8ff1"
# git blob ids at e9f5932 of the files the driver imports (`git ls-tree e9f5932 tdmpc2/...`)
BLOBS = {
    "tdmpc2.py": "6d19f52de096e50a53b89c653b29e8676a3cc1c2",
    "config.yaml": "ff15dbb69952f49df72353db4bf56240be04cfb1",
    "common/__init__.py": "7fa5309348c1d34fab36d3b5e39c2dee9ba8e42a",
    "common/init.py": "965365848e2e583f9a00048194cdf7d8fb0e2647",
    "common/layers.py": "97e977c2a70968768dae3606d236ee47a30e2be3",
    "common/math.py": "658ae23ece7c3d321229cb5199c5766ad6fdc6da",
    "common/parser.py": "a8d9f2500cce9f27b6b7b6a341166a690ee3bc89",
    "common/scale.py": "bee2019a7cbec6162933981c61e9616f758c8aae",
    "common/world_model.py": "3e36c3637a38166d2684105f71b81bebdef58d92",
}
# The CPU device patch: (file, old, new, occurrences expected at e9f5932).
CPU_PATCH = [("tdmpc2.py", "'cuda:0'", "'cpu'", 2),
             ("common/scale.py", "'cuda:0'", "'cpu'", 2),
             ("tdmpc2.py", "capturable=True", "capturable=False", 2)]


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def prepare(reference_dir: Path) -> tuple[Path, dict]:
    """Copy `reference_dir/tdmpc2` to a temporary directory and apply `CPU_PATCH`.

    Returns (the patched copy's tdmpc2/ folder, a report of the checkout:
    per-file match with e9f5932 and the patch's replacement counts).
    Raises SystemExit when the folder is missing or a patch site is not found.
    """
    src = reference_dir / "tdmpc2"
    if not (src / "tdmpc2.py").is_file():
        raise SystemExit(f"{src}/tdmpc2.py not found: --reference-dir must be the root of a "
                         "nicklashansen/tdmpc2 checkout (see benchmarks/tdmpc2_speed.py)")
    report = {"reference_dir": str(reference_dir), "expected_commit": COMMIT, "files": {}}
    for rel, blob in BLOBS.items():
        p = src / rel
        report["files"][rel] = (p.is_file() and git_blob_id(p.read_bytes()) == blob)
    report["matches_expected_commit"] = all(report["files"].values())
    dst = Path(tempfile.mkdtemp(prefix="tdmpc2-ref-")) / "tdmpc2"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("envs", "__pycache__"))
    report["patch"] = []
    for rel, old, new, want in CPU_PATCH:
        p = dst / rel
        text = p.read_text()
        n = text.count(old)
        if n == 0:
            raise SystemExit(f"CPU patch: {old!r} not found in {rel}")
        p.write_text(text.replace(old, new))
        report["patch"].append({"file": rel, "old": old, "new": new, "replaced": n,
                                "expected": want})
    return dst, report


class StandInBuffer:
    """`sample()` returns one fixed batch (obs, action, reward, terminated, task=None)."""

    def __init__(self, torch, cfg, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        H, B, S, A = cfg.horizon, cfg.batch_size, cfg.obs_shape["state"][0], cfg.action_dim
        self.batch = (torch.randn(H + 1, B, S, generator=g),
                      torch.rand(H, B, A, generator=g) * 2 - 1,
                      torch.randn(H, B, 1, generator=g),
                      torch.zeros(H, B, 1),
                      None)

    def sample(self):
        return self.batch


class Driver:
    def __init__(self, code_dir: Path, report: dict, compile_mode: str):
        sys.path.insert(0, str(code_dir))
        import torch                                           # noqa: PLC0415
        self.torch = torch
        self.code_dir = code_dir
        self.report = report
        self.compile_mode = compile_mode
        self.agents: dict[int, tuple] = {}

    def make_cfg(self, model_size: int, obs_dim: int, action_dim: int, episode_length: int,
                 batch_size: int):
        import hydra                                           # noqa: PLC0415
        from omegaconf import OmegaConf                        # noqa: PLC0415
        hydra.utils.get_original_cwd = lambda: tempfile.gettempdir()   # only a log path
        from common.parser import parse_cfg                    # noqa: PLC0415
        raw = OmegaConf.load(self.code_dir / "config.yaml")
        raw.pop("defaults", None)
        raw.task, raw.obs, raw.model_size = "walker-walk", "state", model_size
        raw.batch_size = batch_size
        if self.compile_mode != "config":
            raw.compile = self.compile_mode == "on"
        cfg = parse_cfg(raw)
        cfg.obs_shape = {"state": (obs_dim,)}
        cfg.action_dim, cfg.episode_length = action_dim, episode_length
        cfg.seed_steps = max(1000, 5 * episode_length)
        return cfg

    def setup(self, model_size: int, obs_dim: int = 24, action_dim: int = 6,
              episode_length: int = 500, batch_size: int = 256, warmup: int = 3) -> dict:
        torch = self.torch
        from tdmpc2 import TDMPC2                              # noqa: PLC0415
        torch.manual_seed(model_size)
        cfg = self.make_cfg(model_size, obs_dim, action_dim, episode_length, batch_size)
        stdout, sys.stdout = sys.stdout, sys.stderr           # the agent prints
        try:
            agent = TDMPC2(cfg)
        finally:
            sys.stdout = stdout
        buf = StandInBuffer(torch, cfg)
        obs = torch.randn(obs_dim, generator=torch.Generator().manual_seed(1))
        t = time.perf_counter()
        for _ in range(warmup):
            agent.update(buf)
        t_upd = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(warmup):
            agent.act(obs, t0=False, eval_mode=False)
        t_plan = time.perf_counter() - t
        self.agents[model_size] = (agent, buf, obs)
        dims = {k: getattr(cfg, k) for k in ("enc_dim", "mlp_dim", "latent_dim",
                                             "num_enc_layers", "num_q", "horizon",
                                             "batch_size", "num_samples", "num_pi_trajs",
                                             "num_elites", "iterations", "dropout", "compile")}
        return {"model_size": model_size, "cfg": dims,
                "params": sum(p.numel() for p in agent.model.parameters()),
                "warmup_calls": warmup, "warmup_update_s": t_upd, "warmup_plan_s": t_plan}

    def time(self, kind: str, model_size: int, n: int) -> dict:
        agent, buf, obs = self.agents[model_size]
        if kind == "update":
            fn = lambda: agent.update(buf)                     # noqa: E731
        elif kind == "plan":
            fn = lambda: agent.act(obs, t0=False, eval_mode=False)   # noqa: E731
        else:
            raise ValueError(kind)
        wall, cpu = [], []
        for _ in range(n):
            c, t = time.process_time(), time.perf_counter()
            fn()
            wall.append((time.perf_counter() - t) * 1e3)
            cpu.append((time.process_time() - c) * 1e3)
        return {"wall_ms": wall, "cpu_ms": cpu}   # as _machine.time_calls (no jax here)

    def matmul(self, n: int = 2048, repeats: int = 9) -> dict:
        torch = self.torch
        a, b = torch.randn(n, n), torch.randn(n, n)
        a @ b
        ts = []
        for _ in range(repeats):
            t = time.perf_counter()
            a @ b
            ts.append(time.perf_counter() - t)
        ts.sort()
        med = ts[len(ts) // 2]
        return {"n": n, "median_ms": med * 1e3, "gflop_per_s": 2 * n ** 3 / med / 1e9}

    def info(self) -> dict:
        torch = self.torch
        return {"torch": torch.__version__, "threads": torch.get_num_threads(),
                "python": sys.version.split()[0], "compile_mode": self.compile_mode,
                "mkldnn": torch.backends.mkldnn.is_available(),
                "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                "checkout": self.report, "pid": os.getpid()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reference-dir", required=True, type=Path)
    p.add_argument("--compile", choices=("config", "on", "off"), default="config",
                   help="torch.compile of update/plan: as config.yaml says (default), or forced")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = p.parse_args()
    code_dir, report = prepare(args.reference_dir.resolve())
    out = sys.stdout
    sys.stdout = sys.stderr                  # the protocol owns the real stdout
    drv = Driver(code_dir, report, args.compile)
    if args.threads:
        drv.torch.set_num_threads(args.threads)
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        cmd = msg.pop("cmd")
        if cmd == "quit":
            break
        try:
            res = {"ok": True, **getattr(drv, cmd)(**msg)}
        except Exception as e:                                  # noqa: BLE001
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        out.write(json.dumps(res) + "\n")
        out.flush()
    shutil.rmtree(code_dir.parent, ignore_errors=True)


if __name__ == "__main__":
    main()
