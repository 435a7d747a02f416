"""Watching a search: a live tree with running statistics, and a progress bar for many problems.

    with LiveView(title="game24 · BFS") as view:
        for round_stats in ...:
            view.update(tree, {"round": 3, "nodes": 120, "tokens_per_s": 5321.0})

rich allows one live display at a time: use either a ``LiveView`` or a ``progress`` bar, not both
at once.
"""

from __future__ import annotations

import math
from types import TracebackType
from typing import TYPE_CHECKING, Any, Mapping

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from .render import ViewOptions, layout, legend

if TYPE_CHECKING:
    from ..tree.thought_tree import ThoughtTree

# Known statistics get a short label and a unit; any other key is shown under its own name.
_LABELS: dict[str, tuple[str, str]] = {
    "round": ("round", ""),
    "rounds": ("rounds", ""),
    "nodes": ("nodes", ""),
    "tokens_per_s": ("tok/s", ""),
    "reuse_factor": ("KV reuse", "×"),
    "kv_reuse": ("KV reuse", "×"),
    "best_value": ("best", ""),
    "wall_time": ("time", " s"),
    "expand_seconds": ("expanding", " s"),
    "evaluate_seconds": ("evaluating", " s"),
    "acceptance": ("drafts kept", ""),
    "tokens_per_forward": ("tok/forward", ""),
    "draft_seconds": ("drafting", " s"),
}


def format_stat(value: Any) -> str:
    """A statistic for one glance: ints with thousands separators, floats to 4 significant digits, NaN as –."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"
    return str(value)


def stats_line(stats: Mapping[str, Any]) -> Text:
    """Every key of ``stats`` in order as ``label value`` pairs separated by dots; wraps when narrow."""
    out = Text()
    for i, (key, value) in enumerate(stats.items()):
        label, unit = _LABELS.get(key, (key.replace("_", " "), ""))
        if i:
            out.append("  ·  ", "dim")
        out.append(f"{label} ", "dim")
        text = format_stat(value)
        out.append(text + (unit if text != "–" else ""), "bold")
    return out


class LiveView:
    """A terminal view of a search tree that redraws as the search runs.

    The tree is cut to fit the terminal: every level with at most ``max_children`` children per
    node (the best first), fewer when that does not fit, and at the last the best path alone.
    Use it as a context manager and call :meth:`update` after each round.
    """

    def __init__(
        self,
        console: Console | None = None,
        title: str = "thoughttree",
        *,
        max_children: int = 3,
        max_depth: int | None = None,
        refresh_per_second: float = 4.0,
        transient: bool = False,
    ) -> None:
        if max_children < 1:
            raise ValueError(f"max_children must be >= 1, got {max_children}")
        self.console = console or Console()
        self.title = title
        self.max_children = max_children
        self.max_depth = max_depth
        self._live = Live(
            Text(""),
            console=self.console,
            refresh_per_second=refresh_per_second,
            transient=transient,
            vertical_overflow="ellipsis",
        )
        self.transient = transient
        self._entered = False
        self._shown = False

    def __enter__(self) -> LiveView:
        self._live.__enter__()
        self._entered = True
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._entered = False
        self._live.__exit__(exc_type, exc, tb)
        # rich ends the last frame with a newline only on terminals; a log file needs one too.
        if self._shown and not self.transient and not self.console.is_terminal:
            self.console.line()

    def update(self, tree: ThoughtTree, stats: Mapping[str, Any] | None = None) -> None:
        """Show ``tree`` and ``stats`` (any keys; "round", "nodes", "tokens_per_s", "reuse_factor" and
        "best_value" get short labels). Call it inside the ``with`` block; it returns at once."""
        if not self._entered:
            raise RuntimeError("LiveView.update was called outside its with-block; use `with LiveView() as view:`")
        self._live.update(self.renderable(tree, stats or {}))
        self._shown = True

    def renderable(self, tree: ThoughtTree, stats: Mapping[str, Any]) -> RenderableType:
        """What :meth:`update` draws: the cut tree in a titled panel, the legend, then the statistics."""
        width, height = self.console.size
        line = stats_line(stats)
        stat_rows = len(self.console.render_lines(line, self.console.options.update_width(width), pad=False))
        key = legend()
        # Panel borders take two rows, the legend and the statistics the rest.
        legend_rows = len(self.console.render_lines(key, self.console.options.update_width(width), pad=False))
        room = max(1, height - 2 - legend_rows - (stat_rows if stats else 0))
        inside = max(1, width - 4)  # the panel's borders and padding take four columns
        for k in range(self.max_children, 0, -1):
            drawn = layout(tree, ViewOptions(max_depth=self.max_depth, max_children=k, width=inside))
            if drawn.rows <= room:
                break
        else:
            drawn = layout(tree, ViewOptions(max_depth=self.max_depth, best_only=True, width=inside))
        parts: list[RenderableType] = [Panel(drawn.renderable, title=self.title, title_align="left"), key]
        if stats:
            parts.append(line)
        return Group(*parts)


class RunProgress:
    """A progress bar over the problems of a run, with a short note (e.g. "solved 7/10") after it."""

    def __init__(self, total: int, description: str, *, console: Console | None = None) -> None:
        if total < 0:
            raise ValueError(f"total must be >= 0, got {total}")
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[note]}"),
            console=console,
        )
        self._task: TaskID = self.progress.add_task(description, total=total, note="")

    def __enter__(self) -> RunProgress:
        self.progress.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.progress.stop()

    def advance(self, n: int = 1, *, note: str | None = None) -> None:
        """Count ``n`` more problems done; ``note`` replaces the text after the bar when given."""
        if note is None:
            self.progress.advance(self._task, n)
        else:
            self.progress.update(self._task, advance=n, note=note)

    @property
    def completed(self) -> int:
        return int(self.progress.tasks[0].completed)


def progress(total: int, description: str = "problems", *, console: Console | None = None) -> RunProgress:
    """A progress bar for ``total`` problems: ``with progress(n, "game24") as bar: ... bar.advance(note=...)``."""
    return RunProgress(total, description, console=console)
