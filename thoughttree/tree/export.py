"""Trees for other tools: networkx graphs, GraphML files and Graphviz DOT text.

``to_networkx`` keeps Python values (token lists, metadata dicts) for analysis in Python.
GraphML holds only scalars, so ``to_graphml_graph`` encodes: token ids as a JSON list string,
metadata flattened to ``metadata.<key>`` (nested keys joined with dots; lists and mixed types
as JSON strings), and unknown values (None, NaN) left out. Control characters that XML
forbids become U+FFFD, and XML readers turn a carriage return into a newline.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .node import Node, Status
from .query import best_path, one_line

if TYPE_CHECKING:
    import networkx as nx

    from .thought_tree import ThoughtTree

_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")  # lone surrogates too
_DOT_COLORS = {
    Status.SOLVED: "forestgreen",
    Status.TERMINAL: "goldenrod",
    Status.PRUNED: "gray60",
    Status.OPEN: "steelblue",
    Status.EXPANDED: "navy",
}


def _node_attrs(node: Node, depth: int) -> dict[str, Any]:
    return {
        "id": node.id,
        "parent": None if node.parent is None else node.parent.id,
        "text": node.text,
        "tokens": list(node.tokens),
        "num_tokens": len(node.tokens),
        "logprob": node.logprob,
        "value": node.value,
        "visits": node.visits,
        "status": node.status.value,
        "depth": depth,
        "metadata": dict(node.metadata),
    }


def _depths(tree: ThoughtTree) -> list[int]:
    depth = [0] * len(tree.nodes)
    for n in tree.nodes:  # a parent's id is always below its children's
        if n.parent is not None:
            depth[n.id] = depth[n.parent.id] + 1
    return depth


def to_networkx(tree: ThoughtTree) -> nx.DiGraph:
    """A directed graph with an edge parent -> child and one graph node per thought, keyed by id.

    Node attributes: id, parent (None for a root), text, tokens (list of ids), num_tokens,
    logprob, value (None when unscored), visits, status (its string), depth, metadata (dict).
    Graph attributes: seed.
    """
    import networkx as nx  # only graph exports need it; keeps the command line quick to start

    graph = nx.DiGraph(seed=tree.seed)
    depth = _depths(tree)
    for n in tree.nodes:
        graph.add_node(n.id, **_node_attrs(n, depth[n.id]))
    graph.add_edges_from((n.parent.id, n.id) for n in tree.nodes if n.parent is not None)
    return graph


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, out)
    else:
        out[prefix] = value


def _xml_safe(value: Any) -> Any:
    """XML 1.0 cannot hold most control characters; they become U+FFFD so the file stays readable."""
    return _XML_ILLEGAL.sub("\ufffd", value) if isinstance(value, str) else value


def _is_unknown(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _scalar_kind(value: Any) -> type | None:
    """The GraphML type of ``value``, or None when it must be JSON-encoded."""
    for kind in (bool, int, float, str):  # bool first: it is a subclass of int
        if isinstance(value, kind):
            return kind
    return None


def to_graphml_graph(tree: ThoughtTree) -> nx.DiGraph:
    """``to_networkx(tree)`` with only GraphML scalars, each attribute of one type across nodes.

    tokens become a JSON list string; metadata becomes ``metadata.<key>`` attributes. A
    metadata key whose values mix int and float is stored as float; one that mixes other types,
    or holds lists, is stored as JSON strings. None and NaN are left out; ``parent`` is
    dropped (the edges say it).
    """
    import networkx as nx

    rich = to_networkx(tree)
    flat: dict[int, dict[str, Any]] = {}
    kinds: dict[str, set[type | None]] = {}
    for node_id, attrs in rich.nodes(data=True):
        row: dict[str, Any] = {}
        _flatten("metadata", attrs["metadata"], row)
        row = {k: v for k, v in row.items() if not _is_unknown(v)}
        for k, v in row.items():
            kinds.setdefault(k, set()).add(_scalar_kind(v))
        flat[node_id] = row
    graph = nx.DiGraph(seed=tree.seed)
    for node_id, attrs in rich.nodes(data=True):
        out = {k: v for k, v in attrs.items() if k not in ("metadata", "parent", "tokens") and not _is_unknown(v)}
        out["tokens"] = json.dumps(attrs["tokens"])
        for k in ("value", "logprob"):  # one GraphML type per key even if a caller stored an int
            if k in out:
                out[k] = float(out[k])
        for k, v in flat[node_id].items():
            seen = kinds[k]
            if seen == {int, float}:
                v = float(v)
            elif len(seen) != 1 or None in seen:
                v = json.dumps(v, sort_keys=True, default=str)
            out[k] = v
        graph.add_node(node_id, **{_xml_safe(k): _xml_safe(v) for k, v in out.items()})
    graph.add_edges_from(rich.edges)
    return graph


def write_graphml(tree: ThoughtTree, path: str | Path) -> None:
    """Write ``tree`` as GraphML; read it back with ``networkx.read_graphml(path, node_type=int)``."""
    import networkx as nx

    nx.write_graphml(to_graphml_graph(tree), str(path))


def graphml_text(tree: ThoughtTree) -> str:
    """The GraphML document of ``tree`` as a string."""
    import networkx as nx

    lines = nx.generate_graphml(to_graphml_graph(tree))
    return '<?xml version="1.0" encoding="utf-8"?>\n' + "\n".join(lines) + "\n"


def dot_quote(value: str) -> str:
    """``value`` as a DOT double-quoted string.

    Backslashes are doubled and quotes escaped; a newline becomes ``\\n`` (Graphviz's line
    break in labels); tabs stay, and other control characters become spaces, since DOT has no
    escape for them.
    """
    out = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif (ch < " " and ch != "\t") or ch == "\x7f":
            out.append(" ")
        elif "\ud800" <= ch <= "\udfff":  # a lone surrogate: not UTF-8
            out.append("\ufffd")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _dot_attrs(attrs: dict[str, Any]) -> str:
    parts = []
    for k, v in attrs.items():
        text = repr(v) if isinstance(v, float) else str(v)
        parts.append(f"{k}={dot_quote(text)}")
    return "[" + ", ".join(parts) + "]"


def to_dot(tree: ThoughtTree, *, text_width: int = 40, best: Node | None = None) -> str:
    """Graphviz DOT text of ``tree``: one box per thought, coloured by status, best path bold
    (the path to ``best``, by default :func:`best_path`'s).

    Each node ``n<id>`` carries its label (id, status, value, visits, cut text), the full text
    as ``tooltip``, and the fields status, value, visits, depth, num_tokens, logprob as plain
    attributes (Graphviz keeps unknown attributes; tools can read them back).
    """
    best_ids = {n.id for n in (best.path() if best is not None else best_path(tree))}
    depth = _depths(tree)
    lines = [
        "digraph thoughttree {",
        '  graph [rankdir="TB"];',
        '  node [shape="box", style="rounded", fontname="monospace"];',
    ]
    for n in tree.nodes:
        head = f"#{n.id} {n.status.value}"
        if not _is_unknown(n.value):
            head += f" v={n.value:.3g}"
        if n.visits:
            head += f" n={n.visits}"
        body = one_line(n.text, text_width) if n.text else f"<{len(n.tokens)} tokens>"
        attrs: dict[str, Any] = {
            "label": f"{head}\n{body}",
            "tooltip": n.text,
            "color": _DOT_COLORS[n.status],
            "penwidth": 3 if n.id in best_ids else 1,
            "status": n.status.value,
            "depth": depth[n.id],
            "visits": n.visits,
            "num_tokens": len(n.tokens),
        }
        if not _is_unknown(n.value):
            attrs["value"] = float(n.value)  # type: ignore[arg-type]
        if not _is_unknown(n.logprob):
            attrs["logprob"] = float(n.logprob)
        lines.append(f"  n{n.id} {_dot_attrs(attrs)};")
    for n in tree.nodes:
        if n.parent is not None:
            width = 3 if n.id in best_ids else 1
            lines.append(f"  n{n.parent.id} -> n{n.id} {_dot_attrs({'penwidth': width})};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_dot(tree: ThoughtTree, path: str | Path) -> None:
    """Write ``to_dot(tree)`` to ``path`` as UTF-8 (render with ``dot -Tsvg path``)."""
    Path(path).write_text(to_dot(tree), encoding="utf-8")
