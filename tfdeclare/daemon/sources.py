"""Where the daemon reads the desired state: a folder (filesystem events) or a git branch.

Both only *say* when to look again (``on_change``); the daemon's pass reads the files.

- ``FolderSource`` watches a folder with watchdog, ignoring hidden files and the state and
  status folders, so status writes never trigger a pass.
- ``GitSource`` clones into the state folder and, on ``sync()``, fetches the branch (force
  pushes included) and materialises its head as an immutable snapshot,
  ``revisions/<commit>/`` (written from git's objects, made read-only, renamed into place
  complete); ``current`` is a link to the snapshot being applied, and the daemon reads specs
  through it. Tasks run from the snapshot of the revision they were launched with, which
  stays as it was for their whole life: a snapshot is removed only once it is neither current
  nor named by ``in_use`` (the daemon's job records and live tasks), and never while it holds
  files its commit does not (a task running as root writes through read-only modes; the
  folder is compared with the commit's tree, ``snapshots.py``): that one
  is kept and logged, and ``tfdeclare gc`` removes it when the operator says so. The clone's own working
  tree is never checked out or cleaned. Status files are committed to their own branch
  (default ``tfdeclare-status``) with git plumbing, never to the watched branch, and pushed
  when asked; a commit that could not be written or pushed (a protected branch, a hook that
  refuses it) is tried again at later passes, backing off (``status_retry_s``), until the
  remote has it, and ``write_status`` raises the reason meanwhile. A failed fetch keeps the
  last snapshot (the last applied state runs on); a corrupt clone (what git says of one,
  ``_corrupt``) is moved aside and cloned again, never one that a full disk or a lack of
  descriptors stopped. Git runs as short-lived, bounded commands (``gitrun.Git``), no process
  kept between them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tfdeclare.core.run.record import Revision
from tfdeclare.core.urls import hide_credentials, without_credentials
from tfdeclare.daemon.gitrun import NETWORK_TIMEOUT_S, Git, GitError
from tfdeclare.daemon.gitrun import problem as git_problem
from tfdeclare.daemon.signatures import SignaturePolicy, Verifier
from tfdeclare.daemon.snapshots import CompareError, foreign_paths
from tfdeclare.files import read_regular
from tfdeclare.shell.statuswriter import MAX_BYTES as STATUS_MAX_BYTES

log = logging.getLogger("tfdeclare.daemon")

_SPEC_SUFFIXES = (".yaml", ".yml")


def _revision(git: Git, commit: str) -> Revision:
    """A commit as the revision the records name (its subject: the message's first line)."""
    out = git("show", "-s", "--format=%H%x00%an%x00%ae%x00%ct%x00%B", commit, "--")
    sha, name, email, when, message = out.split("\0", 4)
    return Revision(
        commit=sha, author=f"{name} <{email}>", time=float(when), subject=message.split("\n", 1)[0]
    )


# What git says of a clone that is not one, or whose objects are damaged: only these set it
# aside (a full disk, a read-only folder, too many open files are not the clone's fault).
_CORRUPT = ("not a git repository", "bad object", "corrupt", "invalid object", "bad tree", "unable to read")
_NOT_CORRUPT = (
    "no space left",
    "too many open files",
    "read-only file system",
    "permission denied",
    "cannot allocate memory",
    "disk quota",
)


def _corrupt(err: GitError) -> bool:
    said = err.message.lower()
    return (
        err.started
        and not err.timed_out
        and any(p in said for p in _CORRUPT)
        and not any(p in said for p in _NOT_CORRUPT)
    )


class SourceError(Exception):
    """The source cannot be read now (unreachable remote, corrupt clone, missing folder)."""


STATUS_RETRY_FIRST_S = 2.0
STATUS_RETRY_MAX_S = 300.0


def status_retry_s(failures: int) -> float:
    """How long to wait before trying the status branch again after ``failures`` failures in a
    row: doubling from ``STATUS_RETRY_FIRST_S`` up to ``STATUS_RETRY_MAX_S``."""
    return min(STATUS_RETRY_MAX_S, STATUS_RETRY_FIRST_S * 2.0 ** max(0, min(failures - 1, 16)))


def check_branches(settings: GitSettings) -> None:
    """``SourceError`` naming the option whose branch name git refuses (the daemon's start)."""
    for option, name in (("--branch", settings.branch), ("--status-branch", settings.status_branch)):
        problem = branch_problem(name)
        if problem is not None:
            raise SourceError(f"{option} {name!r}: {problem}")


def branch_problem(name: str) -> str | None:
    """Why ``name`` cannot be a branch (git's ``check-ref-format --branch`` rules), or None."""
    if not name or name.startswith("-"):
        return "not a valid branch name"
    try:
        checked = subprocess.run(
            ["git", "check-ref-format", "--branch", name],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"cannot check it with git ({err})"
    if checked.returncode != 0 or checked.stdout.strip() != name:
        return "not a valid branch name (git check-ref-format --branch refuses it)"
    return None


def push_problem(stderr: str, code: int) -> str:
    """What a failed push said: the remote's refusal of the ref (``[remote rejected] ... (why)``)
    before git's own last words."""
    refused = [
        line.split("]", 1)[1].strip()
        for line in stderr.splitlines()
        if "[remote rejected]" in line or "[rejected]" in line
    ]
    return "; ".join(refused) if refused else git_problem(stderr, code)


class FolderSource:
    rejected: tuple[str, str] | None = None  # a folder has no signatures
    whole = False  # its files are read while they are written: the daemon's settle time applies
    kept: Mapping[str, list[str]] = MappingProxyType({})  # a folder has no snapshots

    def __init__(self, folder: Path, ignore: list[Path]) -> None:
        self.folder = folder
        self.ignore = [str(p.resolve()) for p in ignore]
        self._observer: Any = None

    @property
    def description(self) -> str:
        return f"folder {self.folder}"

    @property
    def problem_path(self) -> str:
        """What a problem of the source itself is named by (``core.plan.problems``)."""
        return str(self.folder)

    @property
    def specs_path(self) -> Path:
        return self.folder

    def sync(self) -> Revision | None:
        if not self.folder.is_dir():
            raise SourceError(f"{self.folder} is not a folder")
        return None

    def _relevant(self, path: str) -> bool:
        real = os.path.realpath(path)
        if any(real == p or real.startswith(p + os.sep) for p in self.ignore):
            return False
        name = os.path.basename(path)
        if name.startswith("."):
            return False
        return name.endswith(_SPEC_SUFFIXES) or os.path.isdir(path) or "." not in name

    def watch(self, on_change: Callable[[list[str]], None]) -> None:
        """Report the paths that changed (the daemon re-reads only those, until its next
        resync reads everything)."""
        from watchdog.events import FileSystemEvent, FileSystemEventHandler
        from watchdog.observers import Observer

        source = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return
                paths = [p for p in (str(event.src_path), str(getattr(event, "dest_path", "") or "")) if p]
                relevant = [p for p in paths if source._relevant(p)]
                if relevant:
                    on_change(relevant)

        observer = Observer()
        observer.schedule(Handler(), str(self.folder), recursive=True)
        observer.daemon = True
        observer.start()
        self._observer = observer

    def write_status(self, status_dir: Path, revision: Revision | None) -> None:
        """Folder mode: the status folder is the write-back."""

    def close(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(timeout=2)


_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def _remove_tree(root: Path) -> None:
    """Remove a snapshot folder (read-only: its folders are made writable first)."""
    if not root.exists():
        return
    for folder, _, _ in os.walk(root):
        with contextlib.suppress(OSError):
            os.chmod(folder, stat.S_IRWXU)
    shutil.rmtree(root, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class GitSettings:
    url: str
    branch: str = "main"
    subdir: str = "."
    status_branch: str = "tfdeclare-status"
    push_status: bool = False
    signatures: SignaturePolicy | None = None  # verify the head's signature before applying it
    timeout_s: float = NETWORK_TIMEOUT_S  # clone, fetch and push each (daemon.gitTimeoutSeconds)


class GitSource:
    # A revision is read from its snapshot, written whole and made current by one rename: never
    # half-written, so the daemon applies it at once (no settle time).
    whole = True

    def __init__(
        self, settings: GitSettings, workdir: Path, *, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        if settings.status_branch == settings.branch:
            raise SourceError(f"the status branch must not be the watched branch ({settings.branch})")
        subdir = Path(settings.subdir)
        if subdir.is_absolute() or ".." in subdir.parts:
            raise SourceError(f"--path must be a folder inside the repository, not {settings.subdir}")
        self.settings = settings
        self.workdir = workdir
        self.clone_dir = workdir / "checkout"  # the repository (its working tree is not used)
        self.revisions_dir = workdir / "revisions"
        self.current = workdir / "current"  # a link to the snapshot being applied
        # Folders in use (job records' source folders, live tasks'): the snapshots that hold
        # one are kept. The daemon sets this once its controller exists; until then, all are.
        self.in_use: Callable[[], Collection[str]] | None = None
        # Unused snapshots kept for the files tasks wrote into them: commit -> those files
        self.kept: dict[str, list[str]] = {}
        self._lock = threading.Lock()  # the snapshots, the status branch, setting the clone aside
        self._fetching = threading.Lock()  # one fetch (or clone) at a time
        self.revision: Revision | None = None
        self._last_status_tree: str | None = None
        # The status branch: the commit the local ref holds and the one the remote was last
        # seen to take (pushed); a failure is tried again after ``status_retry_s``, on this
        # clock, and said meanwhile (``status_error``).
        self._monotonic = monotonic
        self._status_commit: str | None = None
        self._pushed: str | None = None
        self._status_failures = 0
        self._status_retry_at = 0.0
        self.status_error: str | None = None
        self._unreadable_status: set[str] = set()  # said once each (the status folder is evidence)
        # (commit, why) of a head that was fetched but not applied: its signature failed
        self.rejected: tuple[str, str] | None = None
        self.verifier = Verifier(settings.signatures, workdir) if settings.signatures is not None else None
        self.git = Git(self.clone_dir / ".git", settings.timeout_s)  # every git command it runs

    @property
    def description(self) -> str:
        """What the source is, as logs, pages, the lock file and errors name it: its URL
        without the credentials it may carry."""
        return f"git {without_credentials(self.settings.url)} branch {self.settings.branch}" + (
            f" path {self.settings.subdir}" if self.settings.subdir not in ("", ".") else ""
        )

    @property
    def problem_path(self) -> str:
        """What a problem of the source itself (a failed fetch, an unverified head) is named by:
        its URL without credentials (problems go to files, pages and webhooks)."""
        return without_credentials(self.settings.url)

    @property
    def specs_path(self) -> Path:
        return self.current / self.settings.subdir

    def _clone(self) -> None:
        """Clone the repository when there is no clone yet (into a temporary folder, renamed
        into place once complete)."""
        if (self.clone_dir / ".git").exists():
            return
        self.workdir.mkdir(parents=True, exist_ok=True)
        tmp = self.workdir / f".clone-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        self._remote("clone", "--quiet", "--no-checkout", "--", self.settings.url, str(tmp), repository=False)
        tmp.rename(self.clone_dir)

    def _remote(self, verb: str, *args: str, repository: bool = True) -> None:
        """``git VERB ARGS`` with the remote (clone, fetch, push): ``SourceError`` naming the
        verb and the URL (without credentials) when it fails or times out."""
        try:
            self.git(verb, *args, network=True, repository=repository)
        except GitError as err:
            if not err.started:  # no process: said as any other git command's
                raise
            raise SourceError(f"git {verb} {self.problem_path}: {err.message}") from err

    def sync(self) -> Revision:
        """Fetch the branch and make its head the current snapshot (``fetch`` then
        ``apply_fetched``). Raises ``SourceError``; the previous snapshot then stays current."""
        self.fetch()
        return self.apply_fetched()

    def fetch(self) -> None:
        """The network's part of a sync: clone when there is no clone, fetch the branch. It
        may take as long as ``settings.timeout_s`` (each of clone and fetch): the daemon runs it
        beside its passes, which go on with the current snapshot meanwhile; it touches no
        snapshot, and the local commands of a pass (``write_status``) may run beside it.
        Raises ``SourceError``."""
        with self._fetching:
            try:
                self._clone_checked()
                branch = self.settings.branch
                self._remote(
                    "fetch",
                    "--quiet",
                    "--prune",
                    "--force",
                    "origin",
                    f"+refs/heads/{branch}:refs/remotes/origin/{branch}",
                )
            except GitError as err:
                raise self._local_error(err) from err

    def _clone_checked(self) -> None:
        """Clone when there is no clone yet; find an unusable one before the network."""
        try:
            self._clone()
        except OSError as err:  # the state folder (full, read-only): nothing set aside
            raise SourceError(f"git: cannot prepare the clone in {self.workdir}: {err}") from err
        self.git("rev-parse", "--git-dir")

    def _local_error(self, err: GitError) -> SourceError:
        """The error of a git command on the clone; a damaged clone is set aside (it is
        cloned again by the next fetch)."""
        if _corrupt(err):
            with self._lock:
                self._set_aside()
            return SourceError(
                f"the clone in {self.clone_dir} is unusable ({err.message}); it will be cloned again"
            )
        return SourceError(f"git: {err.message}")

    def apply_fetched(self) -> Revision:
        """The local part of a sync: make the fetched head of the branch the current snapshot
        (when its signature verifies). Raises ``SourceError``; the previous snapshot then stays
        current."""
        try:
            with self._lock:
                commit = self.git(
                    "rev-parse",
                    "--verify",
                    "--end-of-options",
                    f"refs/remotes/origin/{self.settings.branch}^{{commit}}",
                )
                if self._refused(commit):
                    self.revision = self.revision or self._last_good()
                    if self.revision is None:  # no good revision yet: nothing to apply
                        raise SourceError(self.rejected[1] if self.rejected else "unverified")
                    return self.revision
                try:
                    self._make_current(self._snapshot(commit))
                    self._remove_unused(commit)
                except OSError as err:  # the folder, not the clone: keep the clone
                    raise SourceError(f"cannot write the snapshot of {commit[:12]}: {err}") from err
                self.revision = _revision(self.git, commit)
                return self.revision
        except GitError as err:
            raise self._local_error(err) from err

    def _last_good(self) -> Revision | None:
        """After a restart: the snapshot current before it, if its commit verifies (so a head
        refused now keeps that one running, and the jobs' status says why)."""
        if not self.current.is_symlink():
            return None
        commit = os.path.basename(os.readlink(self.current))
        if not (self.workdir / os.readlink(self.current)).is_dir():
            return None
        if self.verifier is not None and self.verifier.problem(self.git, commit) is not None:
            return None
        return _revision(self.git, commit)

    def _refused(self, commit: str) -> bool:
        """Whether the head ``commit`` fails signature verification (``rejected`` says why)."""
        problem = self.verifier.problem(self.git, commit) if self.verifier is not None else None
        if problem is None:
            self.rejected = None
            return False
        kept = f"; revision {self.revision.commit[:12]} keeps running" if self.revision else ""
        rejected = (commit, f"revision {commit[:12]} is not applied: {problem}{kept}")
        if rejected != self.rejected:
            log.warning("%s", rejected[1])
        self.rejected = rejected
        return True

    def _snapshot(self, commit: str) -> str:
        """``revisions/<commit>`` made from git's objects (complete, read-only) if missing;
        returns its path relative to the work folder."""
        relative = f"{self.revisions_dir.name}/{commit}"
        if (self.workdir / relative).is_dir():
            return relative
        staged = self.revisions_dir / f".{commit}.tmp"
        _remove_tree(staged)
        staged.mkdir(parents=True)
        index = {"GIT_INDEX_FILE": str(self.workdir / "snapshot-index")}
        self.git("read-tree", commit, env=index)
        self.git("checkout-index", "--all", "--force", f"--prefix={staged}/", env=index)
        for folder, _, files in os.walk(staged):
            for name in files:
                path = os.path.join(folder, name)
                if not os.path.islink(path):
                    os.chmod(path, os.stat(path).st_mode & ~_WRITE_BITS)
            os.chmod(folder, os.stat(folder).st_mode & ~_WRITE_BITS)
        staged.rename(self.workdir / relative)
        return relative

    def _make_current(self, snapshot: str) -> None:
        if not self.current.is_symlink() or os.readlink(self.current) != snapshot:
            staged = self.workdir / ".current.tmp"
            staged.unlink(missing_ok=True)
            staged.symlink_to(snapshot)  # relative: the state folder may move
            staged.replace(self.current)

    def _remove_unused(self, current: str) -> None:
        """Remove the snapshots (and leftovers of interrupted ones) that are neither current
        nor hold a folder in use, unless one holds files its commit does not (a task running
        as root can write through the read-only modes): that one is kept, and said so once."""
        if self.in_use is None:
            return
        for name, path in self.unused(current, self.in_use()):
            if name in self.kept:
                continue
            foreign = self.foreign_files(name)
            if foreign:
                self.kept[name] = foreign
                log.warning(
                    "keeping the snapshot of revision %s in %s: no job uses it, but it holds %d "
                    "file(s) the commit does not (e.g. %s); `tfdeclare gc` removes it",
                    name[:12],
                    path,
                    len(foreign),
                    foreign[0],
                )
                continue
            log.info("removing the snapshot of revision %s (no job or task uses it)", name[:12])
            _remove_tree(path)

    def unused(self, current: str | None, in_use: Collection[str]) -> list[tuple[str, Path]]:
        """The snapshots (commit, folder) that are not ``current`` and hold no folder in use."""
        used = [os.path.realpath(p) for p in in_use]
        out = []
        for entry in sorted(os.scandir(self.revisions_dir), key=lambda e: e.name):
            root = os.path.realpath(entry.path)
            if entry.name != current and not any(p == root or p.startswith(root + os.sep) for p in used):
                out.append((entry.name, Path(entry.path)))
        return out

    def collect(self, in_use: Collection[str], dry_run: bool = False) -> list[tuple[str, list[str]]]:
        """``tfdeclare gc``: remove every unused snapshot, those kept for the files tasks wrote
        in them too; returns (commit, its foreign files) of each."""
        current = os.path.basename(os.readlink(self.current)) if self.current.is_symlink() else None
        if not self.revisions_dir.is_dir():
            return []
        removed = []
        for name, path in self.unused(current, in_use):
            foreign = [] if name.startswith(".") else self.foreign_files(name)
            if not dry_run:
                _remove_tree(path)
            removed.append((name, foreign))
        return removed

    def foreign_files(self, commit: str) -> list[str]:
        """The paths of ``commit``'s snapshot that its commit does not have as they are: made,
        changed (content or executable bit) or removed since it was written, whatever git
        would hide (``.git`` folders, ignored files, paths under a submodule): the folder is
        compared with the commit's tree (``snapshots.py``). A leftover of an interrupted
        snapshot (``.<commit>.tmp``) holds none. The daemon and ``tfdeclare gc`` both ask this."""
        if commit.startswith("."):
            return []
        try:
            return foreign_paths(self.git, commit, self.revisions_dir / commit)
        except CompareError as err:  # unknown then: keep it, lose no file
            return [f"(cannot compare it with the commit: {err})"]

    def _set_aside(self) -> None:
        if self.clone_dir.exists():
            aside = self.workdir / f"corrupt-{int(time.time())}"
            shutil.move(str(self.clone_dir), aside)
            log.warning("moved an unusable clone aside to %s", aside)

    def watch(self, on_change: Callable[[list[str]], None]) -> None:
        """Git mode polls: the daemon calls ``sync`` every interval and on POST /sync."""

    def _status_blob(self, path: Path) -> str | None:
        """The blob id of a status file as ``shell.statuswriter`` reads one (a regular file, no
        link, no FIFO, bounded), stored; None when it cannot be read (a warning, once)."""
        try:
            data = read_regular(path, STATUS_MAX_BYTES)
        except OSError as err:
            if str(path) not in self._unreadable_status:
                self._unreadable_status.add(str(path))
                log.warning("status branch: %s cannot be read (%s); left out", path, err.strerror)
            return None
        self._unreadable_status.discard(str(path))
        return self.git("hash-object", "-w", "--no-filters", "--stdin", stdin=data)

    def write_status(self, status_dir: Path, revision: Revision | None) -> None:
        """Commit the status files to the status branch (never the watched one); push if asked."""
        with self._lock:
            if self.status_error is not None and self._monotonic() < self._status_retry_at:
                raise SourceError(self.status_error)  # backing off: said again, not tried
            pushing = False
            try:
                env = {"GIT_INDEX_FILE": str(self.workdir / "status-index")}
                self.git("read-tree", "--empty", env=env)
                for path in sorted(status_dir.glob("*.yaml")):
                    blob = self._status_blob(path)
                    if blob is None:
                        continue
                    self.git(
                        "update-index", "--add", "--cacheinfo", f"100644,{blob},status/{path.name}", env=env
                    )
                tree = self.git("write-tree", env=env)
                if tree == self._last_status_tree and self._status_done():
                    self._status_failures, self.status_error = 0, None
                    return
                ref = f"refs/heads/{self.settings.status_branch}"
                parent, found, _ = self.git.run("rev-parse", "--verify", "--quiet", ref)
                parent = parent if found == 0 else ""
                if parent and self.git("rev-parse", f"{parent}^{{tree}}") == tree:
                    commit = parent  # written before (by this daemon or the last): pushed yet?
                else:
                    message = "tfdeclare status" + (f" at {revision.commit[:12]}" if revision else "")
                    args = [tree, "-m", message] + (["-p", parent] if parent else [])
                    identity = {
                        "GIT_AUTHOR_NAME": "tfdeclare",
                        "GIT_AUTHOR_EMAIL": "tfdeclare@localhost",
                        "GIT_COMMITTER_NAME": "tfdeclare",
                        "GIT_COMMITTER_EMAIL": "tfdeclare@localhost",
                    }
                    commit = self.git("commit-tree", *args, env=identity)
                    self.git("update-ref", ref, commit)
                self._last_status_tree, self._status_commit = tree, commit
                if not self._status_done():
                    pushing = True
                    self._push(ref)
                    self._pushed = commit
            except GitError as err:
                what = "pushing" if pushing else "writing status to"
                why = hide_credentials(err.message)  # no credentials shown
                self._status_failures += 1
                self._status_retry_at = self._monotonic() + status_retry_s(self._status_failures)
                self.status_error = f"{what} branch {self.settings.status_branch}: {why}"
                raise SourceError(self.status_error) from err
            self._status_failures, self.status_error = 0, None

    def _push(self, ref: str) -> None:
        """Push ``ref`` to origin; ``GitError`` saying the remote's refusal when it fails."""
        _, code, said = self.git.run("push", "--force", "origin", f"{ref}:{ref}", network=True)
        if code != 0:
            raise GitError(push_problem(said, code))

    def _status_done(self) -> bool:
        """Whether the status branch's commit is where it must be: written, and pushed when asked."""
        return not self.settings.push_status or (
            self._status_commit is not None and self._pushed == self._status_commit
        )

    def close(self) -> None:
        """Kill the git commands still running (a fetch that hangs must not keep the daemon)."""
        self.git.stop()
