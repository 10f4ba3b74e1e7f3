"""Spec files from folders and files: discovery, reading, and a cache of parse results.

Discovery takes every ``*.yaml``/``*.yml`` under the given paths, skipping hidden files and
folders and the state and status folders, not following links to folders. The cache keeps
one ``FileResult`` per file keyed by its stat (size, mtime, inode); a file modified within the
last two seconds is re-read regardless (mtime granularity), and results are reused by content
hash, so a warm re-plan reads only what changed.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tfdeclare.core.desired import DesiredState, assemble
from tfdeclare.core.diagnostics import Code, Diagnostic, Severity
from tfdeclare.core.loader import FileResult, LoadContext, content_hash, load_file

_SUFFIXES = (".yaml", ".yml")
_RACY_SECONDS = 2.0


def display_path(path: str, base: str | None) -> str:
    """``path`` relative to ``base`` when it lies below it, else as given."""
    if base and path.startswith(base + os.sep):
        return path[len(base) + 1 :]
    return path


@dataclass(frozen=True, slots=True)
class _StatKey:
    size: int
    mtime_ns: int
    ino: int


class SpecFiles:
    """Loads the desired state from paths, caching per file. Paths are shown as given (or
    relative to ``base`` when one is set and they lie below it)."""

    def __init__(
        self,
        paths: Sequence[Path],
        *,
        context: LoadContext | None = None,
        exclude: Iterable[Path] = (),
        base: Path | None = None,
    ) -> None:
        self.paths = [str(p) for p in paths]
        self.context = context or LoadContext()
        self.exclude = {os.path.realpath(p) for p in exclude}
        self.base = str(base) if base is not None else None
        self._cache: dict[str, tuple[_StatKey, FileResult]] = {}

    def discover(self) -> tuple[list[str], list[Diagnostic]]:
        files: dict[tuple[int, int], str] = {}
        problems: list[Diagnostic] = []
        for path in self.paths:
            try:
                stat = os.stat(path)
            except OSError:
                problems.append(Diagnostic(path, None, None, "no such file or folder", None, Code.READ_ERROR))
                continue
            if os.path.isdir(path):
                if os.path.realpath(path) not in self.exclude:
                    files.update(self._walk(path, stat.st_dev))
            else:
                files.setdefault((stat.st_dev, stat.st_ino), path)
        return sorted(files.values()), problems

    def _walk(self, root: str, device: int) -> Iterable[tuple[tuple[int, int], str]]:
        stack = [root]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                name = entry.name
                if name.startswith("."):
                    continue
                if name.endswith(_SUFFIXES):
                    if entry.is_file():
                        # d_ino from the directory listing: no extra system call
                        yield (
                            (device, entry.inode()) if not entry.is_symlink() else _identity(entry.path),
                            entry.path,
                        )
                elif entry.is_dir(follow_symlinks=False) and os.path.realpath(entry.path) not in self.exclude:
                    stack.append(entry.path)

    def load(self) -> DesiredState:
        files, problems = self.discover()
        # Loading makes many short-lived, acyclic objects: the cyclic collector would only
        # spend time here (about a fifth of a cold 10,000-file load; docs/benchmarks.md).
        collecting = gc.isenabled()
        gc.disable()
        try:
            results = [self._load_one(f) for f in files]
        finally:
            if collecting:
                gc.enable()
        seen = {r.path for r in results}
        for gone in [p for p in self._cache if p not in seen]:
            del self._cache[gone]
        state = assemble(results)
        if problems:
            return DesiredState(
                jobs=state.jobs,
                diagnostics=tuple(problems) + state.diagnostics,
                protected=state.protected,
                invalid_files=state.invalid_files,
                files=state.files,
            )
        return state

    def _load_one(self, path: str) -> FileResult:
        shown = display_path(path, self.base)
        try:
            stat = os.stat(path)
        except OSError as err:
            return _unreadable(shown, err)
        key = _StatKey(stat.st_size, stat.st_mtime_ns, stat.st_ino)
        cached = self._cache.get(shown)
        racy = time.time() - stat.st_mtime < _RACY_SECONDS
        if cached is not None and cached[0] == key and not racy:
            return cached[1]
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except OSError as err:
            return _unreadable(shown, err)
        if cached is not None and cached[1].content_hash == content_hash(data):
            result = cached[1]  # touched, not changed
        else:
            result = load_file(shown, data, self.context)
        self._cache[shown] = (key, result)
        return result


def _identity(path: str) -> tuple[int, int]:
    stat = os.stat(path)
    return stat.st_dev, stat.st_ino


def _unreadable(shown: str, err: OSError) -> FileResult:
    problem = Diagnostic(shown, None, None, f"cannot read: {err.strerror or err}", None, Code.READ_ERROR)
    return FileResult(shown, "", (), (problem,), ())


def no_files_warning(paths: Sequence[Path]) -> Diagnostic:
    where = ", ".join(str(p) for p in paths)
    return Diagnostic(
        where, None, None, "no *.yaml or *.yml files found", None, Code.NO_FILES, Severity.WARNING
    )
