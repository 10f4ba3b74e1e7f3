"""Whether a folder tfdeclare writes (the state folder, the status folder) can take a write
now: a cheap check the daemon makes every pass, so that a read-only or full disk shows in
``/healthz``, ``/metrics`` and the status page even while no pass has anything to write (a
pass writes only what changed, so its own failures come late).

``statvfs`` says whether the file system is mounted read-only or is full, ``os.access`` what
the kernel knows of the folder (its mode, ``chattr +i``); then a file is made
there and dropped at once (an unnamed one, ``O_TMPFILE``, where the file system has them;
else a named ``.tfdeclare-probe-*.tmp`` removed at once): for root, ``os.access`` answers yes
where only the file system decides when asked to make a file (an NFS export squashing root,
a FUSE file system, a quota).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

# Below this many free bytes a folder counts as full: a status file or record of a small job
# (1-2 KiB) may still fit, but the next bigger one will not (one of a 10,000-task job is 1.7 MB:
# a write of it that fails shows as the pass's write failure).
MIN_FREE_BYTES = 64 * 1024

# O_TMPFILE is not known to this file system (or kernel): a named file is made instead
_NO_TMPFILE = frozenset({errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT})


def folder_problem(folder: Path) -> str | None:
    """Why ``folder`` cannot take a write now (one line naming it), or None when it can. A
    folder not made yet is judged by the nearest folder above it that exists."""
    existing = folder
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    try:
        stat = os.statvfs(existing)
    except OSError as err:
        return f"{folder}: cannot be examined ({err.strerror})"
    if stat.f_flag & os.ST_RDONLY:
        return f"{folder} is on a read-only file system"
    free = stat.f_bavail * stat.f_frsize
    if free < MIN_FREE_BYTES:
        return f"{folder}: no space left on its disk ({free} bytes free)"
    if stat.f_files and not stat.f_favail:
        return f"{folder}: no free inodes left on its disk"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{folder} is not writable (permission denied)"
    refused = _cannot_make_a_file(existing)
    if refused is None:
        return None
    if refused.errno == errno.EROFS:
        return f"{folder} is on a read-only file system"
    if refused.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{folder}: no space left on its disk ({refused.strerror})"
    if refused.errno in (errno.EACCES, errno.EPERM):
        return f"{folder} is not writable ({refused.strerror})"
    return f"{folder} cannot take a write ({refused.strerror})"


def _cannot_make_a_file(folder: Path) -> OSError | None:
    """Why no file can be made in ``folder`` now, or None when one could (and is gone)."""
    tmpfile = getattr(os, "O_TMPFILE", None)
    if tmpfile is not None:
        try:
            os.close(os.open(folder, tmpfile | os.O_WRONLY | os.O_CLOEXEC, 0o600))
            return None
        except OSError as err:
            if err.errno not in _NO_TMPFILE:
                return err
    try:
        fd, name = tempfile.mkstemp(prefix=".tfdeclare-probe-", suffix=".tmp", dir=folder)
    except OSError as err:
        return err
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return None
