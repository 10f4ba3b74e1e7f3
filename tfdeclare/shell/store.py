"""The state folder: job records (one JSON file each, written atomically) and where the
backends keep their own state. Reading needs no lock; writing is for the lock holder.

Layout::

    <state-dir>/lock            the controller lock (shell.lock)
    <state-dir>/jobs/<name>.json  one JobRecord per job
    <state-dir>/status-summaries.json  the status files' summaries (shell.statuswriter: a cache)
    <state-dir>/local/...       the local backend's task folders
    <state-dir>/mesos/...       the Mesos backend's framework id and task journal
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

from tfdeclare.core.plan.observed import ObservedJob, observed_job
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.spec.names import is_job_name
from tfdeclare.files import remove, remove_many, write_atomic, write_atomic_many

# json.dumps with options makes an encoder a call; the same settings, made once
_RECORD_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


class StateError(Exception):
    """The state folder holds something we cannot read (named, with the file)."""


class StateStore:
    """Job records. With ``exclusive=True`` (the lock holder, the only writer) records read
    once are trusted until this store itself saves or deletes them; otherwise every read
    checks each file's stat."""

    def __init__(self, root: Path, *, exclusive: bool = False) -> None:
        self.exclusive = exclusive
        self._all_read = False
        self.root = root
        self.jobs_dir = root / "jobs"
        # Parsed records by file name, with the (mtime, size) they were read at: a pass over
        # a thousand unchanged jobs stats them, it does not parse them again.
        self._cache: dict[str, tuple[tuple[int, int, int], JobRecord]] = {}
        self._observed: dict[str, tuple[JobRecord, ObservedJob]] = {}
        self.unreadable: dict[str, str] = {}

    def record_path(self, name: str) -> Path:
        if not is_job_name(name):
            raise StateError(f"{name!r} is not a job name")
        return self.jobs_dir / f"{name}.json"

    def load(self, name: str) -> JobRecord | None:
        path = self.record_path(name)
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as err:
            raise StateError(f"{path}: cannot read job record: {err}") from err
        try:
            return JobRecord.from_json(data)
        except (KeyError, TypeError, ValueError) as err:
            raise StateError(f"{path}: invalid job record: {err}") from err

    def names(self) -> list[str]:
        """The jobs that have a record file (read or not: nothing is parsed)."""
        try:
            entries = os.listdir(self.jobs_dir)
        except FileNotFoundError:
            return []
        return sorted(n.removesuffix(".json") for n in entries if n.endswith(".json") and is_job_name(n[:-5]))

    def records(self) -> dict[str, JobRecord]:
        """Every readable record. Unreadable ones are left out and listed in ``unreadable``
        (name -> why), so one damaged file never stops the others being managed, and the
        controller knows not to treat that job's tasks as orphans."""
        if self.exclusive and self._all_read:
            return {name: entry[1] for name, entry in self._cache.items()}
        out: dict[str, JobRecord] = {}
        self.unreadable = {}
        try:
            entries = sorted(os.scandir(self.jobs_dir), key=lambda e: e.name)
        except FileNotFoundError:
            self._cache.clear()
            self._all_read = True  # none yet: what this store saves next is all there is
            return out
        for entry in entries:
            name = entry.name.removesuffix(".json")
            if not entry.name.endswith(".json") or not is_job_name(name):
                continue
            try:
                stat = entry.stat()
            except FileNotFoundError:
                continue
            key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)  # atomic writes make a new inode
            cached = self._cache.get(name)
            if cached is not None and cached[0] == key:
                out[name] = cached[1]
                continue
            try:
                record = self.load(name)
            except StateError as err:
                self.unreadable[name] = str(err)
                continue
            if record is not None:
                self._cache[name] = (key, record)
                out[name] = record
        for gone in self._cache.keys() - out.keys():
            del self._cache[gone]
        self._all_read = not self.unreadable
        return out

    def held(self) -> list[JobRecord] | None:
        """Every record as this store last read or saved it, reading nothing: for the lock
        holder (``exclusive``, the only writer) once it has read them all; None otherwise."""
        if self.exclusive and self._all_read:
            return [entry[1] for entry in self._cache.values()]
        return None

    def observed(self) -> dict[str, ObservedJob]:
        """Per job what the planner compares against; the same object while its record is
        unchanged, so that ``PlanCache`` reuses the plans of unchanged jobs (which a warm
        re-plan needs to meet its target: see there)."""
        out = {}
        for name, record in self.records().items():
            remembered = self._observed.get(name)
            if remembered is None or remembered[0] is not record:
                remembered = (record, observed_job(record))
                self._observed[name] = remembered
            out[name] = remembered[1]
        for gone in self._observed.keys() - out.keys():
            del self._observed[gone]
        return out

    @staticmethod
    def _data(record: JobRecord) -> bytes:
        # No indent: json's C encoder (with one it is Python's, about 10x slower: a third of
        # `apply` of 10,000 jobs went to writing their records). Read it with jq or
        # `python -m json.tool`.
        return _RECORD_JSON(record.to_json()).encode()

    def _saved(self, record: JobRecord, path: Path | None = None) -> None:
        stat = (path or self.record_path(record.name)).stat()
        self._cache[record.name] = ((stat.st_ino, stat.st_mtime_ns, stat.st_size), record)

    def save(self, record: JobRecord) -> None:
        path = self.record_path(record.name)
        write_atomic(path, self._data(record), mode=0o600)  # the spec's environment may hold secrets
        self._saved(record)

    def save_many(self, records: Sequence[JobRecord]) -> dict[str, OSError]:
        """``save`` of each, with one sync for all (``files.write_atomic_many``: no order among
        them); the names of those that could not be saved, with why."""
        paths = [self.record_path(r.name) for r in records]  # each made once
        items = [(path, self._data(r), 0o600) for path, r in zip(paths, records, strict=True)]
        failed = write_atomic_many(items)
        out = {}
        for path, record in zip(paths, records, strict=True):
            error = failed.get(path)
            if error is not None:
                out[record.name] = error
                self._cache.pop(record.name, None)  # read again: it may be the old one or the new
                self._all_read = False
            else:
                self._saved(record, path)
        return out

    def delete(self, name: str) -> None:
        remove(self.record_path(name))
        self._cache.pop(name, None)

    def delete_many(self, names: Sequence[str]) -> dict[str, OSError]:
        """``delete`` of each, with one sync; those that could not go, with why."""
        failed = remove_many([self.record_path(name) for name in names])
        out = {}
        for name in names:
            error = failed.get(self.record_path(name))
            if error is not None:
                out[name] = error
            self._cache.pop(name, None)
        return out
