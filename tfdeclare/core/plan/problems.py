"""Source problems: what in the source cannot be applied now, as state (issue 31).

A *problem* stands for one source path: a spec file that is invalid, unreadable, refused by
policy, defines a job name twice or a job not started because it runs under another state
folder of this user, or the source itself (its URL or folder) when it cannot
be fetched or its head commit is not verified. It holds the file's error diagnostics, the
jobs it holds back, and the revision and time since which it stands. The daemon recomputes
the standing problems after each pass (``standing``) and shows them everywhere users look;
a problem is gone as soon as its file is fixed.

Pure: the caller passes the time and the previous problems (a problem that still stands
keeps its ``since`` and ``revision``). Bounded: each problem holds at most ``MAX_DIAGNOSTICS``
diagnostics and ``MAX_JOBS`` job names (the counts say how many there were); ``standing``
and ``merged`` return every problem (counted by kind whole, ``counts``), and ``bounded`` keeps
the ``MAX_PROBLEMS`` that are shown and persisted, saying how many it left out: the source's
own problems first, then those that hold back jobs, then unreadable files, then the rest (in
natural order of their paths: ``m2`` before ``m10``), so what is persisted and served stays
small whatever the source holds, and a file that holds a running job back is cut only after
every file that holds none.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from tfdeclare.core.diagnostics import Code, Diagnostic, Severity
from tfdeclare.core.enums import Reason
from tfdeclare.core.plan.planner import Plan
from tfdeclare.core.run.record import rfc3339

MAX_PROBLEMS = 200
MAX_DIAGNOSTICS = 10
MAX_JOBS = 50
MAX_MESSAGE = 2000  # characters of one message


class ProblemKind(StrEnum):
    """What kind of problem a source path has (the ``kind`` of ``/healthz``, ``/jobs``,
    ``status`` and the ``kind`` label of ``tfdeclare_source_problems``)."""

    INVALID_SPEC = "invalid-spec"  # YAML, schema, a value out of range, a Kubeflow TFJob we cannot map
    UNREADABLE = "unreadable"  # the file or folder cannot be read (permissions, gone mid-read)
    POLICY = "policy"  # valid, but refused by the config's policy, quotas or the backend
    DUPLICATE_NAME = "duplicate-name"  # a job name defined in more than one place
    UNVERIFIED_COMMIT = "unverified-commit"  # git: the head is unsigned or badly signed (verifyCommits)
    FETCH_FAILED = "fetch-failed"  # git: the repository cannot be fetched or checked out
    NOT_STARTED = "not-started"  # a job that runs under another state folder of this user: one copy only


_POLICY_CODES = frozenset({Code.BACKEND, Code.QUOTA})
_HOLDING = frozenset({Reason.INVALID_SPEC, Reason.FILES_UNREADABLE})


def kind_of(errors: Iterable[Diagnostic]) -> ProblemKind:
    """The kind of a file's problem from its error diagnostics: unreadable before anything
    else, then invalid (a spec error), a duplicate name, a policy refusal."""
    codes = {d.code for d in errors}
    if Code.READ_ERROR in codes:
        return ProblemKind.UNREADABLE
    if codes - _POLICY_CODES - {Code.DUPLICATE_NAME}:
        return ProblemKind.INVALID_SPEC
    if Code.DUPLICATE_NAME in codes:
        return ProblemKind.DUPLICATE_NAME
    return ProblemKind.POLICY


@dataclass(frozen=True, slots=True)
class Problem:
    path: str  # the spec file (as diagnostics name it), or the source (URL, folder)
    kind: ProblemKind
    message: str  # the first error, gcc-style
    since: float  # unix time it was first seen (kept while it stands)
    revision: str | None = None  # the revision being applied when it was first seen
    diagnostics: tuple[Diagnostic, ...] = ()  # at most MAX_DIAGNOSTICS
    diagnostic_count: int = 0  # how many there were
    jobs: tuple[str, ...] = ()  # the jobs it holds back, at most MAX_JOBS
    job_count: int = 0

    @property
    def key(self) -> tuple[str, ProblemKind]:
        return self.path, self.kind

    @property
    def since_text(self) -> str:
        return rfc3339(self.since) or ""

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind.value,
            "message": self.message,
            "since": rfc3339(self.since),
            "sinceUnix": self.since,
            "revision": self.revision,
            "jobs": list(self.jobs),
            "jobCount": self.job_count,
            "diagnostics": [d.to_json() for d in self.diagnostics],
            "diagnosticCount": self.diagnostic_count,
        }

    @classmethod
    def from_json(cls, data: Any) -> Problem:
        """A problem as ``to_json`` wrote it; ``ValueError`` for anything else."""
        if not isinstance(data, dict):
            raise ValueError("not a problem as tfdeclare writes them (not an object)")  # noqa: TRY004 - one error for every bad file
        try:
            diagnostics = tuple(_diagnostic(d) for d in data["diagnostics"][:MAX_DIAGNOSTICS])
            jobs = tuple(str(j) for j in data["jobs"][:MAX_JOBS])
            revision = data["revision"]
            return cls(
                path=_text(data["path"]),
                kind=ProblemKind(data["kind"]),
                message=_text(data["message"]),
                since=float(data["sinceUnix"]),
                revision=None if revision is None else _text(revision),
                diagnostics=diagnostics,
                diagnostic_count=int(data["diagnosticCount"]),
                jobs=jobs,
                job_count=int(data["jobCount"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            raise ValueError(f"not a problem as tfdeclare writes them ({err})") from None


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("a text field is not text")
    return value[:MAX_MESSAGE]


def _diagnostic(data: Any) -> Diagnostic:
    line, column, json_path = data["line"], data["column"], data["jsonPath"]
    return Diagnostic(
        _text(data["path"]),
        None if line is None else int(line),
        None if column is None else int(column),
        _text(data["message"]),
        None if json_path is None else _text(json_path),
        Code(data["code"]),
        Severity(data["severity"]),
    )


def held_back(plan: Plan) -> dict[str, tuple[str, ...]]:
    """Path -> the jobs its errors hold back: the names it defines that cannot be applied
    (``Plan.protected``) and the jobs kept as applied for its errors (their file is invalid
    or unreadable now)."""
    held = _protecting(plan.protected)
    for job in plan.jobs:
        reason = job.not_synced[0] if job.not_synced else None
        if reason in _HOLDING:
            for diagnostic in job.diagnostics:
                held.setdefault(diagnostic.path, set()).add(job.name)
    return {path: tuple(sorted(names)) for path, names in held.items()}


def held_by(protected: Mapping[str, tuple[Diagnostic, ...]]) -> dict[str, tuple[str, ...]]:
    """Path -> the names it defines that cannot be applied (``DesiredState.protected``)."""
    return {path: tuple(sorted(names)) for path, names in _protecting(protected).items()}


def _protecting(protected: Mapping[str, tuple[Diagnostic, ...]]) -> dict[str, set[str]]:
    held: dict[str, set[str]] = {}
    for name, diagnostics in protected.items():
        for diagnostic in diagnostics:
            held.setdefault(diagnostic.path, set()).add(name)
    return held


def standing(
    diagnostics: Iterable[Diagnostic] | None,
    *,
    source: str,
    source_error: str | None,
    fetch: bool,
    rejected: tuple[str, str] | None,
    revision: str | None,
    now: float,
    previous: Iterable[Problem] = (),
    held: Mapping[str, tuple[str, ...]] | None = None,
    not_started: Mapping[str, Diagnostic] | None = None,
) -> tuple[Problem, ...]:
    """The problems standing after a pass, sorted by path.

    ``diagnostics``: the files' (and the quotas') of this pass; None when the files were not
    read (the source could not be): the files' problems then stand as last seen.
    ``source``: what source-wide problems are named by (the repository URL, the folder);
    ``source_error``: why the source could not be read now, a ``fetch-failed`` problem when
    ``fetch`` (git) else ``unreadable``; ``rejected``: (commit, why) of a head not applied
    (``unverified-commit``); ``held``: path -> the jobs it holds back (``held_back``);
    ``not_started``: job -> why it was not started (its file's place, ``not-started``).
    ``revision``: the revision applied now. A problem that stood before keeps its ``since``
    and ``revision``."""
    before = {p.key: p for p in previous}
    found: list[Problem] = []
    if diagnostics is None:
        found.extend(p for p in before.values() if p.path != source)
    else:
        by_path: dict[str, list[Diagnostic]] = {}
        for diagnostic in diagnostics:
            if diagnostic.is_error:
                by_path.setdefault(diagnostic.path, []).append(diagnostic)
        for path, errors in by_path.items():
            jobs = (held or {}).get(path, ())
            found.append(_made(path, kind_of(errors), errors, jobs, revision, now))
        refused: dict[str, list[tuple[str, Diagnostic]]] = {}
        for name, refusal in sorted((not_started or {}).items()):
            refused.setdefault(refusal.path, []).append((name, refusal))
        for path, each in refused.items():
            names = tuple(name for name, _ in each)
            errors = [refusal for _, refusal in each]
            found.append(_made(path, ProblemKind.NOT_STARTED, errors, names, revision, now))
    if source_error is not None and not (rejected is not None and source_error == rejected[1]):
        kind = ProblemKind.FETCH_FAILED if fetch else ProblemKind.UNREADABLE
        error = Diagnostic(source, None, None, source_error, None, Code.READ_ERROR)
        found.append(_made(source, kind, [error], (), revision, now))
    if rejected is not None:
        commit, why = rejected
        error = Diagnostic(source, None, None, why, None, Code.READ_ERROR)
        found.append(_made(source, ProblemKind.UNVERIFIED_COMMIT, [error], (), commit, now))
    out = []
    for problem in found:
        was = before.get(problem.key)
        out.append(problem if was is None else replace(problem, since=was.since, revision=was.revision))
    out.sort(key=lambda p: (p.path, p.kind.value))
    return tuple(out)


_SOURCE_KINDS = frozenset({ProblemKind.FETCH_FAILED, ProblemKind.UNVERIFIED_COMMIT})


def _natural(path: str) -> tuple[tuple[int, int | str], ...]:
    """``path`` as a key that orders its numbers by value (``m2`` before ``m10``)."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", path))


def _rank(problem: Problem, sources: frozenset[str]) -> int:
    if problem.kind in _SOURCE_KINDS or problem.path in sources:
        return 0
    if problem.job_count:
        return 1
    return 2 if problem.kind is ProblemKind.UNREADABLE else 3


def bounded(
    problems: Iterable[Problem], sources: Iterable[str] = (), limit: int = MAX_PROBLEMS
) -> tuple[tuple[Problem, ...], int]:
    """The problems shown and persisted, sorted by path, and how many were left out: at most
    ``limit``, the problems of ``sources`` (the source itself) and of its fetch first, then
    those that hold back jobs, then unreadable files, then the others."""
    every = tuple(problems)
    if len(every) <= limit:
        return every, 0
    roots = frozenset(sources)
    kept = sorted(every, key=lambda p: (_rank(p, roots), _natural(p.path), p.kind.value))[:limit]
    kept.sort(key=lambda p: (p.path, p.kind.value))
    return tuple(kept), len(every) - limit


def _made(
    path: str,
    kind: ProblemKind,
    errors: list[Diagnostic],
    jobs: tuple[str, ...],
    revision: str | None,
    now: float,
) -> Problem:
    return Problem(
        path=path,
        kind=kind,
        message=errors[0].format()[:MAX_MESSAGE],
        since=now,
        revision=revision,
        diagnostics=tuple(errors[:MAX_DIAGNOSTICS]),
        diagnostic_count=len(errors),
        jobs=jobs[:MAX_JOBS],
        job_count=len(jobs),
    )


def under(path: str, roots: Iterable[str]) -> bool:
    """Whether a problem's ``path`` is one of ``roots`` or below one (paths as given)."""
    normal = _normal(path)
    return any(normal == r or normal.startswith(r.rstrip("/") + "/") or r == "." for r in map(_normal, roots))


def _normal(path: str) -> str:
    parts: list[str] = []
    for part in path.split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        else:
            parts.append(part)
    return ("/" if path.startswith("/") else "") + "/".join(parts) or "."


def merged(
    previous: Iterable[Problem], found: Iterable[Problem], roots: Iterable[str]
) -> tuple[Problem, ...]:
    """``previous`` with the problems of the files under ``roots`` replaced by ``found`` (what
    ``tfdeclare apply PATH...`` read now; the others, and those of a daemon's source, stand)."""
    roots = tuple(roots)
    kept = [p for p in previous if not under(p.path, roots)]
    out = sorted([*kept, *found], key=lambda p: (p.path, p.kind.value))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Changes:
    """What changed between two sets of standing problems: for the webhooks and the log."""

    appeared: tuple[Problem, ...]
    cleared: tuple[Problem, ...]


def changes(before: Iterable[Problem], after: Iterable[Problem]) -> Changes:
    old = {p.key: p for p in before}
    new = {p.key: p for p in after}
    return Changes(
        appeared=tuple(p for k, p in new.items() if k not in old),
        cleared=tuple(p for k, p in old.items() if k not in new),
    )


def counts(problems: Iterable[Problem]) -> dict[str, int]:
    """Standing problems by kind, every kind named (0 when none stands)."""
    out = dict.fromkeys((k.value for k in ProblemKind), 0)
    for problem in problems:
        out[problem.kind.value] += 1
    return out


@dataclass(frozen=True, slots=True)
class BranchFailure:
    """Git mode: the status branch could not be written or pushed (a protected branch, a hook
    that refuses it); the daemon tries again, backing off, until the remote has it."""

    branch: str
    message: str  # what git said, without credentials
    since: float  # unix time it was first seen (kept while it stands)

    def to_json(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "message": self.message,
            "since": rfc3339(self.since),
            "sinceUnix": self.since,
        }

    @classmethod
    def from_json(cls, data: Any) -> BranchFailure:
        """As ``to_json`` wrote it; ``ValueError`` for anything else."""
        try:
            return cls(_text(data["branch"]), _text(data["message"]), float(data["sinceUnix"]))
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a status branch failure as tfdeclare writes them ({err})") from None


def document(
    problems: Iterable[Problem],
    updated_at: float,
    *,
    omitted: int = 0,
    status_branch: BranchFailure | None = None,
) -> dict[str, Any]:
    """The persisted form (``<state-dir>/problems.json``): the problems ``bounded`` kept and
    how many it left out (``problemsOmitted``); ``statusBranch`` while the status branch
    cannot be written or pushed."""
    listed = [p.to_json() for p in problems]
    out: dict[str, Any] = {
        "apiVersion": "tfdeclare/v1",
        "kind": "SourceProblems",
        "updatedAt": rfc3339(updated_at),
        "problems": listed,
        "problemsOmitted": omitted,
    }
    if status_branch is not None:
        out["statusBranch"] = status_branch.to_json()
    return out


def from_document(data: Any) -> tuple[Problem, ...]:
    """The problems of a ``document``; ``ValueError`` when it is not one."""
    if (
        not isinstance(data, dict)
        or data.get("kind") != "SourceProblems"
        or not isinstance(data.get("problems"), list)
    ):
        raise ValueError("not a problems document as tfdeclare writes them")
    return tuple(Problem.from_json(p) for p in data["problems"][:MAX_PROBLEMS])


def omitted_of(data: Any) -> int:
    """The ``problemsOmitted`` of a ``document`` (0 in one written before it was counted);
    ``ValueError`` when it is not a count."""
    omitted = data.get("problemsOmitted", 0) if isinstance(data, dict) else 0
    if not isinstance(omitted, int) or isinstance(omitted, bool) or omitted < 0:
        raise ValueError("problemsOmitted is not a count")
    return omitted


def branch_failure_of(data: Any) -> BranchFailure | None:
    """The ``statusBranch`` of a ``document`` (None when it has none); ``ValueError`` when it is
    not one tfdeclare writes."""
    failure = data.get("statusBranch") if isinstance(data, dict) else None
    return None if failure is None else BranchFailure.from_json(failure)
