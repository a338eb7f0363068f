"""The data-parallel side of tests/train_offline/test_train_offline.py, in a fresh process.

The device count is fixed when JAX starts, so the tests run this file in a
subprocess with N emulated CPU devices (``--xla_force_host_platform_device_count``):

    python data_parallel_check.py chunk N RUN_DIR HOME INIT.npz OUT.npz [--stream]
    python data_parallel_check.py cli N -- <train_offline arguments> [-- <more> ...]

``chunk``: the offline run of RUN_DIR's config.json (its dataset in HOME, in
memory) on a mesh of the N devices: the seeds' initial states are INIT.npz
(leaves of `program.checkpoint_items`, written by the test from the same
`init_carries`, so this process compiles the chunk only), then two chunks of
2 updates (updates 0..1 and 2..3). With ``--stream`` the batches are host
arrays (INIT.npz's ``batch/<key>`` [S, 2, ...] per chunk, ``batch0/`` and
``batch1/``) placed by `program.shard_batches` and trained by the streaming
chunk. Writes OUT.npz: the leaves after the 4 updates and the per-seed
summed losses of each chunk (``sums<c>/<key>``), and a JSON line (``RESULT
{...}``) of what the compiled program shards.

``cli``: `train_offline` (wmx.train_offline.cli.main) with each group of
arguments in turn (one process: the programs compile once), evaluating on
the tests' stand-in envs (no MJX compile); exits with the first non-zero
status. With --coordinator etc. this is one process of a multi-process run
(N devices each).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

MODE, N = sys.argv[1], int(sys.argv[2])
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                           + f" --xla_force_host_platform_device_count={N}")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from wmx.train_offline import loop, program  # noqa: E402


def _chunk(run_dir: Path, home: Path, init: Path, out: Path, stream: bool) -> None:
    from wmx.datasets.readers import load_numpy
    from wmx.runs.offline_config import OfflineRunConfig
    rc = OfflineRunConfig.from_json(json.loads((run_dir / "config.json").read_text()))
    agent, cfg = rc.agent_module, rc.agent_config
    spec = agent.batch_spec(cfg)
    saved = np.load(init)
    like = program.checkpoint_items(
        jax.eval_shape(lambda: program.init_carries(agent, cfg, rc.seeds)))
    leaves, treedef = jax.tree.flatten(like)
    items = jax.tree.unflatten(treedef, [saved[f"leaf{i:04d}"] for i in range(len(leaves))])
    mesh = program.data_mesh(N)
    carries = program.replicate(program.from_checkpoint_items(items), mesh)
    tasks = program.replicate(agent.task_context(cfg, rc.task_set), mesh)
    if stream:
        fn = program.make_stream_chunk_fn(agent, cfg, mesh)
        data = [program.shard_batches({k[len(f"batch{c}/"):]: saved[k] for k in saved.files
                                       if k.startswith(f"batch{c}/")}, spec, mesh)
                for c in (0, 1)]
    else:
        fn = program.make_chunk_fn(agent, cfg, mesh)
        ds = loop.open_run_dataset(rc, home)
        data = [program.device_dataset(load_numpy(ds), spec, mesh)] * 2
    idx = [np.arange(0, 2, dtype=np.int32), np.arange(2, 4, dtype=np.int32)]
    hlo = fn.lower(carries, data[0], tasks, idx[0]).compile().as_text()
    res = {}
    for c in (0, 1):
        carries, sums = fn(carries, data[c], tasks, idx[c])
        res.update({f"sums{c}/{k}": np.asarray(v) for k, v in sums.items()})
    replicated = all(x.sharding.is_fully_replicated and len(x.sharding.device_set) == N
                     for x in jax.tree.leaves(carries))
    flat = jax.tree.leaves(program.checkpoint_items(carries))
    res.update({f"leaf{i:04d}": np.asarray(x) for i, x in enumerate(flat)})
    np.savez(out, **res)
    S, B, H1, O = len(rc.seeds), spec.batch, spec.length, rc.task_set.max_obs_dim
    print("RESULT " + json.dumps({
        "devices": jax.device_count(), "mesh": mesh.size, "carries_replicated": replicated,
        # the partitioned program holds obs [S, H+1, B/N, O] per device, never the global batch
        "per_device_obs": f"f32[{S},{H1},{B // N},{O}]" in hlo,
        "global_obs": f"f32[{S},{H1},{B},{O}]" in hlo,
        "all_reduces": hlo.count(" all-reduce("),
        "batch_sharding": str(data[0]["obs"].sharding.spec) if stream else None}))


def _cli(groups: list[list[str]]) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from stand_in_env import stand_in_env
    from wmx.train_offline import cli
    loop.cached_env = stand_in_env
    for argv in groups:
        rc = cli.main(argv)
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    if MODE == "chunk":
        assert jax.device_count() == N, jax.devices()
        run_dir, home, init, out = map(Path, sys.argv[3:7])
        _chunk(run_dir, home, init, out, "--stream" in sys.argv[7:])
    else:
        groups: list[list[str]] = []
        for a in sys.argv[3:]:
            if a == "--":
                groups.append([])
            else:
                groups[-1].append(a)
        sys.exit(_cli(groups))
