"""Status files: ``<status-dir>/<name>.yaml``, written atomically and only when they change.

Job names are DNS labels (checked again here), so a file name can never leave the folder.

``dump`` writes a status document through libyaml's emitter (PyYAML's ``CSafeDumper``) fed
with YAML events made straight from the document, skipping PyYAML's representer, which is
Python: it built a node per value (250,000 for a 10,000-task job) and had the resolver run
twice per scalar. The bytes are those of ``yaml.dump(document, Dumper=CSafeDumper, ...)``:
the events are the ones its serializer makes (the same tags, implicit flags from the same
resolver, block style), and a document it would write otherwise (a container seen twice,
which it writes as an anchor and alias; a value of another type) goes to ``yaml.dump`` itself.
``tests/test_status_dump.py`` checks that over generated status documents. Measured on the
status of a 10,000-task job (1.7 MB): ``yaml.dump`` 0.91-1.04 s, the events 0.16-0.19 s
(2026-12-04, 2 shared cores), so a one-task resize of such a job no longer spends most of
its time writing the status file.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from pathlib import Path
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

from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.status import status_document
from tfdeclare.core.spec.names import is_job_name
from tfdeclare.files import remove, write_atomic

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


class _Events:
    """The serializer's events for one document of dicts, lists, strings, ints, bools and
    nulls; each distinct scalar's event made once (its implicit flags need the resolver)."""

    def __init__(self, dumper: Any) -> None:
        self.dumper = dumper
        # by (type, value): 1 and True are equal keys, but not the same scalar
        self.scalars: dict[tuple[type, object], ScalarEvent] = {}
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


def dump(document: dict[str, Any]) -> str:
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


class StatusUnreadable(Exception):
    """A status file that exists but cannot be read, or is not a status document (named)."""


class StatusWriter:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._last: dict[str, dict[str, Any]] = {}  # what was written, less updatedAt

    def path(self, name: str) -> Path:
        if not is_job_name(name):
            raise ValueError(f"{name!r} is not a job name")
        return self.root / f"{name}.yaml"

    def write(self, document: dict[str, Any]) -> bool:
        """Write unless only ``updatedAt`` would change; says whether it wrote."""
        name = document["name"]
        comparable = {k: v for k, v in document.items() if k != "updatedAt"}
        if self._last.get(name) == comparable and self.path(name).exists():
            return False
        try:
            write_atomic(self.path(name), dump(document).encode("utf-8"))
        except OSError:
            # the file on disk is not what was last written any more (or never was): the next
            # pass must try again, and fail visibly again, rather than take it as written
            self._last.pop(name, None)
            raise
        self._last[name] = comparable
        return True

    def written(self, name: str) -> bool:
        """Whether this writer has written the job's status file (it is the only writer)."""
        return name in self._last

    def remove(self, name: str) -> None:
        remove(self.path(name))
        self._last.pop(name, None)

    def read(self, name: str) -> dict[str, Any] | None:
        """The job's status document; None when there is no file. ``StatusUnreadable`` when
        the file cannot be read or is not a status document (the message names it)."""
        path = self.path(name)
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except OSError as err:
            raise StatusUnreadable(f"{path}: cannot be read ({err.strerror})") from err
        except (ValueError, yaml.YAMLError) as err:  # ValueError: invalid UTF-8
            raise StatusUnreadable(f"{path}: not a readable status document ({err})") from err
        if not isinstance(data, dict):
            raise StatusUnreadable(f"{path}: not a status document")
        return data

    def documents(
        self,
        record_names: Iterable[str],
        record_of: Callable[[str], JobRecord | None],
        now: float,
        names: list[str] | None = None,
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The status documents of ``names`` (default: every status file and every job of
        ``record_names``), and one line for each that had to be shown otherwise. A job never
        disappears because its status file could not be written or read (a full disk, a
        damaged file): its document is made from its record (``record_of``, asked only for
        those), as the controller would have written it; the lines say which files could not
        be read and which jobs are shown from their records."""
        on_disk = set(self.names())
        wanted = sorted(on_disk | set(record_names)) if names is None else names
        documents: list[dict[str, Any]] = []
        notes: list[str] = []
        for name in wanted:
            document = None
            if not is_job_name(name):
                continue
            if name in on_disk or names is not None:
                try:
                    document = self.read(name)
                except StatusUnreadable as err:
                    notes.append(str(err))
            if document is None:
                record = record_of(name)
                if record is not None:
                    document = status_document(record, now)
                    notes.append(
                        f"{name}: no readable status file; shown from its record in the state folder"
                    )
            if document is not None:
                documents.append(document)
        return documents, notes

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.stem for p in self.root.glob("*.yaml") if is_job_name(p.stem))
