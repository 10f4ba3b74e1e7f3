"""Whether a folder tfdeclare writes (the state folder, the status folder) can take a write
now: a cheap check (``statvfs``, ``access``) the daemon makes every pass, so that a read-only
or full disk shows in ``/healthz``, ``/metrics`` and the status page even while no pass has
anything to write (a pass writes only what changed, so its own failures come late).
"""

from __future__ import annotations

import os
from pathlib import Path

# Below this many free bytes a folder counts as full: a status file or record of a small job
# (1-2 KiB) may still fit, but the next bigger one will not (one of a 10,000-task job is 1.7 MB:
# a write of it that fails shows as the pass's write failure).
MIN_FREE_BYTES = 64 * 1024


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
    return None
