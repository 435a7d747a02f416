from __future__ import annotations

import io
import re

import pytest
from rich.console import Console
from view_trees import build_sample_tree

from thoughttree.view.live import LiveView, format_stat, progress, stats_line
from thoughttree.tree import ThoughtTree

STATS = {"round": 3, "nodes": 12345, "tokens_per_s": 5321.25, "reuse_factor": 3.2109, "best_value": 0.9}
STATS["queue_depth"] = 7  # a key the view has no label for


def recording_console(width: int, height: int) -> Console:
    return Console(file=io.StringIO(), record=True, width=width, height=height, no_color=True)


def lines_of(console: Console, renderable) -> list[str]:
    return ["".join(s.text for s in line) for line in console.render_lines(renderable, console.options, pad=False)]


def test_stats_are_labelled_and_formatted():
    assert format_stat(12345) == "12,345" and format_stat(0.91234) == "0.9123"
    assert format_stat(123456.7) == "123,457" and format_stat(True) == "yes" and format_stat("bfs") == "bfs"
    text = stats_line(STATS).plain
    assert text == "round 3  ·  nodes 12,345  ·  tok/s 5321  ·  KV reuse 3.211×  ·  best 0.9  ·  queue depth 7"
    assert stats_line({}).plain == ""
    searched = {"rounds": 4, "kv_reuse": float("nan"), "wall_time": 0.51234, "generated_tokens": 812}
    assert stats_line(searched).plain == "rounds 4  ·  KV reuse –  ·  time 0.5123 s  ·  generated tokens 812"


def test_a_speculating_search_shows_acceptance_tokens_per_forward_and_drafting_time():
    from thoughttree.search.results import Statistics

    shown = Statistics(
        rounds=2,
        generated_tokens=900,
        forward_steps=100,
        draft_tokens=40,
        accepted_tokens=30,
        draft_seconds=0.25,
        wall_time=1.0,
    ).display()
    assert "drafts kept 0.75  ·  tok/forward 9  ·  drafting 0.25 s" in stats_line(shown).plain
    assert "drafting" not in stats_line(Statistics(rounds=1, generated_tokens=9, forward_steps=9).display()).plain


def test_live_view_shows_the_tree_and_the_statistics():
    tree = build_sample_tree()
    console = recording_console(100, 40)
    with LiveView(console=console, title="game24 · BFS") as view:
        view.update(tree, STATS)
    out = console.export_text()
    assert out.endswith("queue depth 7\n")  # the last frame ends its line, even in a file
    assert "game24 · BFS" in out
    assert "round 3" in out and "tok/s 5321" in out and "queue depth 7" in out
    assert re.search(r"✓★ #8 d2", out)
    assert "★ best path" in out  # legend


@pytest.mark.parametrize("height", [8, 12, 16, 40])
def test_live_view_cuts_the_tree_to_the_terminal(height):
    tree = build_sample_tree()
    console = recording_console(80, height)
    view = LiveView(console=console, max_children=3)
    lines = lines_of(console, view.renderable(tree, STATS))
    assert any("#8 d2" in ln for ln in lines)  # the best node is always there
    if height >= 12:
        assert len(lines) <= height
    if height == 40:  # room for three children per node: the root shows 2, 3, 4 and "… 2 more"
        assert sum(bool(re.search(r"#[234] d1", ln)) for ln in lines) == 3
        assert any(ln.rstrip(" │").endswith("… 2 more") for ln in lines)


def test_live_view_cuts_a_deep_tree_to_the_panel_width():
    tree = ThoughtTree()
    node = tree.add_root([1])
    for i in range(40):
        node = tree.add_child(node, [2], f"step {i}")
    console = recording_console(80, 60)
    lines = lines_of(console, LiveView(console=console).renderable(tree, {}))
    below = [int(m) for ln in lines for m in re.findall(r"… (\d+) below", ln)]
    drawn = {int(m) for ln in lines for m in re.findall(r"#(\d+) d", ln)}
    assert len(below) == 1 and len(drawn) + below[0] == len(tree.nodes)


def test_live_view_of_a_growing_tree_and_misuse():
    tree = ThoughtTree(prompt=[1, 2])
    console = recording_console(60, 20)
    view = LiveView(console=console)
    with pytest.raises(RuntimeError, match="with-block"):
        view.update(tree, {})
    with view:
        view.update(tree)
        tree.add_child(tree.root, [3], "first thought")
        view.update(tree, {"round": 1})
    assert "first thought" in console.export_text()
    with pytest.raises(ValueError, match="max_children"):
        LiveView(console=console, max_children=0)


def test_progress_counts_problems_and_shows_a_note():
    console = recording_console(100, 20)
    with progress(3, "game24", console=console) as bar:
        bar.advance()
        bar.advance(2, note="solved 2/3")
    assert bar.completed == 3
    out = console.export_text()
    assert "game24" in out and "3/3" in out and "solved 2/3" in out
    with pytest.raises(ValueError, match="total"):
        progress(-1)
