"""Errors in our words, keyword by keyword, at and around each bound: what ``Schema.validate``
says (path, message, and whether it points at the key) for every keyword our schemas may use,
and that it finds a value valid exactly when the reference implementation (``jsonschema``) does.

The messages were those of the evaluator that jsonschema-rs replaced; users and editors read
them, so a change here is a change they see.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from tfdeclare.core.spec.schema import Schema

DEFS = {"Name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5}}

# (case, schema, [(value, [(path, message[, at_key])])])
CASES: list[tuple[str, dict[str, Any], list[tuple[Any, list[tuple[Any, ...]]]]]] = [
    (
        "type integer",
        {"type": "integer"},
        [
            (1, []),
            (0, []),
            (-3, []),
            (2.0, []),
            (2.5, [((), "expected a whole number, got 2.5")]),
            (True, [((), "expected a whole number, got true")]),
            ("1", [((), 'expected a whole number, got "1"')]),
            (None, [((), "expected a whole number, got null")]),
        ],
    ),
    (
        "type number",
        {"type": "number"},
        [
            (1, []),
            (1.5, []),
            (True, [((), "expected a number, got true")]),
            (False, [((), "expected a number, got false")]),
            ("x", [((), 'expected a number, got "x"')]),
            (None, [((), "expected a number, got null")]),
        ],
    ),
    (
        "type list",
        {"type": ["string", "null"]},
        [
            ("a", []),
            (None, []),
            (1, [((), "expected a string or null, got 1")]),
            ([], [((), "expected a string or null, got a list")]),
            ({}, [((), "expected a string or null, got a mapping")]),
        ],
    ),
    (
        "type boolean",
        {"type": "boolean"},
        [
            (True, []),
            (False, []),
            (0, [((), "expected true or false, got 0")]),
            (1, [((), "expected true or false, got 1")]),
            (None, [((), "expected true or false, got null")]),
        ],
    ),
    (
        "minimum",
        {"minimum": 2},
        [
            (1, [((), "must be at least 2; got 1")]),
            (2, []),
            (3, []),
            (1.99, [((), "must be at least 2; got 1.99")]),
            (2.0, []),
            ("a", []),
            (True, []),
        ],
    ),
    (
        "maximum",
        {"maximum": 2},
        [
            (1, []),
            (2, []),
            (3, [((), "must be at most 2; got 3")]),
            (2.01, [((), "must be at most 2; got 2.01")]),
        ],
    ),
    (
        "exclusiveMinimum",
        {"exclusiveMinimum": 0},
        [
            (0, [((), "must be more than 0; got 0")]),
            (0.0, [((), "must be more than 0; got 0.0")]),
            (0.1, []),
            (-1, [((), "must be more than 0; got -1")]),
            (False, []),
        ],
    ),
    (
        "exclusiveMaximum",
        {"exclusiveMaximum": 10},
        [
            (10, [((), "must be less than 10; got 10")]),
            (9.99, []),
            (11, [((), "must be less than 10; got 11")]),
        ],
    ),
    (
        "multipleOf",
        {"multipleOf": 0.5},
        [(1, []), (1.5, []), (1.2, [((), "must be a multiple of 0.5; got 1.2")]), (0, []), (True, [])],
    ),
    (
        "string lengths",
        {"minLength": 2, "maxLength": 3},
        [
            ("a", [((), "must not be shorter than 2 characters")]),
            ("ab", []),
            ("abc", []),
            ("abcd", [((), "must be at most 3 characters; got 4")]),
            (5, []),
        ],
    ),
    (
        "pattern",
        {"pattern": "^x[0-9]$"},
        [
            ("x1", []),
            ("x", [((), 'must match the pattern ^x[0-9]$; got "x"')]),
            ("x12", [((), 'must match the pattern ^x[0-9]$; got "x12"')]),
            ("y1", [((), 'must match the pattern ^x[0-9]$; got "y1"')]),
            (1, []),
        ],
    ),
    (
        "enum of words",
        {"enum": ["a", "b"]},
        [
            ("a", []),
            ("b", []),
            ("c", [((), 'must be one of a, b; got "c"')]),
            (1, [((), "must be one of a, b; got 1")]),
            (None, [((), "must be one of a, b; got null")]),
            (["a"], [((), "must be one of a, b; got a list")]),
        ],
    ),
    (
        "enum mixed",
        {"enum": [1, "1", None, True]},
        [
            (1, []),
            (1.0, []),
            ("1", []),
            (None, []),
            (True, []),
            (False, [((), "must be one of 1, 1, None, True; got false")]),
            (2, [((), "must be one of 1, 1, None, True; got 2")]),
        ],
    ),
    (
        "const",
        {"const": "v1"},
        [
            ("v1", []),
            ("v2", [((), 'must be "v1"; got "v2"')]),
            (1, [((), 'must be "v1"; got 1')]),
            (None, [((), 'must be "v1"; got null')]),
        ],
    ),
    (
        "const number",
        {"const": 1},
        [(1, []), (1.0, []), (True, [((), "must be 1; got true")]), ("1", [((), 'must be 1; got "1"')])],
    ),
    (
        "required",
        {"type": "object", "required": ["a", "b"]},
        [
            ({"a": 1, "b": 2}, []),
            ({"a": 1}, [((), "missing required field 'b'")]),
            ({}, [((), "missing required field 'a'"), ((), "missing required field 'b'")]),
            ([], [((), "expected a mapping, got a list")]),
        ],
    ),
    (
        "properties, additional false",
        {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
        [
            ({}, []),
            ({"a": 1}, []),
            ({"a": "x"}, [(("a",), 'expected a whole number, got "x"')]),
            ({"b": 1}, [(("b",), "unknown field 'b'; allowed: a", True)]),
            ({"a": 1, "b": 2}, [(("b",), "unknown field 'b'; allowed: a", True)]),
        ],
    ),
    (
        # "did you mean" names only a close name valid at that level; a name valid elsewhere
        # (mis-indented) is said to be a field of that place instead (issue 22).
        "unknown field: close names at that level, homes elsewhere",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "command": {},
                "workingDir": {},
                "image": {},
                "replicas": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "worker": {},
                        "ps": {"$ref": "#/$defs/Role"},
                        "chief": {"$ref": "#/$defs/Role"},
                    },
                },
            },
            "$defs": {"Role": {"type": "object", "properties": {"count": {}}, "additionalProperties": False}},
        },
        [
            ({"command": 1, "replicas": {"worker": 2, "ps": {"count": 1}}}, []),
            ({"comand": 1}, [(("comand",), "unknown field 'comand' (did you mean 'command'?)", True)]),
            ({"Image": 1}, [(("Image",), "unknown field 'Image' (did you mean 'image'?)", True)]),
            ({"workdir": 1}, [(("workdir",), "unknown field 'workdir' (did you mean 'workingDir'?)", True)]),
            ({"imgae": 1}, [(("imgae",), "unknown field 'imgae' (did you mean 'image'?)", True)]),
            (
                {"worker": 1},
                [
                    (
                        ("worker",),
                        "unknown field 'worker' (a field of replicas: is it indented right?); "
                        "allowed: command, image, replicas, workingDir",
                        True,
                    )
                ],
            ),
            (
                {"count": 1},
                [
                    (
                        ("count",),
                        "unknown field 'count' (a field of replicas.*: is it indented right?); "
                        "allowed: command, image, replicas, workingDir",
                        True,
                    )
                ],
            ),
            (
                {"replicas": {"workers": {}}},
                [(("replicas", "workers"), "unknown field 'workers' (did you mean 'worker'?)", True)],
            ),
            (
                {"replicas": {"command": {}}},
                [
                    (
                        ("replicas", "command"),
                        "unknown field 'command' (a field of the top level: is it indented right?); "
                        "allowed: chief, ps, worker",
                        True,
                    )
                ],
            ),
            (
                {"xyz": 1},
                [(("xyz",), "unknown field 'xyz'; allowed: command, image, replicas, workingDir", True)],
            ),
        ],
    ),
    (
        "additional schema",
        {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}},
        [
            ({"a": 1, "b": "x"}, []),
            ({"b": 1}, [(("b",), "expected a string, got 1")]),
            ({"a": [], "c": "y"}, []),
        ],
    ),
    (
        "patternProperties",
        {
            "type": "object",
            "patternProperties": {"^x": {"type": "integer"}, "y$": {"minimum": 5}},
            "additionalProperties": False,
        },
        [
            ({"x1": 1}, []),
            ({"x1": "a"}, [(("x1",), 'expected a whole number, got "a"')]),
            ({"xy": 4}, [(("xy",), "must be at least 5; got 4")]),
            ({"xy": 6}, []),
            ({"z": 1}, [(("z",), "unknown field 'z'", True)]),
            ({"ay": 7}, []),
            ({}, []),
        ],
    ),
    (
        "propertyNames",
        {
            "type": "object",
            "propertyNames": {"pattern": "^[A-Z]+$"},
            "additionalProperties": {"type": "string"},
        },
        [
            ({"AB": "x"}, []),
            ({"ab": "x"}, [(("ab",), "name 'ab': must match the pattern ^[A-Z]+$; got \"ab\"", True)]),
            ({"AB": 1}, [(("AB",), "expected a string, got 1")]),
            ({}, []),
        ],
    ),
    (
        "object sizes",
        {"type": "object", "minProperties": 1, "maxProperties": 2},
        [
            ({}, [((), "must have at least 1 entries")]),
            ({"a": 1}, []),
            ({"a": 1, "b": 2}, []),
            ({"a": 1, "b": 2, "c": 3}, [((), "must have at most 2 entries")]),
        ],
    ),
    (
        "array",
        {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2},
        [
            ([], [((), "must have at least 1 item")]),
            ([1], []),
            ([1, 2], []),
            ([1, 2, 3], [((), "must have at most 2 items")]),
            (["a"], [((0,), 'expected a whole number, got "a"')]),
            ([1.0], []),
            ({}, [((), "expected a list, got a mapping")]),
        ],
    ),
    (
        "uniqueItems",
        {"type": "array", "uniqueItems": True},
        [
            ([1, 2], []),
            ([1, 1], [((1,), "duplicate item 1")]),
            ([{"a": 1}, {"a": 1}], [((1,), "duplicate item a mapping")]),
            ([], []),
        ],
    ),
    (
        "anyOf",
        {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^[0-9]+Gi$"}]},
        [
            (1, []),
            (0, [((), "must be at least 1; got 0")]),
            ("4Gi", []),
            ("4", [((), 'must match the pattern ^[0-9]+Gi$; got "4"')]),
            (1.0, []),
            (None, [((), "expected a string or a whole number, got null")]),
        ],
    ),
    (
        "oneOf",
        {"oneOf": [{"minimum": 0}, {"maximum": 10}]},
        [
            (-1, []),
            (5, [((), "matches more than one alternative")]),
            (11, []),
            ("x", [((), "matches more than one alternative")]),
        ],
    ),
    ("oneOf of one", {"oneOf": [{"type": "string"}]}, [("a", []), (1, [((), "expected a string, got 1")])]),
    (
        "allOf",
        {"allOf": [{"minimum": 0}, {"maximum": 10}]},
        [(-1, [((), "must be at least 0; got -1")]), (5, []), (11, [((), "must be at most 10; got 11")])],
    ),
    ("not", {"not": {"type": "string"}}, [("a", [((), '"a" is not allowed')]), (1, []), (None, [])]),
    (
        # Standard JSON Schema: additionalProperties does not see the properties of an allOf
        # branch (the evaluator before jsonschema-rs did; none of our schemas relies on it).
        "allOf properties are not known to additionalProperties",
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"a": {}},
            "allOf": [{"properties": {"b": {"type": "integer"}}}],
        },
        [
            ({"a": 1}, []),
            ({"a": 1, "b": 2}, [(("b",), "unknown field 'b'; allowed: a", True)]),
            (
                {"b": "x"},
                [
                    (("b",), "unknown field 'b'; allowed: a", True),
                    (("b",), 'expected a whole number, got "x"'),
                ],
            ),
            ({"c": 1}, [(("c",), "unknown field 'c'; allowed: a", True)]),
        ],
    ),
    (
        "ref",
        {"$defs": DEFS, "$ref": "#/$defs/Name"},
        [
            ("abc", []),
            ("abcdef", [((), "must be at most 5 characters; got 6")]),
            ("ABC", [((), 'must match the pattern ^[a-z]+$; got "ABC"')]),
            (1, [((), "expected a string, got 1")]),
        ],
    ),
    (
        "ref inside",
        {"$defs": DEFS, "type": "array", "items": {"$ref": "#/$defs/Name"}},
        [(["a", "b"], []), (["a", "B"], [((1,), 'must match the pattern ^[a-z]+$; got "B"')]), ([], [])],
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
        [
            ({}, []),
            ({"kids": [{}, {"kids": []}]}, []),
            ({"kids": [1]}, [(("kids", 0), "expected a mapping, got 1")]),
            ({"kids": [{"kids": [3]}]}, [(("kids", 0, "kids", 0), "expected a mapping, got 3")]),
        ],
    ),
    ("true schema", {}, [(1, []), (None, []), ({}, [])]),
]


@pytest.mark.parametrize(("name", "schema", "table"), CASES, ids=[c[0] for c in CASES])
def test_errors_are_worded_as_before_and_validity_agrees_with_jsonschema(
    name: str, schema: dict[str, Any], table: list[tuple[Any, list[tuple[Any, ...]]]]
) -> None:
    ours = Schema(schema)
    reference = jsonschema.Draft202012Validator(schema)
    for value, expected in table:
        said = [(e.path, e.message, True) if e.at_key else (e.path, e.message) for e in ours.validate(value)]
        assert sorted(said) == sorted(expected), value
        assert (not said) == reference.is_valid(value), value
    assert {not errors for _, errors in table} == {True, False} or name == "true schema"


def test_every_worded_kind_is_one_of_the_validators_kinds() -> None:
    """The wording rules are keyed by the class names of jsonschema-rs's error kinds: a name
    the library no longer has would leave its errors in the library's words, unnoticed."""
    import jsonschema_rs

    from tfdeclare.core.spec.schema import _WORDING

    kinds = {name for name in dir(jsonschema_rs.ValidationErrorKind) if not name.startswith("_")}
    assert set(_WORDING) <= kinds, sorted(set(_WORDING) - kinds)
