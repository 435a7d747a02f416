"""Run untrusted Python programs against tests, isolated, and judge them with APPS's rules.

>>> from thoughttree.sandbox import run_tests
>>> [r.status for r in run_tests("print(int(input()) * 2)", [("2\\n", "4\\n"), ("3\\n", "7\\n")])]
['passed', 'wrong_answer']

Programs run inside bubblewrap as an unprivileged user with resource limits (see
:mod:`.isolation` and :mod:`.driver`); expected outputs stay in the calling process
(:mod:`.compare`). No torch here.
"""

from .batch import Job, run_many
from .check import Check
from .compare import outputs_match, values_match
from .isolation import ISOLATIONS, SandboxUnavailable
from .limits import Limits
from .result import STATUSES, Status, TestResult
from .execute import run_tests

__all__ = [
    "Check",
    "ISOLATIONS",
    "STATUSES",
    "Job",
    "Limits",
    "SandboxUnavailable",
    "Status",
    "TestResult",
    "outputs_match",
    "run_many",
    "run_tests",
    "values_match",
]
