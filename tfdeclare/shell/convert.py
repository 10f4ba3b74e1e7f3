"""``tfdeclare convert``: a Kubeflow TFJob manifest's text -> our native spec's text, with the
manifest's comments and key order kept.

ruamel.yaml's round-trip mode reads the manifest (its comments and each key's line); the
pure translation (``core/spec/kubeflow``) says what every native field came from, and each
comment follows the part of the manifest it stood beside: an end-of-line comment stays on its
line's field, a comment line goes before the field that followed it (after the last field: at
the end of the document) — or, when that field
has no native counterpart (a container's ``name``), before the nearest one that does (never
before a field written out for a Kubeflow default, such as a replica's restartPolicy). The
comments of a part that is not carried over (an annotation, a sidecar, ``onExit``) are left
out with it. Comment lines are written into the dumped text before their field's line, at its
indentation. Keys keep the manifest's order where it carries over (roles, labels, env).
Documents that are not Kubeflow TFJobs (a PersistentVolumeClaim beside the TFJob) are written
back as their text was. What could not be carried over is listed in a comment at the top of
the converted document (and printed as warnings).

Every comment line written (the header's warnings, which quote the manifest's values; the
comments carried over; end-of-line comments) is one line: its text is written ``visible``, so
that neither ``\n`` nor a break only YAML reads as one (``\r``, U+0085, U+2028, U+2029) ends
the comment and makes the rest of a value a document of the converted file.

Input is first checked by our own safe loader (``load_file``): a file with errors is not
converted, so ruamel never sees input our loader would refuse.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from tfdeclare.core.diagnostics import JsonPath
from tfdeclare.core.spec.kubeflow import Translation, is_kubeflow, translate
from tfdeclare.core.visible import visible

HEADER = "Converted from a Kubeflow {version} TFJob by `tfdeclare convert`."


@dataclass
class Converted:
    text: str
    kubeflow_documents: int


@dataclass
class _Comments:
    """The comments of one document, each tied to the manifest path it stood beside, with the
    (0-based) line it stood on."""

    before: dict[JsonPath, list[tuple[int, str]]] = field(default_factory=dict)
    end_of_line: dict[JsonPath, list[tuple[int, str]]] = field(default_factory=dict)
    after: list[tuple[int, str]] = field(default_factory=list)  # below the last field: kept last


def convert_text(text: str) -> Converted:
    """``text`` with every Kubeflow TFJob document in native form (input validated first)."""
    yaml = _yaml()
    documents = list(yaml.load_all(text))
    positions = [_positions(doc) for doc in documents]
    prefix = _leading_comments(text)
    comments = _gather(text, documents, positions, prefix.count("\n"))
    texts = _document_texts(text[len(prefix) :], len(documents))
    out: list[str] = []
    converted = 0
    for index, (doc, found) in enumerate(zip(documents, comments, strict=True)):
        if is_kubeflow(doc):
            native, before = _native(translate(doc), found)
            last = "".join(_comment_line(text) + "\n" for _, text in found.after)
            out.append(_with_comments_before(_dump(yaml, native), before) + last)
            converted += 1
        else:  # as it was written
            out.append(texts[index] if texts else _dump(yaml, doc))
    if prefix:  # before the first document's ``---``, as it was (a license header)
        return Converted(prefix + "".join(f"---\n{doc}" for doc in out), converted)
    return Converted(out[0] if len(out) == 1 else "".join(f"---\n{doc}" for doc in out), converted)


def _leading_comments(text: str) -> str:
    """The comment and blank lines that open ``text`` when a ``---`` (or a directive) follows
    them: they belong to no document (a license header), and are written back first as they
    were, whatever the documents are. '' when there are none, or no ``---`` follows them (the
    comments of the first document's first field, then)."""
    lines = text.splitlines(keepends=True)
    count = next((n for n, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")), 0)
    starts = count and (_DOCUMENT_START.match(lines[count]) or lines[count].startswith("%"))
    if not starts or not any(line.strip() for line in lines[:count]):
        return ""
    return "".join(lines[:count])  # each ends in a line break: a line follows


_DOCUMENT_START = re.compile(r"^---(?=[ \t]|$)", re.MULTILINE)


def _document_texts(text: str, count: int) -> list[str] | None:
    """The text of each document, split at its ``---`` (only ever at the start of a line, so
    never inside a block scalar); None when that does not give ``count`` documents (a
    directive, a ``...`` end marker), and ruamel then writes them."""
    if "\n..." in text or text.startswith(("%", "...")):
        return None
    starts = [match.start() for match in _DOCUMENT_START.finditer(text)]
    prefix = text[: starts[0]] if starts else text
    if not starts or not _only_comments(prefix):
        starts, prefix = [0, *starts], ""
    ends = [*starts[1:], len(text)]
    pieces = [_DOCUMENT_START.sub("", text[a:b], count=1) for a, b in zip(starts, ends, strict=True)]
    pieces = [piece.lstrip(" \t").removeprefix("\n") for piece in pieces]
    pieces[0] = prefix + pieces[0]
    if len(pieces) != count:
        return None
    return [piece if piece.endswith("\n") or not piece else piece + "\n" for piece in pieces]


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.strip().startswith("#") for line in text.splitlines())


def _dump(yaml: YAML, document: Any) -> str:
    stream = io.StringIO()
    yaml.dump(document, stream)
    return stream.getvalue()


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.width = 4096  # never fold a long command line
    yaml.preserve_quotes = True
    return yaml


# ---- where each part of the manifest stands --------------------------------------------------


def _positions(node: Any, path: JsonPath = ()) -> list[tuple[int, JsonPath]]:
    """(0-based line, path) of every key and list item."""
    out: list[tuple[int, JsonPath]] = []
    if isinstance(node, CommentedMap):
        for key in node:
            out.append((node.lc.key(key)[0], (*path, key)))
            out.extend(_positions(node[key], (*path, key)))
    elif isinstance(node, CommentedSeq):
        for index, item in enumerate(node):
            out.append((node.lc.item(index)[0], (*path, index)))
            out.extend(_positions(item, (*path, index)))
    return out


def _tokens(node: Any, path: JsonPath = ()) -> list[tuple[JsonPath, str, bool]]:
    """Every comment token below ``node``: the path of the entry it hangs on, its text, and
    whether it starts on that entry's line (ruamel's end-of-line slot; it then goes on with
    the comment lines that follow)."""
    out: list[tuple[JsonPath, str, bool]] = []
    if isinstance(node, CommentedMap | CommentedSeq):
        out.extend((path, text, False) for text in _flatten(getattr(node.ca, "comment", None)))
        out.extend((path, text, False) for text in _flatten(getattr(node.ca, "end", None)))
        same_line = 2 if isinstance(node, CommentedMap) else 0  # ruamel's slot for it
        for key, entry in node.ca.items.items():
            for slot, part in enumerate(entry):
                out.extend(((*path, key), text, slot == same_line) for text in _flatten(part))
        children = node.items() if isinstance(node, CommentedMap) else enumerate(node)
        for key, child in children:
            out.extend(_tokens(child, (*path, key)))
    return out


def _flatten(entry: Any) -> list[str]:
    if entry is None:
        return []
    if isinstance(entry, list):
        return [text for item in entry for text in _flatten(item)]
    value = getattr(entry, "value", None)
    return [value] if isinstance(value, str) else []


def _gather(
    text: str, documents: list[Any], positions: list[list[tuple[int, JsonPath]]], skip: int = 0
) -> list[_Comments]:
    """Each document's comments; the first ``skip`` lines are not read (``_leading_comments``)."""
    found = [_Comments() for _ in documents]
    comment_lines: set[str] = set()  # what ruamel read as comments (not a block scalar's lines)
    for index, doc in enumerate(documents):
        lines = {path: line for line, path in positions[index]}
        for anchor, token, on_its_line in _tokens(doc):
            if on_its_line and token.startswith("#"):
                entry = (lines.get(anchor, 0), _strip(token.partition("\n")[0]))
                found[index].end_of_line.setdefault(anchor, []).append(entry)
            comment_lines.update(line.strip() for line in token.splitlines())
    starts = sorted(
        ((line, index, path) for index, lines in enumerate(positions) for line, path in lines),
        key=lambda start: (start[0], len(start[2])),
    )
    for number, line in enumerate(text.splitlines()):
        stripped = line.strip()
        if number < skip or not stripped.startswith("#") or stripped not in comment_lines:
            continue
        following = next(((i, p) for n, i, p in starts if n > number), None)
        if following is None:  # after the last field: at the end
            found[-1].after.append((number, _strip(stripped)))
        else:
            found[following[0]].before.setdefault(following[1], []).append((number, _strip(stripped)))
    return found


def _strip(comment: str) -> str:
    body = comment.strip()[1:]
    return body[1:] if body.startswith(" ") else body


# ---- the native document ----------------------------------------------------------------------


def _native(translation: Translation, comments: _Comments) -> tuple[CommentedMap, dict[JsonPath, list[str]]]:
    """The native document with its end-of-line comments, and the comment lines to put before
    each of its fields. The comments of what was not carried over are left out with it."""
    root = _fresh(translation.native)
    assert isinstance(root, CommentedMap)
    before: dict[JsonPath, list[tuple[int, str]]] = {}
    for anchor, entries in comments.before.items():
        if not translation.is_dropped(anchor):
            before.setdefault(translation.native_of(anchor) or (), []).extend(entries)
    for anchor, entries in comments.end_of_line.items():
        target = translation.native_of(anchor)
        if target is None or not entries or translation.is_dropped(anchor):
            continue
        if translation.origins.get(target) == anchor or _ends_in_index(anchor, target):
            _eol(root, target, " / ".join(text for _, text in entries))
        else:  # its field has no counterpart: the comment goes before the nearest one that does
            before.setdefault(target, []).extend(entries)
    ordered = {target: [text for _, text in sorted(entries)] for target, entries in before.items()}
    start = [HEADER.format(version=translation.api_version)]
    if translation.warnings:
        start.append("Not carried over (tfdeclare validate shows where):")
        # once each: the same message at several places (each role's) is one line here; the
        # loader's warnings give each place
        start.extend(f"- {message}" for message in dict.fromkeys(m for _, m in translation.warnings))
    start.extend(ordered.pop((), []))
    start.extend(ordered.pop(("apiVersion",), []))
    root.yaml_set_start_comment("\n".join(visible(line) for line in start))  # ruamel: a "# " a line
    return root, ordered


def _ends_in_index(anchor: JsonPath, target: JsonPath) -> bool:
    return bool(anchor) and isinstance(anchor[-1], int) and bool(target) and target[-1] == anchor[-1]


def _fresh(value: Any) -> Any:
    """New containers (the manifest's own carry its comments, placed here one by one instead);
    scalars are kept as read (their quoting style with them)."""
    if isinstance(value, Mapping):
        out = CommentedMap()
        for key, item in value.items():
            out[str(key)] = _fresh(item)
        return out
    if isinstance(value, list):
        return CommentedSeq(_fresh(item) for item in value)
    return value


def _parent(root: CommentedMap, target: JsonPath) -> Any:
    node: Any = root
    for part in target[:-1]:
        node = node[part]
    return node


def _eol(root: CommentedMap, target: JsonPath, text: str) -> None:
    parent = _parent(root, target)
    parent.yaml_add_eol_comment(_comment_line(text), target[-1])


def _comment_line(text: str) -> str:
    """``# text``, one line whatever ``text`` holds (``visible``)."""
    return f"# {visible(text)}".rstrip()


def _with_comments_before(text: str, before: dict[JsonPath, list[str]]) -> str:
    """``text`` (one dumped native document) with comment lines put before the line of each
    field they belong to, at its indentation (before a list item: before the list's key).
    Written into the text rather than through ruamel's comment slots, which put a comment
    before the first key of a nested mapping after that mapping instead."""
    if not before:
        return text
    tree = _yaml().load(text)
    inserts: dict[int, list[str]] = {}
    for path, texts in before.items():
        key = path
        while key and isinstance(key[-1], int):
            key = key[:-1]
        if not key:
            continue
        line, column = _parent(tree, key).lc.key(key[-1])
        inserts.setdefault(line, []).extend(" " * column + _comment_line(t) for t in texts)
    out: list[str] = []
    for number, line in enumerate(text.splitlines(keepends=True)):
        out.extend(f"{comment}\n" for comment in inserts.get(number, ()))
        out.append(line)
    return "".join(out)
