"""Hostile programs: each gets a verdict, nothing outside changes, nothing keeps running."""

from __future__ import annotations

import json
import os
import socket
import tempfile
import uuid
from pathlib import Path

import pytest

from thoughttree.sandbox import Job, Limits, TestResult, run_many, run_tests

pytestmark = pytest.mark.sandbox  # runs programs in bubblewrap

SHORT = Limits(time_s=1.5, memory_mb=256, output_bytes=100_000, processes=8)


@pytest.fixture
def run(descendants):
    """run_tests with short limits, checking that nothing it started is still running."""

    def run_checked(program: str, tests=(("", None),)) -> list[TestResult]:
        results = run_tests(program, list(tests), limits=SHORT)
        assert descendants() == [], "a sandboxed process outlived its run"
        return results

    return run_checked


def test_fork_bomb_is_capped_and_killed(run):
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    [result] = run(bomb)
    assert result.status == "timeout"


@pytest.mark.parametrize("program", ["while True:\n    pass\n", "import time\ntime.sleep(10 ** 6)\n"])
def test_busy_and_sleeping_programs_time_out(program, run):
    [result] = run(program)
    assert result.status == "timeout" and SHORT.time_s <= result.time_s < SHORT.time_s + 2


def test_threads_cannot_exceed_the_process_limit(run):
    program = (
        "import threading, time\nstarted = 0\ntry:\n    for _ in range(50):\n"
        "        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n        started += 1\n"
        "except RuntimeError as err:\n    print(started, err)\n"
    )
    [result] = run(program)
    assert result.status == "passed" and "can't start new thread" in result.stdout
    assert int(result.stdout.split()[0]) < SHORT.processes


@pytest.mark.parametrize("program", ["x = bytearray(20 * 2 ** 30)\n", "x = []\nwhile True:\n    x.append(bytearray(10 ** 7))\n"])
def test_allocating_gigabytes_is_a_memory_limit(program, run):
    [result] = run(program)
    assert result.status == "memory_limit" and "MemoryError" in result.stderr


def test_printing_gigabytes_is_an_output_limit(run):
    [result] = run("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n")
    assert result.status == "output_limit"
    assert len(result.stdout) <= 2001


def test_a_huge_file_is_an_output_limit(run):
    [result] = run("with open('big', 'w') as f:\n    f.write('x' * 10 ** 7)\n")
    assert result.status == "output_limit" and "File too large" in result.stderr


def test_filling_the_scratch_directory_is_an_output_limit(run):
    [result] = run("for i in range(1000):\n    with open(f'f{i}', 'w') as f:\n        f.write('x' * 90_000)\n")
    assert result.status == "output_limit" and "No space left" in result.stderr


def test_writes_land_only_in_the_private_scratch_directory(tmp_path, run):
    name = f"sandbox-escape-{uuid.uuid4().hex}"
    targets = [Path.home(), Path(tempfile.gettempdir()), Path("/tmp"), tmp_path, Path.cwd(), Path("/"), Path("/usr"), Path("/dev")]
    program = (
        "import os, tempfile\n"
        f"for d in [os.path.expanduser('~'), tempfile.gettempdir(), os.getcwd(), *{[str(t) for t in targets]!r}]:\n"
        "    try:\n"
        f"        open(os.path.join(d, {name!r}), 'w').write('x')\n"
        "        print('wrote', d)\n"
        "    except OSError as err:\n"
        "        print('refused', d, type(err).__name__)\n"
        f"print(open(os.path.join(os.path.expanduser('~'), {name!r})).read())\n"
    )
    [result] = run(program)
    assert result.status == "passed", result.stderr
    assert "wrote /tmp" in result.stdout
    assert "refused /usr " in result.stdout and "refused /dev " in result.stdout and "refused / " in result.stdout
    for target in targets:
        assert not (target / name).exists()


def test_no_network_even_to_a_local_listener(run):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=0.5)\n"
        [result] = run(program)
        assert result.status == "runtime_error" and "ConnectionRefusedError" in result.stderr
        with pytest.raises(BlockingIOError):
            listener.accept()
    [result] = run("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=0.5)\n")
    assert result.status == "runtime_error" and "OSError" in result.stderr


@pytest.mark.parametrize(
    "kill",
    [
        "os.kill(os.getppid(), signal.SIGKILL)",
        "os.kill(os.getppid(), signal.SIGSTOP)",
        "os.kill(os.getppid(), signal.SIGINT)",
        "os.kill(-1, signal.SIGKILL)",
        "os.kill(1, signal.SIGTERM)",
    ],
)
def test_no_signal_reaches_the_driver(kill, run):
    # The driver is the namespace's init and handles no signal: a test cannot stop it.
    program = f"import os, signal\ntry:\n    {kill}\nexcept ProcessLookupError:\n    pass\nimport time\ntime.sleep(0.5)\nprint(os.getppid())\n"
    results = run(program, [("", "1"), ("", "1")])
    assert [result.status for result in results] == ["passed", "passed"]


def test_no_test_reaches_the_pipe_that_carries_the_records(run):
    # Taking the driver's standard output (pidfd_getfd) or tracing it would let a program write
    # records of its own; both are refused, as is reading its descriptors through /proc.
    program = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "stolen = libc.syscall(438, os.pidfd_open(1), 1, 0)\n"
        "traced = libc.ptrace(16, 1, None, None)\n"
        "try:\n    os.readlink('/proc/1/fd/1')\n    peeked = 0\nexcept OSError:\n    peeked = -1\n"
        "if stolen >= 0:\n    os.write(stolen, b'{\"i\": 0}\\n')\n"
        "print(stolen, traced, peeked)\n"
    )
    [result] = run(program, [("", "-1 -1 -1")])
    assert result.status == "passed", result


def test_daemons_are_killed_and_collected_before_the_next_test(run):
    # Each test first counts the other processes it can see (only the driver, pid 1, should be
    # left: a daemon that outlived its test, or its zombie that the driver did not collect, is
    # still listed in /proc), then leaves four daemons behind.
    program = (
        "import os, time\n"
        "print(sum(1 for p in os.listdir('/proc') if p.isdigit() and int(p) not in (1, os.getpid())))\n"
        "for _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n        os.setsid()\n"
        "        if os.fork() == 0:\n            time.sleep(100)\n        os._exit(0)\n    os.waitpid(pid, 0)\n"
    )
    results = run(program, [("", "0")] * 3)
    assert [result.status for result in results] == ["passed"] * 3, results


def test_cpu_time_has_a_soft_limit_below_the_hard_one(run):
    # SIGXCPU at the soft limit makes a timeout; the hard limit a second later kills.
    [result] = run("import resource\nprint(*resource.getrlimit(resource.RLIMIT_CPU))\n", [("", "3 4")])
    assert result.status == "passed", result


def test_no_secrets_visible_through_proc_or_files(monkeypatch):
    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("THOUGHTTREE_TEST_SECRET", secret)
    here = Path(__file__).resolve()
    others = [f"/proc/{os.getpid()}/mem", str(here), "/proc/1/root/etc/shadow"]
    program = (
        "import glob, os\nseen = [repr(dict(os.environ))]\n"
        f"for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline') + {others!r}:\n"
        "    try:\n        seen.append(open(path, 'rb').read().decode(errors='replace'))\n"
        "    except OSError as err:\n        seen.append(type(err).__name__)\n"
        "print('\\n'.join(seen))\n"
    )
    [result] = run_tests(program, [("", secret)], limits=Limits(time_s=2.0, output_bytes=10_000_000))
    assert result.status == "wrong_answer"
    assert secret not in result.stdout and "THOUGHTTREE_TEST_SECRET" not in result.stdout
    assert "no_secrets_visible" not in result.stdout
    assert "PermissionError" in result.stdout or "FileNotFoundError" in result.stdout


def test_only_the_interpreter_and_libraries_are_visible():
    here = str(Path(__file__).parent)
    program = (
        "import json, os, shutil, sys\n"
        "print(json.dumps({'top': os.listdir('/'), 'shell': shutil.which('sh'), 'etc': os.path.exists('/etc'),\n"
        f"    'tests': os.path.exists({here!r}), 'next to python': os.listdir(os.path.dirname(sys.executable)),\n"
        "    'python': sys.executable}))\n"
    )
    [result] = run_tests(program, [("", None)], limits=SHORT)
    seen = json.loads(result.stdout)
    assert seen["shell"] is None and not seen["etc"] and not seen["tests"]
    assert {"sandbox", "tmp", "dev", "proc"} <= set(seen["top"])
    if seen["python"].startswith("/usr/"):
        assert seen["next to python"] == [os.path.basename(seen["python"])]


def test_runs_as_an_unprivileged_user_without_capabilities():
    program = "import os\nprint(os.getuid(), os.getgid())\nprint(open('/proc/self/status').read())\n"
    [result] = run_tests(program, [("", None)], limits=SHORT)
    assert result.stdout.splitlines()[0] == "65534 65534"
    assert "CapEff:\t0000000000000000" in result.stdout


def test_daemons_do_not_survive_the_run(run, processes_mentioning):
    marker = f"{uuid.uuid4().int % 10 ** 6}.{uuid.uuid4().int % 10 ** 6}"
    program = (
        "import os, sys\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(1000)', {marker!r}])\n"
        "    os._exit(0)\n"
        "os.wait()\nprint('done')\n"
    )
    results = run(program, [("", "done"), ("", "done")])
    assert [r.status for r in results] == ["passed", "passed"]
    assert processes_mentioning(marker) == []


def test_the_evaluator_is_unharmed(run):
    before = dict(os.environ), os.getcwd()
    run("import os, signal\nos.kill(-1, signal.SIGKILL)\n")
    run("while True:\n    pass\n")
    assert (dict(os.environ), os.getcwd()) == before
    assert run_tests("print(input())", [("ok\n", "ok")], limits=SHORT)[0].passed


def test_a_sandbox_past_its_budget_is_stopped(run, monkeypatch):
    monkeypatch.setattr("thoughttree.sandbox.execute.STARTUP_S", 1.0)
    monkeypatch.setattr("thoughttree.sandbox.execute.PER_TEST_S", -SHORT.time_s)  # the budget: 1 s for all
    results = run("import time\ntime.sleep(100)\n", [("", None), ("", None)])
    assert [result.status for result in results] == ["timeout", "timeout"]
    assert "ran out of time" in results[1].stderr


def test_hostile_programs_checked_in_parallel(descendants, processes_mentioning):
    marker = f"{uuid.uuid4().int % 10 ** 6}.5"
    daemon = (
        "import os, sys\nif os.fork() == 0:\n    os.setsid()\n"
        f"    os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(1000)', {marker!r}])\n"
        "print('done')\n"
    )
    programs = {
        "timeout": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
        "memory_limit": "x = bytearray(20 * 2 ** 30)\n",
        "output_limit": "while True:\n    print('x' * 10000)\n",
        "runtime_error": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nraise SystemExit(3)\n",
        "passed": daemon,
    }
    jobs = [Job(program, [("", "done")], limits=SHORT) for program in programs.values()]
    results = run_many(jobs * 2, workers=4)
    assert [r[0].status for r in results] == list(programs) * 2
    assert descendants() == [] and processes_mentioning(marker) == []
