"""Trees in the terminal: one line per thought with its status, value, visits and depth.

Status reads without colour through a mark in front of every line::

    ✓ solved   ■ terminal   ✗ pruned   ○ open   ● expanded   ★ on the best path

The best path (see :func:`best_path`) is marked ★ and drawn bold. Large trees are cut
with ``max_depth`` and ``max_children``; hidden parts are summarised as ``… 12 more`` lines.
Each level is indented four columns, so a deep tree is also cut where its levels would no longer
fit the width it is drawn at (``… 9 below``), rather than drawn past the edge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.console import Console, Group, RenderableType
from rich.text import Text
from rich.tree import Tree

from ..tree.node import Node, Status
from ..tree.query import best_path, is_scored, node_score, one_line

if TYPE_CHECKING:
    from ..tree.thought_tree import ThoughtTree

MARKS: dict[Status, str] = {
    Status.SOLVED: "✓",
    Status.TERMINAL: "■",
    Status.PRUNED: "✗",
    Status.OPEN: "○",
    Status.EXPANDED: "●",
}
BEST_MARK = "★"
STYLES: dict[Status, str] = {
    Status.SOLVED: "bold green",
    Status.TERMINAL: "yellow",
    Status.PRUNED: "dim red",
    Status.OPEN: "cyan",
    Status.EXPANDED: "blue",
}
BEST_STYLE = "bold magenta"
# When choosing which children survive ``max_children``, live and finished-well nodes come first.
_STATUS_RANK = {Status.SOLVED: 0, Status.EXPANDED: 1, Status.OPEN: 1, Status.TERMINAL: 2, Status.PRUNED: 3}
# rich indents each level of a tree by four columns; a "… N below" line needs twelve more.
_INDENT = 4
_BELOW_COLUMNS = 12


def node_label(node: Node, depth: int, *, best: bool = False, text_width: int = 60) -> Text:
    """One line for ``node``: mark, id, depth, value, visits, then its cut text.

    The line never wraps: at a narrow width rich cuts it with an ellipsis, and the fields that
    come first (status, id, scores) are the ones that stay visible.
    """
    label = Text(no_wrap=True, overflow="ellipsis", end="")
    label.append(MARKS[node.status], STYLES[node.status])
    label.append(BEST_MARK if best else " ", BEST_STYLE)
    label.append(f" #{node.id}", "bold" if best else "")
    fields = [f"d{depth}"]
    if is_scored(node.value):
        fields.append(f"v={node.value:.3g}")
    if node.visits:
        fields.append(f"n={node.visits}")
    label.append(" " + " ".join(fields), "dim")
    label.append(" │ ", "dim")
    if node.text:
        label.append(one_line(node.text, text_width), "bold" if best else "")
    else:
        label.append(f"‹{len(node.tokens)} tokens›", "dim italic")
    return label


def legend() -> Text:
    """One line that names every mark, for readers without colour."""
    out = Text()
    for status, mark in MARKS.items():
        out.append(mark, STYLES[status])
        out.append(f" {status.value}  ", "dim")
    out.append(BEST_MARK, BEST_STYLE)
    out.append(" best path", "dim")
    return out


@dataclass(frozen=True)
class ViewOptions:
    """What part of a tree to draw.

    Attributes:
        max_depth: deepest depth drawn (roots are depth 0); None draws all.
        max_children: most children drawn per node, chosen best first (the best-path child,
            then solved, live, terminal, pruned, each by value) and kept in their own order.
        best_only: draw only the best path.
        solved_only: draw only paths that lead to a solved node.
        text_width: most characters of a node's text on its line.
        best: id of the node whose path is the best one (a search result's ``best``); None uses
            :func:`best_path`.
        width: columns the tree is drawn in; levels that would start too far right to show are
            cut as ``… N below``, as ``max_depth`` cuts them. None draws every level.
    """

    max_depth: int | None = None
    max_children: int | None = None
    best_only: bool = False
    solved_only: bool = False
    text_width: int = 60
    best: int | None = None
    width: int | None = None

    def __post_init__(self) -> None:
        if self.max_depth is not None and self.max_depth < 0:
            raise ValueError(f"max_depth must be >= 0 or None, got {self.max_depth}")
        if self.max_children is not None and self.max_children < 1:
            raise ValueError(f"max_children must be >= 1 or None, got {self.max_children}")
        if self.text_width < 8:
            raise ValueError(f"text_width must be >= 8 to show any text, got {self.text_width}")
        if self.width is not None and self.width < 1:
            raise ValueError(f"width must be >= 1 or None, got {self.width}")

    def deepest(self) -> int | None:
        """The deepest depth drawn: ``max_depth``, or less where ``width`` holds fewer levels."""
        if self.width is None:
            return self.max_depth
        fits = max(0, (self.width - _BELOW_COLUMNS) // _INDENT - 1)
        return fits if self.max_depth is None else min(self.max_depth, fits)


@dataclass(frozen=True)
class TreeLayout:
    """A drawn tree and how many terminal rows it takes (labels never wrap)."""

    renderable: RenderableType
    rows: int


def layout(tree: ThoughtTree, options: ViewOptions = ViewOptions()) -> TreeLayout:
    """Draw ``tree`` as a rich ``Tree`` under ``options``; see :func:`render`."""
    if not tree.roots:
        return TreeLayout(Text("(empty tree)", style="dim italic"), 1)
    depth = [0] * len(tree.nodes)
    size = [1] * len(tree.nodes)
    for n in tree.nodes:  # a parent's id is always below its children's
        if n.parent is not None:
            depth[n.id] = depth[n.parent.id] + 1
    for n in reversed(tree.nodes):
        if n.parent is not None:
            size[n.parent.id] += size[n.id]
    best = {n.id for n in (best_path(tree) if options.best is None else tree[options.best].path())}
    on_solved = {a.id for n in tree.nodes if n.status is Status.SOLVED for a in n.path()}

    def keep(child: Node) -> bool:
        return (not options.best_only or child.id in best) and (not options.solved_only or child.id in on_solved)

    def rank(child: Node) -> tuple[int, int, float, int]:
        return (child.id not in best, _STATUS_RANK[child.status], -node_score(child), child.id)

    def label(n: Node) -> Text:
        return node_label(n, depth[n.id], best=n.id in best, text_width=options.text_width)

    # Guides stay plain: rich styles all of a node's child edges alike, so a coloured guide
    # would mark siblings off the best path too; the ★ and bold labels carry the path instead.
    if len(tree.roots) == 1:
        top = Tree(label(tree.roots[0]), guide_style="dim")
        stack = [(tree.roots[0], top)]
    else:
        top = Tree("", hide_root=True, guide_style="dim")
        stack = [(r, top.add(label(r))) for r in tree.roots][::-1]  # drawn in order, walked first to last
    rows = len(tree.roots)
    deepest = options.deepest()
    while stack:
        node, branch = stack.pop()
        if not node.children:
            continue
        if deepest is not None and depth[node.id] >= deepest:
            branch.add(Text(f"… {size[node.id] - 1} below", style="dim", no_wrap=True, overflow="ellipsis"))
            rows += 1
            continue
        shown = sorted((c for c in node.children if keep(c)), key=rank)[: options.max_children]
        shown_ids = {c.id for c in shown}
        new = []
        for child in node.children:
            if child.id in shown_ids:
                new.append((child, branch.add(label(child))))
        rows += len(new)
        hidden = [c for c in node.children if c.id not in shown_ids]
        if hidden:
            n_nodes = sum(size[c.id] for c in hidden)
            more = f"… {len(hidden)} more" + (f" ({n_nodes} nodes)" if n_nodes != len(hidden) else "")
            branch.add(Text(more, style="dim", no_wrap=True, overflow="ellipsis"))
            rows += 1
        stack.extend(reversed(new))
    return TreeLayout(top, rows)


def render(
    tree: ThoughtTree,
    *,
    max_depth: int | None = None,
    max_children: int | None = None,
    best_only: bool = False,
    solved_only: bool = False,
    text_width: int = 60,
    with_legend: bool = False,
    best: Node | None = None,
    width: int | None = None,
) -> RenderableType:
    """A rich renderable of ``tree`` (print it, or put it in a ``Live`` or ``Panel``).

    Children hidden by ``max_children``, ``best_only`` or ``solved_only`` are summarised as
    ``… N more``; subtrees below ``max_depth``, or below the levels that fit ``width`` columns,
    as ``… N below``. ``best`` marks that node's path as the best one (pass a search result's
    ``best``); by default :func:`best_path` picks it.
    """
    options = ViewOptions(max_depth, max_children, best_only, solved_only, text_width,
                          None if best is None else best.id, width)
    drawn = layout(tree, options).renderable
    return Group(drawn, legend()) if with_legend else drawn


def show(
    tree: ThoughtTree,
    *,
    console: Console | None = None,
    max_depth: int | None = None,
    max_children: int | None = None,
    best_only: bool = False,
    solved_only: bool = False,
    width: int | None = None,
    text_width: int = 60,
    with_legend: bool = True,
    best: Node | None = None,
) -> None:
    """Print ``tree`` to ``console`` (a new one on stdout when None) at ``width`` columns (the console's when None).

    >>> show(tree, max_children=3)           # every level, three children each
    >>> show(tree, best_only=True)           # the path to the best node only
    """
    if width is not None and width < 1:
        raise ValueError(f"width must be >= 1, got {width}")
    console = console or Console()
    renderable = render(
        tree,
        max_depth=max_depth,
        max_children=max_children,
        best_only=best_only,
        solved_only=solved_only,
        text_width=text_width,
        with_legend=with_legend,
        best=best,
        width=console.width if width is None else width,
    )
    console.print(renderable, width=width)
