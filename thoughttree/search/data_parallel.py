"""Data-parallel problem sets: every group of ranks runs a share of the problems, rank 0 merges.

Under ``torchrun --nproc-per-node W`` with tensor-parallel groups of T ranks (T = 1: one rank
per group), the W ranks form G = W / T groups of consecutive ranks, and group g runs problems
g, g + G, g + 2G, ... with the shared runner. The first rank of each group saves its part
(``<output>.part-<g>-of-<G>``, marked as a part in its meta) after every problem, as a single
run saves its file. When every group is done, the parts travel to rank 0 over a Gloo group (no
shared file system needed) and rank 0 writes the merged run file: records in problem order,
totals recomputed, so its content equals a single-process run with the same seed (wall-clock
fields aside). The output path only ever holds a merged file; parts are removed once a complete
run is merged, and kept for ``--resume`` when a run stops early: a launch resumes from the parts
of a launch of as many groups, else each group from its share of a merged run file (of any
launch, or of one process). A SIGINT or SIGTERM that reaches a group already waiting for the
others is remembered and the merge still happens. Only rank 0 draws progress.

A rank that dies makes the merge fail on rank 0 with :class:`RankFailure` (nothing is written to
the output); under torchrun the launcher stops the other ranks as soon as one fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

from .interrupts import Interrupts
from .runner import (
    Problem, Record, RunError, RunOptions, RunOutcome, Solve, Totals, build_run, load_resume, merge_runs, part_files,
    record_error, run_problems,
)
from ..runtime.parallel import DEFAULT_TIMEOUT_S, ParallelError, RankFailure, init_distributed, local_device
from ..tree.serialize import RunFile

PART_KEY = "data_parallel"
# Groups finish their shares at different times; a rank that dies is seen at once (its connections
# close), so the final exchange may wait long for a slow but living group.
MERGE_TIMEOUT = timedelta(days=7)


@dataclass(frozen=True)
class Layout:
    """This rank's place in a data-parallel launch; ``coordinator`` is the Gloo group for the merge.

    ``device`` is this rank's own device; ``requested`` the one the run was asked for (what a
    single process would record in the run file's meta).
    """

    rank: int
    world: int
    tensor_parallel: int
    device: torch.device
    requested: str
    coordinator: Any

    @property
    def group(self) -> int:
        return self.rank // self.tensor_parallel

    @property
    def groups(self) -> int:
        return self.world // self.tensor_parallel

    @property
    def leader(self) -> bool:
        """The first rank of its group: it saves the group's part."""
        return self.rank % self.tensor_parallel == 0

    def share(self, problems: Sequence[Problem]) -> list[Problem]:
        return list(problems)[self.group::self.groups]


def join_data_parallel(tensor_parallel: int, device: torch.device, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> Layout:
    """Join the launch's process group; ``device`` becomes this rank's own GPU under CUDA."""
    requested, device = str(device), local_device(device)
    init_distributed(device, timeout_s=timeout_s)
    world = dist.get_world_size()
    if world % tensor_parallel:
        raise ParallelError(
            f"the world of {world} ranks does not split into tensor-parallel groups of {tensor_parallel}; "
            f"launch a multiple of {tensor_parallel} ranks"
        )
    coordinator = dist.new_group(backend="gloo", timeout=MERGE_TIMEOUT)
    return Layout(dist.get_rank(), world, tensor_parallel, device, requested, coordinator)


def part_path(output: Path, group: int, groups: int) -> Path:
    return output.with_name(f"{output.name}.part-{group + 1}-of-{groups}")


SCRATCH_PREFIX = "thoughttree-part-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def scratch_folder(parent: Path | None = None) -> Path:
    """A new private folder ``thoughttree-part-PID-*`` in the temp directory (or ``parent``), for a
    data-parallel process's scratch parts; removed by its process when the run ends, and, for one
    whose process died without that (killed), by the next process that makes one."""
    where = Path(parent if parent is not None else tempfile.gettempdir())
    for old in where.glob(f"{SCRATCH_PREFIX}*"):
        owner = old.name[len(SCRATCH_PREFIX):].split("-", 1)[0]
        if old.is_dir() and owner.isdigit() and not _alive(int(owner)):
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-", dir=where))


def run_problem_set(
    problems: Sequence[Problem],
    solve: Solve,
    meta: dict[str, Any],
    options: RunOptions,
    *,
    layout: Layout | None = None,
    totals: Totals = lambda records: {},
    on_record: Callable[[Record, RunFile], str | None] | None = None,
    console: Any = None,
) -> RunOutcome:
    """The shared runner on one process (``layout`` None) or split over a data-parallel launch.

    A ``device`` entry of ``meta`` is recorded as the device the run was asked for, as one process would.
    """
    if layout is None:
        return run_problems(problems, solve, meta, options, totals=totals, on_record=on_record, console=console)
    if "device" in meta:
        meta = {**meta, "device": layout.requested}
    base = options.output if options.output is not None else options.resume
    scratch = scratch_folder()
    try:
        # Other members of a tensor-parallel group keep a scratch copy, but resume from the
        # leader's part (on the same host) so that the whole group skips the same problems.
        output = part_path(base, layout.group, layout.groups) if layout.leader and base else scratch / "part.json"
        part_meta = {**meta, PART_KEY: {"part": layout.group + 1, "parts": layout.groups}}
        resume = None
        if options.resume is not None:
            resume = part_path(options.resume, layout.group, layout.groups)
            if not resume.is_file():  # no part of a launch of this size: this group's share of the merged run
                resume = _share_of_run(options.resume, meta, part_meta, problems, layout, totals, scratch)
        mine = RunOptions(
            output=output, resume=resume, label=f"{options.label} (part {layout.group + 1} of {layout.groups})",
            progress=options.progress and layout.rank == 0, select=layout.share,
        )
        outcome = run_problems(problems, solve, part_meta, mine, totals=totals,
                               on_record=on_record if layout.rank == 0 else None, console=console)
        # A signal while this group waits for the others is remembered, not fatal: the others
        # stop at it too, and the merge still happens (it then holds the finished problems).
        with Interrupts() as late:
            parts = _gather(layout, outcome.run if layout.leader else None)
            merged = None
            if parts is not None:
                merged = merge_runs(parts, problems, totals)
                merged.meta = dict(meta)
                if base is not None:
                    merged.save(base)
            complete = _share(layout, merged is not None and merged.totals["finished"] == len(problems))
        stopped = outcome.signal or (None if complete else late.signal)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if layout.leader and base is not None and complete:  # a stopped run keeps its parts for --resume
        part_path(base, layout.group, layout.groups).unlink(missing_ok=True)
    if merged is None:  # not rank 0: its own outcome gives its exit status
        return replace(outcome, path=None, signal=stopped)
    failures = [(str(r["id"]), e) for r in merged.problems if (e := record_error(r)) is not None]
    return RunOutcome(merged, base, len(problems), failures, stopped)


def _share_of_run(
    path: Path, meta: dict[str, Any], part_meta: dict[str, Any], problems: Sequence[Problem], layout: Layout,
    totals: Totals, scratch: Path,
) -> Path | None:
    """A part file in ``scratch`` holding the finished records of this group's share of the run
    file at ``path`` (a one-process run, or a launch of another size, merged), or None without one
    (this group of a stopped launch of this size saved no part: it starts afresh)."""
    if not path.is_file():
        parts = part_files(path)
        if parts and not any(p.name.endswith(f"-of-{layout.groups}") for p in parts):  # else: start afresh
            found = ", ".join(p.name for p in parts[:3])
            raise RunError(f"--resume {path}: there is no merged run file and no part of a launch of {layout.groups} "
                           f"groups, only {found}; resume under a launch of as many groups as the stopped one")
        return None
    done, wall_time = load_resume(path, meta, problems)
    share = layout.share(problems)
    records = [done[p.id] for p in share if p.id in done]
    part = scratch / "resume.json"
    build_run(part_meta, len(share), records, totals, wall_time).save(part)
    return part


def _gather(layout: Layout, part: RunFile | None) -> list[RunFile] | None:
    """Every group's part on rank 0 (None elsewhere); a rank that is gone raises RankFailure."""
    received: list[RunFile | None] | None = [None] * layout.world if layout.rank == 0 else None
    try:
        dist.gather_object(part, received, dst=0, group=layout.coordinator)
    except Exception as exc:  # Gloo raises its own errors when a peer's connection closes
        raise RankFailure(
            f"data-parallel merge failed on rank {layout.rank} of {layout.world}: a rank died before finishing "
            f"its share ({exc}); the finished parts stay in the --output .part-* files, nothing was merged"
        ) from exc
    return None if received is None else [p for p in received if p is not None]


def _share(layout: Layout, flag: bool) -> bool:
    """Rank 0's ``flag`` on every rank."""
    box = [flag]
    try:
        dist.broadcast_object_list(box, src=0, group=layout.coordinator)
    except Exception as exc:
        raise RankFailure(f"data-parallel rank {layout.rank} lost rank 0 after the merge ({exc})") from exc
    return bool(box[0])
