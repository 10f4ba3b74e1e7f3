"""The history of revisions (``tfdeclare history``): one ``HistoryEntry`` per revision the
daemon acted on — a git commit, or a change of the files of a folder — with its outcome
(applied with N changes, nothing to do, refused with N problems, partly applied, not applied:
the state disk could not take the change), the plan's summary and the jobs it changed, each
with the attempt it started.

Pure: the daemon's shell hands in what each pass saw (``PassFacts``) and writes what
``observe`` returns (``shell/history.py`` keeps the log). The rules:

- An entry is made once per *new* revision acted on: a new head commit (applied, or refused:
  a signature that does not verify, files with errors), or a pass that changed jobs, or one
  whose problems (the files' errors, the jobs kept as applied and why) differ from the last
  entry's. A periodic pass with nothing new makes none, so the log does not fill with resyncs;
  "nothing to do" is said only of a new revision that changed nothing.
- A change whose record could not be written (``PassFacts.not_applied``: a full or read-only
  state disk) is no change: its job is kept as applied with reason ``StateWriteFailed`` and
  the entry says "not applied" and why, once: the passes that fail the same way again make
  no entry (the held jobs are in the digest); the pass that writes it is the "applied" one.
- A revision may take more than one pass: a change that stops tasks waits for the settle time
  (``NotSettled``). Its entry is made once no job waits any more (the changes of every pass
  together), when a newer head supersedes it, or after ``PENDING_MAX_S`` at the latest.
- Entries are bounded: at most ``MAX_JOBS`` jobs and ``MAX_DIAGNOSTICS`` problems each, every
  text at most ``MAX_TEXT`` characters (the rest counted), so one line of the log stays small.
- The log is read leniently (``parse_log``): a torn last line (a crash while writing it, or a
  write in progress) is ignored, other unreadable lines are skipped and counted.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import operator
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from tfdeclare.core.enums import Reason
from tfdeclare.core.plan.planner import Action, Plan
from tfdeclare.core.run.record import Revision
from tfdeclare.core.visible import visible

ENTRY_VERSION = 1
NOT_APPLIED = Reason.STATE_WRITE_FAILED.value  # the reason of a change that could not be written
MAX_JOBS = 100  # jobs named per entry (the rest counted in ``jobs_omitted``)
MAX_DIAGNOSTICS = 20  # problems quoted per entry (all are counted)
MAX_TEXT = 300  # characters of a message or a problem
PENDING_MAX_S = 60.0  # a revision whose jobs keep waiting to settle is recorded after this
ROLLBACK = "to roll back, `git revert {commit}` and push: the daemon applies the revert like any commit"


class Outcome(StrEnum):
    APPLIED = "applied"  # changes, no problem
    NOTHING_TO_DO = "nothing-to-do"  # no change, no problem
    REFUSED = "refused"  # problems, no change
    PARTLY_APPLIED = "partly-applied"  # changes and problems, or changes and changes not written
    NOT_APPLIED = "not-applied"  # changes that could not be written (a full state disk), none made

    @classmethod
    def of(cls, changes: int, problems: int, not_applied: int = 0) -> Outcome:
        if not_applied:
            return cls.PARTLY_APPLIED if changes else cls.NOT_APPLIED
        if problems:
            return cls.PARTLY_APPLIED if changes else cls.REFUSED
        return cls.APPLIED if changes else cls.NOTHING_TO_DO


class SourceKind(StrEnum):
    GIT = "git"  # the daemon, a commit of its branch
    FOLDER = "folder"  # the daemon, a change of its folder's files
    APPLY = "apply"  # `tfdeclare apply PATH...`


def _clip(text: str) -> str:
    """A text as an entry keeps it: control characters written out (``visible``: a commit
    subject is anyone's to write, no terminal escape reaches ``tfdeclare history``), at most
    ``MAX_TEXT`` long."""
    text = visible(text)
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 3] + "..."


def rfc3339(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


@dataclass(frozen=True, slots=True)
class JobEntry:
    """One job an entry touched: changed (``action`` create, update, resize, restart, delete,
    move; ``attempt`` the job's attempt after it, the one a create or restart starts) or kept
    as applied (``action`` keep/orphan/no-op with the ``reason`` its status says)."""

    name: str
    action: Action
    message: str
    attempt: int | None = None
    reason: str | None = None

    @property
    def made(self) -> bool:
        """A change made (not one kept as applied, nor one that could not be written)."""
        return self.action.changes_something and self.reason is None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "action": self.action.value,
            "message": self.message,
            "attempt": self.attempt,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobEntry:
        attempt = data.get("attempt")
        reason = data.get("reason")
        return cls(
            name=str(data["name"]),
            action=Action(data["action"]),
            message=str(data.get("message", "")),
            attempt=int(attempt) if attempt is not None else None,
            reason=str(reason) if reason is not None else None,
        )


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    at: float
    source: SourceKind
    outcome: Outcome
    revision: Revision | None = None  # git: the commit acted on
    files: tuple[str, ...] = ()  # folder, apply: the files that changed (or were given)
    files_omitted: int = 0  # beyond MAX_JOBS of them
    changes: int = 0  # jobs changed
    problems: int = 0  # error diagnostics of the files (and quotas), or a refused signature
    diagnostics: tuple[str, ...] = ()  # the first MAX_DIAGNOSTICS problems, formatted
    summary: str = ""
    jobs: tuple[JobEntry, ...] = ()
    jobs_omitted: int = 0
    digest: str = ""  # of the problems and held jobs: what the next entry is compared with
    started: float | None = None  # when the first pass acted on it (``at``: when it was done)
    not_applied: tuple[tuple[str, str], ...] = ()  # (job, why) of the changes not written

    def __post_init__(self) -> None:
        if self.started is None:  # acted on and done in one pass
            object.__setattr__(self, "started", self.at)

    def touches(self, name: str) -> bool:
        return any(job.name == name for job in self.jobs)

    def job(self, name: str) -> JobEntry | None:
        return next((job for job in self.jobs if job.name == name), None)

    @property
    def rollback(self) -> str | None:
        """How to undo this revision (git, when it changed something): a revert, applied as
        any commit."""
        if self.source is SourceKind.GIT and self.revision is not None and self.changes:
            return f"git revert {self.revision.commit}"
        return None

    @property
    def outcome_text(self) -> str:
        """``applied 2 changes``, ``nothing to do``, ``refused: 1 problem``, ..."""
        if self.outcome is Outcome.APPLIED:
            return f"applied {plural(self.changes, 'change')}"
        if self.outcome is Outcome.NOTHING_TO_DO:
            return "nothing to do"
        if self.outcome is Outcome.REFUSED:
            return f"refused: {plural(self.problems, 'problem')}"
        if self.outcome is Outcome.NOT_APPLIED:
            return f"not applied: {self._not_applied_text}"
        left = [plural(self.problems, "problem")] if self.problems or not self.not_applied else []
        if self.not_applied:
            left.append(f"{len(self.not_applied)} not applied: {self._not_applied_text}")
        return f"partly applied: {', '.join([plural(self.changes, 'change'), *left])}"

    @property
    def _not_applied_text(self) -> str:
        """Why the first change not written was not (``cannot write PATH (why)``), and how
        many other jobs share its fate."""
        first = self.not_applied[0][1] if self.not_applied else ""
        others = len(self.not_applied) - 1
        return first + (f" (and {plural(others, 'other job')})" if others > 0 else "")

    @property
    def what(self) -> str:
        """The revision in one line: ``9a1b2c3d4e5f subject``, or the files that changed."""
        if self.revision is not None:
            return f"{self.revision.commit[:12]} {self.revision.subject}".rstrip()
        if not self.files:
            return f"{self.source.value}: no file changed"
        shown = ", ".join(self.files[:3])
        left = len(self.files) + self.files_omitted - 3
        more = f" and {left} more" if left > 0 else ""
        return f"{self.source.value}: {shown}{more}"

    def to_json(self) -> dict[str, Any]:
        return {
            "version": ENTRY_VERSION,
            "time": rfc3339(self.at),
            "at": self.at,
            "started": rfc3339(self.started if self.started is not None else self.at),
            "startedAt": self.started,
            "source": self.source.value,
            "revision": self.revision.to_json() if self.revision else None,
            "files": list(self.files),
            "filesOmitted": self.files_omitted,
            "outcome": self.outcome.value,
            "changes": self.changes,
            "problems": self.problems,
            "diagnostics": list(self.diagnostics),
            "summary": self.summary,
            "jobs": [job.to_json() for job in self.jobs],
            "jobsOmitted": self.jobs_omitted,
            "rollback": self.rollback,
            "digest": self.digest,
            "notApplied": dict(self.not_applied),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryEntry:
        if data.get("version") != ENTRY_VERSION:
            raise ValueError(f"unsupported history entry version {data.get('version')!r}")
        revision = data.get("revision")
        return cls(
            at=float(data["at"]),
            source=SourceKind(data["source"]),
            outcome=Outcome(data["outcome"]),
            revision=_revision(revision) if revision is not None else None,
            files=tuple(str(f) for f in data.get("files", ())),
            files_omitted=int(data.get("filesOmitted", 0)),
            changes=int(data.get("changes", 0)),
            problems=int(data.get("problems", 0)),
            diagnostics=tuple(str(d) for d in data.get("diagnostics", ())),
            summary=str(data.get("summary", "")),
            jobs=tuple(JobEntry.from_json(job) for job in data.get("jobs", ())),
            jobs_omitted=int(data.get("jobsOmitted", 0)),
            digest=str(data.get("digest", "")),
            started=float(data["startedAt"]) if data.get("startedAt") is not None else None,
            not_applied=tuple((str(k), str(v)) for k, v in dict(data.get("notApplied") or {}).items()),
        )

    def line(self) -> bytes:
        """The entry as one line of the log (compact JSON, newline-terminated)."""
        return (json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def _revision(data: Mapping[str, Any]) -> Revision:
    at = data.get("time")
    parsed = None
    if isinstance(at, str):
        try:
            parsed = float(calendar.timegm(time.strptime(at, "%Y-%m-%dT%H:%M:%SZ")))
        except ValueError:
            parsed = None
    return Revision(
        commit=str(data["commit"]),
        author=str(data.get("author", "")),
        time=parsed,
        subject=str(data.get("subject", "")),
    )


# ---- reading the log ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ParsedLog:
    entries: tuple[HistoryEntry, ...]  # oldest first, as written
    skipped: int = 0  # complete lines that are no entry (damaged, or of a newer release)
    torn: bool = False  # the last line has no end: a crash while writing it, or a write in progress


def parse_log(data: bytes) -> ParsedLog:
    """The entries of a log's bytes. A last line without its newline is ignored (torn); any
    other line that is not an entry is skipped and counted."""
    lines = data.split(b"\n")
    torn = bool(lines and lines[-1].strip())
    entries: list[HistoryEntry] = []
    skipped = 0
    for raw in lines[:-1]:
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
            entries.append(HistoryEntry.from_json(value if isinstance(value, dict) else {}))
        except (ValueError, KeyError, TypeError):
            skipped += 1
    return ParsedLog(tuple(entries), skipped, torn)


def newest_first(
    entries: Iterable[HistoryEntry], job: str | None = None, limit: int | None = None
) -> list[HistoryEntry]:
    """What ``tfdeclare history [JOB] --limit N`` shows: newest first (by time, then by the
    order written), only the entries that touched ``job`` when one is named."""
    ordered = [e for _, e in sorted(enumerate(entries), key=lambda pair: (pair[1].at, pair[0]), reverse=True)]
    if job is not None:
        ordered = [e for e in ordered if e.touches(job)]
    return ordered[:limit] if limit is not None else ordered


def kept_within(entries: Sequence[HistoryEntry], max_entries: int, max_bytes: int) -> list[HistoryEntry]:
    """The newest entries that fit both bounds (what a compaction keeps), oldest first."""
    kept: list[HistoryEntry] = []
    size = 0
    for entry in reversed(entries):
        size += len(entry.line())
        if len(kept) >= max_entries or (size > max_bytes and kept):
            break
        kept.append(entry)
    return kept[::-1]


# ---- what a pass of the daemon adds -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PassFacts:
    """What one pass of the daemon saw: the plan it applied, under which revision, the head it
    refused (signature: commit, why) and, asked only of the jobs it changed, each one's
    attempt after the plan was applied."""

    now: float
    plan: Plan
    revision: Revision | None  # git: the revision applied; None: a folder
    rejected: tuple[str, str] | None = None
    attempt: Callable[[str], int | None] = lambda name: None  # a job's attempt after the plan
    # job -> why its change could not be written ("cannot write PATH (why)"): not made
    not_applied: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Pending:
    """A revision acted on whose entry is not made yet (jobs of it wait for the settle time):
    every pass's changes so far, and what its newest pass kept and found wrong."""

    since: float
    revision: Revision | None
    changed: Mapping[str, JobEntry]
    held: Mapping[str, JobEntry]
    problems: tuple[str, ...]
    files: frozenset[str]


@dataclass(frozen=True, slots=True)
class RecorderState:
    last_head: str | None = None  # the commit of the newest entry (git)
    last_digest: str | None = None  # the problems and held jobs of the newest entry
    pending: Pending | None = None
    error_files: frozenset[str] = frozenset()  # the files with errors at the last pass

    @classmethod
    def after(cls, entries: Sequence[HistoryEntry]) -> RecorderState:
        """The state a daemon starts from: what the log's newest entry of a daemon said (so a
        restart records nothing new for a revision already recorded)."""
        daemon = [e for e in entries if e.source is not SourceKind.APPLY]
        if not daemon:
            return cls()
        newest = daemon[-1]
        head = newest.revision.commit if newest.revision is not None else None
        return cls(last_head=head, last_digest=newest.digest)


@dataclass(frozen=True, slots=True)
class _Seen:
    """What one plan says for the history, found in one look at its jobs."""

    changed: dict[str, JobEntry]
    held: dict[str, JobEntry]  # kept as applied, and why (not those waiting to settle)
    waiting: bool  # a change waits for the settle time


_ACTION = operator.attrgetter("action")


def _scan(
    plan: Plan, attempt: Callable[[str], int | None], not_applied: Mapping[str, str] | None = None
) -> _Seen:
    """One loop over the jobs, which skips the unchanged ones at once: a pass of a daemon of
    10,000 jobs pays it every time."""
    changed: dict[str, JobEntry] = {}
    held: dict[str, JobEntry] = {}
    waiting = False
    actions = list(map(_ACTION, plan.jobs))  # unchanged (or another source's): never held, no change
    if actions.count(Action.NOOP) == len(actions):  # the common pass, in C: 0.2 ms at 10,000 jobs
        return _Seen(changed, held, waiting)
    for action, job in zip(actions, plan.jobs, strict=True):
        if action is Action.NOOP:
            continue
        if action.changes_something and not_applied and job.name in not_applied:
            held[job.name] = JobEntry(job.name, action, _clip(not_applied[job.name]), reason=NOT_APPLIED)
            continue
        if action.changes_something:
            changed[job.name] = JobEntry(job.name, action, _clip(job.message), attempt=attempt(job.name))
            continue
        kept = job.not_synced
        if kept is None:
            continue
        if kept[0] is Reason.NOT_SETTLED:
            waiting = True
        else:
            held[job.name] = JobEntry(job.name, action, _clip(job.message), reason=kept[0].value)
    return _Seen(changed, held, waiting)


def _problems(plan: Plan) -> list[str]:
    return sorted(_clip(d.format()) for d in plan.diagnostics if d.is_error)


def _digest(problems: Sequence[str], held: Mapping[str, JobEntry]) -> str:
    text = json.dumps([list(problems), sorted((n, j.reason or "") for n, j in held.items())])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _files(plan: Plan, names: Iterable[str]) -> set[str]:
    """The spec files of these jobs (for a job gone from the files: the one it came from) and
    the files with errors."""
    out = set()
    by_name = {job.name: job for job in plan.jobs}
    for name in names:
        source = plan.sources.get(name) or (by_name[name].source if name in by_name else None)
        if source is not None:
            out.add(source.file)
    out.update(d.path for d in plan.diagnostics if d.is_error and d.path)
    return out


def summary(jobs: Iterable[JobEntry]) -> str:
    """The plan's summary line of what was changed: ``Plan: 1 to create, 0 to resize, ...``."""
    counts: dict[Action, int] = {}
    kept = 0  # kept as applied, or not written (a full state disk)
    for job in jobs:
        if job.made:
            counts[job.action] = counts.get(job.action, 0) + 1
        else:
            kept += 1
    line = (
        f"Plan: {counts.get(Action.CREATE, 0)} to create, {counts.get(Action.RESIZE, 0)} to resize, "
        f"{counts.get(Action.RESTART, 0)} to restart, {counts.get(Action.DELETE, 0)} to delete."
    )
    extra = []
    if counts.get(Action.MOVE):
        extra.append(f"{counts[Action.MOVE]} to move to another backend")
    if counts.get(Action.UPDATE):
        extra.append(f"{counts[Action.UPDATE]} to update in place")
    if kept:
        extra.append(f"{kept} kept as applied")
    return line + (f" ({', '.join(extra)})" if extra else "")


def entry(
    at: float,
    source: SourceKind,
    revision: Revision | None,
    changed: Mapping[str, JobEntry],
    held: Mapping[str, JobEntry],
    problems: Sequence[str],
    files: Iterable[str] = (),
    *,
    digest: str = "",
    started: float | None = None,
) -> HistoryEntry:
    """An entry (bounded) from what was changed, what was kept and the problems."""
    jobs = [*sorted(changed.values(), key=lambda j: j.name), *sorted(held.values(), key=lambda j: j.name)]
    names = sorted({_clip(f) for f in files})
    failed = tuple(
        (j.name, j.message) for j in sorted(held.values(), key=lambda j: j.name) if j.reason == NOT_APPLIED
    )
    if revision is not None:
        revision = Revision(
            _clip(revision.commit), _clip(revision.author), revision.time, _clip(revision.subject)
        )
    return HistoryEntry(
        at=at,
        source=source,
        outcome=Outcome.of(len(changed), len(problems), len(failed)),
        revision=revision,
        files=tuple(names[:MAX_JOBS]),
        files_omitted=max(0, len(names) - MAX_JOBS),
        changes=len(changed),
        problems=len(problems),
        diagnostics=tuple(problems[:MAX_DIAGNOSTICS]),
        summary=summary(jobs),
        jobs=tuple(jobs[:MAX_JOBS]),
        jobs_omitted=max(0, len(jobs) - MAX_JOBS),
        digest=digest,
        started=at if started is None else started,
        not_applied=failed[:MAX_JOBS],
    )


def _close(state: RecorderState, pending: Pending, now: float) -> RecorderState:
    """The state after ``pending``'s entry (made by ``_entry_of``)."""
    head = pending.revision.commit if pending.revision is not None else state.last_head
    return replace(state, last_head=head, last_digest=_digest(pending.problems, pending.held), pending=None)


def _entry_of(pending: Pending, now: float) -> HistoryEntry:
    held = {n: j for n, j in pending.held.items() if n not in pending.changed}
    git = pending.revision is not None
    return entry(
        now,
        SourceKind.GIT if git else SourceKind.FOLDER,
        pending.revision,
        pending.changed,
        held,
        pending.problems,
        () if git else pending.files,
        digest=_digest(pending.problems, pending.held),
        started=pending.since,
    )


def observe(state: RecorderState, facts: PassFacts) -> tuple[RecorderState, list[HistoryEntry]]:
    """What a pass adds to the history: the new state and the entries to write (usually none)."""
    made: list[HistoryEntry] = []
    plan, revision, now = facts.plan, facts.revision, facts.now
    pending = state.pending
    was = pending.revision.commit if pending is not None and pending.revision is not None else None
    if pending is not None and was is not None and revision is not None and was != revision.commit:
        made.append(_entry_of(pending, now))  # superseded by a newer head: as it was left
        state = _close(state, pending, now)
        pending = None
    if facts.rejected is not None and facts.rejected[0] != state.last_head:
        commit, why = facts.rejected  # a head not applied at all (its signature)
        if pending is not None:
            made.append(_entry_of(pending, now))
            state = _close(state, pending, now)
        made.append(
            entry(
                now,
                SourceKind.GIT,
                Revision(commit=commit),
                {},
                {},
                [_clip(why)],
                digest=state.last_digest or "",
            )
        )
        return replace(state, last_head=commit, pending=None), made
    seen = _scan(plan, facts.attempt, facts.not_applied)
    changed, held = seen.changed, seen.held
    problems = tuple(_problems(plan))
    error_files = frozenset(d.path for d in plan.diagnostics if d.is_error and d.path)
    if pending is None:
        head = revision.commit if revision is not None else None
        new_head = head is not None and head != state.last_head and facts.rejected is None
        if new_head or changed or _digest(problems, held) != (state.last_digest or _digest((), {})):
            pending = Pending(now, revision, {}, {}, (), frozenset())
    before, state = state.error_files, replace(state, error_files=error_files)
    if pending is None:
        return state, made
    pending = replace(
        pending,
        changed={**pending.changed, **changed},
        held=held,
        problems=problems,
        files=pending.files | _files(plan, [*changed, *held]) | (error_files ^ before),
    )
    if seen.waiting and now - pending.since < PENDING_MAX_S:
        return replace(state, pending=pending), made
    made.append(_entry_of(pending, now))
    return _close(state, pending, now), made


def flush(state: RecorderState, now: float) -> tuple[RecorderState, list[HistoryEntry]]:
    """The entry of a revision still pending (the daemon stops): as it stands."""
    if state.pending is None:
        return state, []
    return _close(state, state.pending, now), [_entry_of(state.pending, now)]


def applied(
    plan: Plan, paths: Sequence[str], attempt: Callable[[str], int | None], now: float
) -> HistoryEntry:
    """The entry of ``tfdeclare apply PATH...`` (or ``apply PLANFILE``), once it applied
    ``plan``: the paths it was given, what it changed (an apply with problems applies nothing,
    and says so where it runs)."""
    seen = _scan(plan, attempt)
    problems = _problems(plan)
    return entry(now, SourceKind.APPLY, None, seen.changed, seen.held, problems, paths)
