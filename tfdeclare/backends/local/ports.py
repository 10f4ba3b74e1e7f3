"""Machine-wide port reservations, so that controllers of different state folders (two
projects on one machine) never hand out the same port.

A port is reserved by an exclusive ``flock`` on ``<tmp>/tfdeclare-ports/<port>.lock``: the
controller takes it when it places a task, passes the open descriptor to the task's
supervisor, which holds it for as long as the task runs, and the kernel releases it when its
last holder exits or dies. The lock files themselves are never removed (one small file per
port ever used). The bind check (``machine.port_is_free``) stays: a port some other program
listens on is not ours to hand out either.

That folder lies in the temp folder, where every user of the machine can write, so nothing
there is taken on trust (a planted ``<port>.lock`` link would otherwise have a root
controller create a file wherever it points):

- the folder is opened with ``O_NOFOLLOW | O_DIRECTORY`` and used only if ``fstat`` says it
  is owned by root or by us and, when others may write it, has the sticky bit (so nobody
  else can rename or remove what we made there); a folder tfdeclare makes is mode 1777, so
  every user shares it;
- each lock file is opened relative to that descriptor (``openat``) with ``O_NOFOLLOW`` and
  ``O_NONBLOCK``, created only with ``O_EXCL`` (never through a link, never truncated), and
  used only if it is a regular file with one link (not a FIFO, a device, or a hard link to a
  file elsewhere). Anything else there makes that port skipped, never a file created or
  changed elsewhere, never a hang; a lock file another user holds keeps the port theirs.

When the shared folder cannot be trusted (another user made it, it is a link, its mode lets
others swap files), reservations fall back to a folder private to this user,
``<tmp>/tfdeclare-ports-<uid>`` (mode 700, same checks), or, if that is taken too, to a
private folder of this process. The controller still launches; what it lost (controllers of
other users, or of other processes, no longer see its reservations; the bind check remains)
is ``fallback()``, which the backend writes into each task's log and the controller's log.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import tempfile
import threading
from pathlib import Path

log = logging.getLogger("tfdeclare.backends.local.ports")

SHARED_NAME = "tfdeclare-ports"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_LOCK_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def ports_dir() -> Path:
    """The machine-wide folder of port locks (in the temp folder)."""
    return Path(tempfile.gettempdir()) / SHARED_NAME


class UnsafeFolder(OSError):
    """A folder of port locks that cannot be trusted: why."""


_lock = threading.Lock()
_fallbacks: dict[Path, str] = {}  # why each shared folder asked for is not used now
_private: dict[Path, Path] = {}  # the process-private folder made for a shared folder


def _unsafe_reason(info: os.stat_result, shared: bool) -> str | None:
    """Why a folder of port locks with this ``fstat`` cannot be trusted, or None."""
    mode = stat.S_IMODE(info.st_mode)
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if info.st_uid != os.geteuid() and (not shared or info.st_uid != 0):
        return f"it is owned by another user (uid {info.st_uid})"
    others_write = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    if others_write and not shared:
        return f"others may write it (mode {mode:o})"
    if others_write and not info.st_mode & stat.S_ISVTX:
        return f"others may write it and it lacks the sticky bit (mode {mode:o})"
    return None


def open_folder(path: Path, shared: bool = True) -> int:
    """A descriptor of the folder ``path`` (made if missing: mode 1777 when ``shared``, else
    700), never through a link in its last part; ``UnsafeFolder`` when it cannot be trusted
    (a private folder must be ours; a shared one ours or root's)."""
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise UnsafeFolder(f"its parent cannot be opened ({err.strerror})") from None
    made = False
    try:
        for _attempt in range(3):
            try:
                fd = os.open(path.name, _DIR_FLAGS, dir_fd=parent)
                break
            except FileNotFoundError:
                try:
                    os.mkdir(path.name, 0o700, dir_fd=parent)
                    made = True
                except FileExistsError:
                    pass  # made by another controller a moment ago
                except OSError as err:
                    raise UnsafeFolder(f"it cannot be made ({err.strerror})") from None
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise UnsafeFolder("it is a link or not a folder") from None
                raise UnsafeFolder(f"it cannot be opened ({err.strerror})") from None
        else:
            raise UnsafeFolder("it vanishes as it is made")
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if made and info.st_uid == os.geteuid():
            os.fchmod(fd, 0o1777 if shared else 0o700)  # not left to the umask
            info = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    why = _unsafe_reason(info, shared)
    if why is not None:
        os.close(fd)
        raise UnsafeFolder(why)
    return fd


def _folder_fd(shared: Path) -> int:
    """An open, checked descriptor of the folder the locks of ``shared`` go in now: itself
    when it can be trusted (checked at every reservation, so a folder swapped since is
    caught, and one fixed since is used again), else a fallback, which is then logged."""
    with _lock:
        try:
            fd = open_folder(shared, shared=True)
            _fallbacks.pop(shared, None)
            return fd
        except UnsafeFolder as err:
            why = f"the shared folder of port locks {shared} is not used: {err}"
        mine = shared.parent / f"{shared.name}-{os.geteuid()}"
        try:
            fd = open_folder(mine, shared=False)
            why = f"{why}; ports are reserved in {mine}, which controllers of other users do not see"
        except UnsafeFolder as err:
            private = _private.get(shared)
            if private is None:
                private = Path(tempfile.mkdtemp(prefix=f"{shared.name}-", dir=shared.parent))
                _private[shared] = private
            fd = open_folder(private, shared=False)  # made by mkdtemp: ours, mode 700
            why = (
                f"{why}; nor is {mine}: {err}; "
                f"ports are reserved in {private}, which no other controller sees"
            )
        if _fallbacks.get(shared) != why:
            log.warning("%s", why)
            _fallbacks[shared] = why
        return fd


def fallback(folder: Path | None = None) -> str | None:
    """Why reservations are not machine-wide now (the shared folder is not used), or None."""
    with _lock:
        return _fallbacks.get(folder or ports_dir())


def _open_lock(folder_fd: int, name: str) -> int | None:
    """A descriptor of the regular lock file ``name`` in the folder, made there if missing;
    None when what is there is not one (a link, a FIFO, a device, a hard link, unreadable)."""
    for _attempt in range(3):
        try:
            fd = os.open(name, _LOCK_FLAGS, dir_fd=folder_fd)
        except FileNotFoundError:
            try:
                fd = os.open(name, _LOCK_FLAGS | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=folder_fd)
            except FileExistsError:
                continue  # made by another controller a moment ago: open that one
            except OSError:
                return None
        except OSError:
            return None  # a link (ELOOP), a file we may not read, ...
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            return None
        return fd
    return None


def reserve(port: int, folder: Path | None = None) -> int | None:
    """An open descriptor holding the reservation of ``port``, or None when another holder
    has it (or the lock file there is not one tfdeclare can trust: the port is skipped).
    Closing the descriptor (in every process that has it) releases the port. ``folder`` is
    the shared folder (default ``ports_dir()``); see the module's note for its fallbacks."""
    folder_fd = _folder_fd(folder or ports_dir())
    try:
        fd = _open_lock(folder_fd, f"{port}.lock")
    finally:
        os.close(folder_fd)
    if fd is None:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
