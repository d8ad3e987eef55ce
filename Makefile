# Two commands do all set-up on a fresh machine:
#   make demo   the main job on the embedded tiny default, offline
#   make test   the test suite
# Everything installs into a project-local virtual environment, $(VENV).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The CPU wheel that lies on this machine's disk; a bare `torch` may pull a multi-GB CUDA build.
TORCH_VERSION ?= 2.13.0
INSTALLED := $(VENV)/.installed
ASSETS := assets/tiny/.built
LIBRARY := $(wildcard entrodrop/*.py entrodrop/*/*.py)

.PHONY: install assets test demo clean

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

# FULL=1 make demo: the longer version.
demo: $(ASSETS)
	$(PY) scripts/demo.py

clean:
	rm -rf $(VENV) assets outputs
