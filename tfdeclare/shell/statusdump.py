"""Status files' YAML: ``dump`` writes a status document as ``yaml.dump(document,
Dumper=CSafeDumper, sort_keys=False, allow_unicode=True, default_flow_style=False)`` would,
byte for byte, at a fraction of its cost (``tests/test_status_dump.py`` compares them over
generated and real documents).

Two layers:

- **Events** (``_dump_events``): libyaml's emitter fed with YAML events made straight from the
  document, skipping PyYAML's representer, which is Python: it built a node per value
  (250,000 for a 10,000-task job) and had the resolver run twice per scalar. The events are
  the ones its serializer makes (the same tags, implicit flags from the same resolver, block
  style); a document it would write otherwise (a container seen twice, which it writes as an
  anchor and alias; a value of another type) goes to ``yaml.dump`` itself. Measured on the
  status of a 10,000-task job (1.7 MB): ``yaml.dump`` 0.91-1.04 s, the events 0.16-0.19 s.
- **Entries** (``dump``): a top-level mapping's text is its entries' texts one after the other
  (each ``key: value`` starts a line at column 0; what the emitter writes for one never
  depends on another). The status files of 10,000 jobs written in one pass share most entries
  (``replicas``, ``tasks``, ``conditions``, ``message`` of jobs in the same state, at the same
  second): an entry's text is kept by its key and value (its ``repr`` for a list or map: it
  tells a string from a number, ``True`` from ``1``, and keeps the order), made once by the
  events. An entry of plain words and numbers (``name: job-00042``, ``source: {file: ...,
  line: 1}``) is written directly: a string made of letters, digits and ``._/-``, starting
  with a letter or digit, that the resolver reads back as a string, is written as it is by
  libyaml too (nothing to quote, no space to fold at). The whole document goes to the events
  when a container is seen twice or a value is of another type. Measured on the status
  documents of 10,000 new jobs: 88-98 microseconds a document by the events alone, 29-38 by
  entries (2026-12-06, 2 shared cores, best of 3 over 2,000 documents: docs/benchmarks.md).
"""

from __future__ import annotations

import io
import re
from typing import Any

import yaml
from yaml.events import (
    DocumentEndEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
    StreamStartEvent,
)
from yaml.nodes import ScalarNode

_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_OPTIONS: dict[str, Any] = {"allow_unicode": True, "default_flow_style": False, "sort_keys": False}

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_MAPPING_START = MappingStartEvent(None, "tag:yaml.org,2002:map", True, flow_style=False)
_SEQUENCE_START = SequenceStartEvent(None, "tag:yaml.org,2002:seq", True, flow_style=False)
_MAPPING_END = MappingEndEvent()
_SEQUENCE_END = SequenceEndEvent()


class _NotPlain(Exception):
    """The document holds what only PyYAML's representer writes as it does."""


_TAGS = {str: _STR, int: _INT, bool: _BOOL, type(None): _NULL}

# Every scalar's event, shared by the documents of this process: a status document's keys
# and most of its values ("phase", "Pending", "Unschedulable") are those of every other, and
# working out an event's implicit flags (the resolver, twice) was most of the time that
# writing the status files of 10,000 new jobs took. An event depends on the scalar alone
# (the dumper's resolvers are its class's); bounded, emptied when full.
_SCALAR_EVENTS: dict[tuple[type, object], ScalarEvent] = {}
_MAX_SCALAR_EVENTS = 50_000


class _Events:
    """The serializer's events for one document of dicts, lists, strings, ints, bools and
    nulls; each distinct scalar's event made once (its implicit flags need the resolver)."""

    def __init__(self, dumper: Any) -> None:
        self.dumper = dumper
        # by (type, value): 1 and True are equal keys, but not the same scalar
        if len(_SCALAR_EVENTS) >= _MAX_SCALAR_EVENTS:
            _SCALAR_EVENTS.clear()
        self.scalars = _SCALAR_EVENTS
        self.containers: set[int] = set()

    def scalar(self, data: object) -> ScalarEvent:
        """The event of a scalar seen for the first time (``emit`` looks up the others)."""
        kind = type(data)
        tag = _TAGS.get(kind)
        if tag is None:
            raise _NotPlain
        if data is None:
            text = "null"
        elif kind is bool:
            text = "true" if data else "false"
        else:
            text = str(data)  # a str is itself; an int its digits
        # what yaml.serializer.Serializer.serialize_node works out for a scalar node
        implicit = (
            self.dumper.resolve(ScalarNode, text, (True, False)) == tag,
            self.dumper.resolve(ScalarNode, text, (False, True)) == tag,
        )
        event = self.scalars[(kind, data)] = ScalarEvent(None, tag, implicit, text)
        return event

    def emit(self, data: object) -> None:
        """The events of a mapping or list, its scalars looked up inline (one call a container,
        not one a value: a 10,000-task status has 240,000 scalars)."""
        emit, scalars, scalar = self.dumper.emit, self.scalars, self.scalar
        kind = type(data)
        if id(data) in self.containers:  # the representer would make an anchor and alias
            raise _NotPlain
        self.containers.add(id(data))
        if kind is dict:
            emit(_MAPPING_START)
            for key, value in data.items():  # type: ignore[attr-defined]
                for item in (key, value):
                    item_kind = type(item)
                    if item_kind is dict or item_kind is list:
                        self.emit(item)
                    else:
                        emit(scalars.get((item_kind, item)) or scalar(item))
            emit(_MAPPING_END)
        elif kind is list:
            emit(_SEQUENCE_START)
            for item in data:  # type: ignore[attr-defined]
                item_kind = type(item)
                if item_kind is dict or item_kind is list:
                    self.emit(item)
                else:
                    emit(scalars.get((item_kind, item)) or scalar(item))
            emit(_SEQUENCE_END)
        else:
            raise _NotPlain


def _dump_events(document: Any) -> str:
    """``yaml.dump(document, Dumper=CSafeDumper, sort_keys=False, allow_unicode=True,
    default_flow_style=False)``, byte for byte, without PyYAML's representer."""
    stream = io.StringIO()
    dumper = _DUMPER(stream, **_OPTIONS)
    try:
        dumper.emit(StreamStartEvent())
        dumper.emit(DocumentStartEvent(explicit=False))
        _Events(dumper).emit(document)
        dumper.emit(DocumentEndEvent(explicit=False))
        dumper.emit(StreamEndEvent())
    except (_NotPlain, TypeError):  # TypeError: a value that cannot be a key of the memo
        return yaml.dump(document, Dumper=_DUMPER, **_OPTIONS)  # type: ignore[no-any-return]
    finally:
        dumper.dispose()
    return stream.getvalue()


# ---- entries -----------------------------------------------------------------------------------

# Texts made by the events, kept by what they are of: an entry's by (key, type, value) for a
# scalar, (key, repr) for a list or map; a list item's and its entries' the same after a
# marker (``_ITEM``, ``_ITEM_ENTRY``). Bounded, emptied when full (a pass's documents share
# theirs; a long-lived daemon's keep changing).
_ENTRIES: dict[tuple[object, ...], str] = {}
_MAX_ENTRIES = 20_000
# letters, digits, ``._/-``, single spaces inside: nothing libyaml quotes, escapes or folds
# short of the line's end (it breaks a plain scalar only at a space past column 80)
_WORD = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._/-]| (?=[A-Za-z0-9._/-]))*")
_WIDTH = 80
_ITEM, _ITEM_ENTRY = object(), object()  # first in a list item's keys: never a document's key
_RESOLVER = yaml.resolver.Resolver()  # the dumper's own resolvers (CSafeDumper's is this class)
_WORDS: dict[str, bool] = {}  # text -> whether libyaml writes it as it is (bounded as _ENTRIES)


def _is_word(text: str) -> bool:
    """Whether libyaml writes ``text`` (a key or a value) plain, exactly as it is (``_WORD``;
    a space in it only where its line stays within ``_WIDTH``: the caller's to check), and
    the resolver reads it back as a string (not ``true``, ``null``, ``12``, ``2026-12-06``)."""
    known = _WORDS.get(text)
    if known is None:
        if len(_WORDS) >= _MAX_ENTRIES:
            _WORDS.clear()
        known = _WORDS[text] = bool(
            len(text) < 128  # a longer key is not a simple key
            and _WORD.fullmatch(text)
            and _RESOLVER.resolve(ScalarNode, text, (True, False)) == _STR  # type: ignore[no-untyped-call]
        )
    return known


def _scalar_text(value: object, column: int) -> str | None:
    """What libyaml writes for a plain scalar ``value`` starting at ``column``, else None."""
    kind = type(value)
    if kind is str:
        if _is_word(value) and (column + len(value) <= _WIDTH or " " not in value):  # type: ignore[arg-type,operator]
            return value  # type: ignore[return-value]
        return None
    if kind is int:
        return str(value)
    if kind is bool:
        return "true" if value else "false"
    if value is None:
        return "null"
    return None


def _direct(key: str, value: object, indent: str, out: list[str]) -> bool:
    """``key: value`` at ``indent`` into ``out`` for a value of words and numbers (maps of
    them, lists of scalars, empty ones); False, with ``out`` to be dropped, for any other."""
    if not _is_word(key) or (" " in key and len(indent) + len(key) > _WIDTH):
        return False
    kind = type(value)
    if kind is dict:
        if not value:
            out.append(f"{indent}{key}: {{}}\n")
            return True
        out.append(f"{indent}{key}:\n")
        inner = indent + "  "
        return all(type(k) is str and _direct(k, v, inner, out) for k, v in value.items())  # type: ignore[attr-defined]
    if kind is list:
        if not value:
            out.append(f"{indent}{key}: []\n")
            return True
        out.append(f"{indent}{key}:\n")
        for item in value:  # type: ignore[attr-defined]
            text = _scalar_text(item, len(indent) + 2)
            if text is None:
                return False
            out.append(f"{indent}- {text}\n")
        return True
    text = _scalar_text(value, len(indent) + len(key) + 2)
    if text is None:
        return False
    out.append(f"{indent}{key}: {text}\n")
    return True


def _kept(cache_key: tuple[object, ...], make: Any) -> str:
    text = _ENTRIES.get(cache_key)
    if text is None:
        if len(_ENTRIES) >= _MAX_ENTRIES:
            _ENTRIES.clear()
        text = _ENTRIES[cache_key] = make()
    return text


def _in_list(item: object) -> str:
    """The text of ``item`` as an item of a list under a top-level key (``- ...`` lines),
    by the events: what they write for the list holding it alone, less the key's line."""
    return _dump_events({"k": [item]}).partition("\n")[2]


def _item(item: object) -> str:
    """A top-level list's item: a map entry by entry (its first after ``- ``, the others
    indented as far: what the emitter writes for one never depends on another), each written
    directly or kept; anything else as a whole."""
    kind = type(item)
    if kind is not dict or not item:
        text = _scalar_text(item, 2)
        if text is not None:
            return f"- {text}\n"
        key = (_ITEM, repr(item)) if kind is dict or kind is list else (_ITEM, kind, item)
        return _kept(key, lambda: _in_list(item))
    whole_key = (_ITEM, repr(item))
    known = _ENTRIES.get(whole_key)
    if known is not None:
        return known
    parts: list[str] = []
    for k, v in item.items():  # type: ignore[attr-defined]
        direct: list[str] = []
        if type(k) is str and _direct(k, v, "  ", direct):
            text = "".join(direct)
        else:
            cache_key = (
                (_ITEM_ENTRY, k, repr(v))
                if type(v) is dict or type(v) is list
                else (_ITEM_ENTRY, k, type(v), v)
            )
            text = _kept(cache_key, lambda k=k, v=v: "  " + _in_list({k: v})[2:])  # as if not first
        parts.append(text if parts else "- " + text[2:])
    return _kept(whole_key, lambda: "".join(parts))


_PLAIN = frozenset({str, int, bool, type(None)})


def _plain_tree(value: object, seen: set[int]) -> bool:
    """Whether ``value`` holds only maps, lists and plain scalars, each container once
    (also across ``seen``: the other entries' containers)."""
    kind = type(value)
    if kind is dict:
        if id(value) in seen:
            return False
        seen.add(id(value))
        for k, v in value.items():  # type: ignore[attr-defined]
            if type(k) not in _PLAIN or (type(v) not in _PLAIN and not _plain_tree(v, seen)):
                return False
        return True
    if kind is list:
        if id(value) in seen:
            return False
        seen.add(id(value))
        return all(type(v) in _PLAIN or _plain_tree(v, seen) for v in value)  # type: ignore[attr-defined]
    return kind in _PLAIN


def dump(document: dict[str, Any]) -> str:
    """``yaml.dump(document, Dumper=CSafeDumper, sort_keys=False, allow_unicode=True,
    default_flow_style=False)``, byte for byte (module docstring)."""
    if type(document) is not dict or not document:
        return _dump_events(document)
    seen: set[int] = set()
    parts: list[str] = []
    words = _WORDS
    for key, value in document.items():
        kind = type(value)
        if type(key) is not str:
            return _dump_events(document)
        if kind is str:
            if (
                words.get(value)
                and words.get(key)
                and (" " not in value or len(key) + len(value) + 2 <= _WIDTH)
            ):
                parts.append(f"{key}: {value}\n")  # both known to be written as they are
                continue
            cache_key: tuple[object, ...] = (key, kind, value)
        elif kind is dict or kind is list:
            if not _plain_tree(value, seen):
                return _dump_events(document)  # an anchor and alias, another type: as a whole
            direct: list[str] = []
            if _direct(key, value, "", direct):
                parts.extend(direct)
            elif kind is list and _is_word(key) and " " not in key:
                parts.append(f"{key}:\n")
                parts.extend(_item(item) for item in value)
            else:
                parts.append(
                    _kept((key, repr(value)), lambda key=key, value=value: _dump_events({key: value}))
                )
            continue
        elif kind in _PLAIN:
            cache_key = (key, kind, value)
        else:
            return _dump_events(document)
        text = _ENTRIES.get(cache_key)
        if text is None:
            direct = []
            text = "".join(direct) if _direct(key, value, "", direct) else _dump_events({key: value})
            if len(_ENTRIES) >= _MAX_ENTRIES:
                _ENTRIES.clear()
            _ENTRIES[cache_key] = text
        parts.append(text)
    return "".join(parts)
