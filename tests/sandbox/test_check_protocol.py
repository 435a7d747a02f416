"""A Check (HumanEval-style) test counts only answers given after each call, and only a program
that stays until the check is done."""

from __future__ import annotations

import pytest

from thoughttree.sandbox import Check, Limits, run_tests

pytestmark = pytest.mark.sandbox  # runs programs in bubblewrap

QUICK = Limits(time_s=2.0)
CHECK = Check("def check(candidate):\n    assert candidate(2) == 4\n    assert candidate(3) == 6\n")
ANSWERS_AT_LOAD = "import os\nos.write(3, b'4\\n6\\n')\n{exit}def double(x):\n    return 0\n"
LEAVES_AFTER_THE_LAST_CALL = """import os, sys
def double(x):
    if x == 3:  # answer the last call in the protocol's own format, then leave before the check ends
        frame = sys._getframe(1)
        nonce = frame.f_locals.get("nonce", "")
        os.write(3, f"{nonce} 6\\n".encode())
        os._exit(0)
    return 2 * x
"""


@pytest.mark.parametrize("leave", [True, False], ids=["then-exits", "then-waits"])
def test_answers_written_while_the_program_loads_never_pass(leave: bool):
    program = ANSWERS_AT_LOAD.format(exit="os._exit(0)\n" if leave else "")
    [result] = run_tests(program, [([], CHECK)], fn_name="double", limits=QUICK)
    assert result.status != "passed", result
    assert "before it was sent" in result.stderr


def test_a_program_that_exits_before_the_check_finished_never_passes():
    [result] = run_tests(LEAVES_AFTER_THE_LAST_CALL, [([], CHECK)], fn_name="double", limits=QUICK)
    assert result.status == "runtime_error", result
    assert "ended before the check finished" in result.stderr


def test_an_honest_program_still_passes_and_a_wrong_one_fails():
    honest, wrong = "def double(x):\n    return 2 * x\n", "def double(x):\n    return x + 2\n"
    results = run_tests(honest, [([], CHECK), ([], CHECK)], fn_name="double", limits=QUICK)
    assert [r.status for r in results] == ["passed", "passed"]
    [result] = run_tests(wrong, [([], CHECK)], fn_name="double", limits=QUICK)
    assert result.status == "wrong_answer"
