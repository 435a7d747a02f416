# Quickstart targets: `make demo` and `make test` create the environment when needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint dist clean

setup: $(STAMP)

# torch is pinned to the CPU build that installs from the local wheel cache; on a GPU machine
# install your CUDA build of torch into the venv first and this step keeps it. The dev extra
# brings the lint, type-check and packaging tools `make lint` runs.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test,dev]"
	touch $(STAMP)

# The demo runs no generated programs, so it needs no sandbox tools.
demo: $(STAMP)
	$(VENV)/bin/thoughttree demo

# The code sandbox (thoughttree.sandbox) runs programs inside bubblewrap. Nothing here installs
# system packages: without bwrap the tests that run programs skip, each saying why.
# Test files spread over the machine's cores (at most 4), each file on one worker so its
# fixtures are built once.
test: $(STAMP)
	@command -v bwrap >/dev/null 2>&1 || echo "note: bubblewrap (bwrap) is not installed: the sandbox tests that run \
	programs will be skipped. Install it with your package manager, e.g. 'apt-get install bubblewrap' as root." >&2
	$(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile

# Lint, types and the package: what CI runs before the tests.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(MAKE) --no-print-directory dist

dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*

clean:
	rm -rf $(VENV) build dist *.egg-info
