"""Programs checked per second by the sandbox on this machine's CPU, one at a time and in parallel.

    python benchmarks/sandbox_throughput.py [--programs 24] [--tests 1,10] [--workers N] [--markdown]

Each program is a small correct solution (an APPS-style standard-input program or a call-based
function) checked against ``--tests`` tests; "sequential" checks one program after another,
"parallel" hands all of them to ``run_many`` with ``--workers`` sandboxes at once (default: the
core count). Each row is measured twice, side by side: tests forked from the sandbox's driver
(the default) and each test in a fresh interpreter (``fresh_interpreter=True``). The
``none-unsafe`` rows run the same driver without bubblewrap, to show what the isolation itself
costs.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

from rich.console import Console
from rich.table import Table

from thoughttree.sandbox import Job, Limits, run_many, run_tests

STDIN_PROGRAM = "n = int(input())\nprint(sum(range(n + 1)))\n"
CALL_PROGRAM = "def total(n):\n    return sum(range(n + 1))\n"


def jobs(kind: str, programs: int, tests: int, fresh: bool) -> list[Job]:
    made = []
    for p in range(programs):
        ns = [p * 7 + t for t in range(tests)]
        if kind == "stdin":
            made.append(Job(STDIN_PROGRAM + f"# {p}\n", [(f"{n}\n", f"{n * (n + 1) // 2}\n") for n in ns], fresh_interpreter=fresh))
        else:
            made.append(Job(CALL_PROGRAM + f"# {p}\n", [([n], n * (n + 1) // 2) for n in ns], fn_name="total", fresh_interpreter=fresh))
    return made


def measure(batch: list[Job], isolation: str, workers: int) -> tuple[float, float]:
    start = time.perf_counter()
    for job in batch:
        results = run_tests(job.program, job.tests, fn_name=job.fn_name, limits=job.limits, isolation=isolation,
                            fresh_interpreter=job.fresh_interpreter)
        assert all(r.passed for r in results), results
    sequential = len(batch) / (time.perf_counter() - start)
    start = time.perf_counter()
    for results in run_many(batch, workers=workers, isolation=isolation):
        assert all(r.passed for r in results), results
    return sequential, len(batch) / (time.perf_counter() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--programs", type=int, default=24, help="programs per row (default 24)")
    ap.add_argument("--tests", default="1,10", help="comma-separated tests per program (default 1,10)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="parallel sandboxes (default: cores)")
    ap.add_argument("--isolation", default="bwrap,none-unsafe", help="comma-separated modes (default both)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table instead")
    args = ap.parse_args()
    if args.programs < 1 or args.workers < 1:
        sys.exit("error: --programs and --workers must be at least 1")
    try:
        counts = [int(t) for t in args.tests.split(",")]
    except ValueError:
        sys.exit(f"error: --tests must be comma-separated integers, got {args.tests!r}")
    device = f"CPU, {os.cpu_count()} cores ({platform.processor() or platform.machine()})"
    command = f"python benchmarks/sandbox_throughput.py --programs {args.programs} --tests {args.tests} --workers {args.workers}"
    header = ["isolation", "program", "tests/program", "each test", "sequential programs/s",
              f"parallel programs/s ({args.workers} workers)", "parallel ÷ sequential", "forked ÷ fresh (sequential)"]
    rows = []
    for isolation in args.isolation.split(","):
        for kind in ("stdin", "call"):
            for tests in counts:
                forked = measure(jobs(kind, args.programs, tests, fresh=False), isolation, args.workers)
                fresh = measure(jobs(kind, args.programs, tests, fresh=True), isolation, args.workers)
                for name, (seq, par) in (("forked", forked), ("fresh interpreter", fresh)):
                    ratio = f"{forked[0] / fresh[0]:.2f}×" if name == "forked" else ""
                    rows.append([isolation, kind, str(tests), name, f"{seq:.1f}", f"{par:.1f}", f"{par / seq:.2f}×", ratio])
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"device: {device}\ncommand: {command}\nlimits: {Limits()}\nload average after the run: {load}\n")
    if args.markdown:
        print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(row) + " |")
        return
    table = Table(*header, title="sandbox throughput")
    for row in rows:
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
