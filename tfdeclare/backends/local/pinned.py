"""Host folders pinned for a container's mounts, so that what the engine mounts is the folder
that was checked, not whatever its path leads to when the engine walks it.

The controller resolves and checks each host path a container task mounts (its source folder,
each volume's ``hostPath``: ``controller/launchpaths.py``) and records the resolved path. The
engine walks that path again when it starts the container, which may be seconds (a pull)
later: a part of it swapped for a link meanwhile (two renames, by anyone who may write the
folder above it, a container task with that folder mounted read-write included) would mount
wherever the link leads (``/etc``). So the launcher opens each path just before the container
is made (``open_no_follow``: each part opened from the one above with ``O_NOFOLLOW``, as an
``O_PATH`` descriptor; a part that is a link now is ``PathChanged``, never followed) and keeps
the descriptor until the engine has started the container; the engine is given the folder as
a volume of the engine's ``local`` driver binding ``/proc/<launcher pid>/fd/<n>``
(``docker_runtime.py``), which the kernel resolves to the opened folder itself (the engine,
in the launcher's mount namespace, makes that bind mount below its own root-only folder, and
the container's bind mount is of that one), never by walking the path again. Checked with
the engine: a path swapped for a link to ``/etc`` after it was opened still mounted the folder
opened. (A bind source of ``/proc/<pid>/fd/<n>`` handed to the engine directly is refused by
the kernel: runc mounts from the container's new mount namespace, and a bind mount of a
mount of another namespace is ``EINVAL``.)

A host path that is a file is not pinned (the engine's volume is a folder): it is opened the
same way just before the container is made (a link there then is refused) and mounted by its
path, so a swap in the instant between that and the engine's mount is not prevented
(docs/security.md says so).
"""

from __future__ import annotations

import errno
import os
import stat

_PART = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC


class PathChanged(OSError):
    """A path checked before is not what it was: a part of it is a link now."""


def open_no_follow(path: str) -> int:
    """An ``O_PATH`` descriptor of the absolute ``path``, each part opened from the one above
    without following a link; ``PathChanged`` when a part is a link (or ``..``), the
    ``OSError`` of the part that cannot be opened otherwise (``FileNotFoundError``)."""
    if not path.startswith("/"):
        raise PathChanged(errno.EINVAL, "not an absolute path", path)
    parts = [part for part in path.split("/") if part and part != "."]
    if ".." in parts:
        raise PathChanged(errno.EINVAL, "it has a '..' part", path)
    fd = os.open("/", _PART | os.O_DIRECTORY)
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        try:
            inner = os.open(part, _PART if last else _PART | os.O_DIRECTORY, dir_fd=fd)
        except OSError as err:
            link = err.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(fd, part)
            os.close(fd)
            if link:
                here = "/" + "/".join(parts[: index + 1])
                raise PathChanged(errno.ELOOP, "a part of it is a link now", here) from None
            raise
        os.close(fd)
        fd = inner
    if stat.S_ISLNK(os.fstat(fd).st_mode):  # the last part (O_PATH | O_NOFOLLOW opens a link itself)
        os.close(fd)
        raise PathChanged(errno.ELOOP, "a part of it is a link now", path)
    return fd


def _is_link(folder_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def fd_path(fd: int) -> str:
    """The path by which the kernel reaches the opened file itself (this process's descriptor)."""
    return f"/proc/{os.getpid()}/fd/{fd}"
