# Quickstart targets: `make demo` and `make test` create the environment when needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup sandbox-tools demo test test-all lint dist clean

setup: $(STAMP) sandbox-tools

# The code sandbox (thoughttree.sandbox) runs programs inside bubblewrap. As root with apt-get it is
# installed when missing; otherwise this only says how to install it (never through sudo), and the
# tests that run programs are skipped, each marked with that reason.
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u 2>/dev/null)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get install -y -q bubblewrap >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q bubblewrap >/dev/null 2>&1; } || true; \
	  fi; \
	  command -v bwrap >/dev/null 2>&1 || \
	    echo "note: bubblewrap (bwrap) is not installed: the code sandbox cannot run programs and its tests are skipped; install it with your package manager (Debian/Ubuntu: sudo apt-get install bubblewrap)" >&2; }

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

# Tests spread over the machine's cores (at most 4); a worker that runs out of tests takes some
# of another's, so no core idles while one file's slow tests finish elsewhere (a file's module
# fixtures may then be built on two workers: cheap next to the idle tail of one file per worker).
# `make test` (what CI runs) leaves out the tests marked slow; `make test-all` runs every test.
# README.md says how long each takes.
PYTEST := $(PY) -m pytest -q -n auto --maxprocesses 4 --dist worksteal

test: setup
	$(PYTEST) -m "not slow"

test-all: setup
	$(PYTEST)

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
