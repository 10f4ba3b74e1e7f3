"""A small, fast evaluator of the JSON Schema (2020-12) subset our schemas use.

The schemas in ``schemas/`` are the single source of truth for the formats; this module only
interprets them. Why not the ``jsonschema`` package at run time: importing it alone takes
~100 ms, two thirds of the cold-start budget of ``tfdeclare validate`` (docs/benchmarks.md).
``jsonschema`` stays the *oracle* in the tests, which check that both agree on every case.

A schema compiles once into a tree of ``_Node`` objects. ``validate`` collects every error
(never stops at the first) as ``SchemaError``s with JSON paths; ``fill_defaults`` returns a
copy of a valid value with the schemas' ``default``s filled in. Keywords outside the subset
are refused when compiling, so a schema cannot silently rely on something we ignore.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdeclare.core.diagnostics import REPORTED, JsonPath
from tfdeclare.core.spec.schema_codegen import (
    compile_filler,
    compile_predicate,
    copy_json,
    is_integer,
    json_equal,
)

_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$comment",
        "title",
        "description",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$defs",
        "x-message",
        "x-order",
    }
)
_SUPPORTED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        "items",
        "minItems",
        "maxItems",
        "uniqueItems",
        "enum",
        "const",
        "minLength",
        "maxLength",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "$ref",
        "minProperties",
        "maxProperties",
    }
)


@dataclass(frozen=True, slots=True)
class SchemaError:
    path: JsonPath
    message: str
    at_key: bool = False  # place the error on the mapping key, not its value


Check = Callable[[Any, JsonPath, list[SchemaError]], None]


_TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": is_integer,
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}
_PYTHON_TYPES: dict[str, type] = {
    "object": dict,
    "array": list,
    "string": str,
    "integer": int,
    "null": type(None),
}
_TYPE_WORDS = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "null": "null",
}


def describe(value: Any) -> str:
    """How a value reads in an error message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:37] + "..."
        return json.dumps(shown, ensure_ascii=False)
    return repr(value)


_KINDS = {type(None): "null", bool: "boolean", dict: "object", list: "array", str: "string", int: "integer"}


def _type_of(value: Any) -> str:
    kind = _KINDS.get(type(value))
    if kind is not None:
        return kind
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    return "unknown"


class SchemaDefinitionError(Exception):
    """A schema file uses something this evaluator does not support (a bug in schemas/)."""


class _Node:
    __slots__ = ("checks", "deep", "defaults", "item", "patterns", "properties", "types")

    def __init__(self) -> None:
        self.checks: list[Check] = []
        self.types: tuple[str, ...] | None = None
        self.properties: dict[str, _Node] = {}
        self.defaults: dict[str, Any] = {}
        self.patterns: list[tuple[re.Pattern[str], _Node]] = []
        self.item: _Node | None = None
        self.deep = True

    def validate(self, value: Any, path: JsonPath, errors: list[SchemaError]) -> None:
        if value is REPORTED:
            return
        for check in self.checks:
            check(value, path, errors)

    def fill(self, value: Any) -> Any:
        """Fill in the ``default``s below this node, in place; returns ``value``."""
        if not self.deep:
            return value
        if type(value) is dict:
            properties = self.properties
            for key, item in value.items():
                sub = properties.get(key)
                if sub is None:
                    for pattern, node in self.patterns:
                        if pattern.search(key):
                            sub = node
                            break
                if sub is not None and sub.deep:
                    sub.fill(item)
            for key, default in self.defaults.items():
                if key not in value:
                    value[key] = properties[key].fill(copy_json(default))
        elif type(value) is list and self.item is not None and self.item.deep:
            for element in value:
                self.item.fill(element)
        return value


def _mark_deep(node: _Node, seen: set[int]) -> bool:
    """Whether any default lies at or below ``node`` (so ``fill`` can skip the rest)."""
    if id(node) in seen:
        return node.deep
    seen.add(id(node))
    children = [*node.properties.values(), *(n for _, n in node.patterns)]
    if node.item is not None:
        children.append(node.item)
    deep = bool(node.defaults)
    for child in children:
        deep = _mark_deep(child, seen) or deep
    node.deep = deep
    return deep


class Compiler:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.refs: dict[str, _Node] = {}

    def compile(self, schema: Any) -> _Node:
        if schema is True or schema == {}:
            return _Node()
        if not isinstance(schema, dict):
            raise SchemaDefinitionError(f"schema must be an object, got {schema!r}")
        unknown = set(schema) - _SUPPORTED - _ANNOTATIONS
        if unknown:
            raise SchemaDefinitionError(f"unsupported keywords {sorted(unknown)}")
        if "$ref" in schema:
            return self._ref(schema["$ref"])
        node = _Node()
        self._type(node, schema)
        self._object(node, schema)
        self._array(node, schema)
        self._scalar(node, schema)
        self._combinators(node, schema)
        return node

    def _ref(self, ref: str) -> _Node:
        if not ref.startswith("#/$defs/"):
            raise SchemaDefinitionError(f"only local #/$defs references are supported: {ref}")
        if ref not in self.refs:
            name = ref.removeprefix("#/$defs/")
            placeholder = _Node()
            self.refs[ref] = placeholder  # allows recursion
            compiled = self.compile(self.root["$defs"][name])
            for slot in _Node.__slots__:
                setattr(placeholder, slot, getattr(compiled, slot))
        return self.refs[ref]

    def _type(self, node: _Node, schema: Mapping[str, Any]) -> None:
        if "type" not in schema:
            return
        types = (schema["type"],) if isinstance(schema["type"], str) else tuple(schema["type"])
        node.types = types
        words = " or ".join(_TYPE_WORDS[t] for t in types)
        # Python types that pass outright; floats are checked further for "integer".
        exact = {
            bool if t == "boolean" else _PYTHON_TYPES[t]
            for t in types
            if t in _PYTHON_TYPES or t == "boolean"
        }
        if "number" in types:
            exact |= {int, float}
        whole_floats = "integer" in types and float not in exact

        def check(value: Any, path: JsonPath, errors: list[SchemaError]) -> None:
            kind = type(value)
            if kind in exact or (whole_floats and kind is float and value.is_integer()):
                return
            errors.append(SchemaError(path, f"expected {words}, got {describe(value)}"))

        node.checks.append(check)

    def _object(self, node: _Node, schema: Mapping[str, Any]) -> None:
        props = {k: self.compile(v) for k, v in schema.get("properties", {}).items()}
        node.properties = props
        node.defaults = {
            k: v["default"]
            for k, v in schema.get("properties", {}).items()
            if isinstance(v, dict) and "default" in v
        }
        node.patterns = [
            (re.compile(p), self.compile(s)) for p, s in schema.get("patternProperties", {}).items()
        ]
        required = tuple(schema.get("required", ()))
        additional = schema.get("additionalProperties", True)
        additional_node = self.compile(additional) if isinstance(additional, dict) else None
        names_node = self.compile(schema["propertyNames"]) if "propertyNames" in schema else None
        min_props = schema.get("minProperties")
        max_props = schema.get("maxProperties")
        known = sorted(props)
        patterns = node.patterns
        if not (
            props or required or additional is not True or patterns or names_node or min_props or max_props
        ):
            return

        def check(value: Any, path: JsonPath, errors: list[SchemaError]) -> None:
            if not isinstance(value, dict):
                return
            for key in required:
                if key not in value:
                    errors.append(SchemaError(path, f"missing required field {key!r}"))
            for key, item in value.items():
                sub = props.get(key)
                if sub is not None:
                    sub.validate(item, (*path, key), errors)
                    continue
                matched = False
                for pattern, pattern_node in patterns:
                    if pattern.search(key):
                        pattern_node.validate(item, (*path, key), errors)
                        matched = True
                if names_node is not None:
                    name_errors: list[SchemaError] = []
                    names_node.validate(key, (*path, key), name_errors)
                    errors.extend(
                        SchemaError(e.path, f"name {key!r}: {e.message}", True) for e in name_errors
                    )
                if matched:
                    continue
                if additional is False:
                    hint = difflib.get_close_matches(key, known, n=1)
                    suffix = f" (did you mean {hint[0]!r}?)" if hint else ""
                    allowed = f"; allowed: {', '.join(known)}" if known and not hint else ""
                    errors.append(SchemaError((*path, key), f"unknown field {key!r}{suffix}{allowed}", True))
                elif additional_node is not None:
                    additional_node.validate(item, (*path, key), errors)
            if min_props is not None and len(value) < min_props:
                errors.append(SchemaError(path, f"must have at least {min_props} entries"))
            if max_props is not None and len(value) > max_props:
                errors.append(SchemaError(path, f"must have at most {max_props} entries"))

        node.checks.append(check)

    def _array(self, node: _Node, schema: Mapping[str, Any]) -> None:
        item = self.compile(schema["items"]) if "items" in schema else None
        node.item = item
        min_items = schema.get("minItems")
        max_items = schema.get("maxItems")
        unique = schema.get("uniqueItems", False)
        if item is None and min_items is None and max_items is None and not unique:
            return

        def check(value: Any, path: JsonPath, errors: list[SchemaError]) -> None:
            if not isinstance(value, list):
                return
            if item is not None:
                for i, element in enumerate(value):
                    item.validate(element, (*path, i), errors)
            if min_items is not None and len(value) < min_items:
                noun = "item" if min_items == 1 else "items"
                errors.append(SchemaError(path, f"must have at least {min_items} {noun}"))
            if max_items is not None and len(value) > max_items:
                errors.append(SchemaError(path, f"must have at most {max_items} items"))
            if unique:
                seen: list[str] = []
                for i, element in enumerate(value):
                    encoded = json.dumps(element, sort_keys=True)
                    if encoded in seen:
                        errors.append(SchemaError((*path, i), f"duplicate item {describe(element)}"))
                    seen.append(encoded)

        node.checks.append(check)

    def _scalar(self, node: _Node, schema: Mapping[str, Any]) -> None:
        message = schema.get("x-message")
        if "enum" in schema:
            options = list(schema["enum"])
            listing = ", ".join(str(o) for o in options)

            def check_enum(value: Any, path: JsonPath, errors: list[SchemaError]) -> None:
                if not any(json_equal(value, o) for o in options):
                    errors.append(SchemaError(path, f"must be one of {listing}; got {describe(value)}"))

            node.checks.append(check_enum)
        if "const" in schema:
            const = schema["const"]

            def check_const(value: Any, path: JsonPath, errors: list[SchemaError]) -> None:
                if not json_equal(value, const):
                    errors.append(SchemaError(path, f"must be {describe(const)}; got {describe(value)}"))

            node.checks.append(check_const)
        min_len, max_len, pattern_text = (
            schema.get("minLength"),
            schema.get("maxLength"),
            schema.get("pattern"),
        )
        pattern = re.compile(pattern_text) if pattern_text else None
        if min_len is not None or max_len is not None or pattern is not None:

            def check_string(value: Any, path: JsonPath, errors: list[SchemaError]) -> None:
                if not isinstance(value, str):
                    return
                if min_len is not None and len(value) < min_len:
                    errors.append(
                        SchemaError(path, message or f"must not be shorter than {min_len} characters")
                    )
                elif max_len is not None and len(value) > max_len:
                    errors.append(
                        SchemaError(path, f"must be at most {max_len} characters; got {len(value)}")
                    )
                elif pattern is not None and not pattern.search(value):
                    text = message or f"must match the pattern {pattern_text}"
                    errors.append(SchemaError(path, f"{text}; got {describe(value)}"))

            node.checks.append(check_string)
        bounds = [
            (k, schema[k])
            for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
            if k in schema
        ]
        multiple = schema.get("multipleOf")
        if bounds or multiple is not None:

            def check_number(value: Any, path: JsonPath, errors: list[SchemaError]) -> None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    return
                for keyword, limit in bounds:
                    if keyword == "minimum" and value < limit:
                        errors.append(SchemaError(path, f"must be at least {limit}; got {value}"))
                    elif keyword == "maximum" and value > limit:
                        errors.append(SchemaError(path, f"must be at most {limit}; got {value}"))
                    elif keyword == "exclusiveMinimum" and value <= limit:
                        errors.append(SchemaError(path, f"must be more than {limit}; got {value}"))
                    elif keyword == "exclusiveMaximum" and value >= limit:
                        errors.append(SchemaError(path, f"must be less than {limit}; got {value}"))
                if multiple is not None and not is_integer(value / multiple):
                    errors.append(SchemaError(path, f"must be a multiple of {multiple}; got {value}"))

            node.checks.append(check_number)

    def _combinators(self, node: _Node, schema: Mapping[str, Any]) -> None:
        message = schema.get("x-message")
        for branch_schema in schema.get("allOf", ()):
            branch = self.compile(branch_schema)
            node.checks.append(branch.validate)
            for key, sub in branch.properties.items():  # so that fill_defaults sees them
                node.properties.setdefault(key, sub)
            for key, default in branch.defaults.items():
                node.defaults.setdefault(key, default)
        for keyword in ("anyOf", "oneOf"):
            if keyword not in schema:
                continue
            branches = [self.compile(b) for b in schema[keyword]]
            exactly_one = keyword == "oneOf"

            def check(
                value: Any,
                path: JsonPath,
                errors: list[SchemaError],
                branches: list[_Node] = branches,
                exactly_one: bool = exactly_one,
            ) -> None:
                kind = _type_of(value)
                candidates = [
                    b
                    for b in branches
                    if b.types is None or kind in b.types or (kind == "integer" and "number" in b.types)
                ]
                if len(candidates) == 1:  # the others cannot match a value of this type
                    only: list[SchemaError] = []
                    candidates[0].validate(value, path, only)
                    if only:
                        errors.extend(
                            [SchemaError(path, f"{message}; got {describe(value)}")] if message else only
                        )
                    return
                results = []
                for branch in branches:
                    branch_errors: list[SchemaError] = []
                    branch.validate(value, path, branch_errors)
                    results.append((branch, branch_errors))
                passing = [b for b, e in results if not e]
                if exactly_one and len(passing) > 1:
                    errors.append(SchemaError(path, "matches more than one alternative"))
                if passing:
                    return
                if message:
                    errors.append(SchemaError(path, f"{message}; got {describe(value)}"))
                    return
                typed = [
                    (b, e)
                    for b, e in results
                    if b.types is None or kind in b.types or (kind == "integer" and "number" in b.types)
                ]
                if len(typed) == 1:
                    errors.extend(typed[0][1])
                    return
                words = sorted({_TYPE_WORDS[t] for b, _ in results for t in (b.types or ())})
                errors.append(
                    SchemaError(
                        path, f"expected {' or '.join(words) or 'another value'}, got {describe(value)}"
                    )
                )

            node.checks.append(check)
        if "not" in schema:
            negated = self.compile(schema["not"])

            def check_not(value: Any, path: JsonPath, errors: list[SchemaError]) -> None:
                sub: list[SchemaError] = []
                negated.validate(value, path, sub)
                if not sub:
                    errors.append(SchemaError(path, message or f"{describe(value)} is not allowed"))

            node.checks.append(check_not)


# Validations before the schema is also compiled to Python (``schema_codegen``): compiling
# takes a few milliseconds, which a one-file ``validate`` would feel and a big load wins back.
_INTERPRETED_CALLS = 32


class Schema:
    """A compiled schema document."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document = document
        self._root = Compiler(document).compile(document)
        _mark_deep(self._root, set())
        self._calls = 0
        self._accepts: Callable[[Any], bool] | None = None
        self._fills = 0
        self._fill: Callable[[Any], Any] | None = None

    def validate(self, value: Any) -> list[SchemaError]:
        """Every error in ``value`` (none: valid). A valid value is recognised by the
        generated predicate once this schema has been used a few times; the interpreter
        then runs only for values with errors, to collect and place them."""
        accepts = self._accepts
        if accepts is None:
            self._calls += 1
            if self._calls > _INTERPRETED_CALLS:
                accepts = self._accepts = compile_predicate(self.document)
        if accepts is not None and accepts(value):
            return []
        errors: list[SchemaError] = []
        self._root.validate(value, (), errors)
        return errors

    def fill_defaults(self, value: Any) -> Any:
        """``value`` (changed in place) with the schema's defaults filled in (by generated
        code once the schema is in steady use, like ``validate``)."""
        if self._fill is None:
            self._fills += 1
            if self._fills <= _INTERPRETED_CALLS:
                return self._root.fill(value)
            self._fill = compile_filler(self._root)
        return self._fill(value)


SCHEMA_NAMES = ("job", "status", "config")
_cache: dict[str, Schema] = {}


def schema_text(name: str) -> str:
    """The JSON text of ``schemas/<name>.schema.json`` (from the wheel, or the source tree)."""
    filename = f"{name}.schema.json"
    package = Path(__file__).resolve().parents[2]  # the tfdeclare package
    packaged = package / "_schemas" / filename  # installed wheel
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (package.parent / "schemas" / filename).read_text(encoding="utf-8")  # source tree


def load_schema(name: str) -> Schema:
    if name not in _cache:
        _cache[name] = Schema(json.loads(schema_text(name)))
    return _cache[name]
