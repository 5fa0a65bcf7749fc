"""The shared JSON walk and type names (``trajsynth.core.jsonvalues``).

Run: python -m pytest tests/core/test_jsonvalues.py -q
"""

from __future__ import annotations

import doctest
import json

from trajsynth.core import jsonvalues
from trajsynth.core.jsonvalues import json_fields, json_leaves, json_type

DOC = json.loads(
    '{"id": "B1", "items": [{"sku": "S-1", "qty": 2}, {"sku": "S-2", "qty": null}],'
    ' "tags": ["gift", "fast"], "grid": [[1, {"deep": true}]], "note": ""}'
)


def test_docstring_examples() -> None:
    assert doctest.testmod(jsonvalues).failed == 0


def test_type_names_and_the_name_of_null() -> None:
    assert [json_type(v) for v in (None, False, 0, 0.5, "", [], {})] == [
        "null",
        "boolean",
        "integer",
        "number",
        "string",
        "array",
        "object",
    ]
    assert json_type(None, null="string") == "string"
    assert json_type(True, null="string") == "boolean"
    assert json_type((1, 2)) == "tuple"  # not a JSON value: its Python name


def test_leaves_in_document_order() -> None:
    assert list(json_leaves(DOC)) == ["B1", "S-1", 2, "S-2", None, "gift", "fast", 1, True, ""]
    assert list(json_leaves("x")) == ["x"]
    assert list(json_leaves([])) == []


def test_fields_by_name_in_document_order() -> None:
    fields = list(json_fields(DOC))
    assert [k for k, _ in fields] == [
        "id",
        "items",
        "sku",
        "qty",
        "sku",
        "qty",
        "tags",
        "grid",
        "deep",
        "note",
    ]
    assert fields[2] == ("sku", "S-1") and fields[5] == ("qty", None)
    assert list(json_fields([1, "a"])) == []
