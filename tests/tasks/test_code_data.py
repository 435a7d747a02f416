"""The bundled APPS sample and HumanEval's data, every test run in the sandbox.

The bundled APPS rows carry no reference solutions, so the tests here run (a) a program that
answers nothing on every test of every problem (each must run and be judged wrong) and (b)
solutions written for this suite for six problems (each must pass every test).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from thoughttree.sandbox import Job, run_many
from thoughttree.tasks import apps, humaneval

pytestmark = pytest.mark.sandbox  # runs programs in bubblewrap

SOLVED = {
    "1607": "s = input().strip()\nq = a = qa = qaq = 0\nfor ch in s:\n    if ch == 'Q':\n        qaq += qa\n"
            "        q += 1\n    elif ch == 'A':\n        qa += q\nprint(qaq)\n",
    "2755": "def multiple_of_index(arr):\n    return [x for i, x in enumerate(arr) if i > 0 and x % i == 0]\n",
    "3562": "def count_inversion(sequence):\n    s = list(sequence)\n"
            "    return sum(1 for i in range(len(s)) for j in range(i + 1, len(s)) if s[i] > s[j])\n",
    "4411": "def find_missing_number(numbers):\n    n = len(numbers) + 1\n    return n * (n + 1) // 2 - sum(numbers)\n",
    "3387": "def name_in_str(str, name):\n    rest = iter(str.lower())\n    return all(c in rest for c in name.lower())\n",
    "4277": "def difference_in_ages(ages):\n    return (min(ages), max(ages), max(ages) - min(ages))\n",
}


@pytest.fixture(scope="module")
def bundled() -> list:
    return apps.load("bundled")


def test_bundled_sample_is_87_train_split_problems(bundled):
    assert len(bundled) == 87 and len({p.key for p in bundled}) == 87
    assert Counter(p.difficulty for p in bundled) == {"competition": 47, "introductory": 26, "interview": 14}
    assert sum(len(p.public) + len(p.hidden) for p in bundled) == 1062
    assert all(p.public and p.hidden for p in bundled)
    assert sum(p.fn_name is not None for p in bundled) == 38
    assert not any(p.solutions for p in bundled)  # this sample ships without reference solutions
    assert apps.BUNDLED_SPLIT == "train"
    readme = apps.bundled_path().with_name("README.md").read_text()
    assert "train" in readme and apps.bundled_path().with_name("LICENSE-MapCoder").is_file()


def test_every_bundled_test_runs_and_an_empty_answer_fails_it(bundled):
    def nothing(p) -> str:
        return f"def {p.fn_name}(*args):\n    return None\n" if p.fn_name else "import sys\nsys.stdin.read()\n"

    results = run_many([Job(nothing(p), list(p.public + p.hidden), p.fn_name) for p in bundled])
    statuses = Counter(r.status for per in results for r in per)
    assert statuses == {"wrong_answer": 1062}


def test_solutions_pass_every_test_of_their_problems(bundled):
    table = {p.key: p for p in bundled}
    chosen = [table[k] for k in SOLVED]
    results = run_many([Job(SOLVED[p.key], list(p.public + p.hidden), p.fn_name) for p in chosen])
    for problem, per in zip(chosen, results):
        assert [r.status for r in per] == ["passed"] * len(per), problem.key


def test_one_bundled_problem_has_malformed_call_arguments(bundled):
    """Problem 1613's arguments were split from multi-line strings on conversion (see the data README)."""
    import re

    wrong = []
    for p in bundled:
        if p.fn_name:
            params = re.search(r"def\s+\w+\((.*?)\)", p.starter_code).group(1)
            arity = len([x for x in params.split(",") if x.strip() and x.strip() != "self"])
            if any(len(args) != arity for args, _ in p.public + p.hidden):
                wrong.append(p.key)
    assert wrong == ["1613"]


@pytest.mark.slow  # 164 programs and 36 broken ones in the sandbox: a check of the bundled data
def test_humaneval_canonical_solutions_pass_and_broken_ones_fail():
    problems = humaneval.load()
    assert len(problems) == humaneval.NUM_PROBLEMS == 164

    def job(p, program: str) -> Job:
        return Job(program, p.hidden, p.fn_name)

    broken = problems[::8]
    jobs = [job(p, p.solutions[0]) for p in problems]
    jobs += [job(p, p.statement + "    return None\n") for p in broken]
    jobs += [job(p, p.statement + "    raise ValueError('no')\n") for p in broken[:5]]
    jobs += [job(p, p.statement + "    return (\n") for p in broken[:5]]
    results = [per[0].status for per in run_many(jobs)]
    canonical, rest = results[:164], results[164:]
    assert canonical == ["passed"] * 164
    assert "passed" not in rest
    assert Counter(rest[len(broken) + 5:]) == {"syntax_error": 5}


def test_humaneval_docstring_examples():
    problems = humaneval.load()
    assert sum(bool(p.public) for p in problems) == 127  # the other 37 show no parsable example
    first = problems[0]
    assert first.public == (([[1.0, 2.0, 3.0], 0.5], False), ([[1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3], True))
    assert humaneval.docstring_examples("def f(x):\n    '''f(2) ➞ 4\n    f('a') == 'aa'\n    f(z) -> 1'''\n", "f") == [
        ([2], 4), (["a"], "aa")]
    json.dumps([p.public for p in problems])  # plain data
