"""The offline check's ``--pack DIR``: a prepared run's home, packed to train elsewhere.

`pack_home` copies the prepared run, its dataset and the files of its source runs that the
report reads (`PACKED_RUN_FILES`) into a new home; `check_pack` refuses a pack before
anything is built (`offline_check.start_or_resume` and `offline_check.prepared_only` call them).
"""
from __future__ import annotations

import os
from pathlib import Path

from check_run import read_json
from offline_sources import split_source

PACKED_RUN_FILES = ("config.json", "summary.json", "metrics.csv", "benchmark.json")
"""What a packed home keeps of a source run and of the TD-MPC2 run beside (of the latter
its report/ too: `evaluate --runs` compares with it there)."""


def check_pack_dest(dest: Path, home: Path, runs: list[str]) -> None:
    """Refuse a ``--pack`` folder before anything is prepared (SystemExit, one line): it
    exists, its parent is not a folder, it lies inside the home folder (the copy would
    hold itself, or list as a run or a dataset), or a run to pack (``runs``, as
    benchmark.json records them) lies outside the home folder or leaves it with ``..``."""
    home = Path(home).expanduser().resolve()
    if dest.exists() or dest.is_symlink():
        raise SystemExit(f"--pack {dest}: it exists; give a new folder")
    parent = next((q for q in dest.parents if q.exists()), None)
    if parent is not None and not parent.is_dir():
        raise SystemExit(f"--pack {dest}: {parent} is not a folder")
    if dest == home or home in dest.parents:
        raise SystemExit(f"--pack {dest}: inside the home folder {home}; give a folder "
                         "outside it")
    bad = [r for r in runs if Path(r).is_absolute() or ".." in Path(r).parts]
    if bad:
        raise SystemExit(f"--pack: the runs {bad} lie outside the home folder {home}; they "
                         "cannot travel with it (give runs inside it)")


def check_pack(dest: Path, home: Path, runs: list[str], run_dir: Path | None) -> Path | None:
    """`check_pack_dest`, then, given the prepared run ``run_dir``: it has not trained, its
    dataset and the ``runs`` to copy (home-relative) are in ``home``. Returns the dataset's
    home-relative folder (None without ``run_dir``). Raises SystemExit naming the problem,
    before anything is written."""
    check_pack_dest(dest, home, runs)
    if run_dir is None:
        return None
    if (run_dir / "metrics.csv").exists() or (run_dir / "checkpoints").exists():
        raise SystemExit(f"--pack: {run_dir} has trained already (metrics.csv or "
                         "checkpoints/); pack a run that --prepare-only wrote")
    name, _, full = read_json(run_dir / "config.json", "--pack")["dataset"].partition("@")
    dataset = Path("datasets") / name / full
    if not (home / dataset / "manifest.json").is_file():
        raise SystemExit(f"--pack: the run's dataset {name}@{full[:10]} is not in {home}")
    missing = [r for r in runs if not (home / r / "config.json").is_file()]
    if missing:
        raise SystemExit(f"--pack: the runs {missing} recorded in {run_dir / 'benchmark.json'} "
                         f"are not in {home} (no config.json)")
    return dataset


def pack_home(run_dir: Path, home: Path, bench: dict, dest: Path) -> Path:
    """Copy what training the prepared check run ``run_dir`` elsewhere needs into the new
    folder ``dest``, a home folder of its own: the run's config.json and benchmark.json,
    its dataset (``datasets/<name>/<hash>/``), and `PACKED_RUN_FILES` of its source runs
    and of the TD-MPC2 run beside it (about 1 MB for one task and a 50,000-env-step
    source; no episode sets, no checkpoints). Written into an owned temporary sibling
    (`wmx.temporaries`; a killed pack's is swept by the next) and renamed: ``dest`` is
    whole or absent. Returns ``dest``. Raises SystemExit: `check_pack`'s refusals (the
    destination; the run has trained: resume it where it is; a run to pack has no
    config.json; the dataset is not in the home folder)."""
    import shutil

    from wmx import temporaries
    runs = [*(split_source(s)[0] for s in bench.get("sources", [])),
            *([bench["tdmpc2_run"]] if bench.get("tdmpc2_run") else [])]
    dataset = check_pack(dest, home, runs, run_dir)
    dest.parent.mkdir(parents=True, exist_ok=True)
    temporaries.sweep(dest.parent)
    tmp = temporaries.make_dir(dest.parent, dest.name)
    try:
        shutil.copytree(home / dataset, tmp / dataset)
        for rel, files in [(Path("runs") / run_dir.name, ("config.json", "benchmark.json")),
                           *((Path(r), PACKED_RUN_FILES) for r in runs)]:
            (tmp / rel).mkdir(parents=True, exist_ok=True)
            for f in files:
                if (home / rel / f).is_file():
                    shutil.copy2(home / rel / f, tmp / rel / f)
        beside = bench.get("tdmpc2_run")
        if beside and (home / beside / "report").is_dir():
            shutil.copytree(home / beside / "report", tmp / beside / "report")
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return dest


