from __future__ import annotations

import json
import math
import re

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from view_trees import build_sample_tree

from thoughttree.tree import ThoughtTree
from thoughttree.tree.export import dot_quote, to_dot, to_graphml_graph, to_networkx, write_dot, write_graphml
from thoughttree.tree.serialize import tree_from_dict, tree_to_dict

# -- a small reader for the DOT subset to_dot writes: `id [k="v", ...];` and `a -> b [...];` ---------
_QUOTED = r'"((?:[^"\\]|\\.)*)"'
_ATTR = re.compile(rf"(\w+)={_QUOTED}")
_NODE = re.compile(r"^\s*(n\d+) \[(.*)\];$")
_EDGE = re.compile(r"^\s*(n\d+) -> (n\d+)(?: \[(.*)\])?;$")


def dot_unquote(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), body)


def read_dot(text: str) -> tuple[dict[str, dict[str, str]], list[tuple[str, str]]]:
    lines = text.strip().split("\n")
    assert lines[0] == "digraph thoughttree {" and lines[-1] == "}"
    nodes: dict[str, dict[str, str]] = {}
    edges = []
    for line in lines[1:-1]:
        if m := _EDGE.match(line):
            edges.append((m.group(1), m.group(2)))
        elif m := _NODE.match(line):
            attrs = {k: dot_unquote(v) for k, v in _ATTR.findall(m.group(2))}
            # Every byte of the attribute list is accounted for by well-formed key="value" pairs.
            assert ", ".join(f"{k}={dot_quote(v)}" for k, v in attrs.items()) == m.group(2)
            nodes[m.group(1)] = attrs
        else:
            assert re.match(r"^\s*(graph|node) \[.*\];$", line), f"unexpected DOT line: {line!r}"
    return nodes, edges


# -- networkx ------------------------------------------------------------------------------------
def test_to_networkx_keeps_every_field(sample_tree):
    graph = to_networkx(sample_tree)
    assert isinstance(graph, nx.DiGraph)
    assert sorted(graph.nodes) == list(range(len(sample_tree)))
    assert set(graph.edges) == {(n.parent.id, n.id) for n in sample_tree.nodes if n.parent is not None}
    assert graph.graph["seed"] == sample_tree.seed
    for n in sample_tree.nodes:
        attrs = graph.nodes[n.id]
        assert attrs["id"] == n.id
        assert attrs["parent"] == (None if n.parent is None else n.parent.id)
        assert (attrs["text"], attrs["tokens"], attrs["num_tokens"]) == (n.text, n.tokens, len(n.tokens))
        assert (attrs["logprob"], attrs["value"], attrs["visits"]) == (n.logprob, n.value, n.visits)
        assert (attrs["status"], attrs["depth"], attrs["metadata"]) == (n.status.value, n.depth, n.metadata)
    assert nx.is_arborescence(graph)
    method = sample_tree.to_networkx()
    assert set(method.nodes) == set(graph.nodes) and set(method.edges) == set(graph.edges)


# -- GraphML -------------------------------------------------------------------------------------
def test_graphml_round_trip_keeps_nodes_edges_and_attributes(sample_tree, tmp_path):
    sample_tree[7].text = 'ctrl\x1b and "quotes" <tags> & \\ back\nslash ✓'
    path = tmp_path / "tree.graphml"
    write_graphml(sample_tree, path)
    back = nx.read_graphml(path, node_type=int)
    expected = to_graphml_graph(sample_tree)
    assert set(back.nodes) == set(expected.nodes) and set(back.edges) == set(expected.edges)
    for node_id in expected.nodes:
        assert back.nodes[node_id] == expected.nodes[node_id]
    assert back.graph["seed"] == sample_tree.seed
    for n in sample_tree.nodes:
        attrs = back.nodes[n.id]
        assert json.loads(attrs["tokens"]) == n.tokens
        assert attrs["status"] == n.status.value and attrs["depth"] == n.depth and attrs["visits"] == n.visits
        assert ("value" in attrs) == (n.value is not None)
        if n.value is not None:
            assert attrs["value"] == pytest.approx(n.value)
    assert back.nodes[7]["text"] == 'ctrl\ufffd and "quotes" <tags> & \\ back\nslash ✓'
    assert back.nodes[3]["text"] == sample_tree[3].text
    # metadata: flattened with dots; int and float of one key become float; lists become JSON
    assert back.nodes[8]["metadata.finish_reason"] == "stop"
    assert back.nodes[8]["metadata.judge.model"] == "x" and back.nodes[8]["metadata.judge.k"] == 2
    assert back.nodes[8]["metadata.score"] == 1.0 and isinstance(back.nodes[8]["metadata.score"], float)
    assert back.nodes[7]["metadata.score"] == 0.25
    assert json.loads(back.nodes[8]["metadata.token_logprobs"]) == [-0.5]
    assert "metadata.score" not in back.nodes[6]


def test_graphml_leaves_out_unknown_values_from_a_loaded_run(sample_tree, tmp_path):
    sample_tree[4].logprob = float("nan")  # saved as null, loaded back as NaN
    loaded = tree_from_dict(json.loads(json.dumps(tree_to_dict(sample_tree))))
    path = tmp_path / "loaded.graphml"
    write_graphml(loaded, path)
    back = nx.read_graphml(path, node_type=int)
    assert "logprob" not in back.nodes[4] and back.nodes[5]["logprob"] == 0.0
    assert "value" not in back.nodes[0]


# -- DOT -----------------------------------------------------------------------------------------
def test_dot_file_parses_back_with_every_node_edge_and_text(sample_tree, tmp_path):
    path = tmp_path / "tree.dot"
    write_dot(sample_tree, path)
    nodes, edges = read_dot(path.read_text(encoding="utf-8"))
    assert set(nodes) == {f"n{n.id}" for n in sample_tree.nodes}
    assert sorted(edges) == sorted((f"n{n.parent.id}", f"n{n.id}") for n in sample_tree.nodes if n.parent)
    for n in sample_tree.nodes:
        attrs = nodes[f"n{n.id}"]
        assert attrs["tooltip"] == n.text
        assert attrs["status"] == n.status.value and int(attrs["depth"]) == n.depth
        assert attrs["label"].startswith(f"#{n.id} {n.status.value}")
        assert ("value" in attrs) == (n.value is not None)
        if n.value is not None:
            assert float(attrs["value"]) == n.value
        assert attrs["penwidth"] == ("3" if n.id in (0, 2, 8) else "1")  # the best path is bold
    assert nodes["n4"]["tooltip"] == 'say "hi" \\ back\n'


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_dot_quote_reads_back_to_the_text_with_other_control_characters_as_spaces(text):
    quoted = dot_quote(text)
    assert "\n" not in quoted
    m = re.fullmatch(_QUOTED, quoted)
    assert m is not None
    want = "".join(c if c in "\n\t" or (c >= " " and c != "\x7f") else " " for c in text)
    assert dot_unquote(m.group(1)) == want


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pydot's own use of old pyparsing names
def test_dot_parses_with_pydot(sample_tree):
    pydot = pytest.importorskip("pydot")
    sample_tree[9].text = 'tricky \\" end\\'
    (graph,) = pydot.graph_from_dot_data(to_dot(sample_tree))
    names = {n.get_name() for n in graph.get_nodes()} - {"node", "graph"}
    assert names == {f"n{n.id}" for n in sample_tree.nodes}
    assert len(graph.get_edges()) == len(sample_tree) - 1
    tooltip = graph.get_node("n9")[0].get_attributes()["tooltip"]
    assert tooltip == dot_quote(sample_tree[9].text)


def test_empty_and_unscored_trees_export():
    tree = build_sample_tree()
    for n in tree.nodes:
        n.value = None
    nodes, _ = read_dot(to_dot(tree))
    assert all("value" not in a for a in nodes.values())
    assert all(not math.isnan(v) for _, v in to_networkx(tree).nodes(data="logprob"))


def test_keys_and_texts_that_xml_or_utf_8_cannot_hold_are_replaced(tmp_path):
    import networkx as nx

    from thoughttree.tree.export import graphml_text

    tree = ThoughtTree(prompt=[1, 2])
    tree.add_child(tree.root, [3], "x\udcff", metadata={"k\x01ey": 1})
    graph = nx.parse_graphml(graphml_text(tree), node_type=int)
    assert graph.nodes[1]["text"] == "x\ufffd" and graph.nodes[1]["metadata.k\ufffdey"] == 1
    to_dot(tree).encode("utf-8")  # no lone surrogate left


def test_each_graphml_attribute_has_one_type_however_callers_stored_it():
    from thoughttree.tree.export import graphml_text

    tree = ThoughtTree(prompt=[1, 2])
    first = tree.add_child(tree.root, [3], "a", metadata={"label": "sure", "n": 1})
    second = tree.add_child(tree.root, [4], "b", metadata={"label": 3, "n": 0.5})
    first.value, second.value = 2, 0.5  # an int from one caller, a float from another
    text = graphml_text(tree)
    names = re.findall(r'attr\.name="([^"]+)"', text)
    assert len(names) == len(set(names)), names  # tools that read GraphML want one key per name
    graph = nx.parse_graphml(text, node_type=int)
    assert graph.nodes[1]["value"] == 2.0 and graph.nodes[2]["metadata.n"] == 0.5
    assert [json.loads(graph.nodes[i]["metadata.label"]) for i in (1, 2)] == ["sure", 3]


def test_several_roots_are_drawn_in_order():
    import io

    from rich.console import Console

    from thoughttree.view.render import show

    tree = ThoughtTree(prompt=[1])
    tree.add_root([2])
    for root in tree.roots:
        tree.add_child(root, [4], f"child of root {root.id}")
    out = io.StringIO()
    show(tree, console=Console(file=out, width=80))
    lines = [line for line in out.getvalue().splitlines() if "child of root" in line]
    assert ["root 0" in lines[0], "root 1" in lines[1]] == [True, True]
