"""Running a problem set: the loop over problems, progress, the run file, interrupts, exit codes.

A task command gives :func:`run_problems` its problems (each with a stable id), a function that
solves one problem and returns its run-file record, and the run's settings::

    problems = [Problem(id=str(i), data=text) for i, text in ...]
    outcome = run_problems(problems, solve, meta, RunOptions(output=path, resume=None, label="game24 bfs"))
    return finish(outcome, "game24")

The output path is checked and locked before any work (one writer per run file:
:mod:`run_output`); the run file is replaced atomically after every finished problem; SIGINT
and SIGTERM stop the run, the finished problems and the current partial tree are saved, and the
exit status is 130 or 143. ``resume`` continues a stopped run: its finished records are kept and
the rest are solved, so (with deterministic ``solve``) the file ends as an uninterrupted run's
would, wall-clock fields aside.

A record is a run file's problem entry: ``{"id", "problem", "tree", "result": {"stopped", ...}}``;
``result.error`` marks a failed search, ``result.stopped == "interrupted"`` a partial one.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Sequence

from ..tree.serialize import EntryTexts, RunFile, load_run
from ..tree.validate import FieldError, check_result_data
from .interrupts import EXIT_CODES, Interrupts
from .run_output import RunError, check_output, holds_lock, lock_run_file, unlock_run_file

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2

Record = dict[str, Any]
Solve = Callable[["Problem"], Record]
Totals = Callable[[Sequence[Record]], dict[str, Any]]
Select = Callable[[Sequence["Problem"]], Sequence["Problem"]]


@dataclass(frozen=True)
class Problem:
    """One problem of a set: ``id`` is stable across runs (it names the record), ``data`` goes to ``solve``."""

    id: str
    data: Any


def all_problems(problems: Sequence[Problem]) -> Sequence[Problem]:
    """The default selection: this process runs every problem."""
    return problems


@dataclass(frozen=True)
class RunOptions:
    """Where the run is saved and which problems this process runs (``select``, e.g. one rank's share)."""

    output: Path | None = None
    resume: Path | None = None
    label: str = "problems"
    progress: bool = True
    select: Select = all_problems

    @property
    def path(self) -> Path | None:
        """Where the run file is written: ``output``, else the resumed file."""
        return self.output if self.output is not None else self.resume

    def check(self) -> None:
        """Fail before any work (loading a model included) when the run file cannot be written or
        resumed, or another process writes it; the file stays locked for this process (see
        :func:`lock_run_file`; under a distributed launch only rank 0, which writes it, locks it)."""
        if self.path is not None:
            flag = "--output" if self.output is not None else "--resume"
            check_output(self.path, flag)
            if os.environ.get("RANK", "0") == "0":
                lock_run_file(self.path, flag)
        if self.resume is not None and (self.resume.is_file() or not part_files(self.resume)):
            load_run(self.resume)  # a stopped launch's parts without a merged file: its launch checks them


@dataclass
class RunOutcome:
    """What a run did: the run file, where it was saved, the failed searches and the stopping signal."""

    run: RunFile
    path: Path | None
    planned: int
    failures: list[tuple[str, str]] = field(default_factory=list)  # (problem id, error message)
    signal: int | None = None

    @property
    def exit_code(self) -> int:
        if self.signal is not None:
            return EXIT_CODES.get(self.signal, 128 + int(self.signal))
        return EXIT_FAILED if self.failures or self.unfinished else EXIT_OK

    @property
    def unfinished(self) -> int:
        """Problems left undone without a signal here: a launch whose other processes were stopped."""
        return max(0, self.planned - int(self.run.totals.get("finished", self.planned)))

    def message(self, resume: str = "--resume") -> str | None:
        """One line for the user when the run did not end cleanly, else None. ``resume`` continues
        a stopped run when followed by its file: the option, or a whole command line where the
        command that ran takes no ``--resume`` (the demo)."""
        finished = self.run.totals.get("finished", 0)
        where = f"saved to {self.path}; continue with {resume} {self.path}" if self.path else "nothing saved"
        if self.signal is not None:
            name = signal.Signals(self.signal).name
            return f"stopped by {name} after {finished} of {self.planned} problems; {where}"
        if self.failures:
            pid, error = self.failures[0]
            return (f"{len(self.failures)} of {self.planned} searches failed; the first (problem {pid}): {error}")
        if self.unfinished:
            return (f"{finished} of {self.planned} problems finished: another process of the launch stopped "
                    f"early; {where}")
        return None


def record_error(record: Record) -> str | None:
    return record.get("result", {}).get("error")


def _check_record(record: Record) -> None:
    """RunError unless ``record``'s result is what a run file holds, as JSON will hold it (a
    file holding another could not be read back, resumed or shown)."""
    try:
        nodes = record.get("tree", {}).get("nodes", []) if isinstance(record.get("tree"), dict) else []
        check_result_data(json.loads(json.dumps(record.get("result", {}))), len(nodes))
    except (FieldError, TypeError, ValueError) as exc:
        raise RunError(f"problem {record['id']}: the solver returned a record a run file cannot hold ({exc}); "
                       "the problems before it are saved") from None


def is_partial(record: Record) -> bool:
    return record.get("result", {}).get("stopped") == "interrupted"


def build_run(meta: dict[str, Any], planned: int, records: Sequence[Record], totals: Totals,
              wall_time: float) -> RunFile:
    """The run file of ``records`` (finished ones and at most one partial) with the run's totals."""
    done = [r for r in records if not is_partial(r)]
    stats = [r.get("result", {}).get("statistics") or {} for r in done]
    common = {
        "problem_count": planned,
        "finished": len(done),
        "errors": sum(record_error(r) is not None for r in done),
        "generated_tokens": sum(int(s.get("generated_tokens", 0)) for s in stats),
        "prefill_tokens": sum(int(s.get("prefill_tokens", 0)) for s in stats),
        "wall_time": wall_time,
    }
    return RunFile(meta=dict(meta), problems=list(records), totals={**common, **totals(done)})


def merge_runs(parts: Sequence[RunFile], problems: Sequence[Problem], totals: Totals) -> RunFile:
    """One run file from the part files of processes that each ran a share of ``problems``."""
    if not parts:
        raise RunError("no part files to merge")
    by_id: dict[str, Record] = {}
    for part in parts:
        for record in part.problems:
            by_id[str(record["id"])] = record
    records = [by_id[p.id] for p in problems if p.id in by_id]
    wall = max(float(p.totals.get("wall_time", 0.0)) for p in parts)
    return build_run(parts[0].meta, len(problems), records, totals, wall)


def part_files(path: Path) -> list[Path]:
    """The part files a data-parallel launch keeps beside ``path`` (``<name>.part-<g>-of-<G>``)."""
    return sorted(path.parent.glob(f"{glob.escape(path.name)}.part-*-of-*"))


def load_resume(path: Path, meta: dict[str, Any], problems: Sequence[Problem]) -> tuple[dict[str, Record], float]:
    """The finished records of a stopped run (by id) and its wall time so far; checks it is this run."""
    if not path.is_file() and part_files(path):
        raise RunError(f"--resume {path}: there is no merged run file, only the parts of a stopped launch "
                       f"({part_files(path)[0].name}, ...); resume under a launch of as many groups to merge them")
    run = load_run(path)
    differences = _differences(run.meta, json.loads(json.dumps(meta)), "meta")
    if differences:
        shown = differences[:DIFFERENCES_SHOWN]
        listed = "; ".join(f"{key}={theirs!r} there, {ours!r} here" for key, theirs, ours in shown)
        more = f" (and {len(differences) - DIFFERENCES_SHOWN} more)" if len(differences) > DIFFERENCES_SHOWN else ""
        raise RunError(f"--resume {path} was written by a run with other options: {listed}{more}; "
                       "resume with the options of the stopped run")
    ids = {p.id for p in problems}
    done: dict[str, Record] = {}
    for i, record in enumerate(run.problems):
        if "id" not in record or str(record["id"]) not in ids:
            raise RunError(f"--resume {path}: problem {i} has no id of this run's problems; the file is not this run's")
        if not is_partial(record):
            done[str(record["id"])] = record
    return done, float(run.totals.get("wall_time", 0.0))


DIFFERENCES_SHOWN = 4


def _differences(a: Any, b: Any, where: str) -> list[tuple[str, Any, Any]]:
    """The dotted paths where ``a`` and ``b`` differ, with both values there; the run's method
    first (the difference that explains the others), then in key order."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = [d for key in sorted(set(a) | set(b)) for d in _differences(a.get(key), b.get(key), f"{where}.{key}")]
        return sorted(found, key=lambda d: not d[0].endswith(".method"))
    return [] if a == b else [(where, a, b)]


def run_problems(
    problems: Sequence[Problem],
    solve: Solve,
    meta: dict[str, Any],
    options: RunOptions,
    *,
    totals: Totals = lambda records: {},
    on_record: Callable[[Record, RunFile], str | None] | None = None,
    console: Any = None,
) -> RunOutcome:
    """Solve the selected problems in order, saving after each; see the module docstring.

    ``on_record(record, run)`` is called after each finished problem and may return the progress
    bar's note (e.g. "solved 3/5").
    """
    ids = [p.id for p in problems]
    if len(set(ids)) != len(ids):
        raise RunError("problem ids must be unique; two problems share an id")
    output = options.path
    held = output is not None and holds_lock(output)  # by the caller: it lets it go
    options.check()
    flag = "--output" if options.output is not None else "--resume"
    locked = output is not None and (lock_run_file(output, flag) or not held)
    try:
        return _run_locked(problems, solve, meta, options, ids, totals, on_record, console)
    finally:
        if locked and output is not None:
            unlock_run_file(output)


def _run_locked(
    problems: Sequence[Problem], solve: Solve, meta: dict[str, Any], options: RunOptions, ids: list[str],
    totals: Totals, on_record: Callable[[Record, RunFile], str | None] | None, console: Any,
) -> RunOutcome:
    output = options.path
    done, before = load_resume(options.resume, meta, problems) if options.resume is not None else ({}, 0.0)
    mine = list(options.select(problems))
    records: list[Record] = [done[p.id] for p in mine if p.id in done]
    todo = [p for p in mine if p.id not in done]
    outcome = RunOutcome(RunFile(), output, len(mine))
    outcome.failures = [(str(r["id"]), e) for r in records if (e := record_error(r)) is not None]
    began = time.perf_counter()

    position = {pid: i for i, pid in enumerate(ids)}

    encoded = EntryTexts()  # a finished record never changes: encode each one once

    def save() -> RunFile:
        ordered = sorted(records, key=lambda r: position[str(r["id"])])
        outcome.run = build_run(meta, len(mine), ordered, totals, before + time.perf_counter() - began)
        if outcome.path is not None:
            outcome.run.save(outcome.path, encoded)
        return outcome.run

    with Interrupts() as interrupts, _bar(len(mine), options, console) as bar:
        if bar is not None and records:
            bar.advance(len(records))
        for problem in todo:
            record = None
            interrupts.armed = interrupts.signal is None
            try:
                if interrupts.armed:
                    record = solve(problem)
            except KeyboardInterrupt:
                interrupts.signal = interrupts.signal or signal.SIGINT
            finally:
                interrupts.armed = False
            if record is not None:
                record = {"id": problem.id, **record}
                _check_record(record)
                records.append(record)
                if (error := record_error(record)) is not None:
                    outcome.failures.append((problem.id, error))
                if is_partial(record):  # stopped by an interrupt the handlers did not see: stop too
                    interrupts.signal = interrupts.signal or signal.SIGINT
            if interrupts.signal is not None:
                break
            run = save()
            note = on_record(record, run) if on_record is not None and record is not None else None
            if bar is not None:
                bar.advance(note=note)
        if interrupts.signal is not None:
            outcome.signal = interrupts.signal
            if outcome.path is None:  # never lose finished work: save it beside the user
                outcome.path = Path(f"thoughttree-run-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}.json")
        save()
    return outcome


def _bar(total: int, options: RunOptions, console: Any) -> Any:
    if not options.progress:
        return nullcontext()
    from ..view.live import progress

    return progress(total, options.label, console=console)


def finish(outcome: RunOutcome, command: str, resume: str = "--resume") -> int:
    """Print the outcome's one-line message (if any) on stderr and return the exit status;
    ``resume`` as in :meth:`RunOutcome.message`."""
    message = outcome.message(resume)
    if message is not None:
        print(f"thoughttree {command}: {message}", file=sys.stderr)
    return outcome.exit_code


@dataclass(frozen=True)
class BranchRoom:
    """How many branches of up to ``tokens`` new tokens fit the model's KV pool beside a prompt:
    ``free`` pages left by the prompt, ``per_branch`` pages each branch keeps of its own."""

    free: int
    tokens: int
    per_branch: int

    @property
    def fits(self) -> int:
        return max(0, self.free // self.per_branch)


def branch_room(lm: Any, prompt_tokens: int, max_tokens: int) -> BranchRoom | None:
    """The KV room for branches of ``max_tokens`` beside a prompt of ``prompt_tokens`` (a branch
    never runs past the context); None for a remote model, whose KV is the server's business."""
    if getattr(lm, "kv", None) is None:
        return None
    pool = lm.kv.pool
    tokens = min(max_tokens, lm.max_context)
    return BranchRoom(pool.num_pages - -(-prompt_tokens // pool.page_size), tokens, -(-(tokens + 1) // pool.page_size))


def model_meta(lm: Any) -> dict[str, str]:
    """What a run file records about the model: path, device, dtype and the attention backend that ran."""
    return {"model": str(getattr(lm, "path", "")), "device": str(getattr(lm, "device", "")),
            "dtype": str(getattr(getattr(lm, "model", None), "dtype", "")).removeprefix("torch."),
            "attention": str(getattr(getattr(lm, "engine", None), "attention", ""))}
