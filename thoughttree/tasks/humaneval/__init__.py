"""HumanEval (Chen et al., 2021): 164 functions to complete, checked in the sandbox; pass@1 and pass@k."""

from .examples import docstring_examples
from .problems import NUM_PROBLEMS, HumanEvalDataError, hidden_check, load
from .task import HumanEval

__all__ = ["HumanEval", "HumanEvalDataError", "NUM_PROBLEMS", "docstring_examples", "hidden_check", "load"]
