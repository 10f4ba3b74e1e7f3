"""The generated predicate (``schema_codegen``) says "valid" exactly when the interpreter
(``schema.Schema``) finds no error: every keyword of the subset, at and around its bounds."""

from __future__ import annotations

from typing import Any

import pytest

from tfdeclare.core.spec.schema import Schema
from tfdeclare.core.spec.schema_codegen import compile_predicate, predicate_source

DEFS = {"Name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5}}

CASES: list[tuple[str, dict[str, Any], list[Any]]] = [
    ("type integer", {"type": "integer"}, [1, 0, -3, 2.0, 2.5, True, "1", None]),
    ("type number", {"type": "number"}, [1, 1.5, True, False, "x", None]),
    ("type list", {"type": ["string", "null"]}, ["a", None, 1, [], {}]),
    ("type boolean", {"type": "boolean"}, [True, False, 0, 1, None]),
    ("minimum", {"minimum": 2}, [1, 2, 3, 1.99, 2.0, "a", True]),
    ("maximum", {"maximum": 2}, [1, 2, 3, 2.01]),
    ("exclusiveMinimum", {"exclusiveMinimum": 0}, [0, 0.0, 0.1, -1, False]),
    ("exclusiveMaximum", {"exclusiveMaximum": 10}, [10, 9.99, 11]),
    ("multipleOf", {"multipleOf": 0.5}, [1, 1.5, 1.2, 0, True]),
    ("string lengths", {"minLength": 2, "maxLength": 3}, ["a", "ab", "abc", "abcd", 5]),
    ("pattern", {"pattern": "^x[0-9]$"}, ["x1", "x", "x12", "y1", 1]),
    ("enum of words", {"enum": ["a", "b"]}, ["a", "b", "c", 1, None, ["a"]]),
    ("enum mixed", {"enum": [1, "1", None, True]}, [1, 1.0, "1", None, True, False, 2]),
    ("const", {"const": "v1"}, ["v1", "v2", 1, None]),
    ("const number", {"const": 1}, [1, 1.0, True, "1"]),
    ("required", {"type": "object", "required": ["a", "b"]}, [{"a": 1, "b": 2}, {"a": 1}, {}, []]),
    (
        "properties, additional false",
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
        [{}, {"a": 1}, {"a": "x"}, {"b": 1}, {"a": 1, "b": 2}],
    ),
    (
        "additional schema",
        {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}},
        [{"a": 1, "b": "x"}, {"b": 1}, {"a": [], "c": "y"}],
    ),
    (
        "patternProperties",
        {
            "type": "object",
            "patternProperties": {"^x": {"type": "integer"}, "y$": {"minimum": 5}},
            "additionalProperties": False,
        },
        [{"x1": 1}, {"x1": "a"}, {"xy": 4}, {"xy": 6}, {"z": 1}, {"ay": 7}, {}],
    ),
    (
        "propertyNames",
        {
            "type": "object",
            "propertyNames": {"pattern": "^[A-Z]+$"},
            "additionalProperties": {"type": "string"},
        },
        [{"AB": "x"}, {"ab": "x"}, {"AB": 1}, {}],
    ),
    (
        "object sizes",
        {"type": "object", "minProperties": 1, "maxProperties": 2},
        [{}, {"a": 1}, {"a": 1, "b": 2}, {"a": 1, "b": 2, "c": 3}],
    ),
    (
        "array",
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
        [[], [1], [1, 2], [1, 2, 3], ["a"], [1.0], {}],
    ),
    ("uniqueItems", {"type": "array", "uniqueItems": True}, [[1, 2], [1, 1], [{"a": 1}, {"a": 1}], []]),
    (
        "anyOf",
        {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^[0-9]+Gi$"}]},
        [1, 0, "4Gi", "4", 1.0, None],
    ),
    ("oneOf", {"oneOf": [{"minimum": 0}, {"maximum": 10}]}, [-1, 5, 11, "x"]),
    ("oneOf of one", {"oneOf": [{"type": "string"}]}, ["a", 1]),
    ("allOf", {"allOf": [{"minimum": 0}, {"maximum": 10}]}, [-1, 5, 11]),
    ("not", {"not": {"type": "string"}}, ["a", 1, None]),
    (
        "allOf properties are known keys",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"a": {}},
            "allOf": [{"properties": {"b": {"type": "integer"}}}],
        },
        [{"a": 1, "b": 2}, {"b": "x"}, {"c": 1}],
    ),
    ("ref", {"$defs": DEFS, "$ref": "#/$defs/Name"}, ["abc", "abcdef", "ABC", 1]),
    (
        "ref inside",
        {"$defs": DEFS, "type": "array", "items": {"$ref": "#/$defs/Name"}},
        [["a", "b"], ["a", "B"], []],
    ),
    (
        "recursive ref",
        {
            "$defs": {
                "Tree": {
                    "type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/Tree"}}},
                }
            },
            "$ref": "#/$defs/Tree",
        },
        [{}, {"kids": [{}, {"kids": []}]}, {"kids": [1]}, {"kids": [{"kids": [3]}]}],
    ),
    ("true schema", {}, [1, None, {}]),
]


@pytest.mark.parametrize(("name", "schema", "values"), CASES, ids=[c[0] for c in CASES])
def test_the_predicate_agrees_with_the_interpreter(
    name: str, schema: dict[str, Any], values: list[Any]
) -> None:
    accepts = compile_predicate(schema)
    interpreted = Schema(schema)
    verdicts = set()
    for value in values:
        errors: list[Any] = []
        interpreted._root.validate(value, (), errors)
        assert accepts(value) == (not errors), (value, errors, predicate_source(schema))
        verdicts.add(not errors)
    assert verdicts == {True, False} or name == "true schema"  # every table has both answers


def test_validate_switches_to_the_predicate_and_still_reports_errors() -> None:
    schema = Schema({"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}})
    for _ in range(100):  # past the interpreted warm-up
        assert schema.validate({"a": 1}) == []
        assert [e.message for e in schema.validate({"a": "x"})] == ['expected a whole number, got "x"']
    assert schema._accepts is not None
