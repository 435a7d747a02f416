"""Tests forked from the driver behave as tests in fresh interpreters (``fresh_interpreter=True``)."""

from __future__ import annotations

import pytest

from thoughttree.sandbox import Limits, run_tests

pytestmark = pytest.mark.sandbox  # runs programs in bubblewrap

QUICK = Limits(time_s=3.0)
LINES = "3\nalpha\nbeta é\n"

PROGRAMS = {
    "print without newline": "print('no newline', end='')",
    "input lines": "n = int(input())\nprint([input() for _ in range(2)], n)",
    "stdin read": "import sys\nprint(repr(sys.stdin.read()))",
    "stdin bytes": "import sys\nprint(sys.stdin.buffer.read().split())",
    "descriptor 0": "print(open(0).read().split())",
    "exit status": "import sys\nprint('before')\nsys.exit(3)",
    "exit message": "import sys\nsys.exit('a message')",
    "exit builtin": "print('x')\nexit()",
    "os exit loses buffered output": "import os\nprint('lost')\nos._exit(5)",
    "uncaught exception": "def f(x):\n    return 1 // x\nprint('partial')\nf(0)",
    "non-daemon thread": (
        "import threading, sys\nthreading.stack_size(1 << 26)\nsys.setrecursionlimit(10 ** 6)\n"
        "def depth(n):\n    return 0 if n == 0 else 1 + depth(n - 1)\n"
        "def main():\n    print(depth(20000))\nthreading.Thread(target=main).start()"
    ),
    "exception in a thread": "import threading\nt = threading.Thread(target=lambda: 1 / 0)\nt.start()\nt.join()\nprint('after')",
    "exit handler": "import atexit\natexit.register(lambda: print('from atexit'))\nprint('first')",
    "buffered output template": (
        "import io, sys, atexit\nbuf = io.StringIO()\nsys.stdout = buf\n"
        "atexit.register(lambda: sys.__stdout__.write(buf.getvalue()))\nprint('collected', input())"
    ),
    "main guard and argv": "import sys\nif __name__ == '__main__':\n    print(len(sys.argv), sys.argv[0].endswith('.py'))",
    "unicode": "print('é ☃', input(), sep='|')",
    "stderr and stdout": "import sys\nprint('out')\nprint('err', file=sys.stderr)\nprint('out again')",
    "scratch file": "open('f.txt', 'w').write('kept')\nprint(open('f.txt').read())",
    "standard modules": (
        "import collections, heapq, bisect, itertools, math, functools\n"
        "print(collections.Counter('abca')['a'], heapq.nsmallest(1, [3, 1]), bisect.bisect([1, 2], 1), math.comb(5, 2))"
    ),
    "deep recursion": "import sys\nsys.setrecursionlimit(10000)\ndef d(n):\n    return n if n == 0 else d(n - 1)\nprint(d(995))",
    "near the recursion limit": "def d(n):\n    return 0 if n == 0 else 1 + d(n - 1)\nprint(d(995))",
    "too deep": "def d(n):\n    return d(n + 1)\nd(0)",
    "memory error": "x = bytearray(4 * 2 ** 30)",
    "own excepthook": "import sys\nsys.excepthook = lambda *a: print('hooked', a[0].__name__, file=sys.stderr)\nraise KeyError(1)",
    "its own /proc entries": "import os\nprint(sorted(os.listdir('/proc/self/fd')), len(open('/proc/self/status').read()) > 0)",
    "the sandbox's own modules": (
        "for name in ('wire', 'call', 'streams', 'children', 'candidate'):\n    try:\n        __import__(name)\n"
        "        print(name)\n    except ImportError as e:\n        print(type(e).__name__)"
    ),
    "stdout set to None": "import sys\nprint('shown')\nsys.stdout.flush()\nsys.stdout = None",
}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_forked_test_behaves_as_a_fresh_interpreter(name: str) -> None:
    program = PROGRAMS[name]
    forked, fresh = (run_tests(program, [(LINES, None)], limits=QUICK, fresh_interpreter=f)[0] for f in (False, True))
    assert (forked.status, forked.stdout, forked.exit_code) == (fresh.status, fresh.stdout, fresh.exit_code), name
    assert _last_line(forked.stderr) == _last_line(fresh.stderr), name
    if "Traceback" in fresh.stderr:
        # The traceback starts at the program's own first frame, as the interpreter prints it.
        assert forked.stderr.splitlines()[1] == fresh.stderr.splitlines()[1], name


CALLS = {
    "function": ("def f(a, b):\n    return (a, {b: [a]})\n", "f", [[1, 2], [3, 4]]),
    "method": ("class Solution:\n    def f(self, s):\n        print('debug')\n        return s[::-1]\n", "f", [["abc"], ["x"]]),
    "exception": ("def f(x):\n    return 1 // x\n", "f", [[0], [1]]),
    "exit inside": ("import sys\ndef f(x):\n    sys.exit(2)\n", "f", [[1]]),
    "missing": ("def g():\n    pass\n", "f", [[1]]),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_forked_call_behaves_as_a_fresh_interpreter(name: str) -> None:
    program, fn_name, inputs = CALLS[name]
    tests = [(args, None) for args in inputs]
    forked, fresh = (run_tests(program, tests, fn_name=fn_name, limits=QUICK, fresh_interpreter=f) for f in (False, True))
    for a, b in zip(forked, fresh):
        assert (a.status, a.stdout, a.exit_code) == (b.status, b.stdout, b.exit_code), name
        assert _last_line(a.stderr) == _last_line(b.stderr), name


def test_tests_of_one_program_do_not_share_state() -> None:
    """Each test is a new process: what one test changes in its interpreter, the next never sees."""
    program = "import sys\nprint(getattr(sys, 'seen', 0))\nsys.seen = 1\nimport json\njson.loads = None\n"
    results = run_tests(program, [("", "0"), ("", "0"), ("", "0")], limits=QUICK)
    assert [r.status for r in results] == ["passed"] * 3
