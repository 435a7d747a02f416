from __future__ import annotations

import io
import re

import pytest
from rich.cells import cell_len
from rich.console import Console

from thoughttree.tree import Status, ThoughtTree
from thoughttree.view.render import ViewOptions, best_path, layout, one_line, render, show

from view_trees import build_sample_tree


def draw(tree: ThoughtTree, width: int = 100, **options) -> list[str]:
    console = Console(record=True, width=width, no_color=True, file=io.StringIO())
    show(tree, console=console, **options)
    return console.export_text().rstrip("\n").split("\n")


def line_of(lines: list[str], node_id: int) -> str:
    found = [ln for ln in lines if re.search(rf"#{node_id} ", ln)]
    assert len(found) == 1, f"node {node_id} drawn {len(found)} times in:\n" + "\n".join(lines)
    return found[0]


def ids_in(lines: list[str]) -> set[int]:
    return {int(m) for ln in lines for m in re.findall(r"#(\d+) d", ln)}


# -- best path -----------------------------------------------------------------------------------
def test_best_path_prefers_a_solved_node_over_higher_valued_live_leaves(sample_tree):
    assert [n.id for n in best_path(sample_tree)] == [0, 2, 8]
    sample_tree[8].value = 0.1  # the other solution now scores higher
    assert [n.id for n in best_path(sample_tree)] == [0, 3, 10]


def test_best_path_without_solutions_is_the_highest_valued_live_leaf(sample_tree):
    for n in sample_tree.nodes:
        if n.status is Status.SOLVED:
            n.status = Status.OPEN
    # Node 1 (0.95) is pruned, so it never counts; node 8 (1.0) is the best live leaf.
    assert best_path(sample_tree)[-1].id == 8
    sample_tree.prune(sample_tree[8])
    assert best_path(sample_tree)[-1].id == 10  # 0.8 next
    sample_tree.prune(sample_tree[2])
    sample_tree.prune(sample_tree[3])
    sample_tree.prune(sample_tree[4])
    assert best_path(sample_tree)[-1].id == 5  # terminal 0.3: the only live leaf left


def test_best_path_counts_a_node_whose_children_are_all_pruned_as_a_leaf():
    tree = ThoughtTree(prompt=[1])
    a = tree.add_child(tree.root, [2], "a")
    b = tree.add_child(tree.root, [3], "b")
    a.value, b.value = 0.7, 0.2
    kid = tree.add_child(a, [4], "a1")
    kid.value = 0.1
    tree.prune(kid)
    assert [n.id for n in best_path(tree)] == [0, 1]


def test_best_path_of_an_unscored_tree_is_its_deepest_first_branch_and_empty_when_all_pruned():
    tree = ThoughtTree(prompt=[1])
    a = tree.add_child(tree.root, [2], "a")
    tree.add_child(tree.root, [3], "b")
    deep = tree.add_child(a, [4], "a1")
    deep.value = float("nan")  # unknown, ranks like None
    assert [n.id for n in best_path(tree)] == [0, 1, 3]
    tree.prune(tree.root)
    assert best_path(tree) == []


# -- one line ------------------------------------------------------------------------------------
def test_one_line_collapses_whitespace_marks_newlines_and_cuts():
    assert one_line("a  b\t\tc", 20) == "a b c"
    assert one_line("x = 1\n\n  y = 2\n", 20) == "x = 1↵y = 2↵"
    assert one_line("abcdefghij", 5) == "abcd…"
    assert one_line("abcde", 5) == "abcde"
    with pytest.raises(ValueError, match="limit"):
        one_line("a", 0)


# -- drawing -------------------------------------------------------------------------------------
def test_every_status_has_its_mark_and_the_best_path_its_star(sample_tree):
    lines = draw(sample_tree)
    assert ids_in(lines) == set(range(11))
    expected = {0: "●", 1: "✗", 2: "●", 5: "■", 7: "○", 8: "✓", 10: "✓"}
    for node_id, mark in expected.items():
        assert re.search(rf"{mark}[★ ] #{node_id} ", line_of(lines, node_id))
    for node_id in range(11):
        starred = "★ #" in line_of(lines, node_id)
        assert starred == (node_id in (0, 2, 8)), line_of(lines, node_id)
    assert "d2 v=1 n=1" in line_of(lines, 8)
    assert "d1 v=0.9 n=3" in line_of(lines, 2)
    assert "v=" not in line_of(lines, 9)  # unscored
    assert "‹4 tokens›" not in line_of(lines, 0)  # the root has text
    assert "✓ solved" in lines[-1] and "★ best path" in lines[-1]  # the legend


def test_text_is_collapsed_onto_one_line_and_cut(sample_tree):
    lines = draw(sample_tree, text_width=30)
    assert line_of(lines, 3).endswith("│ 6 * 4 = 24↵(left: 24) then a…")
    assert line_of(lines, 4).endswith('│ say "hi" \\ back↵')
    assert len(lines) == 11 + 1  # one row per node plus the legend: nothing wrapped


def test_children_beyond_the_limit_are_counted_and_the_best_kept(sample_tree):
    lines = draw(sample_tree, max_children=2)
    # Root keeps its best-path child 2 and the next best live child 3, in tree order.
    assert ids_in(lines) == {0, 2, 3, 7, 8, 10}
    assert lines.index(line_of(lines, 2)) < lines.index(line_of(lines, 3))
    assert any(ln.endswith("… 3 more (4 nodes)") for ln in lines)  # 1, 4 (with 9), 5
    assert any(ln.endswith("… 1 more") for ln in lines)  # 6 under node 2


def test_depth_limit_summarises_what_is_below(sample_tree):
    lines = draw(sample_tree, max_depth=1)
    assert ids_in(lines) == {0, 1, 2, 3, 4, 5}
    assert sum(ln.endswith("… 3 below") for ln in lines) == 1
    assert sum(ln.endswith("… 1 below") for ln in lines) == 2
    assert draw(sample_tree, max_depth=0)[1].endswith("… 10 below")


def test_best_only_and_solved_only(sample_tree):
    best = draw(sample_tree, best_only=True)
    assert ids_in(best) == {0, 2, 8}
    assert any(ln.endswith("… 4 more (6 nodes)") for ln in best)
    solved = draw(sample_tree, solved_only=True)
    assert ids_in(solved) == {0, 2, 3, 8, 10}
    assert ids_in(draw(sample_tree, best_only=True, solved_only=True)) == {0, 2, 8}


def test_solved_only_without_solutions_draws_the_root_and_a_count():
    tree = ThoughtTree(prompt=[5, 6])
    for i in range(3):
        tree.add_child(tree.root, [i + 1], f"x{i}")
    lines = draw(tree, solved_only=True, with_legend=False)
    assert lines[0].startswith("○★ #0 d0 │ ‹2 tokens›")  # no text without a tokenizer
    assert lines[1].endswith("… 3 more") and len(lines) == 2


@pytest.mark.parametrize("width", [30, 20, 12])
def test_narrow_terminals_still_draw_one_line_per_node(sample_tree, width):
    lines = draw(sample_tree, width=width, with_legend=False)
    assert all(cell_len(ln) <= width for ln in lines)
    assert lines[0].startswith("●★ #0")
    if width >= 30:
        assert len(lines) == 11 and any(ln.lstrip("│├└─ ").startswith("✓★") for ln in lines)
    else:  # the deeper levels no longer fit: they are counted instead
        below = sum(int(m) for ln in lines for m in re.findall(r"… (\d+)", ln))
        assert len(ids_in(lines)) + below == len(sample_tree.nodes)


def test_no_colour_consoles_get_no_colour_codes(sample_tree, monkeypatch):
    colour = re.compile(r"\x1b\[(?:\d+;)*(?:3\d|9[0-7])[;m]")

    def ansi(**kwargs) -> str:
        out = io.StringIO()
        show(sample_tree, console=Console(file=out, force_terminal=True, width=100, **kwargs))
        return out.getvalue()

    monkeypatch.delenv("NO_COLOR", raising=False)
    assert colour.search(ansi())  # the check can see colour when there is some
    assert not colour.search(ansi(no_color=True))
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour.search(ansi())


def chain(length: int, roots: int = 1) -> ThoughtTree:
    tree = ThoughtTree()
    for _ in range(roots):
        node = tree.add_root([1])
        for i in range(length):
            node = tree.add_child(node, [2], f"step {i}")
    return tree


@pytest.mark.parametrize("width", [20, 40, 80, 200])
def test_a_deep_tree_is_cut_where_its_levels_stop_fitting_the_width(width):
    tree = chain(60, roots=2)
    lines = draw(tree, width=width, with_legend=False)
    drawn = ids_in(lines)
    below = [int(m) for ln in lines for m in re.findall(r"… (\d+) below$", ln)]
    assert len(below) == 2 and all(cell_len(ln.rstrip()) <= width for ln in lines)
    assert len(drawn) + sum(below) == len(tree.nodes)  # every node is drawn or counted
    assert all(re.search(r"#\d+ d", ln) or re.search(r"… \d+ below$", ln) for ln in lines)
    deepest = max(int(d) for ln in lines for d in re.findall(r"#\d+ d(\d+)", ln))
    assert deepest == (width - 12) // 4 - 1
    assert layout(tree, ViewOptions(width=width)).rows == len(lines)
    assert ids_in(draw(tree, width=width, with_legend=False, max_depth=1)) == {0, 1, 61, 62}


def test_layout_counts_its_rows_and_forests_and_empty_trees_render(sample_tree):
    for options in (ViewOptions(), ViewOptions(max_children=1), ViewOptions(max_depth=1), ViewOptions(best_only=True)):
        drawn = layout(sample_tree, options)
        console = Console(width=60, file=io.StringIO())
        assert len(console.render_lines(drawn.renderable, console.options, pad=False)) == drawn.rows
    forest = ThoughtTree(prompt=[1])
    forest.add_root([2])
    forest.add_child(forest.roots[1], [3], "kid")
    lines = draw(forest, with_legend=False)
    assert ids_in(lines) == {0, 1, 2} and len(lines) == 3
    console = Console(record=True, width=40, file=io.StringIO())
    console.print(render(ThoughtTree()))
    assert console.export_text().strip() == "(empty tree)"


def test_bad_options_are_refused():
    tree = build_sample_tree()
    with pytest.raises(ValueError, match="max_children"):
        render(tree, max_children=0)
    with pytest.raises(ValueError, match="max_depth"):
        render(tree, max_depth=-1)
    with pytest.raises(ValueError, match="width"):
        render(tree, width=0)
    with pytest.raises(ValueError, match="width"):
        show(tree, width=0)
