# Two commands do all set-up on a fresh machine:
#   make demo   the main job on the embedded tiny default, offline
#   make test   the test suite (all three tiers: unit, recipe, gpu; gpu skips without one)
#   make test-fast   the unit tier alone: no `tune run`, under 2 minutes
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
LIBRARY := $(wildcard entrodrop/*.py entrodrop/*/*.py)

.PHONY: install assets test test-fast test-gpu demo clean

install: $(INSTALLED)

$(INSTALLED): pyproject.toml scripts/link_repo.py
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "torch==$(TORCH_VERSION)"
	$(PY) -m pip install --quiet --disable-pip-version-check "torch==$(TORCH_VERSION)" -e ".[dev]"
	$(PY) scripts/link_repo.py
	touch $@

assets: $(ASSETS)

$(ASSETS): $(INSTALLED) scripts/make_tiny_assets.py $(LIBRARY)
	$(PY) scripts/make_tiny_assets.py --out assets/tiny
	touch $@

test: $(ASSETS)
	$(PY) -m pytest

# The unit tier: everything but the tests that start `tune run` or torchrun, and the GPU tests.
test-fast: $(ASSETS)
	$(PY) -m pytest -m "not recipe and not gpu"

# liger-kernel (the `gpu` extra) for the loss tests of `impl: liger`.
$(GPU_INSTALLED): $(INSTALLED)
	$(PY) -m pip install --quiet --disable-pip-version-check "torch==$(TORCH_VERSION)" -e ".[dev,gpu]"
	touch $@

# The tests marked `gpu` (tests/test_gpu_*.py); `make test` skips them without a GPU.
test-gpu: $(ASSETS) $(GPU_INSTALLED)
	@$(PY) -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else \
	  f'make test-gpu: torch {torch.__version__} sees no CUDA GPU (its CUDA build: {torch.version.cuda}); it needs one, and a CUDA build of torch')"
	$(PY) -m pytest -m gpu -n 0

# FULL=1 make demo: the longer version.
demo: $(ASSETS)
	$(PY) scripts/demo.py

clean:
	rm -rf $(VENV) assets outputs
