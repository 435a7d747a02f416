"""APPS's comparison rules, the wire format of return values, and the package's imports."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import thoughttree.sandbox as sandbox
from thoughttree.sandbox import outputs_match, values_match
from thoughttree.sandbox.wire import Opaque, WireError, decode, encode


@pytest.mark.parametrize(
    "output, expected",
    [
        ("1 2 3\n", "1 2 3"),
        ("1  2\t3  \n\n\n", "1 2 3\n"),
        ("YES\r\nNO\r\n", "YES\nNO"),
        ("0.3333333\n", "0.333333"),
        ("1e-9\n", "0"),
        ("2.50000\n", "2.5"),
        ("a\nb\n", ["a", "b"]),
        ("", ""),
    ],
)
def test_outputs_that_match(output, expected):
    assert outputs_match(output, expected)


@pytest.mark.parametrize(
    "output, expected",
    [
        ("1 2 3", "1 2\n3"),
        ("1 2 3", "3 2 1"),
        ("yes", "YES"),
        ("100000", "100001"),
        ("0.33", "0.333333"),
        ("1 2", "1 2 3"),
        ("1", ""),
    ],
)
def test_outputs_that_do_not_match(output, expected):
    assert not outputs_match(output, expected)


def test_nan_text_matches_only_itself():
    assert outputs_match("nan", "nan") and not outputs_match("nan", "0")


@given(st.lists(st.lists(st.from_regex(r"[A-Za-z0-9.+-]{1,6}", fullmatch=True), min_size=1, max_size=4), max_size=5))
def test_any_spacing_of_the_same_tokens_matches(lines):
    expected = "\n".join(" ".join(line) for line in lines)
    spaced = "\n\n".join("  ".join(line) + " \t" for line in lines) + "\n\n"
    assert outputs_match(spaced, expected)


@pytest.mark.parametrize(
    "value, expected, ok",
    [
        ((1, 2), [1, 2], True),
        ([(1, 2), (3, 4)], [[1, 2], [3, 4]], True),
        (3, [3], True),
        (3, [3, 4], False),
        ({1: "a"}, {"1": "a"}, True),
        ({1: "a"}, [{"1": "a"}], True),
        (0.1 + 0.2, 0.3, True),
        (1, 1.0, True),
        (True, 1, True),
        ("1", 1, False),
        (None, None, True),
        ({1, 2}, [1, 2], False),
        (Opaque("<x>"), "<x>", False),
        ([1, [2, (3,)]], [1, [2, [3]]], True),
    ],
)
def test_values(value, expected, ok):
    assert values_match(value, expected) is ok


values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner) | st.dictionaries(st.integers() | st.text(), inner, max_size=3)
    | st.frozensets(st.integers() | st.text(), max_size=3),
    max_leaves=12,
)


@given(values)
def test_wire_round_trip_keeps_types(value):
    back = decode(encode(value))
    assert back == value and type(back) is type(value) or isinstance(value, frozenset) and back == set(value)


def test_wire_special_values_and_bad_input():
    assert math.isinf(decode(encode(float("inf"))))
    opaque = decode(encode(object()))
    assert isinstance(opaque, Opaque) and opaque != opaque and "object" in repr(opaque)
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert isinstance(decode(encode(deep)), Opaque)
    for bad in ['{"tuple": 1}', '{"a": 1, "b": 2}', '{"exec": "x"}', "not json", "[" * 100_000, '{"set": [[1]]}']:
        with pytest.raises(WireError):
            decode(bad)


def test_the_sandbox_imports_only_the_standard_library_and_itself():
    allowed = {"__future__", "ast", "atexit", "builtins", "call", "candidate", "children", "ctypes", "concurrent",
               "contextlib", "dataclasses", "decimal", "driver", "io", "json", "math", "os", "pathlib", "re", "resource",
               "secrets", "select", "selectors", "shutil", "signal", "stat", "streams", "subprocess", "sys", "tempfile",
               "threading", "time", "traceback", "types", "typing", "wire"}
    for path in Path(sandbox.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module.split(".")[0]]
            else:
                continue
            assert set(names) <= allowed, f"{path.name} imports {names}"
