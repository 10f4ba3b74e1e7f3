"""Status files: ``<status-dir>/<name>.yaml``, written atomically and only when they change.

Job names are DNS labels (checked again here), so a file name can never leave the folder.

``dump`` (``shell/statusdump.py``) writes a status document as ``yaml.dump`` with libyaml's
emitter would, byte for byte, at a fraction of its cost.

Read through libyaml too (``CSafeLoader``). ``tfdeclare status`` of many jobs reads no status
file it need not: the writer keeps an index of one summary a job (``core.run.status.summary``)
beside the state (``<state-dir>/status-summaries.json``, written once a pass when something
changed), each with the identity (inode, mtime, size) of the status file it summarises;
``summaries`` takes an entry only while its file is still that one, and reads the file
otherwise. So a stale, missing or foreign index costs time, never a wrong line. The index
also names the status files the writer could not write (``unwritten``: job -> "PATH (why)",
until a write gets through): what is on disk for those is stale, and ``status`` shows them
from their records. A file it wrote that is gone from the folder is written again
(``write_missing``).

The status folder is meant to be read by other tools and may be shared, so what is in it is
evidence: a status file (and the index) is read with ``files.read_regular``, never through a
link, never blocking on a FIFO, a regular file only and at most ``MAX_BYTES`` (``INDEX_MAX_BYTES``);
anything else is a file that cannot be read (named), and the job is shown from its record. The
writes replace a file by a rename, so a link or FIFO planted at a job's name is replaced, never
followed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.status import status_document, summary
from tfdeclare.core.spec.names import is_job_name
from tfdeclare.files import failed_write, read_regular, remove, remove_many, write_atomic, write_atomic_many
from tfdeclare.shell.statusdump import dump

__all__ = ["STATUS_INDEX", "StatusUnreadable", "StatusWriter", "dump"]

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
INDEX_VERSION = 1
STATUS_INDEX = "status-summaries.json"  # the index's name in the state folder
# A status file read larger than this is not one tfdeclare wrote: a document lists at most
# 1,000 tasks (``core.run.status.TASKS_LISTED``), 174 KB for a 100,000-task job
# (docs/benchmarks.md); the bound is about a hundred times that.
MAX_BYTES = 16 * 1024 * 1024
# The index: one summary a job, a few hundred bytes each (64 MiB: some 200,000 jobs).
INDEX_MAX_BYTES = 64 * 1024 * 1024


class StatusUnreadable(Exception):
    """A status file that exists but cannot be read, or is not a status document (named)."""


# ``updatedAt`` is a status document's last key: its line is the file's last at column 0
# (a long value's continuation lines are indented).
_UPDATED_AT = re.compile(r"\nupdatedAt: '?([^'\n]*)'?\n?\Z")


def _less_updated_at(text: str) -> str:
    return text.rpartition("\nupdatedAt:")[0]


def _identity(stat: os.stat_result) -> list[int]:
    return [stat.st_ino, stat.st_mtime_ns, stat.st_size]  # atomic writes make a new inode


class StatusWriter:
    """The status folder. ``index``: where to keep the summaries' index (module docstring);
    None keeps none."""

    def __init__(self, root: Path, index: Path | None = None) -> None:
        self.root = root
        self.index = index
        self._last: dict[str, dict[str, Any]] = {}  # what was written, less updatedAt
        self._updated: dict[str, Any] = {}  # its updatedAt
        self._json: dict[str, str] = {}  # its JSON text, once asked for (json_documents)
        self._summaries: dict[str, dict[str, Any]] | None = None  # name -> {file, summary}
        self._stale: dict[str, str] | None = None  # name -> why its file could not be written
        self._dirty = False

    def path(self, name: str) -> Path:
        if not is_job_name(name):
            raise ValueError(f"{name!r} is not a job name")
        return self.root / f"{name}.yaml"

    def write(self, document: dict[str, Any]) -> bool:
        """Write unless only ``updatedAt`` would change, also from what the file holds (the
        first write of a job in a process: a command run again over 10,000 unchanged jobs
        writes none of their files); says whether it wrote."""
        path = self.path(document["name"])
        text = self._to_write(document, path)
        if text is None:
            return False
        try:
            write_atomic(path, text.encode("utf-8"))
        except OSError as err:
            self._failed(document["name"], err)
            raise
        self._wrote(document, path)
        return True

    def write_many(self, documents: Sequence[dict[str, Any]]) -> dict[str, OSError]:
        """``write`` of each, with one sync for all (``files.write_atomic_many``); the names
        of those that could not be written, with why."""
        paths = [(d, self.path(d["name"])) for d in documents]  # each made once
        chosen = [(d, path, text) for d, path in paths if (text := self._to_write(d, path)) is not None]
        stats: dict[Path, os.stat_result] = {}
        failed = write_atomic_many([(path, text.encode("utf-8"), 0o644) for _, path, text in chosen], stats)
        out = {}
        for document, path, _ in chosen:
            error = failed.get(path)
            if error is None:
                self._wrote(document, path, stat=stats.get(path))
            else:
                self._failed(document["name"], error)
                out[document["name"]] = error
        return out

    def write_missing(self, skip: Iterable[str] = ()) -> dict[str, OSError]:
        """Write again, as last written, each status file this writer wrote that is no longer
        in the folder (deleted, or a fresh volume mounted over the folder): a job that does
        not change is not in a pass's writes, so without this its file would stay gone. One
        listing of the folder; nothing is written while every file is there. ``skip``: jobs
        the pass could not save (their failure is said already). Those that could not be
        written, with why."""
        try:
            present = {entry.name for entry in os.scandir(self.root)}
        except FileNotFoundError:
            present = set()
        except OSError:
            return {}  # the folder cannot be listed: the next write says why
        skipped = set(skip)
        gone = [
            {**doc, "updatedAt": self._updated.get(name)}
            for name, doc in self._last.items()
            if f"{name}.yaml" not in present and name not in skipped
        ]
        for document in gone:
            self._forget(document["name"])  # not written any more: written again below
        return self.write_many(gone) if gone else {}

    def _failed(self, name: str, err: OSError) -> None:
        """The file could not be written: what is on disk (if anything) is stale. The next pass
        must try again, and fail visibly again, rather than take it as written; the index says
        why until a write gets through (``unwritten``), so ``tfdeclare status`` shows the job
        from its record instead of the stale file."""
        self._forget(name)
        if self.index is not None and self._unwritten().get(name) != (why := failed_write(err)):
            self._unwritten()[name] = why
            self._dirty = True

    def _forget(self, name: str) -> None:
        """The file on disk is not what was last written any more (or never was)."""
        self._last.pop(name, None)
        self._updated.pop(name, None)
        self._json.pop(name, None)

    def _written_now(self, name: str) -> None:
        if self.index is not None and self._unwritten().pop(name, None) is not None:
            self._dirty = True

    def _to_write(self, document: dict[str, Any], path: Path) -> str | None:
        """The text to write to ``path``, or None when the file says it already (then it
        counts as written)."""
        name = document["name"]
        last = self._last.get(name)  # a new job's: none, and nothing to compare
        unchanged = last is not None and last == {k: v for k, v in document.items() if k != "updatedAt"}
        if unchanged and path.exists():
            return None
        text = dump(document)
        held = self._held(path) if name not in self._last else None
        if held is None or held[0] != _less_updated_at(text):
            return text
        self._wrote(document, path, updated=held[1])  # the file was written then
        return None

    def _wrote(
        self, document: dict[str, Any], path: Path, *, updated: Any = ..., stat: os.stat_result | None = None
    ) -> None:
        """``stat``: the file's as written (else it is asked for)."""
        name = document["name"]
        self._last[name] = {k: v for k, v in document.items() if k != "updatedAt"}
        self._updated[name] = document.get("updatedAt") if updated is ... else updated
        self._json.pop(name, None)
        self._written_now(name)
        if self.index is not None:
            shown = {**document, "updatedAt": self._updated[name]}
            entry = {"file": _identity(stat or path.stat()), "summary": summary(shown)}
            if self._indexed().get(name) != entry:
                self._indexed()[name] = entry
                self._dirty = True

    @staticmethod
    def _held(path: Path) -> tuple[str, str | None] | None:
        """What a status file holds but its ``updatedAt``, and that; None when unreadable."""
        try:
            text = read_regular(path, MAX_BYTES).decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        found = _UPDATED_AT.search(text)
        return _less_updated_at(text), found.group(1) if found and found.group(1) != "null" else None

    def written(self, name: str) -> bool:
        """Whether this writer has written the job's status file (it is the only writer)."""
        return name in self._last

    def documents(self) -> dict[str, dict[str, Any]]:
        """What this writer wrote last of each job still there, by name (new dicts; their
        values are shared: not to be changed)."""
        return {name: {**doc, "updatedAt": self._updated.get(name)} for name, doc in self._last.items()}

    def json_documents(self) -> dict[str, str]:
        """``documents`` as JSON texts, each made once per write (``/jobs`` of 10,000 jobs joins
        these instead of encoding 16 MB per request)."""
        out = {}
        for name, doc in self._last.items():
            text = self._json.get(name)
            if text is None:
                text = self._json[name] = json.dumps({**doc, "updatedAt": self._updated.get(name)})
            out[name] = text
        return out

    def remove(self, name: str) -> None:
        remove(self.path(name))
        self._removed(name)

    def remove_many(self, names: Sequence[str]) -> dict[str, OSError]:
        """``remove`` of each, with one sync; those that could not go, with why."""
        failed = remove_many([self.path(name) for name in names])
        out = {}
        for name in names:
            error = failed.get(self.path(name))
            if error is None:
                self._removed(name)
            else:
                out[name] = error
        return out

    def _removed(self, name: str) -> None:
        self._forget(name)
        self._written_now(name)
        if self.index is not None and self._indexed().pop(name, None) is not None:
            self._dirty = True

    def flush(self) -> None:
        """Write the index if it changed (once a pass: the controller calls this)."""
        if self.index is None or not self._dirty:
            return
        data = {
            "version": INDEX_VERSION,
            "statusDir": str(self.root),
            "jobs": self._indexed(),
            "unwritten": self._unwritten(),
        }
        write_atomic(self.index, json.dumps(data, separators=(",", ":")).encode())
        self._dirty = False

    def _indexed(self) -> dict[str, dict[str, Any]]:
        if self._summaries is None:  # what an earlier writer indexed, checked by every reader
            self._summaries, self._stale = _read_index(self.index)
        return self._summaries

    def _unwritten(self) -> dict[str, str]:
        self._indexed()
        assert self._stale is not None
        return self._stale

    def unwritten(self) -> dict[str, str]:
        """The jobs whose status file the last writer could not write (job -> "PATH (why)"),
        as the index says now: their file, if there is one, is stale."""
        return _read_index(self.index)[1]

    def read(self, name: str) -> dict[str, Any] | None:
        """The job's status document; None when there is no file. ``StatusUnreadable`` when
        the file cannot be read or is not a status document (the message names it)."""
        path = self.path(name)
        try:
            data = yaml.load(read_regular(path, MAX_BYTES), Loader=_LOADER)  # noqa: S506 (a safe loader)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise StatusUnreadable(f"{path}: cannot be read ({err.strerror})") from err
        except (ValueError, yaml.YAMLError) as err:  # ValueError: invalid UTF-8
            raise StatusUnreadable(f"{path}: not a readable status document ({err})") from err
        if not isinstance(data, dict):
            raise StatusUnreadable(f"{path}: not a status document")
        return data

    def shown_documents(
        self,
        record_names: Iterable[str],
        record_of: Callable[[str], JobRecord | None],
        now: float,
        names: list[str] | None = None,
        stale: dict[str, str] | None = None,
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The status documents of ``names`` (default: every status file and every job of
        ``record_names``), and one line for each that had to be shown otherwise. A job never
        disappears because its status file could not be written or read (a full disk, a
        damaged file), nor is a file the last writer could not replace shown as current (a
        read-only folder: ``unwritten``, or ``stale`` when the caller read it already): its
        document is made from its record (``record_of``, asked only for those), as the
        controller would have written it; the lines say which files could not be read or
        written and which jobs are shown from their records."""
        on_disk = set(self.names())
        wanted = sorted(on_disk | set(record_names)) if names is None else names
        stale = self.unwritten() if stale is None else stale
        documents: list[dict[str, Any]] = []
        notes: list[str] = []
        for name in wanted:
            document = None
            if not is_job_name(name):
                continue
            if name in stale and name in on_disk:  # none on disk: said below
                record = record_of(name)
                if record is not None:
                    documents.append(status_document(record, now))
                    notes.append(
                        f"{name}: status file stale: cannot write {stale[name]}; "
                        "shown from its record in the state folder"
                    )
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

    def summaries(
        self, unreadable: dict[str, str] | None = None, stale: dict[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """``summary`` of every job's status file, in name order: from the index while an entry
        is of the file there now, else read from the file. ``unreadable``: filled with the
        files that could not be read (job name -> one line naming the file); ``stale``: with
        those the last writer could not write (``unwritten``: still listed here)."""
        indexed, unwritten = _read_index(self.index)
        if stale is not None:
            stale.update(unwritten)
        out = []
        try:
            entries = sorted(os.scandir(self.root), key=lambda e: e.name)
        except (FileNotFoundError, NotADirectoryError):
            return []
        for entry in entries:
            name = entry.name.removesuffix(".yaml")
            if not entry.name.endswith(".yaml") or not is_job_name(name):
                continue
            try:
                identity = _identity(entry.stat())
            except FileNotFoundError:
                continue
            known = indexed.get(name)
            if known is not None and known.get("file") == identity and isinstance(known.get("summary"), dict):
                out.append(known["summary"])
                continue
            try:
                document = self.read(name)
            except StatusUnreadable as err:
                if unreadable is not None:
                    unreadable[name] = str(err)
                continue  # not its job's summary: the caller shows the job otherwise (its record)
            if document is not None:
                out.append(summary(document))
        return out


def _read_index(path: Path | None) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """The index's entries and the jobs whose file could not be written (job -> why); none
    when there is no index or it cannot be read (it is a cache)."""
    if path is None:
        return {}, {}
    try:
        data = json.loads(read_regular(path, INDEX_MAX_BYTES))
    except (OSError, ValueError):
        return {}, {}
    if not isinstance(data, dict) or data.get("version") != INDEX_VERSION:
        return {}, {}
    jobs, unwritten = data.get("jobs"), data.get("unwritten")
    return (
        {k: v for k, v in jobs.items() if isinstance(v, dict)} if isinstance(jobs, dict) else {},
        {k: v for k, v in unwritten.items() if isinstance(v, str)} if isinstance(unwritten, dict) else {},
    )
