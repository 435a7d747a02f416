"""How a function's return value travels out of the sandbox: JSON with tagged containers.

Plain JSON would turn tuples into lists and dictionary keys into strings before the comparison
sees them; the tags keep those types. Lists are JSON arrays; every other container is a
one-key object (``tuple``, ``set``, ``dict``, ``bytes``); anything else travels as its ``repr``
and decodes to an :class:`Opaque` value that equals nothing. Decoding never runs code.

This module is standard library only: the driver imports it inside the sandbox.
"""

from __future__ import annotations

import json
from typing import Any

REPR_CHARS = 1000


class WireError(ValueError):
    """The bytes a program sent back are not a value in this format."""


class Opaque:
    """A value that could not travel (an object of the program's own class): equal to nothing."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return self.text


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_plain(item) for item in value]
    if isinstance(value, tuple):
        return {"tuple": [_plain(item) for item in value]}
    if isinstance(value, (set, frozenset)):
        return {"set": [_plain(item) for item in value]}
    if isinstance(value, dict):
        return {"dict": [[_plain(k), _plain(v)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).decode("latin-1")}
    return {"repr": repr(value)[:REPR_CHARS]}


def encode(value: Any) -> str:
    """One line of JSON for ``value`` (a value nested too deeply travels as its repr)."""
    try:
        return json.dumps(_plain(value))
    except (RecursionError, ValueError):
        return json.dumps({"repr": f"<{type(value).__name__} nested too deeply>"})


def _value(node: Any) -> Any:
    if isinstance(node, list):
        return [_value(item) for item in node]
    if not isinstance(node, dict):
        return node
    if len(node) != 1:
        raise WireError(f"an object with keys {sorted(node)[:4]} is not a tagged value")
    (tag, body), = node.items()
    if tag == "tuple" and isinstance(body, list):
        return tuple(_value(item) for item in body)
    if tag == "set" and isinstance(body, list):
        return {_value(item) for item in body}
    if tag == "dict" and isinstance(body, list) and all(isinstance(p, list) and len(p) == 2 for p in body):
        return {_value(k): _value(v) for k, v in body}
    if tag == "bytes" and isinstance(body, str):
        return body.encode("latin-1")
    if tag == "repr" and isinstance(body, str):
        return Opaque(body)
    raise WireError(f"unknown or malformed tag {tag!r}")


def decode(text: str) -> Any:
    """The value :func:`encode` wrote; :class:`WireError` for anything else."""
    try:
        return _value(json.loads(text))
    except WireError:
        raise
    except (ValueError, TypeError, RecursionError, UnicodeError) as err:
        raise WireError(f"unreadable return value: {type(err).__name__}: {err}") from None
