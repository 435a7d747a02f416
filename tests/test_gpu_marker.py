"""The root conftest's hook: tests marked ``gpu`` skip themselves without a CUDA device."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch


class _Item:
    def __init__(self, marked: bool) -> None:
        self.marked = marked
        self.added: list[pytest.MarkDecorator] = []

    def get_closest_marker(self, name: str) -> object | None:
        return object() if self.marked and name == "gpu" else None

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.added.append(marker)


def _hook(config: pytest.Config):
    root = Path(__file__).resolve().parent / "conftest.py"
    for plugin in config.pluginmanager.get_plugins():
        if Path(getattr(plugin, "__file__", "") or "").resolve() == root:
            return plugin.pytest_collection_modifyitems
    raise AssertionError("the root conftest is not loaded")


@pytest.mark.parametrize("cuda", [False, True])
def test_gpu_tests_skip_without_cuda_and_run_with_it(request, monkeypatch, cuda: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    gpu, cpu = _Item(True), _Item(False)
    _hook(request.config)(request.config, [gpu, cpu])
    assert not cpu.added
    if cuda:
        assert not gpu.added
    else:
        assert [m.mark.name for m in gpu.added] == ["skip"]
