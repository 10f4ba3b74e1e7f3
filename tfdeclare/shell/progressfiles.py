"""Reading a job's progress files: its checkpoint folder's ``checkpoint`` state file and the
TensorBoard event files of its log folder (``core/run/progress.py`` derives the rest).

A task writes these folders, so nothing in them is trusted (docs/security.md, "Progress"):

- A folder is read only when, its links resolved, it lies under one of the places the caller
  allows (the job's task folders, its spec's folder, ``policy.allowedHostPaths``) and in none of
  tfdeclare's own; it is then opened part by part from ``/`` without following a link
  (``O_NOFOLLOW``), so a link swapped in after the check is refused, not followed.
- Files are opened relative to that folder with ``O_NOFOLLOW | O_NONBLOCK`` (no FIFO blocks)
  and read only when ``fstat`` says they are regular files; the state file is read up to
  64 KiB.
- Event files are read incrementally: what was read of each file (by device and inode) is
  remembered, and only new bytes are read, at most ``MAX_READ`` a file and ``MAX_FILES``
  files (the newest) a look. A file seen first, or one that grew by more than ``MAX_READ``
  since, is read from its last ``TAIL`` bytes, the first record boundary found by the
  length's checksum (``tfevents.resync``). At most ``MAX_ENTRIES`` entries of a folder are
  listed, in the log folder and one level of folders below it (Keras writes ``train/`` and
  ``validation/``).

So a look costs a few system calls and at most ``MAX_FILES`` times ``MAX_READ`` bytes, whatever a
task writes there (docs/benchmarks.md).
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tfdeclare.core.run import tfevents
from tfdeclare.core.run.progress import (
    MAX_STATE_FILE,
    STATE_FILE,
    Checkpoint,
    checkpoint_name,
    checkpoint_step,
)
from tfdeclare.core.spec.policy import lies_under

MAX_READ = 1 << 20  # new bytes read of one event file in one look
TAIL = 64 * 1024  # what is read of a file seen first, or that grew too much since
MAX_FILES = 16  # event files read in one look (the most recently written)
MAX_ENTRIES = 10_000  # entries of one folder listed
EVENTS_PREFIX = "events.out.tfevents."
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A folder that may not be read, or cannot be: the words say which and why."""


def open_folder(path: str, allowed: Sequence[str], reserved: Mapping[str, str]) -> int:
    """A descriptor of the folder ``path`` (absolute), read only: refused (``Refused``) when
    it does not exist, when its links lead outside every ``allowed`` folder or into a
    ``reserved`` one, or when a part of it became a link since it was resolved."""
    real = os.path.realpath(path)
    shown = path if real == path else f"{path} leads to {real}, which"
    roots = [posixpath.normpath(a) for a in allowed] + [os.path.realpath(a) for a in allowed]
    holding = [root for root in roots if lies_under(real, root)]
    if not holding:
        raise Refused(f"{shown} lies outside the folders it may name: not read")
    for place, what in reserved.items():
        for spot in (posixpath.normpath(place), os.path.realpath(place)):
            # an allowed folder inside a reserved one is allowed (the local backend's task
            # folders lie in the state folder); the rest of it is not
            if lies_under(real, spot) and not any(lies_under(root, spot) for root in holding):
                raise Refused(f"{shown} lies in {what}: not read")
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in real.split("/")[1:]:
            if not part:
                continue
            try:
                inner = os.open(part, _FOLDER, dir_fd=fd)
            except FileNotFoundError:
                raise Refused(f"{path} does not exist (yet)") from None
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(f"{path}: a part of it is a link or not a folder now: not read") from None
                raise Refused(f"{path} cannot be read: {err.strerror}") from None
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_file(name: str, folder: int) -> int | None:
    """A regular file of ``folder``, opened without following a link or blocking; None if
    it is not one."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def read_checkpoint(folder: int) -> Checkpoint | None:
    """The checkpoint the folder's state file names, with the state file's time."""
    fd = _open_file(STATE_FILE, folder)
    if fd is None:
        return None
    try:
        info = os.fstat(fd)
        data = os.pread(fd, MAX_STATE_FILE, 0)
    finally:
        os.close(fd)
    name = checkpoint_name(data)
    return Checkpoint(name, checkpoint_step(name), info.st_mtime) if name is not None else None


@dataclass(slots=True)
class _Cursor:
    offset: int
    resync: bool = False


@dataclass(slots=True)
class EventReader:
    """What was read of each event file of one log folder (module docstring)."""

    cursors: dict[tuple[int, int], _Cursor] = field(default_factory=dict)

    def read(self, folder: int) -> list[tfevents.Event]:
        """The events written since the last look."""
        files = self._event_files(folder)
        files.sort(key=lambda f: f[1].st_mtime, reverse=True)
        seen: set[tuple[int, int]] = set()
        events: list[tfevents.Event] = []
        for fd, info in files[:MAX_FILES]:
            key = (info.st_dev, info.st_ino)
            seen.add(key)
            events.extend(self._new_events(fd, info, key))
        for fd, _ in files:
            os.close(fd)
        for key in [k for k in self.cursors if k not in seen]:
            del self.cursors[key]
        return events

    def _event_files(self, folder: int) -> list[tuple[int, os.stat_result]]:
        out: list[tuple[int, os.stat_result]] = []
        subfolders: list[str] = []
        for name in _names(folder):
            if name.startswith(EVENTS_PREFIX):
                self._add(name, folder, out)
            elif not name.startswith("."):
                subfolders.append(name)
        for name in subfolders[:MAX_ENTRIES]:
            try:
                inner = os.open(name, _FOLDER, dir_fd=folder)
            except OSError:
                continue  # a file, a link, or gone
            try:
                for inner_name in _names(inner):
                    if inner_name.startswith(EVENTS_PREFIX):
                        self._add(inner_name, inner, out)
            finally:
                os.close(inner)
            if len(out) > 4 * MAX_FILES:
                break
        return out

    @staticmethod
    def _add(name: str, folder: int, out: list[tuple[int, os.stat_result]]) -> None:
        fd = _open_file(name, folder)
        if fd is not None:
            out.append((fd, os.fstat(fd)))

    def _new_events(self, fd: int, info: os.stat_result, key: tuple[int, int]) -> list[tfevents.Event]:
        size = info.st_size
        cursor = self.cursors.get(key)
        if cursor is None or cursor.offset > size:  # first seen, or replaced by a shorter file
            cursor = _Cursor(max(0, size - TAIL), resync=size > TAIL)
        elif size - cursor.offset > MAX_READ:  # grew too much since: its tail only
            cursor = _Cursor(size - TAIL, resync=True)
        self.cursors[key] = cursor
        if cursor.offset >= size:
            return []
        data = os.pread(fd, min(size - cursor.offset, MAX_READ), cursor.offset)
        start = 0
        if cursor.resync:
            found = tfevents.resync(data)
            if found is None:
                cursor.offset += max(0, len(data) - 11)  # no boundary yet: look again further on
                return []
            start, cursor.resync = found, False
        frames = tfevents.records(data[start:])
        cursor.offset += start + frames.consumed
        if frames.broken:
            cursor.resync = True
            cursor.offset += 1
        return list(frames.events)


def _names(folder: int) -> list[str]:
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) >= MAX_ENTRIES:
                    break
    except OSError:
        return []
    return names
