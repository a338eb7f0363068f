#!/usr/bin/env bash
# What: downloads into .whl-h200/ the cp312 wheels wmx needs on the lent H200 machine that its
# image lacks (mujoco, MJX, Playground, Brax, grain and the few packages they import), at the
# versions pinned in requirements-lock.txt, and copies tools/h200_setup.sh beside them as setup.sh.
# Why: that machine has no network and no package registry, and a device call carries at most
# 64 MiB. jax and jaxlib for CUDA 13 are about 220 MB as wheels, so wmx runs there on the image's
# own Python 3.12 and JAX 0.11.2 (with its CUDA 13 plugin, numpy, flax, optax, chex, orbax...);
# only the packages the image does not have are carried.
# How: run from the project root on a machine that reaches PyPI: bash tools/h200_wheels.sh
# Then carry .whl-h200 in every device call and start each command there with
#   source .whl-h200/setup.sh && python ...
# (docs/accelerators.md, "On the lent H200 machine"). Re-run after the lock changes.
set -euo pipefail
[ -f requirements-lock.txt ] && [ -f tools/h200_setup.sh ] || {
  echo "h200_wheels.sh: run me from the project root (no requirements-lock.txt or tools/h200_setup.sh here)"; exit 2; }
# Each name must have a pin in requirements-lock.txt (tests/test_h200_wheels.py checks it, and
# that every requirement of a carried package is the image's, carried, or in LEFT_OUT).
NAMES="array_record brax grain jaxopt ml_collections mujoco mujoco-core mujoco-mjx playground
portpicker tensorboardX trimesh"
# Required by a carried package but never imported by training, evaluation or the benchmarks:
# warp-lang (wmx never selects Playground's Warp backend), glfw, PyOpenGL and mujoco-studio
# (mujoco's viewer), mediapy (Brax's learner script; it would need IPython too), Flask and
# flask-cors (Brax's viewer server). Also not carried: imageio-ffmpeg (only `evaluate --video`
# writes MP4), wandb (`--logger wandb`), apache-beam (datasets are built on a CPU machine).
LEFT_OUT="warp-lang glfw PyOpenGL mujoco-studio mediapy Flask flask-cors"
want=()
for n in $NAMES; do
  pin=$(grep -i -E "^${n//[-_]/[-_]}==" requirements-lock.txt | head -1 || true)
  [ -n "$pin" ] || { echo "h200_wheels.sh: $n has no pin in requirements-lock.txt"; exit 1; }
  want+=("$pin")
done
# Downloaded beside, then renamed into place: an interrupted run leaves the previous
# .whl-h200 as it was (or none), never a folder of some wheels without setup.sh.
part=.whl-h200.partial
rm -rf "$part" && mkdir -p "$part"
trap 'rm -rf "$part"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  --platform any -d "$part" "${want[@]}"
cp tools/h200_setup.sh "$part/setup.sh"
rm -rf .whl-h200 && mv "$part" .whl-h200
trap - EXIT
ls .whl-h200
du -sh .whl-h200
echo "left out:" $LEFT_OUT
echo "carry .whl-h200 in every device call; start each command there with: source .whl-h200/setup.sh &&"
