"""Shared fixtures: tiny random checkpoints of each supported architecture, saved by transformers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

# Without a GPU, Triton kernels run in the interpreter. triton.jit decides at decoration time, so
# this is set before any test module imports thoughttree.kernels. The CPU runtime itself keeps
# the PyTorch path (LM picks the reference backend and unfused layers on CPU); tests that run the
# Triton path on CPU ask for it explicitly.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# One intra-op thread per test process (unless OMP_NUM_THREADS asks for more), in this one and in
# the programs the tests start: the models are tiny, and where every core is busy (the other test
# workers, anything else) each op run on several threads waits for threads the scheduler has not
# run yet, milliseconds for a matrix product of microseconds.
if "OMP_NUM_THREADS" not in os.environ:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)

from tiny_models import ARCHS, make_model

NO_BWRAP = (
    "needs bubblewrap (bwrap), which is not installed here; install it to run the sandbox's tests "
    "(Debian/Ubuntu: sudo apt-get install bubblewrap)"
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` skip themselves where no CUDA device is visible, whatever they import;
    tests marked ``sandbox`` run programs in bubblewrap, and without it are skipped, saying why."""
    skips = {}
    if not torch.cuda.is_available():
        skips["gpu"] = pytest.mark.skip(reason="needs a CUDA device")
    if shutil.which("bwrap") is None:
        skips["sandbox"] = pytest.mark.skip(reason=NO_BWRAP)
    for item in items:
        for marker, skip in skips.items():
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


@pytest.fixture(scope="session", params=ARCHS)
def arch_model_dir(request, tmp_path_factory) -> tuple[str, Path]:
    """(architecture, directory) for each supported architecture."""
    path = tmp_path_factory.mktemp(f"tiny-{request.param}")
    return request.param, make_model(path, request.param)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama checkpoint with tokenizer, for tests that need any real model."""
    return make_model(tmp_path_factory.mktemp("tiny-llama"), "llama")
