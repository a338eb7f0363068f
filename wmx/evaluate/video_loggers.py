"""`evaluate --video N --logger ...`: the report's videos in TensorBoard and W&B.

Both write inside the report directory while it is being built, so they
are part of the atomic report (docs/evaluation.md "Videos"):

- **TensorBoard** (tensorboardX): ``<report>/tensorboard/seed_<s>/``, one
  image summary per video, tag ``video/<task>/ep<i>``, at the checkpoint's
  x value (env steps online, updates offline; the trainers' axes). The
  image is an animated GIF at half the video's size (TensorBoard's image
  tab plays it): what tensorboardX's ``add_video`` writes, made here with
  imageio's GIF writer instead of the moviepy package ``add_video`` needs.
- **W&B**: one W&B run per evaluation (name ``<run>-evaluate``, group the
  run's name, job type ``evaluate``, ``dir`` the report), logging each MP4
  as ``wandb.Video`` under ``video/<task>/seed_<s>/ep<i>``, in the mode the
  trainers use (`wmx.runs.loggers.wandb_mode`: offline without an API key
  or network; ``wandb sync <report>/wandb/offline-run-*`` uploads it).
"""
from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import Any, Sequence

from wmx.runs.loggers import STATE_FILE, wandb_mode

__all__ = ["TB_DIR", "gif_bytes", "log_videos"]

TB_DIR = "tensorboard"


def gif_bytes(mp4: str | Path, fps: float, scale: int = 2) -> tuple[bytes, int, int]:
    """An animated GIF (looping) of an MP4, every ``scale``-th pixel: (bytes, height, width).

    The frame duration is 1000 / fps ms, which GIF stores in 10 ms steps.
    Raises OSError when the file cannot be decoded.
    """
    import imageio.v2 as iio
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
        frames = [f[::scale, ::scale] for f in iio.mimread(str(mp4), format="FFMPEG",
                                                             memtest=False)]
    data = iio.mimwrite("<bytes>", frames, format="GIF", duration=1000.0 / fps, loop=0)
    return data, int(frames[0].shape[0]), int(frames[0].shape[1])


def _tensorboard(videos: Sequence[dict], folder: Path, step: int) -> str:
    from tensorboardX import FileWriter
    from tensorboardX.proto.summary_pb2 import Summary
    writers: dict[int, Any] = {}
    try:
        for v in videos:
            w = writers.get(v["seed"])
            if w is None:
                w = writers[v["seed"]] = FileWriter(str(folder / TB_DIR / f"seed_{v['seed']}"),
                                                    filename_suffix=f".{time.time_ns()}")
            data, h, wd = gif_bytes(folder / v["path"], v["fps"])
            image = Summary.Image(height=h, width=wd, colorspace=3, encoded_image_string=data)
            w.add_summary(Summary(value=[Summary.Value(tag=f"video/{v['task']}/ep{v['episode']}",
                                                       image=image)]), global_step=step)
    finally:
        for w in writers.values():
            w.close()
    return TB_DIR


def _wandb_project(run_dir: Path) -> str:
    try:
        saved = json.loads((run_dir / STATE_FILE).read_text()).get("wandb") or {}
    except (OSError, ValueError, AttributeError):
        saved = {}
    return saved.get("project") or os.environ.get("WANDB_PROJECT", "wmx")


def _wandb(videos: Sequence[dict], folder: Path, run_name: str, run_dir: Path, x: str,
           step: int, config: dict) -> dict[str, Any]:
    import wandb
    mode = wandb_mode()
    run = wandb.init(project=_wandb_project(run_dir), name=f"{run_name}-evaluate",
                     group=run_name, job_type="evaluate", dir=str(folder), config=config,
                     mode=mode, settings=wandb.Settings(console="off", silent=True))
    try:
        row: dict[str, Any] = {x: step}
        for v in videos:
            row[f"video/{v['task']}/seed_{v['seed']}/ep{v['episode']}"] = wandb.Video(
                str(folder / v["path"]), caption=f"return {v['return']:.1f}")
        run.log(row)
        info = {"id": run.id, "project": run.project, "mode": mode,
                "dir": os.path.relpath(Path(run.dir).parent, folder)}
    except BaseException:
        run.finish(exit_code=1)
        raise
    run.finish()
    return info


def log_videos(names: Sequence[str], videos: Sequence[dict], folder: str | Path, *,
               run_name: str, run_dir: str | Path, x: str, step: int,
               config: dict | None = None) -> dict[str, Any]:
    """Log the written ``videos`` (`video.write_videos` entries, paths relative to
    ``folder``) to the loggers in ``names`` ("csv" needs nothing; see the module doc).

    x, step: the x-axis name ("env_steps" / "updates") and the checkpoint's
    value; config: the W&B run's config. Returns {logger: where} for
    report.json: "tensorboard" -> the folder relative to ``folder``,
    "wandb" -> {id, project, mode, dir}.
    """
    folder = Path(folder)
    out: dict[str, Any] = {}
    if "tensorboard" in names:
        out["tensorboard"] = _tensorboard(videos, folder, step)
    if "wandb" in names:
        out["wandb"] = _wandb(videos, folder, run_name, Path(run_dir), x, step, dict(config or {}))
    return out
