# wmx: one command to install and run the main job, one to install and test.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# the pinned dependencies: requirements-lock.txt (CPU), or, on an NVIDIA GPU,
# make install LOCK=requirements-lock-cuda12.txt VENV=.venv-cuda12, on a TPU VM,
# make install LOCK=requirements-lock-tpu.txt VENV=.venv-tpu (docs/accelerators.md)
LOCK ?= requirements-lock.txt
# pinned packages left out of the install: warp-lang (NVIDIA Warp, 392 MB), which playground
# requires but wmx never imports (it runs MJX with impl="jax"; wmx/envs/playground.py).
# The lock pins every dependency, so it installs with --no-deps; LOCK_SKIP= installs all.
LOCK_SKIP ?= warp-lang
empty :=
space := $(empty) $(empty)
export JAX_PLATFORMS ?= cpu

.PHONY: install test test-slow demo clean lock-cuda12 lock-tpu

$(VENV)/.installed: $(LOCK) pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	grep -viE '^($(subst $(space),|,$(strip $(LOCK_SKIP))))==' $(LOCK) > $(VENV)/lock-installed.txt
	$(PY) -m pip install --no-deps -r $(VENV)/lock-installed.txt
	$(PY) -m pip install --no-deps -e .
	touch $@

install: $(VENV)/.installed

## make test: install and run the default test suite (the command CI runs),
## in TEST_WORKERS processes (pytest-xdist; one test module stays in one process,
## so module fixtures compile once). TEST_WORKERS=0 runs in this process.
## Two passes: everything but the parity tests compiled at XLA's optimisation
## level 0 with its older fusion emitters (a quarter of the compile time;
## tests/conftest.py), then the parity tests
## (recordings of the official code) at the default level.
## The parity pass collects only the parity modules (collecting the whole suite costs
## each worker about 12 s of CPU; the marker still selects).
TEST_WORKERS ?= 2
PYTEST_RUN = $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile
PARITY_MODULES = $(shell find tests -name 'test_*parity*.py' | sort)
test: install
	WMX_TEST_XLA_OPT=0 $(PYTEST_RUN) --durations=25 -m "not slow and not parity"
	$(PYTEST_RUN) --durations=10 -m "parity and not slow" $(PARITY_MODULES)

## make test-slow: the long real-environment tests left out of the default run.
test-slow: install
	$(PY) -m pytest -q -m slow

## make demo: install and run the whole pipeline at a small default scale
## (train_online per task, Beam build, train_offline, evaluate; see wmx demo --help).
## Rerunning continues where it stopped. Extra flags: make demo DEMO_ARGS="--updates 500".
## It writes into the data root every other command reads by default ($WMX_HOME, else
## ~/.wmx), so `wmx runs ls` and `wmx demo --agent dreamerv3` find it; HOME_DIR=DIR
## puts it elsewhere (then give those commands --home DIR too).
DEMO_ARGS ?=
HOME_DIR ?=
demo: install
	$(VENV)/bin/wmx demo $(if $(HOME_DIR),--home $(HOME_DIR)) $(DEMO_ARGS)

## make lock-cuda12 / make lock-tpu: regenerate requirements-lock-cuda12.txt /
## requirements-lock-tpu.txt from requirements-lock.txt by resolution
## (pip --dry-run --report; tools/lock_accelerator.py).
lock-cuda12: install
	$(PY) tools/lock_accelerator.py cuda12

lock-tpu: install
	$(PY) tools/lock_accelerator.py tpu

clean:
	rm -rf $(VENV) .pytest_cache
