"""Spec files from folders and files: discovery, reading, and a cache of parse results.

Discovery takes every ``*.yaml``/``*.yml`` under the given paths, skipping hidden files and
folders and the state and status folders, not following links to folders. The cache keeps
one ``FileResult`` per file keyed by its stat (size, mtime, inode); a file modified within the
last two seconds is re-read regardless (mtime granularity), and results are reused by content
hash, so a warm re-plan reads only what changed.
"""

from __future__ import annotations

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


def display_path(path: Path, base: Path) -> str:
    try:
        return str(path.relative_to(base))
    except ValueError:
        return str(path)


@dataclass(frozen=True, slots=True)
class _StatKey:
    size: int
    mtime_ns: int
    ino: int


class SpecFiles:
    """Loads the desired state from paths, caching per file."""

    def __init__(
        self,
        paths: Sequence[Path],
        *,
        context: LoadContext | None = None,
        exclude: Iterable[Path] = (),
        base: Path | None = None,
    ) -> None:
        self.paths = [Path(p) for p in paths]
        self.context = context or LoadContext()
        self.exclude = {p.resolve() for p in exclude}
        self.base = (base or Path.cwd()).resolve()
        self._cache: dict[str, tuple[_StatKey, FileResult]] = {}

    def discover(self) -> tuple[list[Path], list[Diagnostic]]:
        files: list[Path] = []
        problems: list[Diagnostic] = []
        for path in self.paths:
            if path.is_file():
                files.append(path)
            elif path.is_dir():
                files.extend(self._walk(path))
            else:
                problems.append(
                    Diagnostic(str(path), None, None, "no such file or folder", None, Code.READ_ERROR)
                )
        unique = sorted({f.resolve(): f for f in files}.values(), key=str)
        return unique, problems

    def _walk(self, root: Path) -> Iterable[Path]:
        if root.resolve() in self.exclude:
            return
        stack = [root]
        while stack:
            folder = stack.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    child = Path(entry.path)
                    if child.resolve() not in self.exclude:
                        stack.append(child)
                elif entry.name.endswith(_SUFFIXES) and entry.is_file():
                    yield Path(entry.path)

    def load(self) -> DesiredState:
        files, problems = self.discover()
        results = [self._load_one(f) for f in files]
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

    def _load_one(self, path: Path) -> FileResult:
        shown = display_path(path.absolute(), self.base)
        try:
            stat = path.stat()
        except OSError as err:
            return _unreadable(shown, err)
        key = _StatKey(stat.st_size, stat.st_mtime_ns, stat.st_ino)
        cached = self._cache.get(shown)
        racy = time.time() - stat.st_mtime < _RACY_SECONDS
        if cached is not None and cached[0] == key and not racy:
            return cached[1]
        try:
            data = path.read_bytes()
        except OSError as err:
            return _unreadable(shown, err)
        if cached is not None and cached[1].content_hash == content_hash(data):
            result = cached[1]  # touched, not changed
        else:
            result = load_file(shown, data, self.context)
        self._cache[shown] = (key, result)
        return result


def _unreadable(shown: str, err: OSError) -> FileResult:
    problem = Diagnostic(shown, None, None, f"cannot read: {err.strerror or err}", None, Code.READ_ERROR)
    return FileResult(shown, "", (), (problem,), ())


def no_files_warning(paths: Sequence[Path]) -> Diagnostic:
    where = ", ".join(str(p) for p in paths)
    return Diagnostic(
        where, None, None, "no *.yaml or *.yml files found", None, Code.NO_FILES, Severity.WARNING
    )
