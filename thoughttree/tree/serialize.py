"""Trees and runs to JSON and back: token ids, text, scores, structure, and the run's settings.

A run file holds one or more searched problems::

    {"format": "thoughttree.run", "version": 1, "meta": {...}, "success_rate": 0.62, ...,
     "problems": [{"problem": "4 5 6 10", "tree": {...}, "result": {...}}, ...]}

``meta`` carries the task, strategy and sampling settings and the seed; a run over many problems
also writes its totals (success_rate, tokens, time) as top-level numbers; each ``result``
carries that problem's answer, solved flag and statistics.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .node import Status
from .thought_tree import ThoughtTree
from .validate import FieldError, check_run_data, check_tree_data

FORMAT = "thoughttree.run"
TREE_FORMAT = "thoughttree.tree"
VERSION = 1
_RESERVED = ("format", "version", "meta", "problems")


class RunFileError(ValueError):
    """A run or tree file that cannot be read."""


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: store them as None so files stay standard."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def tree_to_dict(tree: ThoughtTree) -> dict[str, Any]:
    """Every node in id order with its parent id; KV handles are runtime state and are not saved."""
    nodes = []
    for n in tree.nodes:
        nodes.append(
            {
                "id": n.id,
                "parent": None if n.parent is None else n.parent.id,
                "tokens": list(n.tokens),
                "text": n.text,
                "logprob": _clean(n.logprob),
                "value": _clean(n.value),
                "visits": n.visits,
                "status": n.status.value,
                "metadata": n.metadata,
            }
        )
    return {"format": TREE_FORMAT, "version": VERSION, "seed": tree.seed, "nodes": nodes}


def tree_from_dict(data: dict[str, Any], lm: Any = None) -> ThoughtTree:
    """Rebuild a tree (without KV; ``tree.materialize()`` prefills it when a model is attached)."""
    _check_header(data, TREE_FORMAT, "tree")
    try:
        check_tree_data(data)
    except FieldError as exc:
        raise RunFileError(f"malformed tree data: {exc}") from None
    tree = ThoughtTree(lm, seed=data.get("seed", 0))
    for raw in data["nodes"]:
        tree._new(
            None if raw["parent"] is None else tree.nodes[raw["parent"]],
            list(raw["tokens"]),
            raw["text"],
            logprob=float("nan") if raw.get("logprob") is None else float(raw["logprob"]),
            value=raw.get("value"),
            visits=raw.get("visits", 0),
            status=Status(raw["status"]),
            metadata=dict(raw.get("metadata", {})),
        )
    return tree


def _dumps(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, allow_nan=False)


_SLOT = "\u0000problems\u0000"  # stands for the problem list while the rest is encoded


class EntryTexts:
    """Each problem entry's JSON text, encoded once: a run saved after every problem then costs
    one new entry per save instead of all of them. An entry must not change once saved."""

    def __init__(self) -> None:
        self._texts: dict[int, tuple[dict[str, Any], str]] = {}

    def text(self, entry: dict[str, Any]) -> str:
        hit = self._texts.get(id(entry))
        if hit is None or hit[0] is not entry:  # the entry is kept, so its id is never reused
            hit = (entry, _dumps(entry))
            self._texts[id(entry)] = hit
        return hit[1]


@dataclass
class RunFile:
    """A saved run: settings in ``meta``, run totals in ``totals`` (top-level keys), one entry per problem."""

    meta: dict[str, Any] = field(default_factory=dict)
    problems: list[dict[str, Any]] = field(default_factory=list)
    totals: dict[str, float | int] = field(default_factory=dict)

    def trees(self, lm: Any = None) -> list[ThoughtTree]:
        return [tree_from_dict(p["tree"], lm) for p in self.problems]

    def to_dict(self) -> dict[str, Any]:
        clash = set(self.totals) & set(_RESERVED)
        if clash:
            raise RunFileError(f"run totals may not use the reserved keys {sorted(clash)}")
        return {**self.totals, "format": FORMAT, "version": VERSION, "meta": self.meta, "problems": self.problems}

    def to_text(self, cache: EntryTexts | None = None) -> str:
        """The file's JSON text; with ``cache`` each problem entry is encoded once across saves.
        Raises RunFileError naming what is not JSON data (a node's metadata, say)."""
        try:
            return self._text(cache)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, RunFileError):
                raise
            raise RunFileError(f"cannot save {self._culprit()}: {exc}; keep metadata and settings to JSON data "
                               "(numbers, strings, lists and dicts with string keys; no NaN or sets)") from None

    def _culprit(self) -> str:
        """Where the first value that JSON cannot hold is: a node's metadata, else the meta or an entry."""
        for i, entry in enumerate(self.problems):
            for node in entry.get("tree", {}).get("nodes", []) if isinstance(entry, dict) else ():
                try:
                    _dumps(node.get("metadata"))
                except (TypeError, ValueError):
                    return f"problem {i}'s node {node.get('id')} (its metadata)"
        return "the run's meta or a problem's result"

    def _text(self, cache: EntryTexts | None) -> str:
        data = self.to_dict()
        if cache is None or not self.problems:
            return _dumps(data) + "\n"
        text = _dumps({**data, "problems": _SLOT})
        if text.count(json.dumps(_SLOT)) != 1:  # the stand-in also occurs in a value: encode plainly
            return _dumps(data) + "\n"
        entries = ",\n  ".join(cache.text(e).replace("\n", "\n  ") for e in self.problems)
        return text.replace(json.dumps(_SLOT), "[\n  " + entries + "\n ]", 1) + "\n"

    def save(self, path: str | Path, cache: EntryTexts | None = None) -> None:
        """Write atomically (temp file then rename) so a crash never leaves half a file."""
        path = Path(path)
        text = self.to_text(cache)
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(text)
            tmp.replace(path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


PEEK_BYTES = 1 << 16


def holds_run_file(path: str | Path, *, empty: bool = False) -> bool:
    """Whether the file at ``path`` begins as a run file does (its top-level keys are sorted, so
    the format comes among the first); an empty file counts when ``empty``, and a file that cannot
    be read counts as one, to be safe."""
    try:
        with Path(path).open("rb") as f:
            head = f.read(PEEK_BYTES)
    except OSError:
        return True
    return json.dumps({"format": FORMAT})[1:-1].encode() in head or (empty and not head.strip())


MAX_DEPTH = 100  # how deeply a run file's free-form values (meta, results, node metadata) may nest


def _depth_within(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists and dicts at most ``limit`` levels deep (without recursion)."""
    stack = [(value, 1)]
    while stack:
        node, level = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if level > limit:
            return False
        stack.extend((item, level + 1) for item in (node.values() if isinstance(node, dict) else node))
    return True


def _shallow(data: Any) -> bool:
    """Whether a run file's free-form values nest at most :data:`MAX_DEPTH` levels (its fixed
    structure, problems, trees and nodes, is checked field by field afterwards)."""
    if not isinstance(data, dict):
        return True
    free: list[Any] = [v for k, v in data.items() if k != "problems"]
    problems = data.get("problems")
    for entry in problems if isinstance(problems, list) else []:
        if not isinstance(entry, dict):
            continue
        free += [v for k, v in entry.items() if k != "tree"]
        tree = entry.get("tree")
        nodes = tree.get("nodes") if isinstance(tree, dict) else None
        if isinstance(tree, dict):
            free += [v for k, v in tree.items() if k != "nodes"]
        for node in nodes if isinstance(nodes, list) else ():
            free += [v for k, v in node.items() if k != "tokens"] if isinstance(node, dict) else [node]
    return all(_depth_within(value, MAX_DEPTH) for value in free)


def load_run(path: str | Path) -> RunFile:
    """Read a run file, with a clear error for a missing, corrupt or newer-version file."""
    path = Path(path)
    if not path.is_file():
        raise RunFileError(f"no run file at {path}; pass the path written by --output")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFileError(f"{path} is not valid JSON ({exc}); the file is corrupt or not a run file") from exc
    except RecursionError:
        data = None
    if data is None or not _shallow(data):
        raise RunFileError(f"{path} nests JSON values more than {MAX_DEPTH} levels deep; the file is corrupt "
                           "or not a run file")
    _check_header(data, FORMAT, "run", path)
    if not isinstance(data.get("problems", []), list):
        raise RunFileError(f"{path}: problems must be a list, got {type(data['problems']).__name__}; the file is "
                           "corrupt")
    for i, entry in enumerate(data.get("problems") or []):
        if isinstance(entry, dict) and isinstance(entry.get("tree"), dict):
            try:
                _check_header(entry["tree"], TREE_FORMAT, "tree")
            except RunFileError as exc:
                raise RunFileError(f"{path}: problem {i}: the tree {exc}") from None
    try:
        check_run_data(data, _RESERVED)
    except FieldError as exc:
        raise RunFileError(f"{path}: {exc}; the file is corrupt or was not written by thoughttree") from None
    totals = {k: v for k, v in data.items() if k not in _RESERVED}
    return RunFile(meta=dict(data.get("meta", {})), problems=data["problems"], totals=totals)


def _check_header(data: Any, fmt: str, what: str, path: Path | None = None) -> None:
    where = f"{path} " if path else ""
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise RunFileError(f"{where}is not a thoughttree {what} file (expected format {fmt!r})")
    version = data.get("version")
    if not isinstance(version, int):
        raise RunFileError(f"{where}has no integer version; the file is corrupt")
    if version > VERSION:
        raise RunFileError(
            f"{where}was written by a newer thoughttree (format version {version}, this one reads up to "
            f"{VERSION}); upgrade thoughttree to read it"
        )
