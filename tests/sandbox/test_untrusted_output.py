"""Program output is untrusted: the judge is total over it, and verdicts are per program."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import thoughttree.sandbox.execute as sandbox_run
from thoughttree.sandbox import Job, Limits, outputs_match, run_many, run_tests, values_match
from thoughttree.sandbox.execute import _Records
from thoughttree.sandbox.wire import WireError, decode

QUICK = Limits(time_s=2.0)
LONG = "9" * 5000

_digits = st.integers(min_value=1, max_value=20_000).map(lambda n: "9" * n)
_numbers = st.one_of(
    _digits,
    _digits.map(lambda d: "-" + d),
    _digits.map(lambda d: d + ".5"),
    _digits.map(lambda d: "1e" + d),
    _digits.map(lambda d: "0." + d),
    st.from_regex(r"[+-]?\d{0,30}\.?\d{0,30}([eE][+-]?\d{1,30})?", fullmatch=True),
)
_tokens = st.one_of(_numbers, st.text(max_size=30), st.sampled_from(["nan", "inf", "-inf", "NaN", "1e", ".", "+-1"]))
_outputs = st.one_of(
    st.text(),
    st.binary().map(lambda b: b.decode("utf-8", "replace")),
    st.lists(_tokens, max_size=20).map(" ".join),
    st.lists(_tokens, max_size=20).map("\n".join),
    st.integers(min_value=0, max_value=5000).map(lambda n: "\n" * n),
)
_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),
        st.text(max_size=20),
        st.binary(max_size=20),
        st.integers(min_value=1, max_value=20_000).map(lambda n: 10**n - 1),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.tuples(inner, inner), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(_outputs, st.one_of(_outputs, st.lists(_tokens, max_size=5)))
def test_the_output_judge_answers_every_output(output, expected):
    assert outputs_match(output, expected) in (True, False)


@settings(max_examples=150, deadline=None)
@given(_values, _values)
def test_the_value_judge_answers_every_value(value, expected):
    assert values_match(value, expected) in (True, False)


@settings(max_examples=100, deadline=None)
@given(st.one_of(st.text(), _outputs), _outputs, st.one_of(st.none(), _outputs))
def test_a_record_of_any_output_gets_a_verdict(stdout, expected, value):
    """The records a driver sends carry what the program printed or returned: any of it is judged."""
    for fn_name, want in ((None, expected), ("f", [expected])):
        line = (
            sandbox_run.json.dumps(
                {
                    "i": 0,
                    "exit": 0,
                    "timeout": False,
                    "output_limit": False,
                    "stdout": stdout,
                    "stderr": stdout,
                    "value": value,
                    "time": 0.1,
                }
            ).encode()
            + b"\n"
        )
        records = _Records([([], want)], fn_name)
        records.take(_Records.READY)
        records.take(line)
        [result] = records.results
        assert result.status in ("passed", "wrong_answer", "runtime_error")


def test_numbers_of_any_length_are_compared_exactly():
    assert outputs_match(LONG, LONG) and outputs_match("+00" + LONG, LONG)
    assert not outputs_match(LONG, LONG[:-1] + "8") and not outputs_match(LONG, "-" + LONG)
    assert outputs_match(LONG + ".0", LONG) and not outputs_match(LONG + ".0", "8" * 5000)
    assert outputs_match("1e400", "1.000001e400") and not outputs_match("1e400", "2e400")
    assert outputs_match("-0", "0") and not outputs_match("1e99999999999999999999", "2e99999999999999999999")
    assert not values_match(int(LONG[:4000]) ** 2, 1.0) and values_match(int(LONG[:4000]), [int(LONG[:4000])])


def test_nested_values_compare_as_unequal():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert values_match(deep, deep) in (True, False)
    with pytest.raises(WireError):
        decode("[" * 100_000 + "]" * 100_000)


@pytest.mark.sandbox
def test_a_program_printing_a_huge_number_gets_a_verdict():
    results = run_tests(f"print('{LONG}')", [("", "5\n"), ("", LONG + "\n")], limits=QUICK)
    assert [r.status for r in results] == ["wrong_answer", "passed"]


@pytest.mark.sandbox
def test_one_program_never_changes_another_programs_verdicts(monkeypatch):
    good, huge = "print(int(input()) * 2)\n", f"print('{LONG}')\n"
    tests = [("2\n", "4\n")]
    [first, second] = run_many([Job(huge, tests, limits=QUICK), Job(good, tests, limits=QUICK)], workers=2)
    assert [r.status for r in first] == ["wrong_answer"] and [r.status for r in second] == ["passed"]

    real = sandbox_run.outputs_match

    def breaks_on_the_huge_one(output: str, expected: object) -> bool:
        if LONG in output:
            raise RuntimeError("the judge broke")
        return real(output, expected)

    monkeypatch.setattr(sandbox_run, "outputs_match", breaks_on_the_huge_one)
    [first, second] = run_many([Job(huge, tests, limits=QUICK), Job(good, tests, limits=QUICK)], workers=2)
    assert [r.status for r in first] == ["runtime_error"] and "the judge broke" in first[0].stderr
    assert [r.status for r in second] == ["passed"]


@pytest.mark.sandbox
def test_check_program_never_tracebacks_on_hostile_output(tmp_path: Path):
    program = tmp_path / "hostile.py"
    program.write_text(f"import sys\nprint('{LONG}')\nsys.stderr.write('[/bold] [red]\\x00\\xff\\n')\n")
    done = subprocess.run(
        [sys.executable, "-m", "thoughttree", "check-program", str(program), "--problem", "1604"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert done.returncode == 1 and "wrong_answer" in done.stdout


@settings(max_examples=50, deadline=None)
@given(_digits, _digits, st.sampled_from(["", "-", "+0"]))
def test_integers_of_any_length_match_only_when_equal(got, want, sign):
    assert outputs_match(sign + got, want) == (got == want and sign != "-")


@pytest.mark.sandbox
@pytest.mark.parametrize("stream", ["stderr", "stdout"])
def test_an_output_flood_on_either_stream_is_an_output_limit(stream: str):
    limits = Limits(time_s=10.0, output_bytes=100_000)
    flood = f"import sys\nfor _ in range(64):\n    sys.{stream}.write('x' * (1 << 16))\n"
    [result] = run_tests(flood, [("", None)], limits=limits)
    assert result.status == "output_limit", result
