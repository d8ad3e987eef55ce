# Two commands do all set-up on a fresh machine:
#   make demo   the main job on the embedded tiny default, offline
#   make test   the test suite (all three tiers: unit, recipe, gpu; gpu skips without one)
#   make reproduce   the paper's tables 3 and 4 at CPU scale, four seeds a setting (under an hour)
#   make test-fast   the unit tier without its slowest tests: no `tune run`, about 2 minutes
# On a machine with a CUDA GPU (and a CUDA build of torch), one more:
#   make test-gpu   the tests of the CUDA paths alone, on the first CUDA device
# Everything installs into a project-local virtual environment, $(VENV).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU wheel that lies on this machine's disk; a bare `torch` may pull a multi-GB CUDA build.
TORCH_VERSION ?= 2.13.0
INSTALLED := $(VENV)/.installed
GPU_INSTALLED := $(VENV)/.installed-gpu
ASSETS := assets/tiny/.built
# What scripts/make_tiny_assets.py reads of the library, its imports followed transitively: the
# model families, builders and checkpointer (models/, qwen3/ in it), the file writing they use
# (storage/), and errors.py. The assets are rebuilt when one of these changes, not after any
# library edit; tests/scripts/test_make_tiny_assets.py fails if the script comes to import more.
ASSET_SOURCES := scripts/make_tiny_assets.py entrodrop/__init__.py entrodrop/errors.py \
	$(wildcard entrodrop/models/*.py entrodrop/models/qwen3/*.py entrodrop/storage/*.py)

.PHONY: install assets test test-fast lint test-gpu gpu-venv gpu-check gpu-profile demo reproduce clean compare-install

install: $(INSTALLED)

$(INSTALLED): pyproject.toml scripts/install_tune_run_hook.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "torch==$(TORCH_VERSION)"
	$(PY) -m pip install --quiet --disable-pip-version-check "torch==$(TORCH_VERSION)" -e ".[dev]"
	$(PY) scripts/install_tune_run_hook.py
	touch $@

assets: $(ASSETS)

$(ASSETS): $(INSTALLED) $(ASSET_SOURCES)
	$(PY) scripts/make_tiny_assets.py --out assets/tiny
	touch $@

test: $(ASSETS)
	$(PY) -m pytest

# The unit tier: everything but the tests that start `tune run`, torchrun, a script or two
# processes, and the GPU tests; less the tests marked `slow` (2.5 s or more each; `make test` runs them).
test-fast: $(ASSETS)
	$(PY) -m pytest -m "not recipe and not gpu and not slow"

# ruff, as configured in pyproject.toml (tests/test_lint.py runs the same check in the unit tier).
lint: $(INSTALLED)
	$(VENV)/bin/ruff check .

# OpenCompass 0.5.4's scoring code, for scripts/compare_opencompass.py: into $(VENV), --no-deps with
# the packages its modules import pinned, failing if any installed package would change.
compare-install:
	VENV=$(VENV) bash scripts/install_opencompass.sh

# liger-kernel (the `gpu` extra) for the loss tests of `impl: liger`.
$(GPU_INSTALLED): $(INSTALLED)
	$(PY) -m pip install --quiet --disable-pip-version-check "torch==$(TORCH_VERSION)" -e ".[dev,gpu]"
	touch $@

# The tests marked `gpu` (tests/test_gpu_kernels.py, tests/recipes/test_gpu_recipes.py); `make test` skips them without a GPU.
test-gpu: $(ASSETS) $(GPU_INSTALLED)
	@$(PY) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else \
	  f'make test-gpu: torch {torch.__version__} sees no CUDA GPU (its CUDA build: {torch.version.cuda}); it needs one, and a CUDA build of torch')"
	$(PY) -m pytest -m gpu -n 0 --durations=0

# On a lent GPU machine that starts bare, with no network (docs/performance.md, "Running the GPU
# check"), carrying .whl/ (scripts/fetch_gpu_wheels.sh) and assets/ (make assets) from a machine
# that has them: a virtual environment over the image's torch, the carried wheels installed
# offline, this checkout linked, then scripts/gpu_check.py (the GPU suite and the quick
# benchmarks, each under its own time cap; summary.md and summary.json in $OUT, else in
# outputs/gpu_check/<time>). GPU_CHECK_ARGS passes it options, e.g. "--stages bench_gpu,loss".
# No prerequisites: make's own (.venv, assets) would reach for the network.
GPU_CHECK_VENV ?= /tmp/entrodrop-gpu-check
GPU_PY := $(GPU_CHECK_VENV)/bin/python
# A command's environment in that venv: this checkout first, then the venv's packages; no hub.
GPU_ENV = PYTHONPATH=$(CURDIR):$$(cat $(GPU_CHECK_VENV)/purelib) HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1

gpu-venv:
	@ls .whl/*.whl >/dev/null 2>&1 || { echo "make $(or $(GPU_TARGET),gpu-venv): no wheels in .whl/: run \
	  'bash scripts/fetch_gpu_wheels.sh' where there is a network, and carry .whl"; exit 1; }
	@test -f $(ASSETS) || { echo "make $(or $(GPU_TARGET),gpu-venv): no $(ASSETS): run 'make assets' first, and carry assets"; exit 1; }
	python3 -m venv --system-site-packages $(GPU_CHECK_VENV)
	$(GPU_PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" > $(GPU_CHECK_VENV)/purelib
	python3 -c "import site; print('\n'.join(site.getsitepackages()))" > $$(cat $(GPU_CHECK_VENV)/purelib)/_parent.pth
	$(GPU_PY) -m pip install -q --no-index --no-deps --no-compile .whl/*.whl
	$(GPU_ENV) $(GPU_PY) scripts/install_tune_run_hook.py

gpu-check:
	@$(MAKE) --no-print-directory gpu-venv GPU_TARGET=gpu-check
	$(GPU_ENV) $(GPU_PY) scripts/gpu_check.py $(GPU_CHECK_ARGS)

# Where training's time goes at Qwen3-0.6B (docs/performance.md): the real recipe, 30 steps of
# 8 x 4,096 tokens, steps 10-29 traced by its profiler; scripts/gpu_window.py profile runs it capped.
gpu-profile:
	@$(MAKE) --no-print-directory gpu-venv GPU_TARGET=gpu-profile
	$(GPU_ENV) $(GPU_PY) benchmarks/bench_gpu.py --models qwen3_0_6b --rows 8 --steps 30 --warmup 8 --profile 20 \
	  --out outputs/gpu_profile

# RESUME=1 continues a demo that was stopped; DEVICE=cpu runs the CPU version where a GPU is.
demo: $(ASSETS)
	$(PY) scripts/demo.py

# Tables 3 and 4 (docs/reproduction.md) on the CPU demo's base, made if missing: SEEDS=N seeds a
# setting (default 4), RESUME=1 continues, DEVICE=cpu stays on the CPU where a GPU is; REGIME=premise
# trains the paper's settings on the premise regime's base instead (its low-entropy tokens near-certain). Where there is
# no $(VENV) but carried wheels (the lent GPU machine, which has no network), it runs in gpu-check's
# venv over the image's torch: every run on the GPU, many at once (docs/reproduction.md, "On a GPU").
reproduce:
	@if [ ! -f $(INSTALLED) ] && ls .whl/*.whl >/dev/null 2>&1; then \
	  $(MAKE) --no-print-directory gpu-venv GPU_TARGET=reproduce && $(GPU_ENV) $(GPU_PY) scripts/reproduce.py; \
	else $(MAKE) --no-print-directory assets && $(PY) scripts/reproduce.py; fi

clean:
	rm -rf $(VENV) assets outputs
