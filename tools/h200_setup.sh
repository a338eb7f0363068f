# Source me first in every command on the lent H200 machine, from the project root:
#   source .whl-h200/setup.sh; python -m wmx.train_online.cli ...
# (tools/h200_wheels.sh copies me into .whl-h200/ beside the wheels; docs/accelerators.md,
# "On the lent H200 machine".) Installs the carried wheels under /tmp/site once per machine
# (about 15 s; a marker names the wheels installed, so later calls skip it), then puts the
# machine's own site-packages first on PYTHONPATH, /tmp/site and the project root after them:
# the image's JAX 0.11.2, numpy, flax, optax... are the ones imported, the carried wheels only
# add what the image lacks. Prints one line with the versions found and where each comes from.
if [ ! -f .whl-h200/setup.sh ] || [ ! -d wmx ]; then
  echo "h200 setup: source me from the project root (no .whl-h200/setup.sh or wmx/ here)"
  return 2 2>/dev/null || exit 2
fi
_wmx_site=/tmp/site
_wmx_wheels=$(cd .whl-h200 && ls *.whl 2>/dev/null | sort | tr '\n' ' ')
if [ "$(cat "$_wmx_site/.wmx-wheels" 2>/dev/null)" != "$_wmx_wheels" ]; then
  rm -rf "$_wmx_site"
  if PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps \
      --no-compile --no-cache-dir --disable-pip-version-check --target "$_wmx_site" \
      .whl-h200/*.whl >/tmp/wmx-h200-pip.log 2>&1; then
    echo "$_wmx_wheels" > "$_wmx_site/.wmx-wheels"
  else
    echo "h200 setup: installing the carried wheels failed ($(grep -m1 -E 'ERROR|rror' /tmp/wmx-h200-pip.log))"
  fi
fi
_wmx_img=$(python3 -c 'import site; print(":".join(site.getsitepackages()))')
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$_wmx_img:$_wmx_site:$PWD
export PYTHONUNBUFFERED=1 WMX_HUGE_PAGES=0
python3 - "$_wmx_site" <<'EOF' | tee "$_wmx_site/versions.txt" 2>/dev/null
import importlib.metadata as md, importlib.util, os, platform, sys
site = sys.argv[1]
sys.path.remove("")                         # look things up as a script's PYTHONPATH finds them
out = [f"python {platform.python_version()}"]
for dist, mod in [("jax", "jax"), ("jaxlib", "jaxlib"), ("numpy", "numpy"), ("flax", "flax"),
                  ("optax", "optax"), ("chex", "chex"), ("orbax-checkpoint", "orbax"),
                  ("mujoco", "mujoco"), ("mujoco-mjx", "mujoco.mjx"),
                  ("playground", "mujoco_playground"), ("grain", "grain")]:
    try:
        spec = importlib.util.find_spec(mod)
        where = "carried" if spec and (spec.origin or "").startswith(site) else "image"
        out.append(f"{dist} {md.version(dist)} ({where})" if spec else f"{dist} MISSING")
    except Exception as e:                  # noqa: BLE001 - report, never stop the command
        out.append(f"{dist} ? ({type(e).__name__})")
wmx = importlib.util.find_spec("wmx")
if not (wmx and (wmx.origin or "").startswith(os.getcwd())):
    out.append(f"wmx from {wmx and wmx.origin}")
print("h200 setup: " + ", ".join(out))
EOF
unset _wmx_site _wmx_wheels _wmx_img
