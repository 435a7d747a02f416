"""Pieces shared by the code tasks (APPS, HumanEval): problems, program extraction, sandbox checks, pass@k, search."""

from .chat import ChatRender, template_renderer
from .checking import Checker, Verdicts
from .passk import mean_pass_at_k, pass_at_k
from .problem import CodeProblem, Test, split_public
from .programs import extract
from .task import CodeConfig, CodeTask, PublicTests, best_program

__all__ = [
    "ChatRender", "Checker", "CodeConfig", "CodeProblem", "CodeTask", "PublicTests", "Test", "Verdicts",
    "best_program", "extract", "mean_pass_at_k", "pass_at_k", "split_public", "template_renderer",
]
