"""The standing source problems on disk: ``<state-dir>/problems.json``, written by the daemon
after each pass that changed them (atomically: temp file, fsync, rename), read by ``tfdeclare
status``, which runs without the daemon, and by the next daemon (a problem that still stands
keeps the time it was first seen).

What is written is bounded by the core (``core.plan.problems``: at most ``MAX_PROBLEMS``
problems and the count of those left out, each with a bounded number of diagnostics and
jobs); what is read is bounded here (``MAX_BYTES``), opened without following a link, and
checked field by field: a damaged file is reported, never trusted.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from tfdeclare.core.plan.problems import (
    BranchFailure,
    Problem,
    branch_failure_of,
    document,
    from_document,
    omitted_of,
)
from tfdeclare.files import read_regular, write_atomic

FILE_NAME = "problems.json"
MAX_BYTES = 4 * 1024 * 1024


def path_in(state_dir: Path) -> Path:
    return state_dir / FILE_NAME


def save(
    path: Path,
    problems: tuple[Problem, ...],
    now: float,
    *,
    omitted: int = 0,
    status_branch: BranchFailure | None = None,
) -> None:
    """Replace the file with ``problems`` (those ``core.plan.problems.bounded`` kept, and how
    many it left out); ``OSError`` when the folder cannot take it."""
    shown = document(problems, now, omitted=omitted, status_branch=status_branch)
    data = json.dumps(shown, separators=(",", ":")) + "\n"
    write_atomic(path, data.encode(), 0o644)


class Stored(NamedTuple):
    """What the file holds: the problems, when it was written (RFC 3339), and the daemon's
    status branch failure (git mode) when one stood."""

    problems: tuple[Problem, ...]
    updated_at: str | None
    status_branch: BranchFailure | None = None
    omitted: int = 0  # problems left out (``core.plan.problems.bounded``)


class ProblemsUnreadable(Exception):
    """The file is there but cannot be read or is not one tfdeclare wrote (one line)."""


def load(path: Path) -> tuple[tuple[Problem, ...], str | None]:
    """The problems the file holds and when it was written (RFC 3339); none when there is no
    file. ``ProblemsUnreadable`` says why one cannot be used."""
    stored = read(path)
    return stored.problems, stored.updated_at


def read(path: Path) -> Stored:
    """What the file holds (``Stored``); nothing when there is no file. ``ProblemsUnreadable``
    says why one cannot be used."""
    try:
        data = read_regular(path, MAX_BYTES)
    except FileNotFoundError:
        return Stored((), None)
    except OSError as err:
        raise ProblemsUnreadable(f"{path}: {err.strerror}") from None
    try:
        parsed = json.loads(data)
        problems = from_document(parsed)
        failure = branch_failure_of(parsed)
        omitted = omitted_of(parsed)
    except (ValueError, RecursionError) as err:
        raise ProblemsUnreadable(f"{path}: {err}") from None
    updated = parsed.get("updatedAt")
    return Stored(problems, updated if isinstance(updated, str) else None, failure, omitted)
