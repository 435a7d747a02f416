"""Shared fixtures: tiny random checkpoints of each supported architecture, saved by transformers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiny_models import ARCHS, make_model


@pytest.fixture(scope="session", params=ARCHS)
def arch_model_dir(request, tmp_path_factory) -> tuple[str, Path]:
    """(architecture, directory) for each supported architecture."""
    path = tmp_path_factory.mktemp(f"tiny-{request.param}")
    return request.param, make_model(path, request.param)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random Llama checkpoint with tokenizer, for tests that need any real model."""
    return make_model(tmp_path_factory.mktemp("tiny-llama"), "llama")
