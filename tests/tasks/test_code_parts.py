"""Pure parts of the code tasks: program extraction, pass@k, public/hidden splits, APPS metrics and prompts."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thoughttree.tasks.apps import Scored, summarize
from thoughttree.tasks.apps.prompts import base_prompt, chat_message, chat_prompt
from thoughttree.tasks.code import CodeProblem, extract, mean_pass_at_k, pass_at_k, split_public
from thoughttree.tasks.code.programs import truncate_at


def test_extract_bare_code_and_fences():
    assert extract("print(1)\n\n\n") == "print(1)\n"
    prose = "Here it is:\n```python\nx = int(input())\nprint(x)\n```\nDone."
    assert extract(prose) == "x = int(input())\nprint(x)\n"
    assert extract("```\nprint(2)\n```") == "print(2)\n"
    assert extract("```text\nnot code\n```\n```py\nprint(3)\n```") == "print(3)\n"
    assert extract("```python\nprint(4)") == "print(4)\n"  # an unclosed block runs to the end


def test_extract_inside_an_opened_block_stops_at_the_fence():
    assert extract("a = 1\nprint(a)\n```\nExplanation ```python\nb\n```", opened=True) == "a = 1\nprint(a)\n"
    assert extract("", opened=True) == ""


def test_truncate_at_earliest_stop():
    assert truncate_at("    return 1\n\ndef g():\n#x", ("\n#", "\ndef ")) == "    return 1\n"
    assert truncate_at("    return 1\n", ("\ndef ",)) == "    return 1\n"


def brute_pass_at_k(n: int, c: int, k: int) -> float:
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_brute_force(nck):
    n, c, k = nck
    assert math.isclose(pass_at_k(n, c, k), brute_pass_at_k(n, c, k), abs_tol=1e-12)


def test_pass_at_k_known_values_and_errors():
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 10, 5) == 1.0
    assert math.isclose(pass_at_k(200, 37, 1), 37 / 200)
    assert 0.0 < pass_at_k(200, 1, 100) < 1.0
    assert math.isclose(mean_pass_at_k([(4, 1), (4, 4)], 1), (0.25 + 1.0) / 2)
    with pytest.raises(ValueError, match="k must be in 1..n"):
        pass_at_k(3, 1, 5)
    with pytest.raises(ValueError, match="cannot exceed"):
        pass_at_k(3, 4, 1)
    with pytest.raises(ValueError, match="at least one problem"):
        mean_pass_at_k([], 1)


def test_split_public_takes_the_statement_examples_and_keeps_one_hidden():
    tests = [("1 2\n", "3\n"), ("5 5\n", "10\n"), ("7 1\n", "8\n"), ("9 9\n", "18\n")]
    public, hidden = split_public(tests, "Add.\nExample input:\n5 5\nOutput: 10\n  9  9 \n", fn_name=None)
    assert public == (tests[1], tests[3])
    assert hidden == (tests[0], tests[2])
    public, hidden = split_public(tests, "no examples here", fn_name=None)
    assert public == (tests[0],) and hidden == tuple(tests[1:])
    part = [("QA\n", "0\n"), ("QAQ\n", "1\n"), ("AQ\n", "0\n")]
    assert split_public(part, "Count QAQ in a line.\nInput\nQAQ\n", fn_name=None)[0] == (part[1],)  # whole lines only
    everything = "1 2\n5 5\n7 1\n9 9"
    public, hidden = split_public(tests[:2], everything, fn_name=None)
    assert public == (tests[0],) and hidden == (tests[1],)
    calls = [([[1, 2]], 3), (["ab"], "ba"), ([7], 7)]
    public, _ = split_public(calls, "solve([1, 2]) returns 3; solve('ab') gives 'ba'", fn_name="solve")
    assert public == (calls[0], calls[1])
    numbers = [([1], 1), ([-3], 9), ([2.5], 6.25), ([10], 100)]  # arguments inside longer numbers are not shown
    public, _ = split_public(numbers, "square(10) gives 100, square(-2.5) gives 6.25 and square(-3) gives 9",
                             fn_name="square")
    assert public == (numbers[1], numbers[3])
    with pytest.raises(ValueError, match="at least 2 tests"):
        split_public(tests[:1], "", fn_name=None)


def test_metrics_strict_accuracy_and_test_case_average_per_difficulty():
    scored = [
        Scored("introductory", ("passed", "passed"), 2),
        Scored("introductory", ("passed", "wrong_answer"), 2),
        Scored("competition", (), 3),  # no program
        Scored("competition", ("timeout", "passed", "passed"), 3),
    ]
    out = summarize(scored)
    assert out["all"] == {"problems": 4, "strict_accuracy": 0.25, "test_case_average": (1 + 0.5 + 0 + 2 / 3) / 4}
    assert out["introductory"]["strict_accuracy"] == 0.5
    assert out["competition"]["test_case_average"] == pytest.approx(1 / 3)
    assert "interview" not in out
    with pytest.raises(ValueError):
        Scored("interview", ("passed",), 2)


def _problem(fn_name: str | None = None, starter: str = "") -> CodeProblem:
    return CodeProblem(key="7", statement="Print the sum of two numbers.", public=(("1 2\n", "3\n"),),
                       hidden=(("2 2\n", "4\n"),), fn_name=fn_name, starter_code=starter)


def test_apps_prompts():
    text = base_prompt(_problem())
    assert text.startswith("\nQUESTION:\nPrint the sum") and text.endswith("\nUse Standard Input format\n\nANSWER:\n")
    call = base_prompt(_problem("add", "def add(a, b):\n    "))
    assert "def add(a, b):" in call and "Use Call-Based format" in call
    assert "standard input" in chat_message(_problem())
    assert "`add`" in chat_message(_problem("add", "def add(a, b):"))
    seen = []
    assert chat_prompt(lambda user, start: seen.append((user, start)) or "X", _problem()) == "X"
    assert seen[0][1] == "```python\n"


def test_chat_prompts_through_the_tokenizer_template(tmp_path):
    from tiny_models import make_tokenizer

    from thoughttree.tasks.apps import Apps
    from thoughttree.tasks.code import template_renderer
    from thoughttree.tasks.humaneval import HumanEval

    tok = make_tokenizer(tmp_path)
    with pytest.raises(ValueError, match="no chat template"):
        template_renderer(tok)
    tok.chat_template = ("{% for m in messages %}<s>[{{ m['role'] }}] {{ m['content'] }}{% endfor %}"
                         "{% if add_generation_prompt %}[assistant] {% endif %}")
    render = template_renderer(tok)
    ids = Apps([_problem()], style="chat", render=render).prompt("7")
    assert isinstance(ids, list) and ids.count(1) == 1  # one BOS, from the template
    text = tok.decode(ids)
    assert "[user] Print the sum" in text and text.endswith("[assistant] ```python\n")
    he = CodeProblem(key="HumanEval/0", statement="def f(x):\n    '''Double.'''\n", public=(), hidden=(([], True),),
                     fn_name="f", info={"entry_point": "f", "test": ""})
    task = HumanEval([he], style="chat", render=render)
    assert tok.decode(task.prompt("HumanEval/0")).endswith("```python\ndef f(x):\n    '''Double.'''\n")
    assert task.program("HumanEval/0", "    return 2 * x\n```\nDone") == he.statement + "    return 2 * x\n"
    assert HumanEval([he]).program("HumanEval/0", "    return 2 * x\n\ndef g():\n    pass\n") == (
        he.statement + "    return 2 * x\n")
    with pytest.raises(ValueError, match="chat template"):
        Apps([_problem()], style="chat")
