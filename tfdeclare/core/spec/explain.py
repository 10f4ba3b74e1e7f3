"""``tfdeclare explain FIELD.PATH``: one field of a JSON Schema of ``schemas/``, as
``kubectl explain`` shows a resource's field: its type, description, default, allowed values,
pattern and bounds, and the fields under it (``--recursive``: the whole subtree).

Pure: a schema document (a mapping) in, a ``Field`` and its text or JSON out. A path is dotted
(``spec.replicas.worker.count``) or a JSON path as diagnostics print it
(``$.spec.volumes[0].hostPath``, ``$.metadata.labels['a.b']``). It walks ``properties``, follows
``$ref`` (the referring node's own keywords, such as its description or default, win over the
definition's), the branches of ``anyOf``/``oneOf``/``allOf``/``then``, lists (their items, an
index or none: ``spec.volumes.hostPath``) and maps (``additionalProperties``: any key, e.g.
``metadata.labels.team`` is one of the labels' string values). A step that finds no field is a
``NoField`` with the fields there are at the last good level and "did you mean".
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tfdeclare.core.spec.schema import close_name

_WIDTH = 80
_MAX_DEPTH = 12  # a schema whose $refs loop is shown this deep at most
ANY_KEY = "<KEY>"  # the name a map's values are listed under (a path may name them so too)
_BOUNDS = (
    ("minimum", "minimum"),
    ("exclusiveMinimum", "more than"),
    ("maximum", "maximum"),
    ("exclusiveMaximum", "less than"),
    ("minLength", "min length"),
    ("maxLength", "max length"),
    ("minItems", "min items"),
    ("maxItems", "max items"),
    ("minProperties", "min fields"),
    ("maxProperties", "max fields"),
)


class NoField(Exception):
    """A path that names no field: ``at`` is the last good level (dotted, "" for the top),
    ``fields`` what is there, ``suggestion`` the one meant, if close (the whole path meant,
    when it names a field)."""

    def __init__(self, message: str, at: str, fields: Sequence[str], suggestion: str | None) -> None:
        super().__init__(message)
        self.at = at
        self.fields = tuple(fields)
        self.suggestion = suggestion


@dataclass(frozen=True, slots=True)
class Field:
    """One field: its path, its schema with the ``$ref``s followed, whether its parent
    requires it."""

    path: tuple[str, ...]
    schema: Mapping[str, Any]
    required: bool = False

    @property
    def dotted(self) -> str:
        return ".".join(self.path)

    @property
    def name(self) -> str:
        return self.path[-1] if self.path else ""


def parse_path(text: str) -> tuple[str, ...]:
    """``spec.replicas.worker`` or ``$.spec.volumes[0]['host.path']`` -> its parts (an index
    stays a part: ``"0"``)."""
    rest = text.strip().removeprefix("$")
    parts: list[str] = []
    for match in re.finditer(r"""\[(\d+|\*)\]|\[(['"])((?:\\.|(?!\2).)*)\2\]|\.?([^.\[\]]+)|(\.)""", rest):
        index, _, quoted, bare, dot = match.groups()
        if dot is not None:
            continue
        if quoted is not None:
            parts.append(re.sub(r"\\(.)", r"\1", quoted))
        else:
            parts.append(index if index is not None else bare)
    return tuple(parts)


def resolved(schema: Any, document: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``$ref`` followed (again, while the target has one): the target's
    keywords under the referring node's own."""
    if not isinstance(schema, Mapping):
        return {}
    seen: set[str] = set()
    merged = dict(schema)
    while isinstance(merged.get("$ref"), str) and merged["$ref"] not in seen:
        ref = merged.pop("$ref")
        seen.add(ref)
        target = _target(ref, document)
        merged = {**target, **merged} if isinstance(target, Mapping) else merged
    merged.pop("$ref", None)
    return merged


def _target(ref: str, document: Mapping[str, Any]) -> Any:
    node: Any = document
    for part in ref.removeprefix("#").strip("/").split("/"):
        if part:
            node = node.get(part.replace("~1", "/").replace("~0", "~")) if isinstance(node, Mapping) else None
    return node


def _branches(schema: Mapping[str, Any], document: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """``schema`` and, resolved, the schemas that add to it (``allOf``, ``anyOf``, ``oneOf``,
    ``then``), depth first."""
    yield dict(schema)
    for keyword in ("allOf", "anyOf", "oneOf"):
        for branch in schema.get(keyword, ()):
            yield from _branches(resolved(branch, document), document)
    if "then" in schema:
        yield from _branches(resolved(schema["then"], document), document)


def _items(schema: Mapping[str, Any], document: Mapping[str, Any]) -> dict[str, Any] | None:
    """A list's item schema (``None``: not a list)."""
    for branch in _branches(schema, document):
        if isinstance(branch.get("items"), Mapping):
            return resolved(branch["items"], document)
    return None


def _values(schema: Mapping[str, Any], document: Mapping[str, Any]) -> dict[str, Any] | None:
    """A map's value schema (``additionalProperties``; ``None``: not a map)."""
    for branch in _branches(schema, document):
        if isinstance(branch.get("additionalProperties"), Mapping):
            return resolved(branch["additionalProperties"], document)
    return None


def _properties(schema: Mapping[str, Any], document: Mapping[str, Any]) -> dict[str, tuple[Any, bool]]:
    """The named fields of ``schema`` (its branches' too): name -> (schema, required)."""
    found: dict[str, tuple[Any, bool]] = {}
    for branch in _branches(schema, document):
        required = set(branch.get("required", ()))
        for name, sub in (branch.get("properties") or {}).items():
            if name not in found:
                found[name] = (sub, name in required)
    return found


def children(field: Field, document: Mapping[str, Any]) -> list[Field]:
    """The fields under ``field``: its properties in the schema's order, a list's items'
    (a list is looked through), or a map's values (as ``<KEY>``)."""
    schema = field.schema
    items = _items(schema, document)
    if items is not None and not _properties(schema, document):
        return children(Field(field.path, items), document)
    found = [
        Field((*field.path, name), resolved(sub, document), required)
        for name, (sub, required) in _properties(schema, document).items()
    ]
    values = _values(schema, document)
    if values is not None:
        found.append(Field((*field.path, ANY_KEY), _value_of(field, values)))
    return found


def field_at(document: Mapping[str, Any], path: Sequence[str]) -> Field:
    """The field ``path`` names; ``NoField`` when it names none."""
    field = Field((), resolved(document, document), True)
    for at, part in enumerate(path):
        try:
            field = _step(field, part, document)
        except NoField as err:
            if err.suggestion is None:
                raise
            meant = (*path[:at], err.suggestion, *path[at + 1 :])
            try:
                field_at(document, meant)
            except NoField:
                raise err from None
            meant_text = ".".join(meant)
            message = str(err).replace(f"did you mean {err.suggestion!r}?", f"did you mean {meant_text}?")
            raise NoField(message, err.at, err.fields, meant_text) from None
    return field


def _step(field: Field, part: str, document: Mapping[str, Any]) -> Field:
    schema = field.schema
    properties = _properties(schema, document)
    if part in properties:
        sub, required = properties[part]
        return Field((*field.path, part), resolved(sub, document), required)
    items = _items(schema, document)
    if items is not None and not properties:
        through = Field(field.path, items)
        return through if part.isdigit() or part in ("*", "[]") else _step(through, part, document)
    values = _values(schema, document)
    if values is not None:
        _check_key(field, part)
        return Field((*field.path, part), _value_of(field, values))
    names = list(properties)
    where = field.dotted or "the top level"
    suggestion = close_name(part, names) if names else None
    if not names:
        message = f"{where} is {_article(type_name(schema, document))}: it has no fields"
    else:
        hint = f"; did you mean {suggestion!r}?" if suggestion else ""
        message = f"{where} has no field {part!r}{hint} (its fields: {', '.join(names)})"
    raise NoField(message, field.dotted, names, suggestion)


def _check_key(field: Field, key: str) -> None:
    """A key the map's ``propertyNames`` pattern refuses names no field (``spec.env.TF_CONFIG``)."""
    names = field.schema.get("propertyNames")
    pattern = names.get("pattern") if isinstance(names, Mapping) else None
    if key != ANY_KEY and isinstance(pattern, str) and re.search(pattern, key) is None:
        said = names.get("x-message") if isinstance(names, Mapping) else None
        rule = f"a key {said}" if said else f"its keys match {pattern}"
        raise NoField(f"{field.dotted} has no key {key!r}: {rule}", field.dotted, [ANY_KEY], None)


def _value_of(field: Field, values: dict[str, Any]) -> dict[str, Any]:
    """A map's value schema, said to be one (when it has no description of its own)."""
    if values.get("description"):
        return values
    return {**values, "description": f"A value of `{field.dotted}`, under a key of your choosing."}


def _article(kind: str) -> str:
    return ("an " if kind[:1] in "aeiou" else "a ") + kind


def type_name(schema: Mapping[str, Any], document: Mapping[str, Any]) -> str:
    """How ``kubectl explain`` would name the type: ``integer``, ``string``, ``object``,
    ``[]string``, ``map[string]string``, ``integer | string``."""
    if "const" in schema:
        return _json_type(schema["const"])
    if "enum" in schema:
        return " | ".join(dict.fromkeys(_json_type(v) for v in schema["enum"]))
    declared = schema.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or ())
    if not types:
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                names = [type_name(resolved(b, document), document) for b in schema[keyword]]
                return " | ".join(dict.fromkeys(names))
        if "properties" in schema or "additionalProperties" in schema:
            types = ["object"]
    if not types:
        return "any"
    return " | ".join(_one_type(t, schema, document) for t in types)


def _one_type(kind: str, schema: Mapping[str, Any], document: Mapping[str, Any]) -> str:
    if kind == "array":
        items = _items(schema, document)
        return "[]" + (type_name(items, document) if items is not None else "any")
    if kind == "object" and not _properties(schema, document):
        values = schema.get("additionalProperties")
        if isinstance(values, Mapping):
            value = type_name(resolved(values, document), document)
            return f"map[string]({value})" if " | " in value else f"map[string]{value}"
    return kind


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object" if isinstance(value, dict) else "any"


def facts(schema: Mapping[str, Any], document: Mapping[str, Any]) -> dict[str, Any]:
    """What bounds a field's value, as ``-o json`` gives them: ``default``, ``allowed`` (an
    enum's or const's values), ``pattern``, ``keys`` (the pattern of a map's keys), the
    bounds by their JSON Schema names, ``examples``; and for a value of several forms
    (``anyOf``/``oneOf``), ``forms``: each form's type and facts."""
    found: dict[str, Any] = {}
    if "default" in schema:
        found["default"] = schema["default"]
    if "const" in schema:
        found["allowed"] = [schema["const"]]
    elif "enum" in schema:
        found["allowed"] = list(schema["enum"])
    if "pattern" in schema:
        found["pattern"] = schema["pattern"]
    names = schema.get("propertyNames")
    if isinstance(names, Mapping) and "pattern" in names:
        found["keys"] = names["pattern"]
    for keyword, _ in _BOUNDS:
        if keyword in schema:
            found[keyword] = schema[keyword]
    forms = [resolved(b, document) for k in ("anyOf", "oneOf") for b in schema.get(k, ())]
    if forms and "type" not in schema:
        found["forms"] = [{"type": type_name(f, document), **facts(f, document)} for f in forms]
    if schema.get("examples"):
        found["examples"] = list(schema["examples"])
    return found


# -- output ------------------------------------------------------------------------------------


def explain_json(
    field: Field, document: Mapping[str, Any], *, recursive: bool = False, depth: int = 0
) -> dict[str, Any]:
    """``explain -o json``: the field, its facts and its fields (with ``recursive``, theirs)."""
    out: dict[str, Any] = {
        "field": field.dotted,
        "type": type_name(field.schema, document),
        "required": field.required,
        "description": field.schema.get("description", ""),
        **facts(field.schema, document),
    }
    subs = children(field, document) if depth < _MAX_DEPTH else []
    out["fields"] = [
        explain_json(sub, document, recursive=True, depth=depth + 1)
        if recursive
        else {
            "name": sub.name,
            "type": type_name(sub.schema, document),
            "required": sub.required,
            "description": sub.schema.get("description", ""),
        }
        for sub in subs
    ]
    return out


def explain_text(field: Field, document: Mapping[str, Any], *, recursive: bool = False) -> str:
    """``explain``'s text, laid out as ``kubectl explain``'s."""
    title = str(document.get("title", ""))
    version = _const(document, "apiVersion")
    lines = [f"KIND:     {title}"] if title else []
    if version:
        lines.append(f"VERSION:  {version}")
    if field.path:
        lines += ["", f"FIELD:    {field.dotted} <{type_name(field.schema, document)}>"]
        if field.required:
            lines[-1] += " -required-"
    description = field.schema.get("description")
    lines += ["", "DESCRIPTION:", *_wrapped(str(description) if description else "(none)", 4)]
    shown = _facts_lines(facts(field.schema, document))
    if shown:
        lines += ["", *shown]
    subs = children(field, document)
    if subs:
        lines += ["", "FIELDS:"]
        for sub in subs:
            if recursive:
                lines += _tree(sub, document, 1)
            else:
                lines.append(_field_line(sub, document, 1))
                said = sub.schema.get("description")
                lines += [*_wrapped(str(said), 4), ""] if said else [""]
        if lines[-1] == "":
            lines.pop()
    return "\n".join(lines) + "\n"


def _const(document: Mapping[str, Any], name: str) -> str:
    node = (document.get("properties") or {}).get(name)
    return str(node["const"]) if isinstance(node, Mapping) and "const" in node else ""


def _field_line(field: Field, document: Mapping[str, Any], level: int) -> str:
    line = f"{'  ' * level}{field.name}  <{type_name(field.schema, document)}>"
    if field.required:
        line += " -required-"
    if "default" in field.schema:
        line += f"  default {_shown(field.schema['default'])}"
    return line


def _tree(field: Field, document: Mapping[str, Any], level: int) -> list[str]:
    lines = [_field_line(field, document, level)]
    if level < _MAX_DEPTH:
        for sub in children(field, document):
            lines += _tree(sub, document, level + 1)
    return lines


def _facts_lines(found: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    if "default" in found:
        lines.append(f"DEFAULT:  {_shown(found['default'])}")
    if "allowed" in found:
        lines.append(f"ALLOWED:  {' | '.join(_shown(v) for v in found['allowed'])}")
    if "pattern" in found:
        lines.append(f"PATTERN:  {found['pattern']}")
    if "keys" in found:
        lines.append(f"KEYS:     {found['keys']}")
    bounds = [f"{word} {_shown(found[keyword])}" for keyword, word in _BOUNDS if keyword in found]
    if bounds:
        lines.append(f"BOUNDS:   {', '.join(bounds)}")
    for form in found.get("forms", ()):
        said = [f"pattern {form['pattern']}"] if "pattern" in form else []
        said += [f"{word} {_shown(form[keyword])}" for keyword, word in _BOUNDS if keyword in form]
        if "allowed" in form:
            said.append(" | ".join(_shown(v) for v in form["allowed"]))
        lines.append(f"FORM:     <{form['type']}>" + (f" {', '.join(said)}" if said else ""))
    example = _shown(found["examples"][0]) if found.get("examples") else ""
    if example and len(example) <= _WIDTH:  # a whole job is an example too long to read here
        lines.append(f"EXAMPLE:  {example}")
    return lines


def _shown(value: Any) -> str:
    """A value as it would be written in a spec (compact JSON, which YAML reads too)."""
    if isinstance(value, str) and value and re.fullmatch(r"[A-Za-z0-9_./:-]+", value):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _wrapped(text: str, indent: int) -> list[str]:
    pad = " " * indent
    return textwrap.wrap(text, _WIDTH - indent, initial_indent=pad, subsequent_indent=pad) or [pad]


def completions(document: Mapping[str, Any], prefix: str) -> list[str]:
    """Field paths that complete ``prefix`` (shell completion of ``explain``): the fields
    below the last dot that start with what follows it; a field that alone matches comes with
    its own fields, so the shell stops after it (no space) and offers them next."""
    parent, dot, last = prefix.rpartition(".")
    try:
        at = field_at(document, parse_path(parent)) if dot else field_at(document, ())
    except NoField:
        return []
    base = parent + dot
    matches = [sub for sub in children(at, document) if sub.name != ANY_KEY and sub.name.startswith(last)]
    if len(matches) == 1:
        below = [sub.name for sub in children(matches[0], document) if sub.name != ANY_KEY]
        full = base + matches[0].name
        return [full, *(f"{full}.{name}" for name in below)] if below else [full]
    return [base + sub.name for sub in matches]
