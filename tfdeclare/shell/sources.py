"""Spec files from folders and files: discovery, reading, and a cache of parse results.

Discovery takes every ``*.yaml``/``*.yml`` under the given paths, skipping hidden files and
folders, the state and status folders and the config file in effect (``tfdeclare.yaml`` beside
the specs is not a job; a file named on the command line is read whatever it is), not
following links to folders. A folder or file
that cannot be listed or looked at is a read error (``Code.READ_ERROR``), never skipped
silently: the listing is then incomplete, and the planner prunes nothing. The cache keeps
one ``FileResult`` per file keyed by its stat (size, mtime, inode); a file modified within the
last two seconds is re-read regardless (mtime granularity), and results are reused by content
hash, so a warm re-plan reads only what changed.

A full rescan (no file events: ``load()`` told nothing) first compares every file's stamp
with the last load's (``shell.stamps``: one ``lstat`` a file, at C speed); the spec files whose
stamp differs, and those that were within the two seconds at the last load, are then patched
in as if told (``_patch``), so a rescan that finds one file changed costs the walk and that
file, not a Python test a file. What a patch cannot take (a link among the spec files, the
same file twice, a folder that could not be listed, a change a patch refuses) takes the full
load, with its diagnostics.

A spec read from standard input (the command line's ``-``) is passed in as bytes and shown as
``<stdin>``.

Files are read only from inside the folders given (in git mode: the repository's snapshot): a
spec file that is a link to a file elsewhere is refused with a read error, in folder mode as
in git mode (a commit adding ``jobs/x.yaml -> /etc/...`` must not make the daemon run a job
defined outside the repository, as CVE-2022-24904 did to Argo CD). A read error keeps every
job as applied, so a refused link never deletes one. Links inside the folder are followed; a
file named on the command line is read wherever it lies (the user chose it).
"""

from __future__ import annotations

import gc
import os
import stat as stat_module
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from pathlib import Path

from tfdeclare.core.diagnostics import Code, Diagnostic, Severity
from tfdeclare.core.plan.desired import DesiredState, assemble, holds_no_job
from tfdeclare.core.plan.scope import PruneScope
from tfdeclare.core.spec.documents import MAX_FILE_BYTES, too_large
from tfdeclare.core.spec.loader import STDIN_NAME, FileResult, SpecCheck, content_hash, load_file
from tfdeclare.core.spec.policy import SpecSources
from tfdeclare.shell.stamps import RACY_SECONDS, Folder, Stamps, stamp, walked_folder

_SUFFIXES = (".yaml", ".yml")


def _spec_name(name: str) -> bool:
    """Whether discovery takes a file of this name in a folder."""
    return not name.startswith(".") and name.endswith(_SUFFIXES)


def spec_sources(paths: Sequence[str | Path], base: str | Path | None = None) -> SpecSources:
    """Where the spec files of ``paths`` lie, for the policy's source-folder rule: each folder
    given (a file's own folder; the current folder for ``-``, standard input) and ``base``
    when given (git mode: the checkout; links are resolved when a path is checked, and a
    folder given counts only where it resolves inside ``base``). File names are taken from
    ``base``, else from the current folder."""
    here = os.path.abspath(base if base is not None else os.curdir)
    roots = [here] if base is not None else []
    for path in paths:
        given = os.path.join(here, "." if str(path) == "-" else path)
        roots.append(given if os.path.isdir(given) else os.path.dirname(given))
    return SpecSources(tuple(dict.fromkeys(roots)), here, os.path.realpath, confined=base is not None)


def prune_scope(paths: Sequence[str | Path], shown: Sequence[str] | None = None) -> PruneScope:
    """What ``--prune`` of a plan read from ``paths`` may reach (``core.plan.scope``): each path
    made absolute with its links resolved, as the job records' source folders are; ``-`` is
    standard input."""
    roots = tuple(dict.fromkeys(os.path.realpath(p) for p in paths if str(p) != "-"))
    given = tuple(shown) if shown is not None else tuple(str(p) for p in paths)
    return PruneScope(roots, stdin=any(str(p) == "-" for p in paths), shown=given)


def display_path(path: str, base: str | None) -> str:
    """``path`` relative to ``base`` when it lies below it (``.`` for ``base`` itself), else as
    given. In git mode ``base`` is the snapshot applied, so every path a problem names is
    the repository's (``jobs/g.yaml``), never one inside the state folder."""
    if base and path.startswith(base + os.sep):
        return path[len(base) + 1 :]
    if base and path in (base, base + os.sep):
        return "."
    return path


class SpecFiles:
    """Loads the desired state from paths, caching per file. Paths are shown as given (or
    relative to ``base`` when one is set and they lie below it)."""

    def __init__(
        self,
        paths: Sequence[Path],
        *,
        checks: Sequence[SpecCheck] = (),
        exclude: Iterable[Path] = (),
        skip_files: Iterable[Path] = (),
        base: Path | None = None,
        confined: bool = False,
        stdin: bytes | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.paths = [str(p) for p in paths]
        self.stdin = stdin  # a spec read from standard input, loaded as <stdin>
        self.clock = clock  # the wall clock the racy window is measured on (files' mtimes)
        self.checks = tuple(checks)
        self.exclude = {os.path.realpath(p) for p in exclude}
        # Files a folder's walk passes over, by their real folder: names there (the path as
        # given, and with its links resolved: a config named through a link is passed over
        # where the link lies and where it leads).
        self._skipped: dict[str, set[str]] = {}
        for skipped in skip_files:
            for form in (
                os.path.join(
                    os.path.realpath(os.path.dirname(os.path.abspath(skipped))), os.path.basename(skipped)
                ),
                os.path.realpath(skipped),
            ):
                self._skipped.setdefault(os.path.dirname(form), set()).add(os.path.basename(form))
        self.base = str(base) if base is not None else None
        # Git mode: the folders given are the repository's, not the user's (``--path``): each
        # must lie inside ``base`` (the snapshot) with its links resolved, and so must every
        # spec file; a path committed as a link out of the repository is refused.
        self.confined = confined and self.base is not None
        # Where spec files may really lie (their links resolved): the folders given, the base;
        # only the base when confined. Resolved at each scan: ``base`` may be a link that a
        # new revision moves (git mode's ``current``).
        self.roots = self._roots()
        self._cache: dict[str, tuple[tuple[int, int, int], FileResult]] = {}
        # The last state and the per-file results it was assembled from (None after a patch).
        self._last: tuple[list[FileResult] | None, DesiredState] | None = None
        self._files: dict[str, os.stat_result] = {}  # spec files found by the last scan
        # For a rescan (``shell.stamps``): the stamps of the last look (None: the next load
        # is a full one), and the spec files within the racy window then (looked at again).
        self._stamps: Stamps | None = None
        self._racy: set[str] = set()
        self._walked = walked_folder(self.exclude, _SUFFIXES)

    def discover(self) -> tuple[list[tuple[str, os.stat_result]], list[Diagnostic]]:
        """Every spec file with its stat, once each (links to the same file count once)."""
        files, problems, _ = self._discover(Stamps(self.clock()))
        return files, problems

    def _discover(
        self, stamps: Stamps
    ) -> tuple[list[tuple[str, os.stat_result]], list[Diagnostic], Stamps | None]:
        """``discover``, and ``stamps`` filled for the next rescan (None when that must load
        everything: a link among the spec files, the same file twice, or a problem)."""
        files: dict[tuple[int, int], tuple[str, os.stat_result]] = {}
        problems: list[Diagnostic] = []
        plain = True  # no link among the spec files, no file twice
        self.roots = self._roots()
        for path in self.paths:
            if self.confined and os.path.lexists(path):
                refused = self._outside(path, "a folder or file given")
                if refused is not None:
                    problems.append(refused)
                    continue
            try:
                stat = os.stat(path)
            except OSError as err:  # a whole-file problem (line 1)
                shown = display_path(path, self.base)  # (git mode: the --path, as the repository has it)
                if os.path.lexists(path):  # a dangling link or a loop: as a walk reports it
                    problems.append(_read_error(shown, 1, "cannot read", err))
                else:
                    problems.append(
                        Diagnostic(shown, 1, None, "no such file or folder", None, Code.READ_ERROR)
                    )
                continue
            if os.path.isdir(path):
                if os.path.realpath(path) not in self.exclude:
                    plain &= self._walk(path, files, problems, stamps)
            else:
                plain &= (stat.st_dev, stat.st_ino) not in files
                files.setdefault((stat.st_dev, stat.st_ino), (path, stat))
                stamps.given[path] = stamp(stat)
        found = sorted(files.values())  # by path: no two are the same, no stat compared
        return found, problems, stamps if plain and not problems else None

    def _walk(
        self,
        root: str,
        files: dict[tuple[int, int], tuple[str, os.stat_result]],
        problems: list[Diagnostic],
        stamps: Stamps,
    ) -> bool:
        """Spec files below ``root`` into ``files`` (by device and inode: the last path of a
        file seen twice is kept), each folder's and spec file's stamp into ``stamps``; what
        cannot be read is added to ``problems``. False when a spec file is a link or a file
        was seen twice (a rescan then loads everything)."""
        plain = True
        stack = [root]
        while stack:
            folder = stack.pop()
            try:
                folder_stamp = stamp(os.stat(folder))  # before the listing: a later change shows
                entries = list(os.scandir(folder))
            except OSError as err:
                shown = display_path(folder, self.base)
                problems.append(_read_error(shown, None, "cannot list this folder", err))
                continue
            stamped: dict[str, int] = {}
            below: list[str] = []
            skipped = self._skipped.get(os.path.realpath(folder), ()) if self._skipped else ()
            for entry in entries:
                name = entry.name
                if name.startswith(".") or name in skipped:
                    continue
                if name.endswith(_SUFFIXES):
                    if entry.is_symlink():
                        plain = False
                        refused = self._outside(entry.path)
                        if refused is not None:
                            problems.append(refused)
                            continue
                    try:
                        stat = entry.stat()  # the one system call per file of a warm load
                    except OSError as err:
                        problems.append(
                            _read_error(display_path(entry.path, self.base), 1, "cannot read", err)
                        )
                        continue
                    if stat_module.S_ISREG(stat.st_mode):
                        key = (stat.st_dev, stat.st_ino)
                        plain = plain and key not in files
                        files[key] = (entry.path, stat)
                    if not stat_module.S_ISDIR(stat.st_mode):
                        stamped[entry.path] = stat.st_ctime_ns
                elif entry.is_dir(follow_symlinks=False) and os.path.realpath(entry.path) not in self.exclude:
                    below.append(entry.path)
            stack.extend(below)
            stamps.folders[folder] = Folder(folder_stamp, stamped, below)
        return plain

    def _rescan(self, started: float) -> DesiredState | None:
        """What a full load would give, from the spec files whose stamp changed since the
        last load and those then within the racy window, patched in (``shell.stamps``); None
        when the full load must look (see there, and ``_patch``)."""
        last, stamps = self._last, self._stamps
        if last is None or stamps is None or self.stdin is not None:
            return None
        changed = stamps.changes(self.paths, self._walked, _spec_name, started)
        if changed is None:
            return None
        changed |= self._racy
        if not changed:
            return last[1]  # nothing changed: the same desired state, object and all
        if not self._incremental(changed):
            return None
        now = self.clock()
        state = self._patch(changed, now)
        if state is not None:
            files = self._files
            self._racy = {p for p in changed if p in files and _racy(files[p], now)}
        return state

    def load(self, changed: Collection[str] | None = None) -> DesiredState:
        """The desired state. ``changed``, when the caller knows it (the daemon's file
        events), lists the only paths that may have changed since the last load: then just
        those are read again and the previous state patched, instead of every file being
        looked at (a full scan stats them all)."""
        if changed is not None and not changed and self._last is not None:
            return self._last[1]  # nothing changed since the last load
        now = self.clock()
        if self._escaped():
            changed, self._stamps = None, None  # the full load refuses it, and says why
        if changed is not None and self._incremental(changed):
            patched = self._patch(changed, now)
            if patched is not None:
                self._racy.update(changed)  # looked at again by the next rescan
                return patched
        rescanned = self._rescan(now)
        if rescanned is not None:
            return rescanned
        files, problems, stamps = self._discover(Stamps(self.clock()))
        now = self.clock()
        # Loading makes many short-lived, acyclic objects: the cyclic collector would only
        # spend time here (about a fifth of a cold 10,000-file load; docs/benchmarks.md).
        # What the load keeps then goes to the oldest generation at once (freeze, unfreeze:
        # two list moves), instead of the next young collection walking all of it (0.18 s of
        # a 10,000-file plan's 2.5 s of CPU, issue 23); a full collection still sees it.
        collecting = gc.isenabled()
        gc.disable()
        try:
            results = self._load_all(files, now)
        finally:
            if collecting:
                gc.freeze()
                gc.unfreeze()
                gc.enable()
        if self.stdin is not None:
            results.append(load_file(STDIN_NAME, self.stdin, self.checks))
        if len(self._cache) > len(results):
            seen = {r.path for r in results}
            for gone in [p for p in self._cache if p not in seen]:
                del self._cache[gone]
        self._files = dict(files)
        self._stamps = stamps if self.stdin is None else None
        self._racy = {path for path, stat in files if _racy(stat, now)}
        last = self._last
        if (
            last is not None
            and last[0] is not None
            and not problems
            and len(last[0]) == len(results)
            and all(a is b for a, b in zip(last[0], results, strict=True))
        ):
            return last[1]  # nothing changed: the same desired state, object and all
        state = assemble(results)
        if problems:
            state = replace(state, diagnostics=tuple(problems) + state.diagnostics)
        self._last = (results, state)
        return state

    @staticmethod
    def _incremental(changed: Collection[str]) -> bool:
        """Only changes to spec files can be patched in (a folder appearing or going, a rename
        of a folder, ... needs a scan)."""
        return all(path.endswith(_SUFFIXES) and not os.path.isdir(path) for path in changed)

    def _patch(self, changed: Collection[str], now: float) -> DesiredState | None:
        """The previous state with the changed files' jobs replaced, when that cannot affect
        anything else: the state was clean, stays clean (every changed file still holds a
        job), and no name moves between files. Otherwise None, and the caller loads everything."""
        if self._last is None or self._last[1].diagnostics:
            return None
        changed = [p for p in changed if p in self.paths or not self._passed_over(p)]
        previous = self._last[1]
        # dict.copy clones the table (about 4 ns a job at 10,000); dict() of a dict that ever
        # lost a key inserts every key again (about 45 ns a job): the told re-plan's one copy
        jobs = previous.jobs.copy() if isinstance(previous.jobs, dict) else dict(previous.jobs)
        files = self._files
        added_or_removed = False
        names: set[str] = set()  # whose job was added, replaced or removed
        for path, stat in sorted(_stats(changed), key=_gone_first):
            shown = display_path(path, self.base)
            old = self._cache.get(shown)
            new: FileResult | None = None
            if stat is None and os.path.lexists(path):
                return None  # there, but unreadable (a dangling link, a loop): a full load says why
            if stat is None or not stat_module.S_ISREG(stat.st_mode):
                self._cache.pop(shown, None)
                added_or_removed |= files.pop(path, None) is not None
            else:
                added_or_removed |= path not in files
                files[path] = stat
                if os.path.islink(path):
                    return None  # a full load checks where it leads
                new = self._load_one(path, stat, now)
                if new.diagnostics or holds_no_job(new):
                    return None
            gone = {job.name for job in (old[1].jobs if old is not None else ()) if jobs.get(job.name) is job}
            names |= gone
            for job in new.jobs if new is not None else ():
                if job.name in jobs and job.name not in gone:
                    return None  # the name is defined elsewhere too: assemble reports it
                jobs[job.name] = job  # replaced where it was: the table keeps no gap to copy
                names.add(job.name)
                gone.discard(job.name)
            for name in gone:
                del jobs[name]
        shown_files = (
            tuple(sorted(display_path(p, self.base) for p in files)) if added_or_removed else previous.files
        )
        names = {n for n in names if jobs.get(n) is not previous.jobs.get(n)}  # touched, not changed: out
        if not names and shown_files is previous.files:
            return previous  # only touched: the same state, object and all
        state = DesiredState(jobs, (), {}, frozenset(), shown_files, patch=(previous.token, frozenset(names)))
        self._last = (None, state)  # no per-file list: the next full load compares nothing
        return state

    def _passed_over(self, path: str) -> bool:
        """Whether a folder's walk passes over the file ``path`` (``skip_files``)."""
        names = self._skipped.get(os.path.realpath(os.path.dirname(path))) if self._skipped else None
        return names is not None and os.path.basename(path) in names

    def _escaped(self) -> bool:
        """Confined (git mode): whether a path given now leads out of ``base`` (a commit made
        ``--path`` a link); a patch or a rescan would read through it."""
        if not self.confined:
            return False
        self.roots = self._roots()
        return any(os.path.lexists(p) and self._outside(p, "given") is not None for p in self.paths)

    def _roots(self) -> list[str]:
        """Where spec files may really lie, links resolved (see ``__init__``)."""
        given = (
            [self.base] if self.confined and self.base else [*self.paths, *([self.base] if self.base else [])]
        )
        return [os.path.realpath(p) for p in given]

    def _outside(self, path: str, what: str = "") -> Diagnostic | None:
        """The refusal of ``path`` (a link among the spec files; ``what``: a path given, in git
        mode) when it leads outside every root, else None."""
        real = os.path.realpath(path)
        if any(real == root or real.startswith(root.rstrip(os.sep) + os.sep) for root in self.roots):
            return None
        if what:  # a whole folder: no line
            message = (
                f"{what} leads through a link to {real}, outside the repository: refused "
                "(files are read only from inside it); every job stays as applied"
            )
            return Diagnostic(display_path(path, self.base), None, None, message, None, Code.READ_ERROR)
        message = f"a link to {real}, outside the folder: refused (files are read only from inside it)"
        return Diagnostic(display_path(path, self.base), 1, None, message, None, Code.READ_ERROR)

    def _load_all(self, files: Sequence[tuple[str, os.stat_result]], now: float) -> list[FileResult]:
        """``_load_one`` of each file, with its test for an unchanged file inline (a full rescan
        of 10,000 unchanged files does little else; docs/benchmarks.md)."""
        cache, base = self._cache, self.base
        below = base + os.sep if base else None
        results: list[FileResult] = []
        add = results.append
        for path, stat in files:
            cached = cache.get(path[len(below) :] if below and path.startswith(below) else path)
            if (
                cached is not None
                and cached[0] == (stat.st_size, stat.st_mtime_ns, stat.st_ino)
                and now - stat.st_mtime >= RACY_SECONDS
            ):
                add(cached[1])
            else:
                add(self._load_one(path, stat, now))
        return results

    def _load_one(self, path: str, stat: os.stat_result, now: float) -> FileResult:
        shown = display_path(path, self.base)
        key = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        cached = self._cache.get(shown)
        if cached is not None and cached[0] == key and now - stat.st_mtime >= RACY_SECONDS:
            return cached[1]
        if stat.st_size > MAX_FILE_BYTES:  # refused unread (a 1 GB file pushed is not read)
            result = _too_large(shown, stat.st_size)
            self._cache[shown] = (key, result)
            return result
        try:
            data = _read(path, stat.st_size)
        except OSError as err:
            return _unreadable(shown, err)
        if cached is not None and cached[1].content_hash == content_hash(data):
            result = cached[1]  # touched, not changed
        else:
            result = load_file(shown, data, self.checks)
        self._cache[shown] = (key, result)
        return result


def _stats(paths: Iterable[str]) -> list[tuple[str, os.stat_result | None]]:
    """Each path but a hidden one with its stat (None: it is gone)."""
    found: list[tuple[str, os.stat_result | None]] = []
    for path in paths:
        if not os.path.basename(path).startswith("."):
            try:
                found.append((path, os.stat(path)))
            except OSError:
                found.append((path, None))
    return found


def _gone_first(looked: tuple[str, os.stat_result | None]) -> tuple[bool, str]:
    """Files gone (or no longer regular) first, so that a job moved from one file to another
    (a rename) is removed before it is added again."""
    stat = looked[1]
    return (stat is not None and stat_module.S_ISREG(stat.st_mode), looked[0])


def _racy(stat: os.stat_result, now: float) -> bool:
    """Whether a rescan looks at this file again whatever its stamp (``shell.stamps``): it
    was modified or changed within the racy window."""
    return now - stat.st_mtime < RACY_SECONDS or now - stat.st_ctime < RACY_SECONDS


def load_spec_file(path: str, checks: Sequence[SpecCheck]) -> tuple[bytes, FileResult]:
    """A spec file named by the user (``convert``), its bytes and what loading them gives,
    as discovery reads one: a file over the loader's limit is refused unread. Raises
    ``OSError`` when it cannot be read."""
    size = os.stat(path).st_size
    if size > MAX_FILE_BYTES:
        return b"", _too_large(path, size)
    data = _read(path, size)
    return data, load_file(path, data, checks)


def _too_large(shown: str, size: int) -> FileResult:
    return FileResult(shown, "", (), (too_large(shown, size),), ())


def _read(path: str, size: int) -> bytes:
    """The file's bytes, at most one more than ``MAX_FILE_BYTES`` (a file that grew since its
    ``stat`` is refused by the loader, not read whole), by ``os.read``: a buffered file object
    costs more than the read. A read of a regular file that gives less than asked has reached
    its end: most spec files take one read, not a second that finds nothing."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        asked = max(size + 1, 1 << 16)
        parts, left = [], MAX_FILE_BYTES + 1
        while left > 0 and (chunk := os.read(fd, min(asked, left))):
            parts.append(chunk)
            left -= len(chunk)
            if len(chunk) < asked:
                break
        return b"".join(parts)
    finally:
        os.close(fd)


def _read_error(shown: str, line: int | None, what: str, err: OSError) -> Diagnostic:
    """A file's read error is a whole-file problem (line 1); a folder's has no line."""
    return Diagnostic(shown, line, None, f"{what}: {err.strerror or err}", None, Code.READ_ERROR)


def _unreadable(shown: str, err: OSError) -> FileResult:
    return FileResult(shown, "", (), (_read_error(shown, 1, "cannot read", err),), ())


def no_files_warning(paths: Sequence[Path]) -> Diagnostic:
    where = ", ".join(str(p) for p in paths)
    return Diagnostic(
        where, None, None, "no *.yaml or *.yml files found", None, Code.NO_FILES, Severity.WARNING
    )
