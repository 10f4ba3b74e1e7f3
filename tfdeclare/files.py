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
files of one batch among themselves; a caller that needs an order (a record before the task
it names is launched) writes that one alone first.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path


def _naming(err: OSError, path: Path) -> OSError:
    """``err`` (same errno, so the same subclass) naming ``path``."""
    return OSError(err.errno, err.strerror or str(err), str(path))


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
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
    """libc's ``syncfs`` (Linux), or None where there is none."""
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
            error = ctypes.get_errno()
            raise OSError(error, os.strerror(error), str(folder))
    finally:
        os.close(fd)
    return True


def write_atomic_many(items: Sequence[tuple[Path, bytes, int]]) -> dict[Path, OSError]:
    """``write_atomic(path, data, mode)`` for each item, with one sync of the data per file
    system and one per folder (module docstring). Returns the items that could not be written
    (path -> why); the others are."""
    failed: dict[Path, OSError] = {}
    written: list[tuple[Path, str]] = []
    for path, data, mode in items:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        except OSError as err:
            failed[path] = err
            continue
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fchmod(handle.fileno(), mode)
        except OSError as err:
            failed[path] = err
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            continue
        written.append((path, tmp))
    folders = sorted({path.parent for path, _ in written})
    synced: set[Path] = set()
    for folder in folders:
        try:
            if _sync_filesystem(folder):
                synced.add(folder)
        except OSError as err:  # nothing of this folder's is known to be on disk: none is renamed
            for path, _ in written:
                if path.parent == folder:
                    failed[path] = err
    for path, tmp in written:
        try:
            if path in failed:
                raise failed[path]
            if path.parent not in synced:
                _fsync_file(tmp)
            os.replace(tmp, path)
        except OSError as err:
            failed[path] = err
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    for folder in folders:
        try:
            fsync_dir(folder)
        except OSError as err:
            for path, _ in written:
                if path.parent == folder:
                    failed.setdefault(path, err)
    return {path: _naming(err, path) for path, err in failed.items()}


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
    for path in paths:
        try:
            path.unlink()
            gone.append(path)
        except FileNotFoundError:
            continue
        except OSError as err:
            failed[path] = _naming(err, path)
    for folder in sorted({path.parent for path in gone}):
        try:
            fsync_dir(folder)
        except OSError as err:
            for path in gone:
                if path.parent == folder:
                    failed[path] = err
    return failed
