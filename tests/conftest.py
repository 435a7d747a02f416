"""Shared fixtures: tiny random checkpoints of each supported architecture, saved by transformers."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch

# Without a GPU, Triton kernels run in the interpreter. triton.jit decides at decoration time, so
# this is set before any test module imports thoughttree.kernels. The CPU runtime itself keeps
# the PyTorch path (LM picks the reference backend and unfused layers on CPU); tests that run the
# Triton path on CPU ask for it explicitly.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

from tiny_models import ARCHS, make_model

from thoughttree.sandbox import SandboxUnavailable

BWRAP_HINT = "install bubblewrap with your package manager (Debian/Ubuntu: apt-get install bubblewrap, as root)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``gpu`` skip themselves on a machine without CUDA."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """A test that needs the sandbox skips, naming what to install, where bubblewrap is missing."""
    try:
        return (yield)
    except SandboxUnavailable as exc:
        if shutil.which("bwrap") is None:
            pytest.skip(f"needs bubblewrap: {BWRAP_HINT} ({exc})")
        raise


@pytest.fixture(scope="session", params=ARCHS)
def arch_model_dir(request, tmp_path_factory) -> tuple[str, Path]:
    """(architecture, directory) for each supported architecture."""
    path = tmp_path_factory.mktemp(f"tiny-{request.param}")
    return request.param, make_model(path, request.param)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama checkpoint with tokenizer, for tests that need any real model."""
    return make_model(tmp_path_factory.mktemp("tiny-llama"), "llama")
