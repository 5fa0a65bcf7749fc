"""JSON values as ``json.loads`` makes them: their type names, and one walk over their nodes.

- :func:`json_type` names a value's JSON Schema type. What ``None`` is called is a parameter,
  because callers differ on purpose: a schema check reports it as ``null``, while the
  function-signature graph types an ``enum`` of ``None`` and strings as a string.
- :func:`json_leaves` walks a value's leaves (everything that is not an object or array)
  and :func:`json_fields` its object members by name, both depth first in document order.
  Callers choose which values identify something (an argument threaded from an earlier
  output, a value the user stated, a record's fields by name); the walk is shared.
- :func:`pattern_search` applies a JSON Schema ``pattern`` to a string under a time limit:
  the pattern comes from a tool's schema, the string from a model, and a backtracking
  pattern on a long string can run for minutes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = [
    "JSON_TYPE_NAMES",
    "PATTERN_TIMEOUT_S",
    "json_fields",
    "json_leaves",
    "json_type",
    "pattern_search",
]

#: Python type → JSON Schema type name, in the order to test them (``bool`` before ``int``);
#: ``None`` is named by :func:`json_type`'s ``null`` parameter.
JSON_TYPE_NAMES: tuple[tuple[type, str], ...] = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


#: seconds one ``pattern`` may take on one string (:func:`pattern_search`)
PATTERN_TIMEOUT_S = 0.05


def pattern_search(pattern: str, text: str) -> bool | None:
    """Whether the JSON Schema ``pattern`` matches somewhere in ``text`` (``re.search``), with
    the ``regex`` engine's time limit of :data:`PATTERN_TIMEOUT_S`; None when the pattern
    does not compile. Raises ``TimeoutError`` when the match ran out of time.

    >>> pattern_search(r"^[A-Z]{3}$", "CDG"), pattern_search(r"^\\d+$", "12a")
    (True, False)
    >>> pattern_search("(", "x") is None
    True
    """
    import regex

    try:
        compiled = regex.compile(pattern)
    except (regex.error, TypeError, ValueError, OverflowError):
        return None
    return compiled.search(text, timeout=PATTERN_TIMEOUT_S) is not None


def json_type(value: Any, *, null: str = "null") -> str:
    """The JSON Schema type name of a Python value; ``None`` is called ``null`` (the name
    the caller gives). ``bool`` is boolean, not integer; a value JSON cannot hold is named
    by its Python type.

    >>> [json_type(v) for v in (None, True, 3, 2.5, "a", [1], {"k": 1})]
    ['null', 'boolean', 'integer', 'number', 'string', 'array', 'object']
    >>> json_type(None, null="string")
    'string'
    """
    if value is None:
        return null
    for kind, name in JSON_TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def json_leaves(value: Any) -> Iterator[Any]:
    """The leaves of ``value`` (strings, numbers, booleans, ``None``), depth first in
    document order.

    >>> list(json_leaves({"a": "Paris", "b": [1, True, None, {"c": 2.5}], "d": []}))
    ['Paris', 1, True, None, 2.5]
    """
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(reversed(node.values()))
        elif isinstance(node, list):
            stack.extend(reversed(node))
        else:
            yield node


def json_fields(value: Any) -> Iterator[tuple[str, Any]]:
    """Every object member of ``value`` as ``(key, member value)``, depth first in document
    order: a member comes before the members nested in it, and arrays are looked through.

    >>> list(json_fields({"a": {"b": 1}, "c": [{"d": [2]}, 3]}))
    [('a', {'b': 1}), ('b', 1), ('c', [{'d': [2]}, 3]), ('d', [2])]
    """
    stack: list[tuple[Any, Any]] = [(None, value)]  # (member key or None, value)
    while stack:
        key, node = stack.pop()
        if key is not None:
            yield key, node
        if isinstance(node, dict):
            stack.extend(reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((None, v) for v in reversed(node))
