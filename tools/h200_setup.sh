# Source me first in every command on the lent H200 machine, from the project root:
#   source .whl-h200/setup.sh && python -m wmx.train_online.cli ...
# (tools/h200_wheels.sh copies me into .whl-h200/ beside the wheels; docs/accelerators.md,
# "On the lent H200 machine".) Installs the carried wheels under /tmp/site ($WMX_H200_SITE
# when set) once per machine (about 15 s; a marker names the wheels installed, so later calls
# skip it, and a later call on the warm machine may carry .whl-h200/setup.sh alone: 30 MB
# less), then puts on PYTHONPATH, after what it already held, the machine's own
# site-packages, the carried wheels and the project root, in that order, each once however
# often I am sourced: the image's JAX 0.11.2, numpy, flax, optax... are the ones imported, the
# carried wheels only add what the image lacks. Prints one line with the versions found and
# where each comes from. Returns 1 when the wheels could not be installed or none are there
# (the line says why), 2 outside the project root.
if [ -n "${BASH_VERSION:-}" ] && [ "${BASH_SOURCE:-}" = "$0" ]; then
  echo "h200 setup: source me (source .whl-h200/setup.sh && python ...), do not run me: a child shell's PYTHONPATH is lost"
  exit 2
fi
if [ ! -f .whl-h200/setup.sh ] || [ ! -d wmx ]; then
  echo "h200 setup: source me from the project root (no .whl-h200/setup.sh or wmx/ here)"
  return 2 2>/dev/null || exit 2
fi
if [ -f tools/h200_setup.sh ] && [ "$(cat tools/h200_setup.sh)" != "$(cat .whl-h200/setup.sh)" ]; then
  echo "h200 setup: .whl-h200/setup.sh is not this tree's tools/h200_setup.sh; copy it there again (cp tools/h200_setup.sh .whl-h200/setup.sh) before the next call"
fi
_wmx_py='import sys; print(sys.prefix, sys.version)'
if [ "$(python -c "$_wmx_py" 2>/dev/null)" != "$(python3 -c "$_wmx_py")" ]; then
  echo "h200 setup: python here is not python3 (the interpreter set up): start the command's Python with python3"
fi
_wmx_site=${WMX_H200_SITE:-/tmp/site}
_wmx_log=$_wmx_site-pip.log
_wmx_rc=0
_wmx_wheels=$(cd .whl-h200 && for w in *.whl; do if [ -f "$w" ]; then printf '%s ' "$w"; fi; done)
if [ -z "$_wmx_wheels" ]; then      # a later call may carry setup.sh alone (.whl-h200/setup.sh)
  if [ -f "$_wmx_site/.wmx-wheels" ]; then
    echo "h200 setup: no wheels carried; using those an earlier call installed in $_wmx_site"
  else
    _wmx_rc=1
    echo "h200 setup: no wheels carried and none installed in $_wmx_site (a fresh machine): carry the whole .whl-h200 in this machine's first call"
  fi
elif [ "$(cat "$_wmx_site/.wmx-wheels" 2>/dev/null)" != "$_wmx_wheels" ]; then
  rm -rf "$_wmx_site"
  if PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps \
      --no-compile --no-cache-dir --disable-pip-version-check --target "$_wmx_site" \
      .whl-h200/*.whl >"$_wmx_log" 2>&1; then
    echo "$_wmx_wheels" > "$_wmx_site/.wmx-wheels"
  else
    _wmx_rc=1
    echo "h200 setup: installing the carried wheels into $_wmx_site failed ($(grep -m1 ERROR "$_wmx_log"); log: $_wmx_log): make .whl-h200 again with bash tools/h200_wheels.sh where PyPI is reachable, and carry it"
  fi
fi
PYTHONPATH=$(python3 -c '
import os, site, sys
new = site.getsitepackages() + sys.argv[1:]
old = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in new]
print(os.pathsep.join(old + new))' "$_wmx_site" "$PWD")
export PYTHONPATH PYTHONUNBUFFERED=1 WMX_HUGE_PAGES=0
python3 - "$_wmx_site" <<'EOF' || echo "h200 setup: the versions check failed (above)"
import importlib.metadata as md, importlib.util, os, platform, sys
site = sys.argv[1]
if "" in sys.path:                          # look things up as a script's PYTHONPATH finds them
    sys.path.remove("")
out = [f"python {platform.python_version()}"]
for dist, mod in [("jax", "jax"), ("jaxlib", "jaxlib"), ("numpy", "numpy"), ("flax", "flax"),
                  ("optax", "optax"), ("chex", "chex"), ("orbax-checkpoint", "orbax"),
                  ("mujoco", "mujoco"), ("mujoco-mjx", "mujoco.mjx"),
                  ("playground", "mujoco_playground"), ("grain", "grain")]:
    try:
        spec = importlib.util.find_spec(mod)
        where = "carried" if spec and (spec.origin or "").startswith(site + os.sep) else "image"
        out.append(f"{dist} {md.version(dist)} ({where})" if spec else f"{dist} MISSING")
    except Exception as e:                  # noqa: BLE001 - report, never stop the command
        out.append(f"{dist} ? ({type(e).__name__})")
wmx = importlib.util.find_spec("wmx")
here = os.path.realpath(os.getcwd()) + os.sep
if not (wmx and os.path.realpath(wmx.origin or "").startswith(here)):
    out.append(f"wmx from {wmx and wmx.origin}")
line = "h200 setup: " + ", ".join(out)
print(line)
try:
    with open(os.path.join(site, "versions.txt"), "w") as f:
        f.write(line + "\n")
except OSError:                             # no wheels installed: the line above says so
    pass
EOF
unset _wmx_site _wmx_log _wmx_wheels _wmx_py
eval "unset _wmx_rc; return $_wmx_rc"
