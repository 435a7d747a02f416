"""Shared fixtures of the task tests: the bundled model's full training data, generated once."""

from __future__ import annotations

import pytest

from thoughttree.tasks.game24.dataset import DataConfig, Example, generate_examples


@pytest.fixture(scope="session")
def game24_examples() -> list[Example]:
    return generate_examples(DataConfig())
