"""Evaluation videos: render recorded episodes with MuJoCo on the host, encode them as MP4.

The jitted rollout only records each video episode's physics
(`wmx.acting.make_evaluate_fn` with ``record``); frames are made here,
afterwards, from the env's host model: per recorded state, a ``mujoco.MjData``
gets its qpos (and mocap poses), ``mj_forward`` places the bodies, and a
``mujoco.Renderer`` draws the scene from the model's first camera (DMC
models define a fixed or tracking view as camera 0; a model without
cameras gets the free camera) at Playground's default render size,
320 x 240 (width x height). One frame per agent step plus the reset state:
T+1 frames, played at 1 / (control dt x action repeat) frames per second.

Encoding: imageio with the imageio-ffmpeg binary, H.264 (libx264,
yuv420p). The GL backend must be chosen before ``mujoco`` is imported
(`wmx.evaluate.gl_backend`).
"""
from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import numpy as np

__all__ = ["HEIGHT", "WIDTH", "Recording", "video_path", "camera_of", "render_frames",
           "write_mp4", "write_videos"]

HEIGHT, WIDTH = 240, 320
"""Frame size in pixels (Playground's `MjxEnv.render` default)."""
VIDEOS_DIR = "videos"


@dataclasses.dataclass(frozen=True)
class Recording:
    """The recorded video episodes of one task and seed.

    physics: {name: f32[N, T+1, ...]} (`wmx.envs.base.Env.physics` per
    state; row 0 the reset state); returns: f32[N], the episodes' returns;
    mj_model: the env's ``mujoco.MjModel``; fps: frames per second,
    1 / (control dt x action repeat).
    """
    task: str
    seed: int
    physics: Mapping[str, np.ndarray]
    returns: np.ndarray
    mj_model: Any
    fps: float

    @property
    def episodes(self) -> int:
        return int(self.physics["qpos"].shape[0])

    @property
    def frames(self) -> int:
        return int(self.physics["qpos"].shape[1])


def video_path(task: str, seed: int, episode: int) -> str:
    """``videos/<task>_seed<seed>_ep<episode>.mp4``, relative to the report directory."""
    return f"{VIDEOS_DIR}/{task}_seed{seed}_ep{episode}.mp4"


def camera_of(mj_model) -> tuple[int, str]:
    """(camera id, name) frames are drawn from: the model's camera 0, else the free
    camera (-1, "free")."""
    if mj_model.ncam == 0:
        return -1, "free"
    import mujoco
    return 0, mujoco.mj_id2name(mj_model, mujoco.mjtObj.mjOBJ_CAMERA, 0) or "0"


def render_frames(mj_model, physics: Mapping[str, np.ndarray], *, camera: int = 0,
                  height: int = HEIGHT, width: int = WIDTH) -> Iterator[np.ndarray]:
    """Yield uint8[height, width, 3] RGB frames of one episode, one per row of ``physics``.

    physics: {"qpos": f32[n, nq], optional "mocap_pos" f32[n, nmocap, 3],
    "mocap_quat" f32[n, nmocap, 4]}. Raises ValueError for a qpos width that
    is not the model's nq; mujoco's errors for a GL context that cannot be
    made (choose the backend first: `gl_backend.choose_gl_backend`).
    """
    import mujoco
    qpos = np.asarray(physics["qpos"], np.float64)
    if qpos.ndim != 2 or qpos.shape[1] != mj_model.nq:
        raise ValueError(f"qpos has shape {qpos.shape}; the model needs [n, {mj_model.nq}]")
    mocap = {k: np.asarray(physics[k], np.float64) for k in ("mocap_pos", "mocap_quat")
             if k in physics}
    data = mujoco.MjData(mj_model)
    with mujoco.Renderer(mj_model, height=height, width=width) as renderer:
        for k in range(qpos.shape[0]):
            data.qpos[:] = qpos[k]
            for name, x in mocap.items():
                getattr(data, name)[:] = x[k]
            mujoco.mj_forward(mj_model, data)
            renderer.update_scene(data, camera=camera)
            yield renderer.render().copy()


def _check_frame(frame: np.ndarray) -> None:
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3 or \
            frame.shape[0] % 2 or frame.shape[1] % 2:
        raise ValueError(f"a frame must be uint8[H, W, 3] with even H and W, got "
                         f"{frame.dtype}{list(frame.shape)}")


def write_mp4(path: str | Path, frames: Iterable[np.ndarray], fps: float) -> int:
    """Encode uint8[H, W, 3] frames to an H.264 MP4 at ``fps``; returns the frame count.

    H and W must be even (yuv420p). Raises ValueError for no frames or a bad
    frame shape or dtype; OSError / RuntimeError from ffmpeg.
    """
    import imageio.v2 as iio
    n = 0
    writer = None
    try:
        with warnings.catch_warnings():
            # the ffmpeg subprocess starts here (fork + exec at once: JAX's warning about
            # fork in a threaded process does not apply)
            warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called")
            frames = iter(frames)
            first = next(frames, None)
            if first is not None:
                _check_frame(first)
                writer = iio.get_writer(str(path), format="FFMPEG", mode="I", fps=float(fps),
                                        codec="libx264", pixelformat="yuv420p", quality=7,
                                        macro_block_size=1, ffmpeg_log_level="error")
                writer.append_data(first)
                n = 1
        for frame in frames:
            _check_frame(frame)
            writer.append_data(frame)
            n += 1
    finally:
        if writer is not None:
            writer.close()
    if n == 0:
        raise ValueError(f"no frames to write to {path}")
    return n


def write_videos(recordings: Iterable[Recording], folder: str | Path) -> list[dict[str, Any]]:
    """Render and encode every recorded episode into ``folder``/videos/.

    Returns one entry per video, in order: task, seed, episode (0-based among
    the evaluated episodes), return, path (relative to ``folder``), frames,
    fps, height, width, camera. Raises as `render_frames` / `write_mp4`.
    """
    folder = Path(folder)
    (folder / VIDEOS_DIR).mkdir(parents=True, exist_ok=True)
    out = []
    for rec in recordings:
        camera, camera_name = camera_of(rec.mj_model)
        for i in range(rec.episodes):
            rel = video_path(rec.task, rec.seed, i)
            episode = {k: v[i] for k, v in rec.physics.items()}
            n = write_mp4(folder / rel, render_frames(rec.mj_model, episode, camera=camera),
                          rec.fps)
            out.append({"task": rec.task, "seed": rec.seed, "episode": i,
                        "return": float(rec.returns[i]), "path": rel, "frames": n,
                        "fps": rec.fps, "height": HEIGHT, "width": WIDTH,
                        "camera": camera_name})
    return out
