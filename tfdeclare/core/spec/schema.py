"""Our documents against the JSON Schemas of ``schemas/``: errors in our words, and defaults.

The schemas are the single source of truth for the formats. jsonschema-rs (a compiled Draft
2020-12 validator) decides whether a value is valid and finds every error with its instance
path; this module only words those errors (``_WORDING``: one rule per error kind, with the
schemas' ``x-message``s and "did you mean" hints for unknown fields) and fills in the
schemas' ``default``s (``Defaults``). The ``jsonschema`` package is the oracle in the tests.

jsonschema-rs is imported when a schema is first compiled, so that commands which validate
nothing never pay for it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfdeclare.core.diagnostics import REPORTED, JsonPath, hides_value

if TYPE_CHECKING:
    from jsonschema_rs import ValidationError


@dataclass(frozen=True, slots=True)
class SchemaError:
    path: JsonPath
    message: str
    at_key: bool = False  # place the error on the mapping key, not its value


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


def _type_word(value: Any) -> str:
    """A value as its kind alone, for places whose values are never quoted (``hides_value``)."""
    return _TYPE_WORDS.get(_json_type(value), "a value")


def _json_type(value: Any) -> str:
    """The JSON type of a value, ``2.0`` being an integer as JSON Schema counts."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    return {dict: "object", list: "array", str: "string", int: "integer"}.get(type(value), "unknown")


class Schema:
    """One schema document, compiled once: ``validate`` and ``fill_defaults``."""

    def __init__(self, document: dict[str, Any]) -> None:
        import jsonschema_rs

        self.document = document
        self._validator = jsonschema_rs.Draft202012Validator(document)
        self._defaults = Defaults.of(document)

    def validate(self, value: Any) -> list[SchemaError]:
        """Every error in ``value`` (none: valid). Values refused while loading (``REPORTED``,
        already reported) are not judged again."""
        try:
            if self._validator.is_valid(value):
                return []
        except ValueError:  # not JSON: a refused value stands somewhere in it
            pass
        refused: list[JsonPath] = []
        value = _without_refused(value, (), refused)
        errors = _render_all(self._validator.iter_errors(value), self.document)
        return [e for e in errors if not any(e.path[: len(r)] == r for r in refused)]

    def fill_defaults(self, value: Any) -> Any:
        """``value`` (changed in place) with the schema's defaults filled in."""
        return self._defaults.fill(value)


def _without_refused(value: Any, path: JsonPath, refused: list[JsonPath]) -> Any:
    """A copy of ``value`` with null for each refused value, whose paths go to ``refused``."""
    if value is REPORTED:
        refused.append(path)
        return None
    if isinstance(value, dict):
        return {k: _without_refused(v, (*path, k), refused) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_refused(v, (*path, i), refused) for i, v in enumerate(value)]
    return value


# -- wording ---------------------------------------------------------------------------------

_BOUNDS = {
    "minimum": "must be at least",
    "maximum": "must be at most",
    "exclusiveMinimum": "must be more than",
    "exclusiveMaximum": "must be less than",
}

# A string failing several of its length and pattern keywords is told only the first of them.
_STRING_KEYWORDS = ("minLength", "maxLength", "pattern")


def _render_all(errors: Iterable[ValidationError], document: Mapping[str, Any]) -> list[SchemaError]:
    errors = list(errors)
    first_string_error: dict[tuple[Any, ...], int] = {}
    for error in errors:
        keyword = error.schema_path[-1] if error.schema_path else None
        if keyword in _STRING_KEYWORDS:
            place = (*error.instance_path, None, *error.schema_path[:-1])
            rank = _STRING_KEYWORDS.index(str(keyword))
            first_string_error[place] = min(rank, first_string_error.get(place, rank))
    out: list[SchemaError] = []
    for error in errors:
        keyword = error.schema_path[-1] if error.schema_path else None
        if keyword in _STRING_KEYWORDS:
            place = (*error.instance_path, None, *error.schema_path[:-1])
            if _STRING_KEYWORDS.index(str(keyword)) > first_string_error[place]:
                continue
        out.extend(_render(error, document))
    return out


def _node(document: Mapping[str, Any], schema_path: list[str | int]) -> Any:
    """The schema object holding the keyword at ``schema_path``."""
    node: Any = document
    for part in schema_path[:-1]:
        node = node[part]
    return node


@dataclass(frozen=True, slots=True)
class _Failure:
    """One error of jsonschema-rs as the wording rules below read it: ``node`` is the schema
    object whose keyword failed, ``kind`` the error's kind with its own fields (``limit``,
    ``property``, ...)."""

    error: ValidationError
    document: Mapping[str, Any]
    node: Mapping[str, Any]
    path: JsonPath

    @property
    def kind(self) -> Any:
        return self.error.kind

    @property
    def value(self) -> Any:
        return self.error.instance

    @property
    def message(self) -> str | None:
        """The schema's own words for this keyword (``x-message``), if it has them."""
        said = self.node.get("x-message")
        return str(said) if said else None

    def shown(self, what: Any) -> str:
        return _type_word(what) if hides_value(self.path) else describe(what)

    def said(self, text: str) -> list[SchemaError]:
        return [SchemaError(self.path, text)]


def _render(error: ValidationError, document: Mapping[str, Any]) -> list[SchemaError]:
    """``error`` in our words: the rule of ``_WORDING`` for its kind, else (a keyword our
    schemas do not use) the library's own words."""
    failure = _Failure(error, document, _node(document, error.schema_path), tuple(error.instance_path))
    rule = _WORDING.get(type(error.kind).__name__)
    return rule(failure) if rule is not None else failure.said(error.message)


def _wrong_type(f: _Failure) -> list[SchemaError]:
    types = _types(f.node, f.document) or ()
    return f.said(f"expected {' or '.join(_TYPE_WORDS[t] for t in types)}, got {f.shown(f.value)}")


def _unknown_fields(f: _Failure) -> list[SchemaError]:
    """Each unknown key, with the field meant ("did you mean"), or where it belongs (a key at
    the wrong level), or the fields allowed here."""
    known = sorted(f.node.get("properties", {}))
    found = []
    for key in f.kind.unexpected:
        hint = close_name(key, known)
        suffix = f" (did you mean {hint!r}?)" if hint else ""
        if not hint and (homes := _homes_of(key, f.path, f.document)):
            suffix = f" (a field of {' or '.join(homes)}: is it indented right?)"
        allowed = f"; allowed: {', '.join(known)}" if known and not hint else ""
        found.append(SchemaError((*f.path, key), f"unknown field {key!r}{suffix}{allowed}", True))
    return found


def _bad_name(f: _Failure) -> list[SchemaError]:
    inner = f.kind.error
    name = inner.instance
    return [
        SchemaError((*f.path, str(name)), f"name {name!r}: {e.message}", True)
        for e in _render_all([inner], f.document)
    ]


def _min_items(f: _Failure) -> list[SchemaError]:
    limit = f.kind.limit
    return f.said(f"must have at least {limit} {'item' if limit == 1 else 'items'}")


def _duplicates(f: _Failure) -> list[SchemaError]:
    seen: list[str] = []
    found = []
    for i, element in enumerate(f.value):
        encoded = json.dumps(element, sort_keys=True)
        if encoded in seen:
            found.append(SchemaError((*f.path, i), f"duplicate item {f.shown(element)}"))
        seen.append(encoded)
    return found


def _not_listed(f: _Failure) -> list[SchemaError]:
    listing = ", ".join(str(option) for option in f.node["enum"])
    return f.said(f"must be one of {listing}; got {f.shown(f.value)}")


def _no_match(f: _Failure) -> list[SchemaError]:
    return f.said(f"{f.message or f'must match the pattern {f.kind.pattern}'}; got {f.shown(f.value)}")


def _out_of_bounds(f: _Failure) -> list[SchemaError]:
    bound = str(f.error.schema_path[-1])
    return f.said(f"{_BOUNDS[bound]} {f.node[bound]}; got {f.shown(f.value)}")


def _no_alternative(f: _Failure) -> list[SchemaError]:
    """``anyOf``/``oneOf`` with no branch matching: the schema's words, or the errors of the
    one branch that admits a value of this type (they say what is wrong better than "not any
    of these"), or the types the branches admit."""
    if f.message:
        return f.said(f"{f.message}; got {f.shown(f.value)}")
    branches = f.node[str(f.error.schema_path[-1])]
    admitting = [i for i, branch in enumerate(branches) if _admits(branch, f.document, f.value)]
    if len(admitting) == 1:
        return _render_all(f.kind.context[admitting[0]], f.document)
    words = sorted({_TYPE_WORDS[t] for b in branches for t in _types(b, f.document) or ()})
    return f.said(f"expected {' or '.join(words) or 'another value'}, got {f.shown(f.value)}")


# The wording of each kind of error (jsonschema-rs's ValidationErrorKind, by its class name).
_WORDING: dict[str, Callable[[_Failure], list[SchemaError]]] = {
    "Type": _wrong_type,
    "Required": lambda f: f.said(f"missing required field {f.kind.property!r}"),
    "AdditionalProperties": _unknown_fields,
    "PropertyNames": _bad_name,
    "MinProperties": lambda f: f.said(f"must have at least {f.kind.limit} entries"),
    "MaxProperties": lambda f: f.said(f"must have at most {f.kind.limit} entries"),
    "MinItems": _min_items,
    "MaxItems": lambda f: f.said(f"must have at most {f.kind.limit} items"),
    "UniqueItems": _duplicates,
    "Enum": _not_listed,
    "Constant": lambda f: f.said(f"must be {describe(f.node['const'])}; got {f.shown(f.value)}"),
    "MinLength": lambda f: f.said(f.message or f"must not be shorter than {f.kind.limit} characters"),
    "MaxLength": lambda f: f.said(f"must be at most {f.kind.limit} characters; got {len(f.value)}"),
    "Pattern": _no_match,
    "Minimum": _out_of_bounds,
    "Maximum": _out_of_bounds,
    "ExclusiveMinimum": _out_of_bounds,
    "ExclusiveMaximum": _out_of_bounds,
    "MultipleOf": lambda f: f.said(f"must be a multiple of {f.node['multipleOf']}; got {f.shown(f.value)}"),
    "OneOfMultipleValid": lambda f: f.said("matches more than one alternative"),
    "AnyOf": _no_alternative,
    "OneOfNotValid": _no_alternative,
    "Not": lambda f: f.said(f.message or f"{f.shown(f.value)} is not allowed"),
}


def close_name(key: str, known: Iterable[str]) -> str | None:
    """The name of ``known`` that ``key`` is a slip of, if one is close enough: the same but for
    case, or within one edit (two for names longer than five characters; a swap of neighbours
    counts as one), never replacing most of a short name, or alike in 80% of their letters. So
    ``comand`` is ``command`` and ``workdir`` is ``workingDir``, but ``worker`` is not."""
    import difflib  # here: only a mistyped key needs it, and `validate` starts faster without it

    lowered = key.lower()
    best: tuple[int, float, str] | None = None
    for name in known:
        other = name.lower()
        edits = _edits(lowered, other)
        ratio = difflib.SequenceMatcher(None, lowered, other).ratio()
        limit = 1 if max(len(lowered), len(other)) <= 5 else 2
        if (edits <= limit and edits < min(len(lowered), len(other))) or ratio >= 0.8:
            candidate = (edits, -ratio, name)
            best = candidate if best is None or candidate < best else best
    return best[2] if best else None


def _edits(a: str, b: str) -> int:
    """The optimal string alignment distance (Levenshtein, a swap of neighbours counting one)."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        row = [i]
        for j, y in enumerate(b, 1):
            cost = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (x != y))
            if i > 1 and j > 1 and x == b[j - 2] and a[i - 2] == y:
                cost = min(cost, previous2[j - 2] + 1)
            row.append(cost)
        previous2, previous = previous, row
    return previous[-1]


def _homes_of(key: str, path: JsonPath, document: Mapping[str, Any]) -> list[str]:
    """Where else in the document ``key`` is a field (``spec.replicas``), for a key put at the
    wrong level; the nearest first, at most two."""
    here = _dotted(tuple("*" if isinstance(p, int) else p for p in path))
    homes = [home for home in _field_homes(document).get(key, ()) if home != here]
    parents = [home.rpartition(".")[0] for home in homes]
    shown = list(  # spec.replicas.chief, spec.replicas.ps, ...: spec.replicas.*
        dict.fromkeys(
            f"{parent}.*" if parents.count(parent) > 1 and parent else home
            for home, parent in zip(homes, parents, strict=True)
        )
    )
    return [h or "the top level" for h in sorted(shown, key=lambda h: (h.count("."), h))[:2]]


# id(schema document) -> (the document, kept so that its id is not reused; name -> places)
_HOMES: dict[int, tuple[Mapping[str, Any], dict[str, tuple[str, ...]]]] = {}


def _field_homes(document: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Every property name of a schema with the places (dotted, ``*`` for any key or item) it
    is a property of; gathered once per schema document."""
    if id(document) not in _HOMES:
        found: dict[str, list[str]] = {}
        _gather_homes(document, document, (), (), found)
        homes = {name: tuple(dict.fromkeys(places)) for name, places in found.items()}
        _HOMES[id(document)] = (document, homes)
    return _HOMES[id(document)][1]


def _gather_homes(
    schema: Any,
    document: Mapping[str, Any],
    at: tuple[str, ...],
    refs: tuple[str, ...],
    found: dict[str, list[str]],
) -> None:
    if not isinstance(schema, dict) or len(at) > 8:
        return
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref not in refs:
            _gather_homes(_resolve(ref, document), document, at, (*refs, ref), found)
    for name, sub in schema.get("properties", {}).items():
        found.setdefault(name, []).append(_dotted(at))
        _gather_homes(sub, document, (*at, name), refs, found)
    for keyword in ("additionalProperties", "items"):
        _gather_homes(schema.get(keyword), document, (*at, "*"), refs, found)
    for keyword in ("anyOf", "oneOf", "allOf"):
        for branch in schema.get(keyword, ()):
            _gather_homes(branch, document, at, refs, found)
    for keyword in ("if", "then", "else"):
        _gather_homes(schema.get(keyword), document, at, refs, found)


def _dotted(at: tuple[str, ...]) -> str:
    return ".".join(at)


def _types(schema: Any, document: Mapping[str, Any]) -> tuple[str, ...] | None:
    if isinstance(schema, dict) and "$ref" in schema:
        schema = _resolve(schema["$ref"], document)
    if not isinstance(schema, dict) or "type" not in schema:
        return None
    return (schema["type"],) if isinstance(schema["type"], str) else tuple(schema["type"])


def _admits(schema: Any, document: Mapping[str, Any], value: Any) -> bool:
    types = _types(schema, document)
    kind = _json_type(value)
    return types is None or kind in types or (kind == "integer" and "number" in types)


def _resolve(ref: str, document: Mapping[str, Any]) -> Any:
    """A local reference (``#/$defs/Name``, all our schemas use)."""
    node: Any = document
    for part in ref.removeprefix("#/").split("/"):
        if part:
            node = node[part]
    return node


# -- defaults --------------------------------------------------------------------------------


class Defaults:
    """The ``default`` keywords of a schema, gathered once into a tree that mirrors the
    properties (and list items) under which a default lies; ``fill`` walks a value along it.
    A default is filled in where its key is missing, and defaults below it are filled in too.
    """

    __slots__ = ("defaults", "items", "properties")

    def __init__(self) -> None:
        self.properties: dict[str, Defaults] = {}
        self.defaults: dict[str, Any] = {}
        self.items: Defaults | None = None

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> Defaults:
        return _gather(document, document, {})

    def __bool__(self) -> bool:
        return bool(self.properties or self.defaults or self.items)

    def fill(self, value: Any) -> Any:
        """``value``, with the defaults below this point filled in (in place)."""
        if type(value) is dict:
            for key, child in self.properties.items():
                if key in value:
                    child.fill(value[key])
            for key, default in self.defaults.items():
                if key not in value:
                    below = self.properties.get(key)
                    value[key] = below.fill(_copy(default)) if below else _copy(default)
        elif type(value) is list and self.items is not None:
            for element in value:
                self.items.fill(element)
        return value


def _gather(schema: Any, document: Mapping[str, Any], refs: dict[str, Defaults]) -> Defaults:
    """The defaults at and below ``schema``; ``refs`` holds each ``$ref`` gathered (or being
    gathered: a schema may refer to itself)."""
    if isinstance(schema, dict) and "$ref" in schema:
        ref = schema["$ref"]
        if ref not in refs:
            refs[ref] = node = Defaults()
            gathered = _gather(_resolve(ref, document), document, refs)
            node.properties, node.defaults = gathered.properties, gathered.defaults
            node.items = gathered.items
        return refs[ref]
    node = Defaults()
    if not isinstance(schema, dict):
        return node
    for key, sub in schema.get("properties", {}).items():
        child = _gather(sub, document, refs)
        if child or _refers(sub):  # a reference being gathered is empty until it is done
            node.properties[key] = child
        if isinstance(sub, dict) and "default" in sub:
            node.defaults[key] = sub["default"]
    if "items" in schema:
        items = _gather(schema["items"], document, refs)
        node.items = items if items or _refers(schema["items"]) else None
    return node


def _refers(schema: Any) -> bool:
    return isinstance(schema, dict) and "$ref" in schema


def _copy(value: Any) -> Any:
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy(v) for v in value]
    return value


# -- the schemas -----------------------------------------------------------------------------

SCHEMA_NAMES = ("job", "status", "config")


def schema_text(name: str) -> str:
    """The JSON text of ``schemas/<name>.schema.json`` (from the wheel, or the source tree)."""
    filename = f"{name}.schema.json"
    package = Path(__file__).resolve().parents[2]  # the tfdeclare package
    packaged = package / "_schemas" / filename  # installed wheel
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (package.parent / "schemas" / filename).read_text(encoding="utf-8")  # source tree


@cache  # each schema is compiled once per process: they are constants of the program
def load_schema(name: str) -> Schema:
    return Schema(json.loads(schema_text(name)))
