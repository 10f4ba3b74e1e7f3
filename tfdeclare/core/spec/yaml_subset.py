"""The common subset of YAML, read straight into plain values: the fast path of ``documents``.

Job files are nearly always written in a small part of YAML: block mappings and sequences
(indentless ones too), one-line flow collections (``{cpus: 2, mem: 4Gi}``, ``[python, a.py]``),
one-line plain, single-quoted and escape-free double-quoted scalars, comments, and ``---``
between documents. This module reads exactly that, in about 0.6 of the time of composing
libyaml's node tree and walking it (docs/benchmarks.md), and answers ``None`` for everything else: any other
character or construct (tabs, CR, non-ASCII, anchors, aliases, tags, block scalars, multi-line
scalars or flow collections, directives, ``...``, empty documents), anything YAML would
reject, duplicate or non-string keys, non-finite numbers, and whatever is unusual enough that
this reader is not sure (a quoted flow scalar holding ``,``, a plain one holding ``:``).
``documents`` then takes the full path (libyaml), which alone decides what is wrong with a file
and where. So this module never reports a problem, and where it answers, its values must equal
the full path's: ``tests/test_yaml_subset.py`` checks that on generated and mutated texts.

Plain scalars are resolved by ``scalars.resolve_plain``, as on the full path. No node positions
are kept but the line and column of the scalar values in the first two levels of block
mappings (``metadata.name``, which the loader asks for of every job); ``Document.locate``
composes the full tree on demand for anything else.
"""

from __future__ import annotations

import json
import json.scanner
import math
import re
from typing import Any

from tfdeclare.core.spec.scalars import NOT_STRING_WORDS, resolve_plain

Positions = dict[tuple[str | int, ...], tuple[int, int]]  # JSON path -> (line, column)

MAX_DEPTH = 48  # below documents.MAX_DEPTH: deeper files take the full path and its bound
# libyaml refuses a key whose ":" is more than 1,024 characters past the key's start; a line
# no longer than that cannot hold one.
MAX_LINE = 1024

# Anything but printable ASCII and LF sends the file to the full path.
_OUTSIDE = re.compile(r"[^\x20-\x7e\n]")
# A block mapping key that is not a plain identifier (quoted without escapes, or holding
# . / -) and its ": " (or ":" at the end); the match ends where the value starts.
_KEY = re.compile(r"""(?:([A-Za-z0-9_][A-Za-z0-9_./-]*)|'((?:[^']|'')*)'|"([^"\\]*)") *:(?: +|\Z)""")
# A quoted scalar that is the rest of a line (maybe then a comment).
_SINGLE = re.compile(r"'((?:[^']|'')*)'(?: *| +#.*)\Z")
_DOUBLE = re.compile(r'"([^"\\]*)"(?: *| +#.*)\Z')
# A flow collection, split into scalar pieces (even places) and indicators (odd places).
_FLOW_SPLIT = re.compile(r"([\[\]{},]|: )").split
# First characters that make a scalar something other than a plain one.
_INDICATORS = frozenset("-?:,[]{}#&*!|>%@`'\"")
# The first characters of plain scalars that may not be strings (null, true, 1, .5, -1, ~).
_MAYBE_NOT_STRING = frozenset("nNtTfF0123456789+-.~")

# The first characters of scalars that are not plain strings, or might not be.
_SPECIAL = _INDICATORS | _MAYBE_NOT_STRING
# json's scanner (C): (value, end) of the JSON text at an index.
_JSON_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]

# What a flow collection expects next.
_VALUE, _KEY_NEXT, _COLON, _SEPARATOR, _DONE = range(5)


class _Unsure(Exception):
    """Not in the subset (or not valid YAML): the full path decides."""


def parse_subset(text: str) -> list[tuple[int, Any, Positions]] | None:
    """Each document of ``text`` as (1-based line where its root starts, value, positions);
    ``None`` when the text is not in the subset."""
    if _OUTSIDE.search(text) is not None:
        return None
    documents: list[list[tuple[int, str, int]]] = []
    lines: list[tuple[int, str, int]] = []
    explicit = False
    for number, raw in enumerate(text.split("\n"), 1):
        if len(raw) > MAX_LINE:
            return None
        content = raw.lstrip(" ")
        if not content:
            continue
        first = content[0]
        if first == "#":
            continue
        if (first == "-" or first == ".") and raw[:3] in ("---", "...") and (len(raw) == 3 or raw[3] == " "):
            rest = raw[3:].lstrip(" ")
            if first == "." or (rest and rest[0] != "#"):
                return None
            if lines:
                documents.append(lines)
            elif explicit:
                return None  # an empty document
            lines, explicit = [], True
            continue
        lines.append((len(raw) - len(content), content, number))
    if lines:
        documents.append(lines)
    elif explicit:
        return None
    try:
        return [_Reader(lines).document() for lines in documents]
    except _Unsure:
        return None


class _Reader:
    """Recursive descent over the content lines of one document: (indent, content, number)."""

    def __init__(self, lines: list[tuple[int, str, int]]) -> None:
        self.lines = lines
        self.i = 0
        self.positions: Positions = {}

    def document(self) -> tuple[int, Any, Positions]:
        indent, content, number = self.lines[0]
        if _is_entry(content):
            value: Any = self.sequence(indent, 0)
        else:
            value = self.mapping(indent, 0, ())
        if self.i != len(self.lines):
            raise _Unsure  # a line outside the root's indentation
        return number, value, self.positions

    def mapping(self, indent: int, depth: int, prefix: tuple[str, ...] | None) -> dict[str, Any]:
        if depth > MAX_DEPTH:
            raise _Unsure
        lines = self.lines
        count = len(lines)
        mapping: dict[str, Any] = {}
        while self.i < count:
            at, content, number = lines[self.i]
            if at != indent:
                if at > indent:
                    raise _Unsure
                break
            colon = content.find(":")
            key = content[:colon]
            if (
                colon > 0
                and (colon + 1 == len(content) or content[colon + 1] == " ")
                and key.isidentifier()
                and key not in NOT_STRING_WORDS
            ):
                rest = content[colon + 1 :].lstrip(" ")
            else:
                key, rest = _key_of(content)
            if key in mapping:
                raise _Unsure  # duplicate key: the full path reports it
            self.i += 1
            if rest and rest[0] != "#":
                if prefix is not None and rest[0] != "[" and rest[0] != "{":
                    self.positions[(*prefix, key)] = (number, at + len(content) - len(rest) + 1)
                mapping[key] = self.inline(rest, depth + 1)
            else:
                child = (key,) if prefix == () else None
                mapping[key] = self.below(indent, depth + 1, child, indentless=True)
        return mapping

    def sequence(self, indent: int, depth: int) -> list[Any]:
        if depth > MAX_DEPTH:
            raise _Unsure
        lines = self.lines
        count = len(lines)
        items: list[Any] = []
        while self.i < count:
            at, content, number = lines[self.i]
            if at != indent:
                if at > indent:
                    raise _Unsure
                break
            if not _is_entry(content):
                break  # a key after an indentless sequence: its mapping goes on
            rest = content[2:]
            stripped = rest.lstrip(" ")
            if not stripped or stripped[0] == "#":
                self.i += 1
                items.append(self.below(indent, depth + 1, None, indentless=False))
            elif _is_entry(stripped) or _KEY.match(stripped) is not None:
                # ``- name: x`` / ``- - x``: the item's node starts at its own column.
                column = indent + 2 + len(rest) - len(stripped)
                lines[self.i] = (column, stripped, number)
                if _is_entry(stripped):
                    items.append(self.sequence(column, depth + 1))
                else:
                    items.append(self.mapping(column, depth + 1, None))
            else:
                self.i += 1
                items.append(self.inline(stripped, depth + 1))
        return items

    def below(self, indent: int, depth: int, prefix: tuple[str, ...] | None, *, indentless: bool) -> Any:
        """The value of a key or entry with nothing after it on its line."""
        if self.i < len(self.lines):
            at, content, _ = self.lines[self.i]
            if at > indent:
                if _is_entry(content):
                    return self.sequence(at, depth)
                return self.mapping(at, depth, prefix)
            if at == indent and indentless and _is_entry(content):
                return self.sequence(at, depth)
        return None

    def inline(self, text: str, depth: int) -> Any:
        """A value that is the rest of a line (from its first character)."""
        first = text[0]
        if first == "{" or first == "[":
            cut = text.find(" #")
            return self.flow(text[:cut] if cut >= 0 else text, depth)
        if first == "'":
            match = _SINGLE.match(text)
            if match is None:
                raise _Unsure
            return match.group(1).replace("''", "'")
        if first == '"':
            match = _DOUBLE.match(text)
            if match is None:
                raise _Unsure
            return match.group(1)
        if first in _INDICATORS and (first != "-" or len(text) == 1 or text[1] == " "):
            raise _Unsure
        cut = text.find(" #")
        if cut >= 0:
            text = text[:cut]
        text = text.rstrip(" ")
        if ": " in text or text[-1] == ":":
            raise _Unsure
        if first in _MAYBE_NOT_STRING:
            return int(text) if text.isdigit() else _resolve(text)  # ASCII, at most MAX_LINE digits
        return text

    def flow(self, text: str, depth: int) -> Any:
        """A flow collection that is all of ``text`` (but trailing spaces)."""
        text = text.rstrip(" ")
        if (
            '"' in text
            or "\\" in text
            or "  " in text
            or " ," in text
            or " ]" in text
            or " }" in text
            or " :" in text
            or "[ " in text
            or "{ " in text
            or text.count(":") != text.count(": ")
            or text.count("[") + text.count("{") + depth > MAX_DEPTH  # may nest too deep
        ):
            return self.flow_pieces(text, depth)
        try:
            return _flow_json(text)
        except _Unsure:
            return self.flow_pieces(text, depth)

    def flow_pieces(self, text: str, depth: int) -> Any:
        """``flow`` for what the JSON route does not take: split at its indicators (``[ ] { }
        ,`` and ``": "``) into alternating scalar and indicator pieces."""
        pieces = _FLOW_SPLIT(text)
        root: Any = None
        stack: list[Any] = []
        top: Any = None
        key: Any = None
        expect = _VALUE
        for at in range(1, len(pieces), 2):
            indicator = pieces[at]
            if indicator == "[" or indicator == "{":
                if expect != _VALUE or (root is None and at != 1):
                    raise _Unsure
                child: Any = [] if indicator == "[" else {}
                if top is None:
                    root = child
                elif type(top) is list:
                    top.append(child)
                else:
                    top[key] = child
                stack.append(child)
                top = child
                expect = _VALUE if indicator == "[" else _KEY_NEXT
                if len(stack) + depth > MAX_DEPTH:
                    raise _Unsure
            elif indicator == ",":
                if expect != _SEPARATOR:
                    raise _Unsure
                expect = _VALUE if type(top) is list else _KEY_NEXT
            elif indicator == ": ":
                if expect != _COLON:
                    raise _Unsure
                expect = _VALUE
            else:  # "]" or "}": after an item, or at once
                closes_list = indicator == "]"
                if (type(top) is list) != closes_list or not (
                    expect == _SEPARATOR or (not top and expect == (_VALUE if closes_list else _KEY_NEXT))
                ):
                    raise _Unsure
                stack.pop()
                top = stack[-1] if stack else None
                expect = _SEPARATOR if stack else _DONE
            scalar = pieces[at + 1].strip(" ")
            if not scalar:
                continue
            if expect == _VALUE:
                value = _flow_scalar(scalar)
                if type(top) is list:
                    top.append(value)
                else:
                    top[key] = value
                expect = _SEPARATOR
            elif expect == _KEY_NEXT:
                key = _flow_scalar(scalar)
                if type(key) is not str or key in top:
                    raise _Unsure  # not a string (``{1: x}``), or a duplicate
                expect = _COLON
            else:
                raise _Unsure
        if expect != _DONE or pieces[0]:
            raise _Unsure
        return root


def _flow_json(text: str) -> Any:
    """``flow`` for the common case (plain and single-quoted scalars, spaced as usual): every
    scalar becomes a JSON string, json's C scanner builds the structure, and one walk resolves
    the plain scalars that may not be strings."""
    json_text = (
        text.replace(", ", ",")
        .replace(": ", ":")
        .replace("{", '{"')
        .replace("[", '["')
        .replace("}", '"}')
        .replace("]", '"]')
        .replace(",", '","')
        .replace(":", '":"')
        .replace('"{', "{")
        .replace('}"', "}")
        .replace('"[', "[")
        .replace(']"', "]")
    )
    if '""' in json_text:
        raise _Unsure  # an empty scalar or collection: the token route says which
    try:
        value, end = _JSON_SCAN(json_text, 0)
    except (ValueError, StopIteration):
        raise _Unsure from None
    if end != len(json_text) or _resolve_leaves(value) != text.count(": "):
        raise _Unsure  # more after the collection, or a duplicate key
    return value


def _resolve_leaves(node: Any) -> int:
    """Resolves, in place, the scalars of a collection ``_flow_json`` built; returns how many
    mapping entries it holds."""
    if type(node) is dict:
        entries = len(node)
        for key, value in node.items():
            if key[0] in _SPECIAL and _flow_scalar(key) != key:
                raise _Unsure  # quoted, or not a string: the token route
            if type(value) is str:
                if value[0] in _SPECIAL:
                    node[key] = int(value) if value.isdigit() else _flow_scalar(value)
            else:
                entries += _resolve_leaves(value)
        return entries
    entries = 0
    for index, value in enumerate(node):
        if type(value) is str:
            if value[0] in _SPECIAL:
                node[index] = int(value) if value.isdigit() else _flow_scalar(value)
        else:
            entries += _resolve_leaves(value)
    return entries


def _key_of(content: str) -> tuple[str, str]:
    """A block mapping key that is not a plain identifier, and the rest of its line."""
    match = _KEY.match(content)
    if match is None:
        raise _Unsure
    key = match.group(1)
    if key is None:
        single = match.group(2)
        key = single.replace("''", "'") if single is not None else match.group(3)
    elif key[0] in _MAYBE_NOT_STRING and type(_resolve(key)) is not str:
        raise _Unsure  # ``1: x``, ``true: x``: the full path says to quote it
    return key, content[match.end() :]


def _flow_scalar(text: str) -> Any:
    """A scalar between flow indicators: plain (never holding ``:``), or quoted whole."""
    first = text[0]
    if first == "'":
        inner = text[1:-1]
        if len(text) < 2 or text[-1] != "'" or "'" in inner.replace("''", ""):
            raise _Unsure  # not one quoted scalar (it held an indicator, or more follows)
        return inner.replace("''", "'")
    if first == '"':
        inner = text[1:-1]
        if len(text) < 2 or text[-1] != '"' or '"' in inner or "\\" in inner:
            raise _Unsure
        return inner
    if ":" in text or (first in _INDICATORS and (first != "-" or text[1:2] in ("", " "))):
        raise _Unsure
    if first in _MAYBE_NOT_STRING:
        return _resolve(text)
    return text


def _resolve(text: str) -> Any:
    try:
        value = resolve_plain(text)
    except ValueError:
        raise _Unsure from None  # a huge integer: the full path reports it
    if type(value) is float and not math.isfinite(value):
        raise _Unsure  # the full path reports it
    return value


def _is_entry(content: str) -> bool:
    """A block sequence entry: ``-`` then a space or the end of the line."""
    return content[0] == "-" and (len(content) == 1 or content[1] == " ")
