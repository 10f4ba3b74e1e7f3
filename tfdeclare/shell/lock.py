"""One controller per state folder: an exclusive ``flock`` on ``<state-dir>/lock``.

The lock file also says who holds it (pid, host, command, since, what it manages), so a
second ``apply`` or daemon gets an error naming the holder. The kernel drops the lock when
its process dies, so a stale lock left by a crash is simply free: nothing to clean up. The
descriptor is not inherited by child processes (task supervisors never hold it).

Taking the lock is the door every writer of a state folder goes through (``apply``, ``delete``,
``status --refresh``, ``gc``, the daemon, the background controller), so it first checks that
the folder is this user's alone (``check_state_folder``): the folder and its own sub-folders
(``SUBFOLDERS``) real folders, not links, owned by this user and not writable by others
(``files.not_own_folder``: a group only when it is the user's private one), and no link
directly in the folder or in those sub-folders but ``git/`` (docs/security.md, "The state
folder"). So nothing tfdeclare makes or opens there is written through a link someone
planted; the lock file itself is opened with ``O_NOFOLLOW | O_NONBLOCK`` and used only when
it is a regular file.

Commands that only read the folder run the same check, without the lock
(``check_state_folder(..., reading=True)``), and refuse a folder that fails it: whoever can
write there could plant a link or a FIFO at a file they read.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
from pathlib import Path
from typing import Any

from tfdeclare.core.urls import hide_credentials
from tfdeclare.files import not_own_folder


class LockHeld(Exception):
    def __init__(self, holder: dict[str, Any]) -> None:
        self.holder = holder
        who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
        what = holder.get("purpose") or holder.get("command") or "a controller"
        since = holder.get("since")
        when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since)) if since else ""
        super().__init__(f"{what} ({who}{when}) holds the state folder lock")


# The state folder's own sub-folders (shell/store.py's layout, the backends' folders in it):
# each, when there, must be a folder of this user alone. ``git/`` holds the daemon's own link
# to its current snapshot, so its entries are not looked at; those of the others must hold no
# link (a task's folders, logs and work folders are one level below).
SUBFOLDERS = ("local", "local/tasks", "local/logs", "local/work", "mesos", "jobs", "git")
_NO_LINKS_IN = ("", "local", "local/tasks", "local/logs", "local/work", "mesos", "jobs")
_OPEN_FLAGS = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class StateFolderRefused(Exception):
    """The state folder is not this user's alone: what is wrong, and how to fix it (one line)."""


def _refused(state_dir: Path, path: Path, why: str, *, reading: bool = False) -> StateFolderRefused:
    if why.startswith("can be written"):
        fix = f"run `chmod go-w {path}`, or choose another --state-dir"
    elif why.startswith("belongs to"):
        fix = "choose another --state-dir (one of your own), or have its owner give it to you"
    else:
        fix = f"remove or move {path} (tfdeclare makes what it needs there), or choose another --state-dir"
    if reading:
        return StateFolderRefused(
            f"the state folder {state_dir} is not read: {path} {why}; whoever can write there could make "
            f"tfdeclare show files of yours it names, or hang: {fix}"
        )
    return StateFolderRefused(
        f"the state folder {state_dir} is not used: {path} {why}; whoever can write there could make "
        f"tfdeclare write its job records, task files and logs elsewhere: {fix}"
    )


def check_state_folder(state_dir: Path, *, reading: bool = False) -> None:
    """``StateFolderRefused`` unless ``state_dir`` and its own sub-folders are real folders of
    this user alone, with no link directly in them (module docstring). A folder that cannot
    be listed is left to what reads it (which says so). A state folder given as a link (one
    the user made: ``.tfdeclare -> /data/x``) is checked where it leads. ``reading``: for a
    command that only reads (``status``, ``logs``, ``history``, ``plan``), which runs the same
    check without the lock and words its refusal for that."""
    state_dir = Path(os.path.realpath(state_dir))
    for sub in ("", *SUBFOLDERS):
        folder = state_dir / sub if sub else state_dir
        try:
            why = not_own_folder(folder)
        except FileNotFoundError:
            continue
        except OSError as err:
            raise StateFolderRefused(f"cannot look at the state folder's {folder} ({err.strerror})") from None
        if why is not None:
            raise _refused(state_dir, folder, why, reading=reading)
    for sub in _NO_LINKS_IN:
        folder = state_dir / sub if sub else state_dir
        try:
            entries = os.scandir(folder)
        except OSError:
            continue
        with entries:
            for entry in entries:
                if entry.is_symlink():
                    raise _refused(state_dir, Path(entry.path), "is a link (not followed)", reading=reading)


class ControllerLock:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "lock"
        self._fd: int | None = None

    def acquire(self, purpose: str, **details: Any) -> None:
        if not self.path.parent.exists():  # private: job records, task folders, launch files
            self.path.parent.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                self.path.parent.mkdir(mode=0o700)
        check_state_folder(self.path.parent)
        try:
            fd = os.open(self.path, _OPEN_FLAGS | os.O_CREAT, 0o644)
        except OSError as err:
            if err.errno == errno.ELOOP:  # planted after the check
                raise _refused(self.path.parent, self.path, "is a link (not followed)") from None
            raise OSError(err.errno, err.strerror, str(self.path)) from err
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise _refused(self.path.parent, self.path, "is not a regular file")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except StateFolderRefused:
            os.close(fd)
            raise
        except BlockingIOError:
            holder = self._read(fd)
            os.close(fd)
            raise LockHeld(holder) from None
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": hide_credentials(" ".join(["tfdeclare", *sys.argv[1:]])),  # --git URL
            "purpose": purpose,
            "since": time.time(),
            **details,
        }
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
            os.fsync(fd)
        except OSError as err:  # a full or read-only state disk: say which file
            os.close(fd)
            raise OSError(err.errno, err.strerror, str(self.path)) from err
        self._fd = fd

    @staticmethod
    def _read(fd: int) -> dict[str, Any]:
        try:
            data = json.loads(os.pread(fd, 65536, 0) or b"{}")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock now, or None when it is free (does not take it)."""
        try:
            fd = os.open(self.path, _OPEN_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as err:
            if err.errno == errno.ELOOP:  # a link: no controller of ours holds that (they refuse it)
                return None
            raise
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return self._read(fd)
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ControllerLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
