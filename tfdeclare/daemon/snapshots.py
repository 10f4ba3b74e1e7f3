"""Whether a git snapshot (``revisions/<commit>/``) still holds exactly its commit's tree.

A task running as root can write into the snapshot it runs from; before the daemon (or
``tfdeclare gc``'s report) lets an unused snapshot go, ``foreign_paths`` lists what in it the
commit does not have as it is. It compares the folder itself with the commit's tree, not what
``git status`` shows, since git hides whole kinds of paths: folders named ``.git`` (at the top
or nested), ignored files (``.gitignore``, ``info/exclude``, ``core.excludesFile``), whatever
lies under a submodule's path, names git refuses. So:

- the commit's tree is ``git ls-tree -r -z --full-tree`` (every path with its mode and blob
  id, submodules as ``160000`` entries, which the snapshot holds as empty folders);
- the snapshot is walked entry by entry, never following a link: every file, link, folder and
  special file, ``.git`` folders anywhere included;
- a regular file matches when its blob id (hashed here, as git does) and its executable bit
  match; one whose hash differs is asked of ``git hash-object`` once more, which applies the
  repository's filters and line-ending settings as the checkout did; a link matches when its
  target is the blob; a folder when the tree has files below it (or a submodule there); a
  FIFO, socket or device never does. Write bits are not compared (the snapshot removes them).

Paths the commit has and the snapshot lacks are listed too (``status`` said so before). Any
error reading the snapshot is listed as a foreign path: when in doubt, the snapshot is kept.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tfdeclare.daemon.gitrun import Git, GitError

_FILE_MODES = {b"100644": False, b"100755": True}  # blob mode -> executable
_LINK_MODE = b"120000"
_GITLINK_MODE = b"160000"
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


class CompareError(Exception):
    """The commit's tree cannot be read (git's own words)."""


@dataclass(frozen=True, slots=True)
class _Entry:
    mode: bytes
    oid: str


def _shown(path: bytes) -> str:
    return path.decode("utf-8", "backslashreplace")


def _git(git: Git, *args: str, cwd: Path | None = None, stdin: bytes | None = None) -> bytes:
    try:
        out, code, err = git.run_bytes(*args, stdin=stdin, cwd=cwd)
    except GitError as failed:
        raise CompareError(failed.message) from None
    if code != 0:
        lines = err.strip().splitlines()
        raise CompareError(lines[-1] if lines else f"git {args[0]} failed (exit code {code})")
    return out


def commit_tree(git: Git, commit: str) -> dict[bytes, _Entry]:
    """Every path of ``commit`` (bytes, as git stores them) with its mode and object id."""
    out = _git(git, "ls-tree", "-r", "-z", "--full-tree", commit)
    tree = {}
    for item in out.split(b"\0"):
        if not item:
            continue
        meta, _, path = item.partition(b"\t")
        mode, _kind, oid = meta.split(b" ")
        tree[path] = _Entry(mode, oid.decode("ascii"))
    return tree


def _blob_id(data_chunks: Iterator[bytes], size: int, hex_length: int) -> str:
    digest = hashlib.sha256() if hex_length == 64 else hashlib.sha1()  # noqa: S324 - git's ids
    digest.update(b"blob %d\0" % size)
    for chunk in data_chunks:
        digest.update(chunk)
    return digest.hexdigest()


def _file_matches(path: bytes, entry: _Entry) -> bool | None:
    """Whether the regular file at ``path`` has ``entry``'s mode and content as it is on disk
    (None: its content differs, ask git with the filters applied; False: not a match)."""
    fd = os.open(path, _READ_FLAGS)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return False  # swapped since it was listed
        if bool(info.st_mode & stat.S_IXUSR) != _FILE_MODES[entry.mode]:
            return False

        def chunks() -> Iterator[bytes]:
            while chunk := os.read(fd, _CHUNK):
                yield chunk

        return True if _blob_id(chunks(), info.st_size, len(entry.oid)) == entry.oid else None
    finally:
        os.close(fd)


def _walk(root: bytes, relative: bytes = b"") -> Iterator[tuple[bytes, os.DirEntry[bytes] | OSError]]:
    """Every entry under ``root`` (relative path, entry), folders before what they hold, links
    never followed; a folder that cannot be read is yielded as its error."""
    try:
        with os.scandir(os.path.join(root, relative) if relative else root) as listing:
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as err:
        yield relative, err
        return
    for entry in entries:
        path = relative + b"/" + entry.name if relative else entry.name
        yield path, entry
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(root, path)


def foreign_paths(git: Git, commit: str, snapshot: Path) -> list[str]:
    """What ``snapshot`` holds that ``commit`` does not have as it is (made, changed, a mode
    changed), and what of the commit it lacks; sorted. ``CompareError`` if git cannot say
    what the commit holds."""
    tree = commit_tree(git, commit)
    folders = {b""}
    for path in tree:
        parts = path.split(b"/")
        folders.update(b"/".join(parts[:i]) for i in range(1, len(parts)))
    root = os.fsencode(snapshot)
    foreign: list[str] = []
    seen: set[bytes] = set()
    ask_git: list[bytes] = []
    for path, entry in _walk(root):
        if isinstance(entry, OSError):
            foreign.append(f"{_shown(path) or '.'} (cannot be read: {entry.strerror})")
            continue
        seen.add(path)
        known = tree.get(path)
        full = os.path.join(root, path)
        try:
            if entry.is_symlink():
                if known is None or known.mode != _LINK_MODE:
                    foreign.append(_shown(path))
                else:
                    target = os.readlink(full)
                    if _blob_id(iter((target,)), len(target), len(known.oid)) != known.oid:
                        foreign.append(_shown(path))
            elif entry.is_dir(follow_symlinks=False):
                if path in folders or (known is not None and known.mode == _GITLINK_MODE):
                    continue
                with os.scandir(full) as listing:
                    empty = next(listing, None) is None
                if empty:
                    foreign.append(_shown(path) + "/")  # a new empty folder (what it holds is listed)
            elif entry.is_file(follow_symlinks=False):
                if known is None or known.mode not in _FILE_MODES:
                    foreign.append(_shown(path))
                    continue
                matches = _file_matches(full, known)
                if matches is None:
                    ask_git.append(path)
                elif not matches:
                    foreign.append(_shown(path))
            else:
                foreign.append(_shown(path))  # a FIFO, socket or device: no commit has one
        except OSError as err:
            foreign.append(f"{_shown(path)} (cannot be read: {err.strerror})")
    foreign.extend(_filtered_differ(git, snapshot, tree, ask_git))
    foreign.extend(_shown(path) for path in tree.keys() - seen)
    return sorted(foreign)


def _filtered_differ(git: Git, snapshot: Path, tree: dict[bytes, _Entry], paths: list[bytes]) -> list[str]:
    """Of the files whose bytes differ from their blob, those that still differ once git's
    filters (line endings, ``.gitattributes``) are applied, as ``git status`` would see them."""
    plain = [p for p in paths if b"\n" not in p]
    differ = [_shown(p) for p in paths if b"\n" in p]  # no line of --stdin-paths can name it
    if not plain:
        return differ
    try:
        out = _git(
            git,
            f"--work-tree={snapshot}",
            "hash-object",
            "--stdin-paths",
            cwd=snapshot,
            stdin=b"".join(p + b"\n" for p in plain),
        )
    except CompareError:
        return differ + [_shown(p) for p in plain]
    ids = out.decode("ascii", "replace").split()
    if len(ids) != len(plain):
        return differ + [_shown(p) for p in plain]
    return differ + [_shown(p) for p, oid in zip(plain, ids, strict=True) if oid != tree[p].oid]
