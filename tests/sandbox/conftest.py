"""Fixtures for the sandbox tests: which processes are still running."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue  # exited while we looked
        for line in status.splitlines():
            if line.startswith("PPid:"):
                parents[int(entry.name)] = int(line.split()[1])
    return parents


def _descendants(pid: int | None = None) -> list[int]:
    """Every live process below ``pid`` (default: this one), found through /proc."""
    root = os.getpid() if pid is None else pid
    parents = _parents()
    found, frontier = [], [root]
    while frontier:
        current = frontier.pop()
        children = [child for child, parent in parents.items() if parent == current]
        found += children
        frontier += children
    return found


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line contains ``text``."""
    hits = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    hits.append(int(entry.name))
            except OSError:
                continue
    return hits


@pytest.fixture
def descendants() -> Callable[..., list[int]]:
    return _descendants


@pytest.fixture
def processes_mentioning() -> Callable[[str], list[int]]:
    return _processes_mentioning
