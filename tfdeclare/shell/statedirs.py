"""The state folders this user's controllers have used on this machine, so that a job running
under one is found when a command would start it under another (a ``--config`` elsewhere moves
the state folder: one job must never run twice, whatever the flags).

The registry is one JSON file, ``state-dirs.json``, in a folder of the user's own:
``$TFDECLARE_REGISTRY_DIR`` (tests point it at a temporary folder), else
``$XDG_STATE_HOME/tfdeclare``, else ``~/.local/state/tfdeclare``. The folder is made 0700;
a folder that is a link, not a folder, or owned by someone else is not used (it is said why).
The file is opened with ``O_NOFOLLOW``, read bounded (``MAX_BYTES``) and checked entry by entry
(it is evidence, not authority: it only says where to look), written atomically under an
``flock`` on ``state-dirs.lock`` beside it, keeps at most ``MAX_ENTRIES`` (the most recently
used), and drops the folders that no longer exist.

A controller (``apply``, ``delete``, ``status --refresh``, the daemon, ``gc``) records its state
folder when it takes that folder's lock (``remember``). ``elsewhere`` reads the job records of
the other folders, read-only and without their locks (as ``tfdeclare status`` does).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdeclare.core.run.record import JobRecord
from tfdeclare.files import failed_write, not_own_folder, read_regular, write_atomic
from tfdeclare.shell.lock import StateFolderRefused, check_state_folder
from tfdeclare.shell.store import StateError, StateStore, StoreUnreadable

ENV = "TFDECLARE_REGISTRY_DIR"
FILE = "state-dirs.json"
KIND = "TFDeclareStateFolders"
MAX_ENTRIES = 100
MAX_BYTES = 1024 * 1024
_LISTED_FROM = 32  # more jobs to look for than this: each other folder's records are listed once


class RegistryError(Exception):
    """The registry cannot be used (named, with why); commands go on without it."""


def registry_dir(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get(ENV):
        return Path(env[ENV])
    base = Path(env["XDG_STATE_HOME"]) if env.get("XDG_STATE_HOME") else Path.home() / ".local" / "state"
    return base / "tfdeclare"


def _own_folder(folder: Path) -> Path:
    """``folder``, made 0700 if missing; ``RegistryError`` unless it is a real folder of ours."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            folder.mkdir(mode=0o700)
        why = not_own_folder(folder)
    except OSError as err:
        raise RegistryError(f"cannot make {failed_write(err)}") from err
    if why is not None:
        fix = " (chmod 700 it)" if why.startswith("can be written") else ""
        raise RegistryError(f"{folder} {why}; not used{fix}")
    return folder


def _read(folder: Path) -> list[dict[str, Any]]:
    """The entries of the registry in ``folder`` (none when it is missing); each checked."""
    try:
        data = read_regular(folder / FILE, MAX_BYTES)
    except FileNotFoundError:
        return []
    except OSError as err:
        raise RegistryError(f"cannot read {folder / FILE} ({err.strerror}); not used") from err
    try:
        document = json.loads(data)
    except ValueError as err:
        raise RegistryError(f"{folder / FILE} is not JSON ({err}); it is rewritten next time") from err
    entries = document.get("stateDirs") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        return []
    return [
        {"path": e["path"], "backend": str(e.get("backend", "?")), "lastUsed": float(e.get("lastUsed", 0))}
        for e in entries
        if isinstance(e, dict)
        and isinstance(e.get("path"), str)
        and os.path.isabs(e["path"])
        and isinstance(e.get("lastUsed", 0), int | float)
    ]


def remember(state_dir: Path, backend: str, now: float, environ: Mapping[str, str] | None = None) -> None:
    """Record that a controller uses ``state_dir`` now; ``RegistryError`` when it cannot."""
    folder = _own_folder(registry_dir(environ))
    try:
        lock = os.open(
            folder / "state-dirs.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600
        )
    except OSError as err:
        raise RegistryError(f"cannot open {failed_write(err)}") from err
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            entries = _read(folder)
        except RegistryError:
            entries = []  # damaged: rewritten whole
        path = os.path.realpath(state_dir)
        kept = [e for e in entries if os.path.realpath(e["path"]) != path and os.path.isdir(e["path"])]
        kept.append({"path": path, "backend": backend, "lastUsed": now})
        kept = sorted(kept, key=lambda e: -e["lastUsed"])[:MAX_ENTRIES]
        document = {"kind": KIND, "version": 1, "stateDirs": kept}
        try:
            write_atomic(folder / FILE, (json.dumps(document, indent=1) + "\n").encode(), mode=0o600)
        except OSError as err:
            raise RegistryError(f"cannot write {failed_write(err)}") from err
    finally:
        os.close(lock)


def known(here: Path, environ: Mapping[str, str] | None = None) -> list[str]:
    """The other state folders recorded (most recently used first) that still exist."""
    folder = registry_dir(environ)
    if not folder.is_dir():
        return []
    _own_folder(folder)
    own = os.path.realpath(here)
    return [
        e["path"]
        for e in sorted(_read(folder), key=lambda e: -e["lastUsed"])
        if os.path.realpath(e["path"]) != own and os.path.isdir(e["path"])
    ]


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """A job of the same name under another state folder."""

    name: str
    state_dir: str
    record: JobRecord
    live: bool  # it runs there, or would run again there: starting it here makes a second copy

    def describe(self) -> str:
        return f"state folder {self.state_dir} (backend {self.record.backend}, {self.record.phase.value})"


def elsewhere(
    creates: Mapping[str, str], here: Path, environ: Mapping[str, str] | None = None
) -> tuple[list[Elsewhere], list[str]]:
    """For each job ``creates`` names (name -> the spec hash it would be created with here),
    its records under the other known state folders; and what could not be read (one line
    each). A record counts as ``live`` unless it is being deleted, or it finished (Succeeded,
    Failed) with the very spec it would get here (its own folder will not run it again).
    Read-only: no lock is taken, nothing is written."""
    if not creates:
        return [], []
    problems: list[str] = []
    try:
        others = known(here, environ)
    except RegistryError as err:
        return [], [str(err)]
    found: list[Elsewhere] = []
    for other in others:
        try:  # read as `tfdeclare status` reads it: only a folder of this user's alone
            check_state_folder(Path(other), reading=True)
        except StateFolderRefused as err:
            problems.append(str(err))
            continue
        store = StateStore(Path(other))
        names = sorted(creates)
        if len(names) > _LISTED_FROM:  # one listing, not a failed open a job (10,000 jobs: 1 s)
            try:
                names = sorted(creates.keys() & set(store.names()))
            except OSError as err:
                problems.append(f"{store.jobs_dir}: cannot list the job records: {err.strerror or err}")
                continue
            except StateError as err:
                problems.append(str(err))
                continue
        for name in names:
            spec_hash = creates[name]
            try:
                record = store.load(name)
            except StoreUnreadable as err:  # none of this folder's records: said once
                problems.append(str(err))
                break
            except StateError as err:
                problems.append(str(err))
                continue
            if record is None or record.deleting:
                continue
            finished_same = record.phase.terminal and record.spec_hash == spec_hash
            found.append(Elsewhere(name, other, record, live=not finished_same))
    return found, problems


def names_of(found: Iterable[Elsewhere]) -> list[str]:
    return sorted({e.name for e in found})
