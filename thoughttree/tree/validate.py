"""Checks of run and tree files as read from JSON: every error names the field that is wrong.

A file that passes can be shown, summarised, exported and loaded as search results without
surprises; one that does not gives one line such as ``problem 2, node 5: value must be a
number or null, got 'high'``.
"""

from __future__ import annotations

from typing import Any

from .node import Status

_STATUSES = {s.value for s in Status}


class FieldError(ValueError):
    """A field of a run or tree file with the wrong type or value; the message names it."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _want(ok: bool, field: str, what: str, value: Any) -> None:
    if not ok:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
        raise FieldError(f"{field} must be {what}, got {shown}")


def check_tree_data(data: Any) -> None:
    """A tree's JSON: nodes in id order, parents before children, every field of its type."""
    _want(isinstance(data, dict), "tree", "a JSON object", data)
    _want(_whole(data.get("seed", 0)), "tree.seed", "an integer", data.get("seed"))
    nodes = data.get("nodes")
    _want(isinstance(nodes, list), "tree.nodes", "a list", nodes)
    for i, raw in enumerate(nodes):
        where = f"node {i}"
        _want(isinstance(raw, dict), where, "a JSON object", raw)
        for key in ("id", "parent", "tokens", "text", "status"):
            if key not in raw:
                raise FieldError(f"{where} has no {key!r}")
        _want(raw["id"] == i and _whole(raw["id"]), f"{where}: id", f"{i} (ids are 0..N-1 in order)", raw["id"])
        parent = raw["parent"]
        _want(parent is None or (_whole(parent) and 0 <= parent < i), f"{where}: parent",
              "null or the id of an earlier node", parent)
        tokens = raw["tokens"]
        _want(isinstance(tokens, list) and all(_whole(t) and t >= 0 for t in tokens), f"{where}: tokens",
              "a list of token ids (whole numbers >= 0)", tokens)
        _want(isinstance(raw["text"], str), f"{where}: text", "a string", raw["text"])
        for key in ("logprob", "value"):
            value = raw.get(key)
            _want(value is None or _number(value), f"{where}: {key}", "a number or null", value)
        _want(_whole(raw.get("visits", 0)) and raw.get("visits", 0) >= 0, f"{where}: visits",
              "a whole number >= 0", raw.get("visits"))
        _want(isinstance(raw["status"], str) and raw["status"] in _STATUSES, f"{where}: status",
              f"one of {', '.join(sorted(_STATUSES))}", raw["status"])
        _want(isinstance(raw.get("metadata", {}), dict), f"{where}: metadata", "a JSON object", raw.get("metadata"))


def _check_statistics(stats: Any, field: str) -> None:
    _want(isinstance(stats, dict), field, "a JSON object", stats)
    for key, value in stats.items():
        if key == "per_round":
            _want(isinstance(value, list) and all(isinstance(r, dict) for r in value), f"{field}.per_round",
                  "a list of JSON objects", value)
        else:
            _want(value is None or _number(value), f"{field}.{key}", "a number", value)


def check_result_data(result: Any, nodes: int) -> None:
    """A problem's result: the fields a search writes are checked when present."""
    _want(isinstance(result, dict), "result", "a JSON object", result)
    _want(result.get("answer") is None or isinstance(result["answer"], str), "result.answer", "a string or null",
          result.get("answer"))
    for key in ("solved", "correct"):
        _want(isinstance(result.get(key, False), bool), f"result.{key}", "true or false", result.get(key))
    for key in ("stopped", "error"):
        _want(isinstance(result.get(key, ""), str), f"result.{key}", "a string", result.get(key))
    best = result.get("best")
    _want(best is None or (_whole(best) and 0 <= best < nodes), "result.best", f"null or a node id below {nodes}",
          best)
    solutions = result.get("solutions", [])
    _want(isinstance(solutions, list) and all(_whole(s) and 0 <= s < nodes for s in solutions),
          "result.solutions", f"a list of node ids below {nodes}", solutions)
    for key in ("statistics", "stats"):
        if key in result:
            _check_statistics(result[key], f"result.{key}")


def check_run_data(data: dict[str, Any], reserved: tuple[str, ...]) -> None:
    """A run file's JSON after its header: meta, totals and every problem."""
    _want(isinstance(data.get("meta", {}), dict), "meta", "a JSON object", data.get("meta"))
    for key, value in data.items():
        if key not in reserved:
            _want(value is None or _number(value), key, "a number (run totals are numbers)", value)
    problems = data.get("problems")
    _want(isinstance(problems, list), "problems", "a list", problems)
    assert isinstance(problems, list)  # _want raised otherwise
    for i, entry in enumerate(problems):
        try:
            _want(isinstance(entry, dict), "entry", "a JSON object", entry)
            if "tree" not in entry:
                raise FieldError("has no 'tree'")
            check_tree_data(entry["tree"])
            if "result" in entry:
                check_result_data(entry["result"], len(entry["tree"]["nodes"]))
        except FieldError as exc:
            raise FieldError(f"problem {i}: {exc}") from None
