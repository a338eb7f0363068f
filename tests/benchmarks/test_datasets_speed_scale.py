"""benchmarks/datasets_speed.py --scale pieces on a tiny synthetic dataset:
the reader probe's figures, and the page-cache eviction it runs first."""
import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "datasets_speed", Path(__file__).resolve().parents[2] / "benchmarks" / "datasets_speed.py")
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_stream_probe_on_a_tiny_synthetic_dataset(tmp_path):
    from wmx.datasets.synth import write_synthetic_dataset
    r = write_synthetic_dataset(tmp_path, 40 * 21, episode_length=20, seed=0)
    bench.evict_page_cache(r.path)
    for reader in ("slices", "windows"):
        spec = {"path": str(r.path), "reader": reader, "batch": 8, "H": 3, "length": 10,
                "slices_per_episode": 1, "num_threads": 1, "num_workers": 0, "seed": 0,
                "warmup": 1, "batches": 3}
        out = bench.stream_probe(spec)
        assert out["items_per_s"] > 0 and 0 < out["first_batch_s"] < 120
        assert out["peak_rss_mb"] >= out["rss_after_import_mb"] > 0
    facts = bench.machine_facts()
    assert facts["cpus"] >= 1 and len(facts["loadavg_1_5_15"]) == 3
