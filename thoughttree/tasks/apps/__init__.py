"""APPS (Hendrycks et al., 2021): competitive-programming problems, programs checked in the sandbox.

The bundled sample is 87 problems of the APPS *train* split, for trying the task; point
:func:`load` at a local copy of the APPS test split for real results.
"""

from .metrics import Scored, summarize
from .problems import (
    BUNDLED, BUNDLED_SPLIT, DIFFICULTIES, AppsDataError, Selection, bundled_path, find, load, problem_ids,
)
from .prompts import base_prompt, chat_message
from .task import Apps

__all__ = [
    "Apps", "AppsDataError", "BUNDLED", "BUNDLED_SPLIT", "DIFFICULTIES", "Scored", "Selection", "base_prompt",
    "bundled_path", "chat_message", "find", "load", "problem_ids", "summarize",
]
