"""Machine-wide port reservations, so that controllers of different state folders (two
projects on one machine) never hand out the same port.

A port is reserved by an exclusive ``flock`` on ``<tmp>/tfdeclare-ports/<port>.lock``: the
controller takes it when it places a task, passes the open descriptor to the task's
supervisor, which holds it for as long as the task runs, and the kernel releases it when its
last holder exits or dies. The lock files themselves are never removed (one small file per
port ever used); the folder is world-writable with the sticky bit, like the temp folder, so
every user of the machine shares it. The bind check (``machine.port_is_free``) stays: a port
some other program listens on is not ours to hand out either.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path


def ports_dir() -> Path:
    return Path(tempfile.gettempdir()) / "tfdeclare-ports"


def reserve(port: int, folder: Path | None = None) -> int | None:
    """An open descriptor holding the reservation of ``port``, or None when another holder
    has it. Closing the descriptor (in every process that has it) releases the port."""
    folder = folder or ports_dir()
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        try:
            folder.chmod(0o1777)
        except PermissionError:
            pass  # made by another user a moment ago
    fd = os.open(folder / f"{port}.lock", os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
