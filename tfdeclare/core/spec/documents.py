"""Safe YAML: bytes of one file -> plain JSON-like documents, with positions for diagnostics.

Only libyaml's *composer* runs (structure and positions); nothing is ever constructed from a
tag. We resolve plain scalars ourselves with the YAML 1.2 core schema (so ``NO`` and ``yes``
stay strings), refuse every tag but the standard scalar/collection ones, report duplicate and
non-string keys, bound the file size, the nesting depth and the number of nodes visited (an
alias bomb stops after ``max_nodes`` visits, in milliseconds), and reject invalid UTF-8.

A ``Document`` can place validation errors, found later by JSON path, at a line and column;
``release()`` drops what it kept for that once a file is done.
"""

from __future__ import annotations

import bisect
import math
import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import yaml

from tfdeclare.core.diagnostics import REPORTED, Code, Diagnostic, JsonPath, format_json_path, hides_value
from tfdeclare.core.spec.scalars import NOT_STRING_WORDS, resolve_plain

MAX_FILE_BYTES = 1 << 20
MAX_NODES = 100_000
MAX_DEPTH = 64

_STR = "tag:yaml.org,2002:str"
_PLAIN = "tag:tfdeclare,plain"  # untagged plain scalar: resolved by the YAML 1.2 core schema
_MAP = "tag:yaml.org,2002:map"
_SEQ = "tag:yaml.org,2002:seq"
_EXPLICIT_SCALARS = {
    _STR,
    "tag:yaml.org,2002:int",
    "tag:yaml.org,2002:float",
    "tag:yaml.org,2002:bool",
    "tag:yaml.org,2002:null",
}


class _Loader(yaml.cyaml.CParser if yaml.__with_libyaml__ else yaml.SafeLoader):  # type: ignore[misc]
    """libyaml's parser and composer (no constructor: nothing is built from tags) with our
    own scalar resolution."""

    def resolve(self, kind: type, value: Any, implicit: Any) -> str:
        if kind is yaml.ScalarNode:
            return _PLAIN if implicit[0] else _STR
        return _MAP if kind is yaml.MappingNode else _SEQ

    # libyaml's composer calls these two for every node; we use no path resolvers. Builtins
    # that take their arguments and do nothing, rather than methods: a Python call each is
    # two calls a node (138 a typical job file, docs/benchmarks.md).
    descend_resolver = staticmethod(operator.is_)  # (parent node, index) -> ignored
    ascend_resolver = staticmethod(tuple)  # () -> ignored


def _resolve_tagged(tag: str, text: str) -> Any:
    if tag == _STR:
        return text
    value = resolve_plain(text)
    expected = {
        "tag:yaml.org,2002:int": int,
        "tag:yaml.org,2002:float": float,
        "tag:yaml.org,2002:bool": bool,
        "tag:yaml.org,2002:null": type(None),
    }[tag]
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if type(value) is not expected:
        raise ValueError(f"{text!r} is not a valid {tag.rsplit(':', 1)[-1]}")
    return value


def _short(tag: str) -> str:
    return "!!" + tag.removeprefix("tag:yaml.org,2002:") if tag.startswith("tag:yaml.org,2002:") else tag


# libyaml (YAML 1.1) also breaks lines at U+0085, U+2028 and U+2029; editors do not.
_ODD_BREAKS = ("\x85", "\u2028", "\u2029")


class EditorLines:
    """Line and column as editors count them (CR, LF, CRLF), from a character index: for the
    rare text in which libyaml's own line numbers would point too far down."""

    def __init__(self, text: str) -> None:
        starts = [0]
        for index, char in enumerate(text):
            if char == "\n" or (char == "\r" and text[index + 1 : index + 2] != "\n"):
                starts.append(index + 1)
        self.starts = starts

    @staticmethod
    def of(text: str) -> EditorLines | None:
        return EditorLines(text) if any(b in text for b in _ODD_BREAKS) else None

    def position(self, index: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.starts, index)
        return line, index - self.starts[line - 1] + 1


def _mark_pos(mark: Any, lines: EditorLines | None) -> tuple[int, int]:
    if lines is not None:
        return lines.position(mark.index)
    return mark.line + 1, mark.column + 1


def _pos(node: yaml.Node, lines: EditorLines | None = None) -> tuple[int, int]:
    return _mark_pos(node.start_mark, lines)


@dataclass(slots=True)
class Document:
    """One YAML document of a file: its plain value and (until released) its node tree."""

    source: str
    index: int  # 0-based position of the document in its file
    line: int  # 1-based line where it starts
    value: Any
    _root: yaml.Node | None = field(default=None, repr=False)
    refused: bool = False  # some value was refused while loading (and reported); not usable
    _lines: EditorLines | None = field(default=None, repr=False)

    def locate(self, path: JsonPath, *, key: bool = False) -> tuple[int, int]:
        """Line and column of the node at ``path``; its nearest existing parent if absent.

        With ``key=True`` and a mapping entry, the position of the key rather than the value.
        """
        node = self._root
        if node is None:
            return self.line, 1
        # Where a missing child is reported: the key that names its parent (``spec:``).
        lines = self._lines
        anchor = _pos(node, lines)
        for depth, part in enumerate(path):
            last = depth == len(path) - 1
            child: yaml.Node | None = None
            if isinstance(node, yaml.MappingNode) and isinstance(part, str):
                for key_node, value_node in node.value:
                    if isinstance(key_node, yaml.ScalarNode) and key_node.value == part:
                        child = key_node if (last and key) else value_node
                        next_anchor = _pos(key_node, lines)
                        break
            elif (
                isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value)
            ):
                child = node.value[part]
                next_anchor = _pos(child, lines)
            if child is None:
                return anchor
            node = child
            anchor = next_anchor
        # A mapping or list is best shown by the key that names it; a scalar by its value.
        if key or isinstance(node, yaml.ScalarNode) or not path:
            return _pos(node, lines)
        return anchor

    def diagnostic(
        self, path: JsonPath, message: str, code: Code = Code.SCHEMA, *, key: bool = False
    ) -> Diagnostic:
        line, column = self.locate(path, key=key)
        return Diagnostic(self.source, line, column, message, format_json_path(path), code)

    def release(self) -> None:
        self._root = None


class _Converter:
    """Walks a composed node graph into plain values, bounding the work."""

    def __init__(self, source: str, max_nodes: int, lines: EditorLines | None) -> None:
        self.source = source
        self.lines = lines
        self.budget = max_nodes
        self.diagnostics: list[Diagnostic] = []

    def fail(self, node: yaml.Node, path: _Path, message: str, code: Code) -> None:
        line, column = _pos(node, self.lines)
        flat = _flatten(path)
        text = node.value if isinstance(node, yaml.ScalarNode) else None
        if text and hides_value(flat):  # an environment value is never quoted
            message = message.replace(repr(text), "the value").replace(text, "the value")
        self.diagnostics.append(Diagnostic(self.source, line, column, message, format_json_path(flat), code))

    def convert(self, node: yaml.Node, path: _Path, depth: int = 0) -> Any:
        """The plain value of ``node``. Hot: written for speed (one call per YAML node)."""
        self.budget -= 1
        if self.budget < 0:
            raise _TooComplex(node, "document is too large or expands too many aliases")
        tag = node.tag
        kind = type(node)
        if kind is _ScalarNode:
            text = node.value
            if tag == _PLAIN:
                first = text[:1]
                if first.isalpha() and first not in "nNtTfF":
                    return text  # the common case: a word
                try:
                    value = resolve_plain(text)
                except ValueError as err:
                    self.fail(node, path, str(err), Code.SCHEMA)
                    return REPORTED
                if type(value) is str:
                    return value
            elif tag in _EXPLICIT_SCALARS:
                try:
                    value = _resolve_tagged(tag, text)
                except ValueError as err:
                    self.fail(node, path, str(err), Code.YAML_SYNTAX)
                    return REPORTED
                if type(value) is str and "\0" in value:  # only a quoted "\0" can make one
                    self.fail(node, path, _NUL, Code.SCHEMA)
                    return REPORTED
            else:
                self.fail(
                    node, path, f"tag {_short(tag)} is not allowed (only plain YAML data)", Code.FORBIDDEN_TAG
                )
                return REPORTED
            if type(value) is float and not math.isfinite(value):
                self.fail(node, path, f"{text!r} is not a finite number", Code.SCHEMA)
                return REPORTED
            return value
        if depth >= MAX_DEPTH:
            raise _TooComplex(node, f"document nests deeper than {MAX_DEPTH} levels")
        if tag not in (_MAP, _SEQ):
            self.fail(
                node, path, f"tag {_short(tag)} is not allowed (only plain YAML data)", Code.FORBIDDEN_TAG
            )
            return REPORTED
        depth += 1
        convert = self.convert
        if kind is _SequenceNode:
            return [convert(item, (path, i), depth) for i, item in enumerate(node.value)]
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key_tag = key_node.tag
            if type(key_node) is not _ScalarNode or key_tag not in (_PLAIN, _STR):
                self.fail(key_node, path, "keys must be plain strings", Code.NON_STRING_KEY)
                continue
            key = key_node.value
            if key_tag == _STR and "\0" in key:
                self.fail(key_node, path, f"key {key!r}: {_NUL}", Code.SCHEMA)
                continue
            maybe_not_string = not key[:1].isalpha() or key in NOT_STRING_WORDS
            if key_tag == _PLAIN and maybe_not_string and not _is_string_key(key):
                # ``1: x`` or ``true: x``: YAML would make a number or bool of it; say so.
                self.fail(key_node, path, f"key {key!r} must be a string (quote it)", Code.NON_STRING_KEY)
                continue
            if key in mapping:
                self.fail(key_node, (path, key), f"duplicate key {key!r}", Code.DUPLICATE_KEY)
                continue
            mapping[key] = convert(value_node, (path, key), depth)
        return mapping


_NUL = "a NUL character (\\0) cannot reach a process: argv, environment and paths are C strings"


def _is_string_key(key: str) -> bool:
    """Whether a plain key stays a string (``1``, ``true``, ``~`` do not)."""
    try:
        return isinstance(resolve_plain(key), str)
    except ValueError:  # a huge integer
        return False


# A JSON path as a linked list (parent, key), built cheaply per node and flattened only
# when a diagnostic needs it.
_Path = tuple[Any, str | int] | None


def _flatten(path: _Path) -> JsonPath:
    parts: list[str | int] = []
    while path is not None:
        path, key = path
        parts.append(key)
    return tuple(reversed(parts))


_ScalarNode = yaml.ScalarNode
_SequenceNode = yaml.SequenceNode


class _TooComplex(Exception):
    def __init__(self, node: yaml.Node, message: str) -> None:
        super().__init__(message)
        self.node = node


def too_large(source: str, size: int) -> Diagnostic:
    """The refusal of a file over ``MAX_FILE_BYTES`` (a reader that knows the size from a
    ``stat`` gives it without reading the file)."""
    message = f"file is {size} bytes, more than the limit of {MAX_FILE_BYTES}"
    return Diagnostic(source, 1, None, message, None, Code.FILE_TOO_LARGE)


def _decode(source: str, data: bytes) -> tuple[str | None, Diagnostic | None]:
    if len(data) > MAX_FILE_BYTES:
        return None, too_large(source, len(data))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        before = data[: err.start]
        line = before.count(b"\n") + 1
        column = err.start - (before.rfind(b"\n") + 1) + 1
        return None, Diagnostic(
            source,
            line,
            column,
            f"invalid UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start})",
            None,
            Code.INVALID_UTF8,
        )
    return text.removeprefix("\ufeff"), None


def _mark_diagnostic(
    source: str, text: str, err: yaml.MarkedYAMLError, lines: EditorLines | None
) -> Diagnostic:
    mark = err.problem_mark or err.context_mark
    problem = err.problem or "invalid YAML"
    if mark is not None and 0 <= mark.index < len(text) and text[mark.index] == "\t":
        problem = "a tab cannot indent YAML; use spaces"
    elif mark is not None and "flow sequence" in (err.context or ""):
        text_line = text.splitlines()[mark.line] if mark.line < len(text.splitlines()) else ""
        if "{" in text_line or "}" in text_line:
            problem += "; inside [...] quote every item that holds { or }, e.g. '--task_index={task_index}'"
    if err.context:
        problem = f"{problem} ({err.context})"
    if mark is None:
        return Diagnostic(source, 1, None, problem, None, Code.YAML_SYNTAX)
    line, column = _mark_pos(mark, lines)
    return Diagnostic(source, line, column, problem, None, Code.YAML_SYNTAX)


def parse_documents(
    source: str, data: bytes, *, max_nodes: int = MAX_NODES
) -> tuple[list[Document], list[Diagnostic]]:
    """All documents of one file, and every problem found on the way.

    Documents that parsed are returned even when a later one has a syntax error, so that the
    jobs they name can still be recognised (and protected) by the planner.
    """
    text, problem = _decode(source, data)
    if text is None:
        return [], [problem] if problem else []
    documents: list[Document] = []
    diagnostics: list[Diagnostic] = []
    lines = EditorLines.of(text)
    converter = _Converter(source, max_nodes, lines)
    loader = _Loader(text)
    try:
        for root in _iter_nodes(loader):
            line = _pos(root, lines)[0]
            reported = len(converter.diagnostics)
            try:
                value = converter.convert(root, None)
            except _TooComplex as err:
                node_line, node_column = _pos(err.node, lines)
                diagnostics.append(
                    Diagnostic(source, node_line, node_column, str(err), None, Code.TOO_COMPLEX)
                )
                break
            refused = len(converter.diagnostics) > reported
            documents.append(Document(source, len(documents), line, value, root, refused, lines))
    except yaml.MarkedYAMLError as err:
        diagnostics.append(_mark_diagnostic(source, text, err, lines))
    except yaml.reader.ReaderError as err:  # e.g. a control character: placed by its position
        line, column = EditorLines(text).position(err.position)
        what = f"character {err.character:#06x}" if isinstance(err.character, int) else "character"
        message = f"unacceptable {what}: {err.reason}"
        diagnostics.append(Diagnostic(source, line, column, message, None, Code.YAML_SYNTAX))
    except yaml.YAMLError as err:  # without a mark
        diagnostics.append(Diagnostic(source, 1, None, str(err).splitlines()[0], None, Code.YAML_SYNTAX))
    finally:
        loader.dispose()
    diagnostics.extend(converter.diagnostics)
    return documents, diagnostics


def _iter_nodes(loader: Any) -> Iterator[yaml.Node]:
    while loader.check_node():
        node = loader.get_node()
        if node is not None:
            yield node
