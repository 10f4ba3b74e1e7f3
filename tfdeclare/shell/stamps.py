"""What changed in the spec folders since the last load, without reading a file: what each
folder held when it was last looked at, and each file's change time then.

A full rescan (no file events) must look at every file: one ``lstat`` each, as a bare walk
does. This module keeps the Python work beside it small (docs/benchmarks.md, issue 33): a
folder whose own stamp (size, mtime, inode, mode) is unchanged, and whose mtime was already
outside the racy window when it was last listed, holds the same entries, so its files are
compared by their ``st_ctime_ns`` in one comprehension (a content edit changes a file's, not
its folder's); a folder that changed (a file added, removed, renamed; a sub-folder made or
removed) is listed again whole, and its differences found by one set operation.

The change time is the one time a user cannot set: every write, truncation, ``utime``,
``chmod``, link or rename of a file sets it to the current time, so each change the loader's
own test sees (size, mtime, inode) changes it, once the file was outside the racy window at
the last load (a file that was not is looked at again by the loader, which also counts a
recent change time as racy). What changed is returned as paths, for the loader to read as if
told (``SpecFiles._patch``); the rules of discovery (hidden names, suffixes, excluded folders,
links not followed into folders) are ``SpecFiles``', applied to the few paths returned and to
the folders walked. Entries are looked at without following links: a spec file that is a link
is never trusted here (the load that saw one keeps no stamps; one appearing is a change the
full load looks at).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

# A folder's stamp, or a file's given by name: size, mtime (ns), inode, mode.
Stamp = tuple[int, int, int, int]

# A file or folder modified within this many seconds of a look may change again without its
# mtime changing (the file system's time granularity): it is looked at again, whole.
RACY_SECONDS = 2.0


def stamp(stat: os.stat_result) -> Stamp:
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino, stat.st_mode)


@dataclass(slots=True)
class Folder:
    """One folder as last looked at: its own stamp, the ``st_ctime_ns`` of each entry other
    than a folder, by path (a name the load skipped is added at the first rescan), the
    sub-folders walked."""

    stamp: Stamp
    files: dict[str, int]
    folders: list[str]


class Stamps:
    """The stamps of the last look at the spec folders and at the files given by name.
    ``looked_at``: when that look began (``time.time()``)."""

    def __init__(self, looked_at: float) -> None:
        self.looked_at = looked_at
        self.given: dict[str, Stamp] = {}
        self.folders: dict[str, Folder] = {}

    def changes(
        self,
        paths: Sequence[str],
        walked: Callable[[str, str], bool],
        spec_name: Callable[[str], bool],
        now: float,
    ) -> set[str] | None:
        """The paths that may have changed since the last look, among the spec files, given
        and below the folders of ``paths`` (a file gone is one; so is each file of a folder
        gone), and the stamps updated to what was seen; None when the caller must load
        everything: something could not be looked at, a spec file is now a link, or the
        clock went back. ``walked(path, name)``: whether a sub-folder is walked;
        ``spec_name(name)``: whether a file of that name is a spec file."""
        if now < self.looked_at:
            return None
        changed: set[str] = set()
        links: set[str] = set()
        seen: dict[str, Folder] = {}
        try:
            for path in paths:
                if not os.path.isdir(path):  # a file given by name: followed, as the load does
                    now_stamp = stamp(os.stat(path))
                    if self.given.get(path) != now_stamp:
                        self.given[path] = now_stamp
                        changed.add(path)
                    continue
                if not walked(path, ""):
                    continue
                stack = [path]
                while stack:
                    folder = stack.pop()
                    if folder not in seen:
                        seen[folder] = looked = self._look(folder, walked, changed, links)
                        stack.extend(looked.folders)
        except OSError:
            return None
        for gone in self.folders.keys() - seen.keys():
            changed.update(self.folders[gone].files)
        specs = {p for p in changed if p in self.given or spec_name(os.path.basename(p))}
        if links & specs:
            return None  # a spec file is a link now: the full load checks where it leads
        self.folders, self.looked_at = seen, now
        return specs

    def _look(
        self, folder: str, walked: Callable[[str, str], bool], changed: set[str], links: set[str]
    ) -> Folder:
        """``folder`` as it is now; what differs from the last look into ``changed``, the
        links among it into ``links``."""
        folder_stat = os.stat(folder)
        folder_stamp = stamp(folder_stat)
        old = self.folders.get(folder)
        if (
            old is not None
            and old.stamp == folder_stamp
            and self.looked_at - folder_stat.st_mtime >= RACY_SECONDS
        ):
            # The same entries: compare each file's change time, one lstat each, at C speed.
            get = old.files.get
            with os.scandir(folder) as listing:
                moved = [
                    e
                    for e in listing
                    if not e.is_dir(follow_symlinks=False)
                    and get(e.path) != e.stat(follow_symlinks=False).st_ctime_ns
                ]
            for entry in moved:
                old.files[entry.path] = entry.stat(follow_symlinks=False).st_ctime_ns
                changed.add(entry.path)
                if entry.is_symlink():
                    links.add(entry.path)
            return old
        with os.scandir(folder) as listing:
            entries = list(listing)
        files = {
            e.path: e.stat(follow_symlinks=False).st_ctime_ns
            for e in entries
            if not e.is_dir(follow_symlinks=False)
        }
        folders = [e.path for e in entries if e.is_dir(follow_symlinks=False) and walked(e.path, e.name)]
        previous = old.files if old is not None else {}
        changed.update(path for path, _ in files.items() ^ previous.items())
        links.update(e.path for e in entries if e.is_symlink())
        return Folder(folder_stamp, files, folders)


def walked_folder(exclude: Collection[str], suffixes: tuple[str, ...]) -> Callable[[str, str], bool]:
    """Discovery's rule for a folder (``name`` empty: a folder given): not hidden, not named
    like a spec file, not one of ``exclude`` (real paths)."""

    def walked(path: str, name: str) -> bool:
        if name and (name.startswith(".") or name.endswith(suffixes)):
            return False
        return os.path.realpath(path) not in exclude

    return walked
