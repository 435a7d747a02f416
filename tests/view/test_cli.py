from __future__ import annotations

import json
import os
import re
from pathlib import Path

import networkx as nx
import pytest
from view_trees import build_sample_tree

from thoughttree.cli import main
from thoughttree.tree import ThoughtTree
from thoughttree.tree.serialize import RunFile, tree_to_dict


@pytest.fixture
def run_file(tmp_path, monkeypatch) -> Path:
    """The sample tree (time in "stats"), a one-thought tree without a time, and one with it in "statistics"."""
    monkeypatch.setenv("COLUMNS", "120")
    small = ThoughtTree(prompt=[7, 8])
    small.add_child(small.root, [9, 9, 9], "only thought\n")
    run = RunFile(
        meta={"task": "game24", "strategy": {"name": "bfs", "breadth": 5}, "success_rate": 0.5},
        problems=[
            {"problem": "4 5 6 10", "tree": tree_to_dict(build_sample_tree()),
             "result": {"stats": {"wall_time": 1.25}}},
            {"problem": "1 1 1 1", "tree": tree_to_dict(small), "result": {"solved": False}},
            {"problem": "2 2 2 2", "tree": tree_to_dict(small), "result": {"statistics": {"wall_time": 0.5, "per_round": [
                {"expand_seconds": 0.25, "evaluate_seconds": 0.125}, {"expand_seconds": 0.0625, "evaluate_seconds": 0.0}]}}},
        ],
    )
    path = tmp_path / "run.json"
    run.save(path)
    return path


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_show_draws_every_problem_or_one(run_file, capsys):
    code, out, err = run_cli(capsys, "show", run_file)
    assert code == 0 and err == ""
    assert "problem 0: 4 5 6 10" in out and "problem 1: 1 1 1 1" in out
    assert out.count("★ best path") == 1 and out.rstrip().endswith("★ best path")  # one legend, at the end
    assert re.search(r"✓★ #8 d2 v=1 n=1 │ step b2↵", out)
    code, out, _ = run_cli(capsys, "show", run_file, "--problem", "1")
    assert code == 0 and "problem 0" not in out and "only thought↵" in out
    code, out, _ = run_cli(capsys, "show", run_file, "--problem", "0", "--best")
    assert code == 0 and "#7 " not in out and "… 4 more (6 nodes)" in out
    code, out, _ = run_cli(capsys, "show", run_file, "--problem", "0", "--solved", "--depth", "1", "--children", "1")
    assert code == 0 and "… 3 below" in out and "#3 " not in out
    code, out, _ = run_cli(capsys, "show", run_file, "--problem", "0", "--width", "30")
    assert code == 0 and max(len(ln) for ln in out.splitlines()) <= 30


def test_show_marks_a_tree_cut_short(tmp_path, capsys):
    small = ThoughtTree(prompt=[7, 8])
    run = RunFile(meta={}, problems=[{"problem": "a", "tree": tree_to_dict(small), "result": {"stopped": "interrupted"}},
                                     {"problem": "b", "tree": tree_to_dict(small), "result": {"error": "boom"}},
                                     {"problem": "c", "tree": tree_to_dict(small), "result": {"stopped": "done"}}])
    run.save(tmp_path / "run.json")
    code, out, _ = run_cli(capsys, "show", tmp_path / "run.json")
    assert code == 0 and "problem 0: a (interrupted: the tree so far)" in out
    assert "problem 1: b (failed: the tree so far)" in out and re.search(r"problem 2: c ─", out)


def test_stats_table_per_problem_total_and_meta(run_file, capsys):
    code, out, err = run_cli(capsys, "stats", run_file)
    assert code == 0 and err == ""
    rows = {ln.split()[0]: ln for ln in out.splitlines() if re.match(r"\s*(\d:|total)", ln)}
    #        nodes  depths  branch  prompt  gen  solved  pruned  best  time  expand  eval
    assert re.search(r"11\s+1 5 5\s+2\.5\s+4\s+17\s+2\s+1\s+1\s+1\.25s\s+–\s+–", rows["0:"])
    assert re.search(r"2\s+1 1\s+1\s+2\s+3\s+0\s+0\s+–\s+–\s+–\s+–", rows["1:"])
    # A search result's "statistics", with the rounds' expansion and evaluation seconds.
    assert re.search(r"2\s+1 1\s+1\s+2\s+3\s+0\s+0\s+–\s+0\.50s\s+0\.31s\s+0\.12s", rows["2:"])
    assert re.search(r"15\s+3 7 5\s+2\s+8\s+23\s+2\s+1\s+1\s+1\.75s\s+0\.31s\s+0\.12s", rows["total"])
    assert re.search(r"success_rate\s+0\.5", out) and '{"breadth": 5, "name": "bfs"}' in out
    code, out, _ = run_cli(capsys, "stats", run_file, "--total")
    assert code == 0 and "total (3)" in out and "4 5 6 10" not in out


def test_stats_on_a_narrow_terminal_lists_metrics_down_the_page(run_file, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    code, out, _ = run_cli(capsys, "stats", run_file, "--problem", "0")
    assert code == 0 and max(len(ln) for ln in out.splitlines()) <= 40
    assert re.search(r"branch\s+2\.5", out) and re.search(r"time\s+1\.25s", out)


def test_export_writes_graphml_dot_and_json(run_file, tmp_path, capsys):
    graphml = tmp_path / "t.graphml"
    assert run_cli(capsys, "export", run_file, "--problem", "0", "--format", "graphml", "--output", graphml)[0] == 0
    graph = nx.read_graphml(graphml, node_type=int)
    assert graph.number_of_nodes() == 11 and graph.number_of_edges() == 10
    assert graph.nodes[8]["status"] == "solved"
    dot = tmp_path / "t.dot"
    assert run_cli(capsys, "export", run_file, "--problem", "1", "--format", "dot", "--output", dot)[0] == 0
    assert re.search(r"^\s*n0 -> n1 \[", dot.read_text(), re.M)
    code, out, _ = run_cli(capsys, "export", run_file, "--problem", "0", "--format", "json")
    assert code == 0 and json.loads(out) == json.loads(json.dumps(tree_to_dict(build_sample_tree())))
    code, out, _ = run_cli(capsys, "export", run_file, "--problem", "1", "--format", "graphml")
    assert code == 0 and out.startswith("<?xml")
    assert nx.parse_graphml(out, node_type=int).number_of_nodes() == 2


def error_line(capsys, *argv: str) -> str:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_bad_run_files_give_one_clear_line_and_status_2(tmp_path, capsys):
    missing = tmp_path / "missing.json"
    assert "no run file at" in error_line(capsys, "show", missing)
    corrupt = tmp_path / "corrupt.json"
    corrupt.write_text('{"format": "thoughttree.run", "version": 1, "probl')
    assert "not valid JSON" in error_line(capsys, "stats", corrupt)
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"format": "thoughttree.run", "version": 99, "meta": {}, "problems": []}))
    assert "newer thoughttree" in error_line(capsys, "export", newer, "--format", "json")
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"hello": "world"}))
    assert "not a thoughttree run file" in error_line(capsys, "show", other)
    broken_tree = tmp_path / "broken.json"
    broken_tree.write_text(json.dumps({"format": "thoughttree.run", "version": 1, "problems": [{"tree": {"a": 3}}]}))
    assert "problem 0" in error_line(capsys, "stats", broken_tree)
    not_a_list = tmp_path / "not_a_list.json"
    not_a_list.write_text(json.dumps({"format": "thoughttree.run", "version": 1, "problems": 5}))
    assert "problems must be a list" in error_line(capsys, "show", not_a_list)
    odd_status = tmp_path / "odd_status.json"
    tree = tree_to_dict(ThoughtTree(prompt=[7, 8]))
    tree["nodes"][0]["status"] = ["open"]
    odd_status.write_text(json.dumps({"format": "thoughttree.run", "version": 1, "problems": [{"tree": tree}]}))
    assert "status must be one of" in error_line(capsys, "stats", odd_status)


def test_bad_choices_give_one_clear_line_and_status_2(run_file, tmp_path, capsys):
    assert "out of range" in error_line(capsys, "show", run_file, "--problem", "3")
    assert "0..2" in error_line(capsys, "stats", run_file, "--problem", "7")
    assert "choose one with --problem" in error_line(capsys, "export", run_file, "--format", "dot")
    nowhere = tmp_path / "no" / "such" / "dir" / "t.dot"
    argv = ("export", run_file, "--problem", "0", "--format", "dot", "--output", nowhere)
    assert "does not exist; create it first" in error_line(capsys, *argv)
    before = run_file.read_bytes()
    argv = ("export", run_file, "--problem", "0", "--format", "json", "--output", run_file.parent / "." / run_file.name)
    assert "is the run file being exported" in error_line(capsys, *argv)
    assert run_file.read_bytes() == before
    other = tmp_path / "other.json"
    other.write_bytes(before)
    argv = ("export", run_file, "--problem", "0", "--format", "dot", "--output", other)
    assert "is a thoughttree run file" in error_line(capsys, *argv)
    assert other.read_bytes() == before
    assert main([]) == 2
    with pytest.raises(SystemExit) as exc:  # argparse's own usage errors keep its status 2
        main(["show", str(run_file), "--children", "0"])
    assert exc.value.code == 2


def test_stats_shows_no_round_split_where_a_run_file_has_odd_round_records(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    small = ThoughtTree(prompt=[7, 8])
    rounds = [{"expand_seconds": "fast", "evaluate_seconds": 0.1}]
    run = RunFile(meta={}, problems=[{"problem": "p", "tree": tree_to_dict(small),
                                      "result": {"statistics": {"wall_time": 0.5, "per_round": rounds}}}])
    run.save(tmp_path / "run.json")
    code, out, _ = run_cli(capsys, "stats", tmp_path / "run.json")
    assert code == 0 and re.search(r"0\.50s\s+–\s+–", out)


def test_text_from_a_run_file_is_shown_as_text_never_as_markup_or_terminal_codes(tmp_path, capsys):
    tree = ThoughtTree(prompt=[7, 8])
    tree.add_child(tree.root, [9], "\x1b]0;retitled\x07 \x1b[2J cleared \u202eabc")
    run = RunFile(meta={"note": "[link=http://example.com]click[/link]"},
                  problems=[{"problem": "Print a[i] [/x] in [order]", "tree": tree_to_dict(tree), "result": {}}])
    run.save(tmp_path / "run.json")
    for command in ("show", "stats"):
        code, out, err = run_cli(capsys, command, tmp_path / "run.json")
        assert code == 0 and err == "", err
        assert "\x1b" not in out and "\u202e" not in out
    code, out, _ = run_cli(capsys, "show", tmp_path / "run.json")
    assert "Print a[i] [/x] in [order]" in out and "␛]0;retitled␇ ␛[2J cleared" in out
    code, out, _ = run_cli(capsys, "stats", tmp_path / "run.json")
    assert "[link=http://example.com]click[/link]" in out


def test_export_dot_marks_the_run_files_best_path_and_json_refuses_nan_in_one_line(tmp_path, capsys):
    tree = ThoughtTree(prompt=[7, 8])
    reported = tree.add_child(tree.root, [9], "reported best")
    higher = tree.add_child(tree.root, [10], "higher valued")
    reported.value, higher.value = 0.1, 0.9
    data = RunFile(meta={}, problems=[{"problem": "p", "tree": tree_to_dict(tree), "result": {"best": reported.id}}])
    data = data.to_dict()
    data["problems"][0]["tree"]["nodes"][higher.id]["metadata"]["score"] = float("nan")  # as another writer may
    (tmp_path / "run.json").write_text(json.dumps(data))
    code, out, _ = run_cli(capsys, "export", tmp_path / "run.json", "--format", "dot")
    assert code == 0
    assert re.search(rf'n0 -> n{reported.id} \[penwidth="3"\]', out)
    assert re.search(rf'n0 -> n{higher.id} \[penwidth="1"\]', out)
    assert "JSON cannot write" in error_line(capsys, "export", tmp_path / "run.json", "--format", "json")


def test_output_into_a_reader_that_stops_early_ends_quietly(tmp_path):
    import subprocess
    import sys

    # Through rich (show) and through plain print (as check-program --json prints), the second
    # by a show whose drawing is replaced with prints.
    wide = ThoughtTree(prompt=[7, 8])
    for i in range(3000):  # far more than a pipe holds, so the command is still writing when the reader goes
        wide.add_child(wide.root, [9], f"thought {i}")
    path = tmp_path / "run.json"
    RunFile(meta={"task": "game24"}, problems=[{"problem": "1 2 3 4", "tree": tree_to_dict(wide), "result": {}}]).save(path)
    printing = ("import sys; from thoughttree import cli; from thoughttree.commands import runs\n"
                "runs.run_show = lambda args: [print('x' * 100) for _ in range(5000)] and 0\n"
                "sys.exit(cli.main(['show', sys.argv[1]]))")
    for argv in ([sys.executable, "-m", "thoughttree", "show", str(path)], [sys.executable, "-c", printing, str(path)]):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "COLUMNS": "100"})
        assert proc.stdout.readline()
        proc.stdout.close()
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 1 and err == b"", err.decode()
