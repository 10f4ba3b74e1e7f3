"""Crash-safe file writes, for every layer that writes state: temp file in the same folder,
fsync, rename, fsync the folder.

A reader sees the old content or the new, never half of either; a crash leaves at most a
stray ``.*.tmp`` file that the next write ignores. A write that fails (a full or read-only
disk) leaves the old content in place and raises an ``OSError`` whose ``filename`` is the
file meant, never the temporary one nor none at all (``failed_write`` words it for a person),
so every layer above can say which file it could not write.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
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
