"""One controller per state folder: an exclusive ``flock`` on ``<state-dir>/lock``.

The lock file also says who holds it (pid, host, command, since, what it manages), so a
second ``apply`` or daemon gets an error naming the holder. The kernel drops the lock when
its process dies, so a stale lock left by a crash is simply free: nothing to clean up. The
descriptor is not inherited by child processes (task supervisors never hold it).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any


class LockHeld(Exception):
    def __init__(self, holder: dict[str, Any]) -> None:
        self.holder = holder
        who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
        what = holder.get("purpose") or holder.get("command") or "a controller"
        since = holder.get("since")
        when = time.strftime(" since %Y-%m-%d %H:%M:%S", time.localtime(since)) if since else ""
        super().__init__(f"{what} ({who}{when}) holds the state folder lock")


class ControllerLock:
    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / "lock"
        self._fd: int | None = None

    def acquire(self, purpose: str, **details: Any) -> None:
        if not self.path.parent.exists():  # private: job records, task folders, launch files
            self.path.parent.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                self.path.parent.mkdir(mode=0o700)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read(fd)
            os.close(fd)
            raise LockHeld(holder) from None
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": " ".join(["tfdeclare", *sys.argv[1:]]),
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
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
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
