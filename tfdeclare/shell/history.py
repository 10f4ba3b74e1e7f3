"""The history log, ``<state-dir>/history.jsonl``: one JSON object per line, one line per
revision acted on (``core/plan/history.py`` says which), newest last.

Crash-safe without a lock for readers:

- An entry is appended with one ``write`` of the whole line, then ``fsync``. A crash in the
  middle leaves a torn last line, which readers ignore; the next append starts on a line of
  its own (a newline first), so an entry is never glued to a torn one.
- Bounded: over ``MAX_ENTRIES`` entries or ``MAX_BYTES`` bytes the log is compacted to the
  newest entries that fit three quarters of both, written whole to a temporary file and
  renamed over it (``files.write_atomic``): a crash before the rename leaves the old log as
  it was (and a stray temporary file, removed at the next open).
- Only the lock holder (the daemon, or ``apply``) appends; ``tfdeclare history`` only reads,
  and a write in progress is to it a torn line.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

from tfdeclare.core.plan.history import HistoryEntry, ParsedLog, kept_within, parse_log
from tfdeclare.files import fsync_dir, open_regular, write_atomic

NAME = "history.jsonl"
MAX_ENTRIES = 1000
MAX_BYTES = 1 << 20
READ_LIMIT = 8 << 20  # a reader reads at most the last this many bytes (the log is far smaller)


def log_path(state_dir: Path) -> Path:
    return state_dir / NAME


def read(state_dir: Path) -> ParsedLog:
    """The log's entries (oldest first); none when there is no log yet. Raises ``OSError``
    (naming it) for anything but a regular file: never read through a link nor waiting on a
    FIFO (``files.open_regular``)."""
    path = log_path(state_dir)
    try:
        fd = open_regular(path)
    except FileNotFoundError:
        return ParsedLog(())
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > READ_LIMIT:  # not ours to grow that far: read its end, from a line's start
            handle.seek(size - READ_LIMIT)
            handle.readline()
        data = handle.read()
    return parse_log(data)


class HistoryLog:
    """The writer (the lock holder). ``entries`` is what the log holds, oldest first."""

    def __init__(
        self, state_dir: Path, *, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES
    ) -> None:
        self.path = log_path(state_dir)
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._remove_strays()
        parsed = read(state_dir)
        self.entries: list[HistoryEntry] = list(parsed.entries)
        self.skipped = parsed.skipped

    def _remove_strays(self) -> None:
        """Temporary files of a compaction that a crash interrupted (before its rename)."""
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.path.parent):
                if entry.name.startswith(f".{NAME}.") and entry.name.endswith(".tmp"):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)

    def append(self, entry: HistoryEntry) -> None:
        """Add ``entry`` durably (compacting when over a bound). Raises ``OSError`` (a full
        disk): the log is then as it was, or has a torn last line that readers ignore."""
        line = entry.line()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        fd = os.open(self.path, flags, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = b"\n" + line  # after a torn line: this one stands on its own
            written = os.write(fd, line)
            if written != len(line):  # a full disk part-way: a torn line, the next append mends
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
            os.fsync(fd)
            size += written
        finally:
            os.close(fd)
        if size == len(line):
            fsync_dir(self.path.parent)  # a new log: its name is durable too
        self.entries.append(entry)
        if len(self.entries) > self.max_entries or size > self.max_bytes:
            self.compact()

    def compact(self) -> None:
        """Keep the newest entries that fit three quarters of both bounds (room for the next
        appends), written whole and renamed over the log."""
        kept = kept_within(self.entries, self.max_entries * 3 // 4, self.max_bytes * 3 // 4)
        write_atomic(self.path, b"".join(e.line() for e in kept), mode=0o600)
        self.entries = kept


def append_one(state_dir: Path, entry: HistoryEntry) -> str | None:
    """Append one entry (``apply``); what went wrong, or None."""
    try:
        HistoryLog(state_dir).append(entry)
    except OSError as err:
        return f"cannot write the history {log_path(state_dir)}: {err.strerror or err}"
    return None
