"""The Mesos backend's durable state under ``<state-dir>/mesos/``: framework and task journal.

This module owns the files and their crash safety:

``framework.json``
    The framework id the master assigned, this state folder's instance id (task labels name
    it), and whether GPU offers were asked for. Written atomically (``write_atomic``) as soon
    as the id is known, before it is acted on.
``tasks.json`` + ``tasks.log`` (+ ``tasks.log.old`` while compacting)
    The task journal: every task is recorded *before* the ACCEPT that launches it, then each
    change (status update, kill request, forget). ``tasks.json`` is an atomic snapshot;
    ``tasks.log`` holds the changes since, one JSON line per change, each a complete task
    record (``{"put": {...}}``) or a removal (``{"del": id}``). Writes reach the kernel at
    once (``write(2)``: a crashed *process* loses nothing); ``sync()`` makes them durable
    against a machine crash and runs before every acknowledgement, once per batch.

    Compaction has two steps: the records are serialised and the log is rotated
    (``tasks.log`` -> ``tasks.log.old``, new changes go to a fresh ``tasks.log``); then the
    snapshot is written and the old log removed. Loading replays snapshot, ``tasks.log.old``,
    ``tasks.log``. Replay is idempotent (every line is a whole record), so a crash at any
    point of a compaction loses nothing, and a torn last line (a crash mid-write) is ignored.

Reconciliation answers carry no labels, so this journal is how a restarted controller knows
its tasks. A journal is not thread-safe: one thread owns it (the backend's loop); another
thread may only fsync a ``durable_handle()`` it was given.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from tfdeclare.files import fsync_dir, open_append, open_regular, read_regular, write_atomic

log = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
FRAMEWORK_MAX_BYTES = 1 << 20
# each journal file read at most this large (a snapshot of 100,000 tasks is ~30 MB); every file
# here is read as a regular file only, never through a link nor waiting on a FIFO
JOURNAL_MAX_BYTES = 1 << 30
_LINE = json.JSONEncoder(separators=(",", ":"))  # one encoder for every log line (no per-call setup)


@dataclass(slots=True)
class TaskEntry:
    """One task as the journal records it."""

    task_id: str
    job: str
    role: str
    index: int
    attempt: int
    config_hash: str
    spec_hash: str
    cpus: float
    mem_mib: int
    gpus: int
    agent_id: str
    host: str
    port: int
    agent_url: str  # the agent's HTTP base and libprocess path, e.g. http://10.0.0.7:5051/slave(1)
    created_at: float
    accepted: bool = False  # the ACCEPT carrying it was answered 202
    kill_requested: bool = False
    kill_grace_s: float | None = None
    state: str | None = None  # the latest Mesos state (TASK_*); None before any update
    reason: str | None = None
    source: str | None = None
    message: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    lost_since: float | None = None  # when it became LOST / UNREACHABLE / UNKNOWN (fencing)
    updated_at: float | None = None
    forgotten: bool = False  # out of observe(); kept for its logs until the job is purged
    healthy: bool | None = None  # the executor's health check's last word (None: no check or no result)
    # tfdeclare stopped it to move it off its agent (an ``EndCause`` value: Maintenance)
    moved_for: str | None = None
    fetches_cluster: bool = False  # its TF cluster is fetched at its start (clusterwire)
    cluster_fetched: bool = False  # and the cluster server answered it: an exit 86 is its program's

    def to_json(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _ENTRY_FIELDS}  # flat: no deep copy

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TaskEntry:
        return cls(**{k: v for k, v in raw.items() if k in _ENTRY_FIELDS})


_ENTRY_FIELDS = tuple(f.name for f in fields(TaskEntry))


@dataclass(frozen=True, slots=True)
class FrameworkState:
    framework_id: str | None
    instance_id: str  # names this state folder in task labels (owner)
    gpu_resources: bool = False  # GPU_RESOURCES was asked for once: keep asking

    def to_json(self) -> dict[str, Any]:
        return {
            "frameworkId": self.framework_id,
            "instanceId": self.instance_id,
            "gpuResources": self.gpu_resources,
        }


class FrameworkStore:
    def __init__(self, root: Path) -> None:
        self.path = root / "framework.json"

    def load(self) -> FrameworkState:
        try:
            raw = json.loads(read_regular(self.path, FRAMEWORK_MAX_BYTES))
        except FileNotFoundError:
            return FrameworkState(None, secrets.token_hex(4))
        except (OSError, ValueError) as err:
            raise JournalError(
                f"{self.path} is unreadable ({err}); move it away to start a new framework"
            ) from err
        framework_id = raw.get("frameworkId")
        return FrameworkState(
            framework_id if isinstance(framework_id, str) and framework_id else None,
            str(raw.get("instanceId") or secrets.token_hex(4)),
            bool(raw.get("gpuResources", False)),
        )

    def save(self, state: FrameworkState) -> None:
        write_atomic(self.path, (json.dumps(state.to_json(), indent=2) + "\n").encode())

    def archive(self, suffix: str) -> Path:
        """Move framework.json aside (a removed framework); returns the new path."""
        target = self.path.with_name(f"framework.{suffix}.json")
        os.replace(self.path, target)
        fsync_dir(self.path.parent)
        return target


class JournalError(Exception):
    """The journal files cannot be read or written."""


class TaskJournal:
    """Snapshot + write-ahead log of ``TaskEntry`` records (see the module docstring)."""

    def __init__(self, root: Path, compact_after: int = 2000) -> None:
        self.root = root
        self.snapshot_path = root / "tasks.json"
        self.log_path = root / "tasks.log"
        self.old_log_path = root / "tasks.log.old"
        self.compact_after = compact_after
        self._fd: int | None = None
        self._lines = 0
        self._dirty = False  # written since the last fsync
        self.wrote = False  # this instance changed the journal (close() compacts only then)

    # ---- reading -----------------------------------------------------------------------------

    def load(self) -> dict[str, TaskEntry]:
        tasks: dict[str, TaskEntry] = {}
        try:
            raw = json.loads(read_regular(self.snapshot_path, JOURNAL_MAX_BYTES))
            for item in raw.get("tasks", []):
                entry = TaskEntry.from_json(item)
                tasks[entry.task_id] = entry
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as err:
            raise JournalError(f"{self.snapshot_path} is unreadable: {err}") from err
        self._replay(self.old_log_path, tasks)
        self._lines = self._replay(self.log_path, tasks)
        return tasks

    def _replay(self, path: Path, tasks: dict[str, TaskEntry]) -> int:
        lines = 0
        try:
            with os.fdopen(open_regular(path, JOURNAL_MAX_BYTES), "rb") as handle:
                for line in handle:
                    lines += 1
                    try:
                        change = json.loads(line)
                        if "put" in change:
                            entry = TaskEntry.from_json(change["put"])
                            tasks[entry.task_id] = entry
                        elif "del" in change:
                            tasks.pop(str(change["del"]), None)
                    except (ValueError, TypeError, KeyError):
                        log.warning("%s: ignoring a torn or unreadable line %d", path, lines)
        except FileNotFoundError:
            pass
        except OSError as err:
            raise JournalError(f"{path} is unreadable: {err}") from err
        return lines

    # ---- writing -----------------------------------------------------------------------------

    def _open(self) -> int:
        if self._fd is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self._fd = open_append(self.log_path, 0o600)
        return self._fd

    def _append(self, lines: Iterable[dict[str, Any]], sync: bool) -> None:
        encode = _LINE.encode
        data = b"".join(encode(line).encode() + b"\n" for line in lines)
        if not data:
            return
        fd = self._open()
        view = memoryview(data)
        try:  # a full or read-only state disk: say which file (the line is retried next time)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            self._lines += data.count(b"\n")
            self._dirty = True
            self.wrote = True
            if sync:
                os.fsync(fd)
                self._dirty = False
        except OSError as err:
            raise OSError(err.errno, err.strerror, str(self.log_path)) from err

    def put(self, entries: Iterable[TaskEntry], sync: bool) -> None:
        """Record these task records (complete); ``sync``: durable before returning."""
        self._append(({"put": e.to_json()} for e in entries), sync)

    def delete(self, task_ids: Iterable[str], sync: bool) -> None:
        self._append(({"del": task_id} for task_id in task_ids), sync)

    def sync(self) -> None:
        """Make every write so far durable (one fsync for a whole batch)."""
        if self._dirty and self._fd is not None:
            os.fsync(self._fd)
            self._dirty = False

    def durable_handle(self) -> int | None:
        """A duplicate of the log's descriptor for another thread to ``fsync`` and close:
        once that returns, everything written so far is durable (the duplicate stays on the
        file those writes went to, even if the log is rotated meanwhile). None when nothing
        was written since the last sync."""
        if not self._dirty or self._fd is None:
            return None
        handle = os.dup(self._fd)
        self._dirty = False  # whoever holds the handle makes it durable
        return handle

    def needs_compaction(self, live: int) -> bool:
        """The log is long compared with the journal (``live`` records)."""
        return self._lines > max(self.compact_after, 4 * live)

    def begin_compaction(self, tasks: Iterable[TaskEntry]) -> bytes:
        """Serialise ``tasks`` and rotate the log; then ``finish_compaction`` with the result."""
        body = {"version": SNAPSHOT_VERSION, "tasks": [t.to_json() for t in tasks]}
        if self._fd is not None:
            if self._dirty:
                os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
        if self.log_path.exists():
            if self.old_log_path.exists():  # an unfinished compaction: keep its lines too
                with (
                    os.fdopen(open_append(self.old_log_path, 0o600), "ab") as old,
                    os.fdopen(open_regular(self.log_path, JOURNAL_MAX_BYTES), "rb") as new,
                ):
                    old.write(new.read())
                    old.flush()
                    os.fsync(old.fileno())
                self.log_path.unlink()
            else:
                os.replace(self.log_path, self.old_log_path)
            fsync_dir(self.root)
        self._lines = 0
        self._dirty = False
        self.wrote = True
        return json.dumps(body, separators=(",", ":")).encode()

    def finish_compaction(self, snapshot: bytes) -> None:
        write_atomic(self.snapshot_path, snapshot, mode=0o600)
        with contextlib.suppress(FileNotFoundError):
            self.old_log_path.unlink()
            fsync_dir(self.root)

    def compact(self, tasks: Iterable[TaskEntry]) -> None:
        """Both steps at once."""
        self.finish_compaction(self.begin_compaction(tasks))

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                if self._dirty:
                    os.fsync(self._fd)
            os.close(self._fd)
            self._fd = None
