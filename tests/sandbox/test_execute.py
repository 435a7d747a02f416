"""Ordinary programs through the sandbox: verdicts, call-based mode, batches, bad input."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from thoughttree.sandbox import Check, Job, Limits, SandboxUnavailable, TestResult, run_many, run_tests
from thoughttree.sandbox.execute import _Records

pytestmark = pytest.mark.sandbox  # runs programs in bubblewrap

DOUBLE = "print(int(input()) * 2)\n"
QUICK = Limits(time_s=2.0)


def statuses(results: list[TestResult]) -> list[str]:
    return [result.status for result in results]


def test_standard_input_verdicts():
    results = run_tests(DOUBLE, [("2\n", "4\n"), ("3", "7"), ("10\n", "  20  \n\n")], limits=QUICK)
    assert statuses(results) == ["passed", "wrong_answer", "passed"]
    assert results[0].passed and not results[1].passed
    assert results[1].stdout == "6\n" and results[1].exit_code == 0
    assert 0 < results[0].time_s < 2.0


def test_syntax_error_fails_every_test_without_running():
    results = run_tests("print(\n", [("", ""), ("", "")], limits=QUICK)
    assert statuses(results) == ["syntax_error", "syntax_error"]
    assert "SyntaxError" in results[0].stderr and results[0].exit_code is None


def test_runtime_error_keeps_the_traceback_and_later_tests_still_run():
    program = "n = int(input())\nprint(10 // n)\n"
    results = run_tests(program, [("0\n", "0\n"), ("5\n", "2\n")], limits=QUICK)
    assert statuses(results) == ["runtime_error", "passed"]
    assert "ZeroDivisionError" in results[0].stderr and results[0].exit_code == 1


def test_floats_within_tolerance_pass_and_integers_must_be_exact():
    program = "print(1 / 3, 100000)\n"
    assert run_tests(program, [("", "0.333333 100000")], limits=QUICK)[0].passed
    assert not run_tests(program, [("", "0.3334 100000")], limits=QUICK)[0].passed
    assert not run_tests(program, [("", "0.333333 100001")], limits=QUICK)[0].passed


def test_expected_none_accepts_any_output_of_a_clean_exit():
    results = run_tests("print('anything')", [("", None)], limits=QUICK)
    assert results[0].passed
    assert run_tests("raise SystemExit(3)", [("", None)], limits=QUICK)[0].status == "runtime_error"


def test_call_based_function_and_solution_method():
    program = "def add(a, b):\n    return a + b\n"
    results = run_tests(program, [([1, 2], 3), ([0.1, 0.2], 0.3), ([[1], [2]], [1, 2]), ([1, 1], 3)], fn_name="add", limits=QUICK)
    assert statuses(results) == ["passed", "passed", "passed", "wrong_answer"]
    leetcode = "class Solution:\n    def pair(self, n):\n        print('debug output is ignored')\n        return (n, n + 1)\n"
    results = run_tests(leetcode, [([1], [1, 2]), ([2], [[2, 3]]), ([3], [3, 5])], fn_name="pair", limits=QUICK)
    assert statuses(results) == ["passed", "passed", "wrong_answer"]
    assert "debug output" in results[0].stdout


def test_call_based_values_keep_their_types():
    program = "def f(kind):\n    return {'set': {1, 2}, 'dict': {1: 'a'}, 'obj': object(), 'tuple': [(1, 2)]}[kind]\n"
    tests = [(["set"], [1, 2]), (["dict"], {"1": "a"}), (["obj"], None), (["tuple"], [[1, 2]])]
    assert statuses(run_tests(program, tests, fn_name="f", limits=QUICK)) == [
        "wrong_answer", "passed", "wrong_answer", "passed"
    ]


def test_call_based_missing_function_and_early_exit_are_runtime_errors():
    results = run_tests("def g():\n    return 1\n", [([], 1)], fn_name="f", limits=QUICK)
    assert results[0].status == "runtime_error" and "'f'" in results[0].stderr
    results = run_tests("import os\nos._exit(0)\ndef f():\n    return 1\n", [([], 1)], fn_name="f", limits=QUICK)
    assert results[0].status == "runtime_error"


PAIR_CHECK = Check(
    "import math\n\n\ndef check(candidate):\n"
    "    assert candidate(1, 2) == 3\n"
    "    assert candidate((1,), b=(2,)) == (1, 2)\n"
    "    assert math.isclose(candidate(0.1, 0.2), 0.3)\n"
)


def test_a_check_function_judges_the_program_function():
    tests = [([], PAIR_CHECK), ([2, 2], 4)]
    results = run_tests("def add(a, b):\n    print('seen')\n    return a + b\n", tests, fn_name="add", limits=QUICK)
    assert statuses(results) == ["passed", "passed"] and "seen" in results[0].stdout
    results = run_tests("def add(a, b):\n    return a\n", tests, fn_name="add", limits=QUICK)
    assert statuses(results) == ["wrong_answer", "wrong_answer"] and "AssertionError" in results[0].stderr
    results = run_tests("def add(a, b):\n    raise KeyError(a)\n", tests, fn_name="add", limits=QUICK)
    assert statuses(results) == ["runtime_error", "runtime_error"] and "KeyError" in results[0].stderr
    results = run_tests("def add(a, b):\n    while True:\n        pass\n", tests[:1], fn_name="add", limits=QUICK)
    assert statuses(results) == ["timeout"]


@pytest.mark.parametrize(
    "cheat",
    [
        # an answer that claims to equal anything
        "class Any:\n    def __eq__(self, other):\n        return True\n    __hash__ = None\n"
        "    def __sub__(self, other):\n        return 0\n    def __abs__(self):\n        return 0\n"
        "def add(a, b):\n    return Any()\n",
        # an int that claims to equal anything
        "class Yes(int):\n    def __eq__(self, other):\n        return True\n    __hash__ = int.__hash__\n"
        "def add(a, b):\n    return Yes(0)\n",
        # a forged answer on the value channel, then a quiet exit
        "import os\nos.write(3, b'3\\n3\\n3\\n')\nos._exit(0)\n",
        # the check's source looked for in the process's memory, its files and its parent's
        "import gc, os\nfound = [o for o in gc.get_objects() if isinstance(o, str) and 'def check' in o]\n"
        "paths = [os.path.join(r, n) for top in ('/sandbox', '/tmp', '/dev/shm') for r, _, ns in os.walk(top) for n in ns]\n"
        "for path in paths + ['/proc/1/cmdline', '/proc/1/environ', '/proc/1/mem']:\n    try:\n"
        "        found += [path] if b'def check' in open(path, 'rb').read(1 << 20) else []\n"
        "    except OSError:\n        pass\n"
        "def add(a, b):\n    raise SystemExit(repr(found))\n",
        # builtins patched so that every comparison and assertion holds
        "import builtins\nbuiltins.AssertionError = type('Never', (Exception,), {})\n"
        "def add(a, b):\n    return None\n",
    ],
)
def test_a_check_cannot_be_fooled_by_the_program(cheat):
    [result] = run_tests(cheat, [([], PAIR_CHECK)], fn_name="add", limits=QUICK)
    assert result.status in ("wrong_answer", "runtime_error"), result
    assert "def check" not in result.stderr


def test_a_function_named_check_is_still_the_candidate():
    judge = Check("def check(candidate):\n    assert candidate(2) == 4\n")
    assert statuses(run_tests("def check(x):\n    return 2 * x\n", [([], judge)], fn_name="check", limits=QUICK)) == ["passed"]
    assert statuses(run_tests("def check(x):\n    return 3 * x\n", [([], judge)], fn_name="check", limits=QUICK)) == [
        "wrong_answer"]


def test_a_check_is_validated_and_needs_a_function():
    with pytest.raises(ValueError, match="check\\(candidate\\)"):
        Check("def judge(candidate):\n    pass\n")
    with pytest.raises(ValueError, match="does not compile"):
        Check("def check(candidate:\n")
    with pytest.raises(ValueError, match="call-based"):
        run_tests("print(1)", [("", PAIR_CHECK)])


def test_records_that_the_driver_could_not_have_written_stop_the_reading():
    records = _Records([("", "1\n"), ("", "2\n")], None)
    good = b'{"i": 0, "exit": 0, "timeout": false, "output_limit": false, "stdout": "1\\n", "stderr": "", "value": null, "time": 0.1}\n'
    assert records.take(b'{"ready": true}\n') and records.take(good)
    for bad in (good, b'{"i": 1}\n', b"[1]\n", good.replace(b'"exit": 0', b'"exit": true').replace(b'"i": 0', b'"i": 1')):
        probe = _Records(records.pairs, None)
        probe.ready, probe.results = True, list(records.results)
        assert not probe.take(bad) and probe.malformed and probe.syntax_error is None
    assert [r.status for r in records.results] == ["passed"]


def test_no_tests_means_no_results_and_bad_tests_are_refused():
    assert run_tests(DOUBLE, []) == []
    with pytest.raises(ValueError, match="pair"):
        run_tests(DOUBLE, [("1",)])
    with pytest.raises(ValueError, match="must be a string"):
        run_tests(DOUBLE, [([1], "2")])
    with pytest.raises(ValueError, match="list of arguments"):
        run_tests(DOUBLE, [("1", "2")], fn_name="f")
    with pytest.raises(ValueError, match="identifier"):
        run_tests(DOUBLE, [([1], 2)], fn_name="not a name")
    with pytest.raises(ValueError, match="isolation"):
        run_tests(DOUBLE, [("1", "2")], isolation="none")


@pytest.mark.parametrize(
    "field, value",
    [("time_s", 0), ("time_s", float("nan")), ("memory_mb", 8), ("output_bytes", 0), ("processes", True)],
)
def test_limits_are_validated(field, value):
    with pytest.raises(ValueError, match=f"Limits.{field}"):
        Limits(**{field: value})


def test_run_many_keeps_job_order():
    jobs = [Job(DOUBLE, [(f"{n}\n", f"{2 * n}\n")], limits=QUICK) for n in range(5)]
    jobs.append(Job("def f(x):\n    return -x\n", [([4], -4)], fn_name="f", limits=QUICK))
    jobs.append(Job("print(", [("", "")]))
    results = run_many(jobs, workers=3)
    assert [statuses(r) for r in results] == [["passed"]] * 6 + [["syntax_error"]]
    with pytest.raises(ValueError, match="workers"):
        run_many(jobs, workers=0)


def test_missing_bubblewrap_is_refused_with_what_is_missing():
    with pytest.raises(SandboxUnavailable, match="bubblewrap is not installed.*none-unsafe"):
        run_tests(DOUBLE, [("1\n", "2\n")], bwrap="/nonexistent/bwrap")
    with pytest.raises(SandboxUnavailable):
        run_many([Job(DOUBLE, [("1\n", "2\n")])], bwrap="/nonexistent/bwrap")


def test_unsafe_mode_is_chosen_by_name_and_still_judges():
    results = run_tests(DOUBLE, [("2\n", "4\n"), ("2\n", "5\n")], limits=QUICK, isolation="none-unsafe")
    assert statuses(results) == ["passed", "wrong_answer"]


def test_bubblewrap_that_cannot_build_namespaces_is_refused():
    folder = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        folder.chmod(0o755)
        fake = folder / "bwrap"
        fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
        fake.chmod(0o755)
        with pytest.raises(SandboxUnavailable, match="No permissions.*user namespaces"):
            run_tests(DOUBLE, [("1\n", "2\n")], bwrap=str(fake))
    finally:
        shutil.rmtree(folder)


def test_a_program_too_deep_to_compile_is_a_syntax_error():
    program = "x = " + "-" * 200_000 + "1\n"
    assert statuses(run_tests(program, [("", None)], limits=QUICK)) == ["syntax_error"]
