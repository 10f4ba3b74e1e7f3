"""A schema compiled to Python source: a predicate that says whether a value is valid, and
the filling of its defaults.

``schema.Schema.validate`` interprets a tree of checks and collects every error with its JSON
path; that is the work a bad file needs. A good file only needs a yes, and most files are good:
this module turns the same schema document into straight-line Python (one function per
``$defs`` entry, everything else inlined), which answers "valid?" several times faster. The
schema stays the single source of truth: both read the same document, and the tests check
that ``accepts(v) == (validate(v) == [])`` on generated documents and against ``jsonschema``.

The predicate mirrors the interpreter keyword by keyword (same type rules: ``true`` is no
number, ``2.0`` is an integer; same order-free semantics). Keywords the schemas rarely use
(``uniqueItems``, ``multipleOf``) call small helpers instead of being inlined. The filler
(``compile_filler``) is generated from the interpreter's compiled tree, so both fill the same.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

_MISSING = object()


def json_equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def copy_json(value: Any) -> Any:
    """A deep copy of a JSON-like value (dicts and lists; scalars are shared)."""
    if type(value) is dict:
        return {k: copy_json(v) for k, v in value.items()}
    if type(value) is list:
        return [copy_json(v) for v in value]
    return value


def _unique(value: list[Any]) -> bool:
    encoded = [json.dumps(element, sort_keys=True) for element in value]
    return len(set(encoded)) == len(encoded)


def is_integer(value: Any) -> bool:
    """JSON Schema's integer: 2 and 2.0, not true."""
    return not isinstance(value, bool) and (
        isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    )


class _Generator:
    """Emits the source; names constants it cannot write as literals (patterns, defaults)."""

    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.lines: list[str] = []
        self.constants: dict[str, Any] = {"_MISSING": _MISSING, "_same": json_equal}
        self.constants.update(_unique=_unique, _whole=is_integer)
        self.defs: dict[str, str] = {}  # "#/$defs/X" -> function name
        self.pending: list[str] = []
        self.counter = 0

    def constant(self, value: Any) -> str:
        self.counter += 1
        name = f"_c{self.counter}"
        self.constants[name] = value
        return name

    def variable(self) -> str:
        self.counter += 1
        return f"v{self.counter}"

    def function_for(self, ref: str) -> str:
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"only local #/$defs references are supported: {ref}")
        if ref not in self.defs:
            self.defs[ref] = f"_def_{re.sub(r'[^0-9A-Za-z_]', '_', ref.removeprefix('#/$defs/'))}"
            self.pending.append(ref)
        return self.defs[ref]

    def source(self) -> str:
        body: list[str] = []
        self.lines = body
        body.append("def accepts(v0):")
        self.node(self.root, "v0", 1)
        body.append("    return True")
        while self.pending:
            ref = self.pending.pop()
            body.append(f"def {self.defs[ref]}(v0):")
            self.node(self.root["$defs"][ref.removeprefix("#/$defs/")], "v0", 1)
            body.append("    return True")
        return "\n".join(body) + "\n"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def predicate(self, schema: Any, var: str) -> str:
        """An expression true when ``var`` satisfies ``schema`` (for anyOf / oneOf / not)."""
        if schema is True or schema == {}:
            return "True"
        if isinstance(schema, dict) and "$ref" in schema:
            return f"{self.function_for(schema['$ref'])}({var})"
        name = f"_branch{self.counter + 1}"
        self.counter += 1
        outer = self.lines
        self.lines = []
        self.emit(0, f"def {name}(v0):")
        self.node(schema, "v0", 1)
        self.emit(1, "return True")
        outer[0:0] = self.lines  # defined before the functions that use it
        self.lines = outer
        return f"{name}({var})"

    def node(self, schema: Any, var: str, depth: int) -> None:
        """Statements that ``return False`` when ``var`` breaks ``schema``."""
        if schema is True or schema == {}:
            return
        if schema is False:
            self.emit(depth, "return False")
            return
        if "$ref" in schema:
            self.emit(depth, f"if not {self.function_for(schema['$ref'])}({var}): return False")
            return
        exact = self.type_check(schema, var, depth)
        self.object_checks(schema, var, depth, exact)
        self.array_checks(schema, var, depth, exact)
        self.scalar_checks(schema, var, depth, exact)
        for branch in schema.get("allOf", ()):
            self.node(branch, var, depth)
        if "anyOf" in schema:
            tests = " or ".join(self.predicate(b, var) for b in schema["anyOf"])
            self.emit(depth, f"if not ({tests}): return False")
        if "oneOf" in schema:
            tests = ", ".join(self.predicate(b, var) for b in schema["oneOf"])
            self.emit(depth, f"if ({tests},).count(True) != 1: return False")
        if "not" in schema:
            self.emit(depth, f"if {self.predicate(schema['not'], var)}: return False")

    def guard_for(self, exact: str | None, python_type: str, var: str, depth: int) -> int:
        """Opens ``if isinstance(var, T):`` unless the type check made ``var``'s type
        certain (``exact``); returns the depth of the statements that follow."""
        if exact == python_type:
            return depth
        self.emit(depth, f"if isinstance({var}, {python_type}):")
        self.emit(depth + 1, "pass")
        return depth + 1

    def type_check(self, schema: Mapping[str, Any], var: str, depth: int) -> str | None:
        """Emits the ``type`` check; returns the one Python type it leaves possible, if so."""
        if "type" not in schema:
            return None
        types = (schema["type"],) if isinstance(schema["type"], str) else tuple(schema["type"])
        exact = {_EXACT[t] for t in types if t in _EXACT}
        if "number" in types:
            exact |= {"int", "float"}
        kinds = sorted(exact)
        if len(kinds) == 1:
            test = f"type({var}) is {kinds[0]}"
        else:
            test = f"type({var}) in ({', '.join(kinds)})" if kinds else "False"
        if "integer" in types and "float" not in exact:
            test = f"({test} or (type({var}) is float and {var}.is_integer()))"
            kinds = []
        self.emit(depth, f"if not {test}: return False")
        return kinds[0] if len(kinds) == 1 else None

    def object_checks(self, schema: Mapping[str, Any], var: str, depth: int, exact: str | None) -> None:
        properties: dict[str, Any] = dict(schema.get("properties", {}))
        for branch in schema.get("allOf", ()):  # known keys here too, as in the interpreter
            if isinstance(branch, dict):
                for key, sub in branch.get("properties", {}).items():
                    properties.setdefault(key, sub)
        patterns = schema.get("patternProperties", {})
        required = schema.get("required", ())
        additional = schema.get("additionalProperties", True)
        names = schema.get("propertyNames")
        low, high = schema.get("minProperties"), schema.get("maxProperties")
        if not (properties or required or additional is not True or patterns or names or low or high):
            return
        inner = self.guard_for(exact, "dict", var, depth)
        for key in required:
            self.emit(inner, f"if {key!r} not in {var}: return False")
        if low is not None:
            self.emit(inner, f"if len({var}) < {int(low)}: return False")
        if high is not None:
            self.emit(inner, f"if len({var}) > {int(high)}: return False")
        for key, sub in properties.items():
            child = self.variable()
            self.emit(inner, f"{child} = {var}.get({key!r}, _MISSING)")
            self.emit(inner, f"if {child} is not _MISSING:")
            self.emit(inner + 1, "pass")
            self.node(sub, child, inner + 1)
        if additional is True and not patterns and names is None:
            return
        known = self.constant(frozenset(properties))
        if additional is False and not patterns and names is None:
            self.emit(inner, f"if not {var}.keys() <= {known}: return False")
            return
        key, item = self.variable(), self.variable()
        self.emit(inner, f"for {key}, {item} in {var}.items():")
        self.emit(inner + 1, f"if {key} in {known}: continue")
        if names is not None:
            self.node(names, key, inner + 1)
        if patterns:
            matched = self.variable()
            self.emit(inner + 1, f"{matched} = False")
            for pattern, sub in patterns.items():
                compiled = self.constant(re.compile(pattern))
                self.emit(inner + 1, f"if {compiled}.search({key}):")
                self.emit(inner + 2, f"{matched} = True")
                self.node(sub, item, inner + 2)
            self.emit(inner + 1, f"if {matched}: continue")
        if additional is False:
            self.emit(inner + 1, "return False")
        elif isinstance(additional, dict):
            self.node(additional, item, inner + 1)

    def array_checks(self, schema: Mapping[str, Any], var: str, depth: int, exact: str | None) -> None:
        items = schema.get("items")
        low, high = schema.get("minItems"), schema.get("maxItems")
        unique = schema.get("uniqueItems", False)
        if items is None and low is None and high is None and not unique:
            return
        inner = self.guard_for(exact, "list", var, depth)
        if low is not None:
            self.emit(inner, f"if len({var}) < {int(low)}: return False")
        if high is not None:
            self.emit(inner, f"if len({var}) > {int(high)}: return False")
        if unique:
            self.emit(inner, f"if not _unique({var}): return False")
        if items is not None and items is not True and items != {}:
            element = self.variable()
            self.emit(inner, f"for {element} in {var}:")
            self.emit(inner + 1, "pass")
            self.node(items, element, inner + 1)

    def scalar_checks(self, schema: Mapping[str, Any], var: str, depth: int, exact: str | None) -> None:
        if "enum" in schema:
            if all(isinstance(o, str) for o in schema["enum"]):  # the common case: a set lookup
                words = self.constant(frozenset(schema["enum"]))
                self.emit(depth, f"if not (isinstance({var}, str) and {var} in {words}): return False")
            else:
                options = self.constant(tuple(schema["enum"]))
                self.emit(depth, f"if not any(_same({var}, o) for o in {options}): return False")
        if "const" in schema and isinstance(schema["const"], str):
            self.emit(depth, f"if {var} != {schema['const']!r}: return False")
        elif "const" in schema:
            const = self.constant(schema["const"])
            self.emit(depth, f"if not _same({var}, {const}): return False")
        low, high, pattern = schema.get("minLength"), schema.get("maxLength"), schema.get("pattern")
        if low is not None or high is not None or pattern is not None:
            inner = self.guard_for(exact, "str", var, depth)
            if low is not None:
                self.emit(inner, f"if len({var}) < {int(low)}: return False")
            if high is not None:
                self.emit(inner, f"if len({var}) > {int(high)}: return False")
            if pattern is not None:
                compiled = self.constant(re.compile(pattern))
                self.emit(inner, f"if not {compiled}.search({var}): return False")
        bounds = [(k, schema[k]) for k in _BOUNDS if k in schema]
        multiple = schema.get("multipleOf")
        if bounds or multiple is not None:
            self.emit(depth, f"if type({var}) is not bool and isinstance({var}, (int, float)):")
            self.emit(depth + 1, "pass")
            for keyword, limit in bounds:
                self.emit(depth + 1, f"if not ({var} {_BOUNDS[keyword]} {limit!r}): return False")
            if multiple is not None:
                self.emit(depth + 1, f"if not _whole({var} / {multiple!r}): return False")


_EXACT = {"object": "dict", "array": "list", "string": "str", "integer": "int", "null": "type(None)"}
_EXACT["boolean"] = "bool"
_BOUNDS = {"minimum": ">=", "maximum": "<=", "exclusiveMinimum": ">", "exclusiveMaximum": "<"}


def compile_predicate(document: Mapping[str, Any]) -> Callable[[Any], bool]:
    """``accepts(value)``: whether ``value`` is valid against ``document`` (no error detail)."""
    generator = _Generator(document)
    source = generator.source()
    namespace: dict[str, Any] = dict(generator.constants)
    exec(compile(source, f"<schema {document.get('$id', '')}>", "exec"), namespace)  # noqa: S102
    accepts: Callable[[Any], bool] = namespace["accepts"]
    return accepts


def predicate_source(document: Mapping[str, Any]) -> str:
    """The generated source, for reading and debugging."""
    return _Generator(document).source()


def compile_filler(root: Any) -> Callable[[Any], Any]:
    """``fill(value)``: the generated twin of ``schema._Node.fill`` for the compiled tree
    ``root``: every ``default`` below it filled in place (defaults that are themselves filled
    are worked out once, here); returns ``value``."""
    names: dict[int, str] = {id(root): "_fill0"}
    constants: dict[str, Any] = {"_MISSING": _MISSING, "_copy": copy_json}
    lines: list[str] = []
    pending = [root]

    def name_of(node: Any) -> str:
        if id(node) not in names:
            names[id(node)] = f"_fill{len(names)}"
            pending.append(node)
        return names[id(node)]

    while pending:
        node = pending.pop()
        body = [f"def {names[id(node)]}(v):"]
        deep_properties = [(k, sub) for k, sub in node.properties.items() if sub.deep]
        deep_patterns = node.patterns if any(sub.deep for _, sub in node.patterns) else []
        if deep_properties or deep_patterns or node.defaults:
            body.append("    if type(v) is dict:")
            for key, sub in deep_properties:
                body.append(f"        x = v.get({key!r}, _MISSING)")
                body.append(f"        if x is not _MISSING: {name_of(sub)}(x)")
            if deep_patterns:
                known = f"_k{len(constants)}"
                constants[known] = frozenset(node.properties)
                body.append("        for k, x in v.items():")
                body.append(f"            if k in {known}: continue")
                for i, (pattern, sub) in enumerate(deep_patterns):
                    compiled = f"_p{len(constants)}"
                    constants[compiled] = pattern
                    keyword = "if" if i == 0 else "elif"
                    action = f"{name_of(sub)}(x)" if sub.deep else "pass"  # the first match wins
                    body.append(f"            {keyword} {compiled}.search(k): {action}")
            for key, default in node.defaults.items():
                filled = f"_d{len(constants)}"
                constants[filled] = node.properties[key].fill(copy_json(default))
                fresh = f"_copy({filled})" if isinstance(constants[filled], dict | list) else filled
                body.append(f"        if {key!r} not in v: v[{key!r}] = {fresh}")
        if node.item is not None and node.item.deep:
            body.append("    if type(v) is list:")
            body.append(f"        for x in v: {name_of(node.item)}(x)")
        body.append("    return v")
        lines.extend(body)
    namespace = dict(constants)
    exec(compile("\n".join(lines) + "\n", "<schema defaults>", "exec"), namespace)  # noqa: S102
    fill: Callable[[Any], Any] = namespace[names[id(root)]]
    return fill
