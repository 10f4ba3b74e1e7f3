"""Crash-safe file writes, for every layer that writes state: temp file in the same folder,
fsync, rename, fsync the folder.

A reader sees the old content or the new, never half of either; a crash leaves at most a
stray ``.*.tmp`` file that the next write ignores. A write that fails (a full or read-only
disk) leaves the old content in place and raises an ``OSError`` whose ``filename`` is the
file meant, never the temporary one nor none at all (``failed_write`` words it for a person),
so every layer above can say which file it could not write.

``write_atomic_many`` writes many independent files with the same guarantee for each and one
sync of their data (Linux ``syncfs``) and of each folder, instead of two per file: a reconcile
pass over 10,000 jobs spent most of its time in 40,000 ``fsync`` calls. Nothing orders the
files of one batch among themselves (their creations, renames and removals run on a few
threads: ``_each``); a caller that needs an order (a record before the task it names is
launched) writes that one alone first. Every rename of a batch still follows the sync of its
data, and a batch ends with its folders synced.

Reading and trusting (docs/security.md): ``read_regular`` reads a file as evidence, never
following a link nor blocking on a FIFO, a regular file only and at most a given number of
bytes (problems, status files, the summaries' index, every file of the state folder);
``open_regular`` and ``read_regular_at`` open one so for reading in pieces (logs, journals);
``open_append`` appends to a log without
following a link; ``not_own_folder`` says why a folder is
not one of this user alone (a link, another type, another owner, writable by others):
the state folder and its own sub-folders, the registry's folder.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import grp
import itertools
import os
import pwd
import stat
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

_T = TypeVar("_T")
_R = TypeVar("_R")


def _naming(err: OSError, path: Path) -> OSError:
    """``err`` (same errno, so the same subclass) naming ``path``."""
    return OSError(err.errno, err.strerror or str(err), str(path))


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    import tempfile  # here: ``validate`` and ``plan`` write nothing (tempfile brings shutil, random)

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as err:
        raise _naming(err, path) from err
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise _naming(err, path) from err
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def open_regular(path: Path, max_bytes: int | None = None) -> int:
    """A read-only descriptor of ``path``, a regular file (of at most ``max_bytes`` bytes when
    given): opened without following a link (``O_NOFOLLOW``) or blocking on a FIFO
    (``O_NONBLOCK``, which changes nothing for a regular file), kept only once ``fstat`` says
    it is a regular file. ``FileNotFoundError`` when there is none; else an ``OSError``
    naming the file whose ``strerror`` says why (a link, not a regular file, larger than the
    bound). Every file read inside the state folder is opened here (docs/security.md, "The
    state folder")."""
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        raise
    except OSError as err:
        why = "a link, not followed" if err.errno == errno.ELOOP else err.strerror or str(err)
        raise OSError(err.errno, why, str(path)) from None
    try:
        info = os.fstat(fd)
    except OSError as err:
        os.close(fd)
        raise OSError(err.errno, err.strerror or str(err), str(path)) from None
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    if max_bytes is not None and info.st_size > max_bytes:
        os.close(fd)
        raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
    return fd


def read_regular(path: Path, max_bytes: int) -> bytes:
    """The bytes of ``path``, a regular file of at most ``max_bytes`` (``open_regular``): at
    most ``max_bytes + 1`` bytes are read, so a file that grows meanwhile is refused too."""
    fd = open_regular(path)
    try:
        data = _read_upto(fd, max_bytes + 1)
    except OSError as err:
        raise OSError(err.errno, err.strerror or str(err), str(path)) from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes", str(path))
    return data


def read_regular_at(path: Path, offset: int, limit: int) -> tuple[bytes, int]:
    """At most ``limit`` bytes of ``path`` (``open_regular``) from ``offset``, and the file's
    size when opened: a log read a piece at a time (``logs``, ``logs --follow``), each piece
    opened again, never through a link."""
    fd = open_regular(path)
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, limit, offset) if offset <= size and limit > 0 else b""
    except OSError as err:
        raise OSError(err.errno, err.strerror or str(err), str(path)) from None
    finally:
        os.close(fd)
    return data, size


def _read_upto(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    while limit > 0:
        chunk = os.read(fd, min(limit, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


def open_append(path: Path, mode: int = 0o644) -> int:
    """A descriptor appending to ``path`` (made with ``mode`` if missing), never through a link
    (``O_NOFOLLOW``: ``OSError`` ``ELOOP``): the logs and journals kept in the state folder."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def not_own_folder(folder: Path) -> str | None:
    """Why ``folder`` is not a folder of this user alone (words to follow its name), or None
    when it is: a real folder (not a link to one), owned by this user, not writable by others
    (its group may write only when it is the user's private group). ``OSError`` when it
    cannot be looked at (``FileNotFoundError``: none)."""
    info = os.lstat(folder)
    if stat.S_ISLNK(info.st_mode):
        return "is a link (not followed)"
    if not stat.S_ISDIR(info.st_mode):
        return "is not a folder"
    if info.st_uid != os.geteuid():
        return f"belongs to another user (uid {info.st_uid})"
    if info.st_mode & 0o002 or (info.st_mode & 0o020 and not _own_group(info.st_gid)):
        return f"can be written by others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def _own_group(gid: int) -> bool:
    """Whether group ``gid`` is this user's own: a user-private group (the user's primary
    group, named as the user, no other member), which the umask 002 of many distributions
    makes every new folder writable by. Any other group may hold other users."""
    if gid != os.getegid():
        return False
    try:
        group, user = grp.getgrgid(gid), pwd.getpwuid(os.geteuid())
    except KeyError:
        return False
    return group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as err:
        raise _naming(err, folder) from err


def remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    except OSError as err:
        raise _naming(err, path) from err
    fsync_dir(path.parent)


def failed_write(err: OSError) -> str:
    """``status/a.yaml (No space left on device)``: the file and the errno's words."""
    target = err.filename2 or err.filename
    if target is not None and err.strerror:
        return f"{os.fsdecode(target)} ({err.strerror})"
    return err.strerror or str(err)


class JobWriteError(Exception):
    """A job's record or status file could not be written: the job, the file and the errno's
    words, and what that left undone (the old file stays readable)."""

    def __init__(self, job: str, err: OSError, left: str) -> None:
        self.job = job
        self.error = err
        super().__init__(f"job {job}: cannot write {failed_write(err)}; {left}")


@functools.cache
def _syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs`` (Linux), or None where there is none. ``ctypes`` is imported here,
    as ``ThreadPoolExecutor`` below: every command imports this module, few write a batch."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None
    function = getattr(libc, "syncfs", None)
    if function is None:
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function  # type: ignore[no-any-return]


def _sync_filesystem(folder: Path) -> bool:
    """Every written byte of the file system holding ``folder`` on disk; False when this
    system cannot say so at once (then each file is synced by itself)."""
    syncfs = _syncfs()
    if syncfs is None:
        return False
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if syncfs(fd) != 0:
            import ctypes

            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), str(folder))
    finally:
        os.close(fd)
    return True


def write_atomic_many(
    items: Sequence[tuple[Path, bytes, int]], stats: dict[Path, os.stat_result] | None = None
) -> dict[Path, OSError]:
    """``write_atomic(path, data, mode)`` for each item, with one sync of the data per file
    system and one per folder (module docstring). Returns the items that could not be written
    (path -> why); the others are. ``stats``: filled with each written file's ``fstat`` as
    written (its inode, mtime and size are the renamed file's: no ``stat`` a file after)."""
    failed = _make_folders(items)
    to_write = [item for item in items if item[0] not in failed]
    written: list[tuple[Path, str]] = []
    made: dict[Path, os.stat_result] = {}
    for (path, _, _), outcome in zip(to_write, _each(_write_temp, to_write), strict=True):
        if isinstance(outcome, OSError):
            failed[path] = outcome
        else:
            written.append((path, outcome[0]))
            made[path] = outcome[1]
    folders = sorted({path.parent for path, _ in written})
    synced = _sync_filesystems(folders, written, failed)

    def rename(item: tuple[Path, str]) -> None:
        path, tmp = item
        try:
            if path in failed:
                raise failed[path]
            if path.parent not in synced:
                _fsync_file(tmp)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise

    for (path, _), renamed in zip(written, _each(rename, written), strict=True):
        if isinstance(renamed, OSError):
            failed[path] = renamed
    for folder in folders:
        try:
            fsync_dir(folder)
        except OSError as err:
            for path, _ in written:
                if path.parent == folder:
                    failed.setdefault(path, err)
    if stats is not None:
        stats.update((path, stat) for path, stat in made.items() if path not in failed)
    return {path: _naming(err, path) for path, err in failed.items()}


def _make_folders(items: Sequence[tuple[Path, bytes, int]]) -> dict[Path, OSError]:
    """Each item's folder, made once (not once a file); the items whose folder cannot be."""
    failed: dict[Path, OSError] = {}
    made: set[Path] = set()
    for path, _, _ in items:
        if path.parent not in made:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                made.add(path.parent)
            except OSError as err:
                failed[path] = err
    return failed


def _sync_filesystems(
    folders: Sequence[Path], written: Sequence[tuple[Path, str]], failed: dict[Path, OSError]
) -> set[Path]:
    """The folders whose file system is synced whole (their temp files need no sync of their
    own). A folder whose sync fails has nothing known on disk: its files go into ``failed``,
    so none is renamed."""
    synced: set[Path] = set()
    for folder in folders:
        try:
            if _sync_filesystem(folder):
                synced.add(folder)
        except OSError as err:
            for path, _ in written:
                if path.parent == folder:
                    failed[path] = err
    return synced


def _write_temp(item: tuple[Path, bytes, int]) -> tuple[str, os.stat_result]:
    """The item's data in a new temp file beside it, with its mode; the temp file's path and
    its ``fstat`` once written."""
    path, data, mode = item
    fd, tmp = _temp_file(path)
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            stat = os.fstat(fd)
        finally:
            os.close(fd)
    except OSError:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp, stat


# A batch's file operations run on this many threads: each creation, rename and removal waits
# for the file system (a removal frees the file's blocks, a rename over a file frees the old
# one's), and the waits overlap; the calls release the GIL. Removing 4,000 files took 1.4-8.6 s
# one after the other and 0.3-0.5 s on 8 threads (2026-12-05, 2 shared cores, ext4 mounted
# with discard, load average 10-12). Fewer files than _PARALLEL_FROM go one after the other.
_THREADS = 8
_PARALLEL_FROM = 64


def _each(function: Callable[[_T], _R], items: Sequence[_T]) -> list[_R | OSError]:
    """``function`` of each item, in order: its result, or the ``OSError`` it raised."""

    def call(item: _T) -> _R | OSError:
        try:
            return function(item)
        except OSError as err:
            return err

    def call_each(chunk: Sequence[_T]) -> list[_R | OSError]:
        return [call(item) for item in chunk]

    if len(items) < _PARALLEL_FROM:
        return call_each(items)
    # a few slices a thread, not a future an item (``ThreadPoolExecutor.map`` ignores its
    # chunksize): the Python time of a batch of 20,000 files went from 0.8-1.0 s to 0.3 s
    size = -(-len(items) // (_THREADS * 4))
    chunks = [items[start : start + size] for start in range(0, len(items), size)]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(_THREADS, thread_name_prefix="tfdeclare-files") as pool:
        return [outcome for done in pool.map(call_each, chunks) for outcome in done]


_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_temp_numbers = itertools.count()


def _temp_file(path: Path) -> tuple[int, str]:
    """A new ``.<name>.<pid>-<n>.tmp`` beside ``path``, open for writing (mode 0600 until
    changed): ``tempfile.mkstemp``'s guarantee (made here, by us, never an existing file or
    a link) without its random names, a third of a batch's time in Python."""
    folder, name, pid = os.fspath(path.parent), path.name, os.getpid()
    while True:
        tmp = f"{folder}/.{name}.{pid}-{next(_temp_numbers)}.tmp"
        try:
            return os.open(tmp, _TEMP_FLAGS, 0o600), tmp
        except FileExistsError:
            continue  # left by a process of the same pid before: the next number


def _fsync_file(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_many(paths: Sequence[Path]) -> dict[Path, OSError]:
    """``remove`` for each path, with one sync per folder; the paths that could not go."""
    failed: dict[Path, OSError] = {}
    gone: list[Path] = []
    for path, outcome in zip(paths, _each(_unlink, paths), strict=True):
        if outcome is True:
            gone.append(path)
        elif isinstance(outcome, OSError):
            failed[path] = _naming(outcome, path)
    for folder in sorted({path.parent for path in gone}):
        try:
            fsync_dir(folder)
        except OSError as err:
            for path in gone:
                if path.parent == folder:
                    failed[path] = err
    return failed


def _unlink(path: Path) -> bool:
    """Whether ``path`` was removed now (False: it was not there)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
