"""Tasks: what a search asks the model and how it scores and checks the answers.

Subclass :class:`Task` for a new problem family; pick an evaluator from
:mod:`thoughttree.tasks.evaluate` (or write one with the same ``evaluate`` method).
"""

from .base import Propose, Sample, Task, TaskConfig, TaskError
from .game24 import Game24, Game24Direct
from .evaluate import Evaluator, LabelProbs, LogProb, Lookahead, Rollout, ValuePrompt, Verifier, Vote, parse_choice

__all__ = [
    "Evaluator",
    "Game24",
    "Game24Direct",
    "LabelProbs",
    "Lookahead",
    "LogProb",
    "Propose",
    "Rollout",
    "Sample",
    "Task",
    "TaskConfig",
    "TaskError",
    "ValuePrompt",
    "Verifier",
    "Vote",
    "parse_choice",
]
