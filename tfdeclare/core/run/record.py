"""The controller's memory of one job: what was applied and where its run stands.

A ``JobRecord`` is written to the state folder after every change (atomically), so a crash
at any point leaves a record the next controller adopts. It holds the applied canonical spec
(what the planner diffs against), the attempt and restart counters, the addresses given to
each slot (reused on restart), phase, conditions and the last observed tasks.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from operator import attrgetter
from typing import Any

from tfdeclare.core.enums import EndCause, Phase, Reason, Role, TaskState
from tfdeclare.core.errors import RuntimeProblem
from tfdeclare.core.run.progress import Progress
from tfdeclare.core.spec.keys import TaskKey
from tfdeclare.core.spec.loader import SourceRef
from tfdeclare.core.spec.model import JobSpec

RECORD_VERSION = 1


def rfc3339(timestamp: float | None) -> str | None:
    if timestamp is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(timestamp))


@dataclass(frozen=True, slots=True)
class Revision:
    """The git commit a job's spec was applied from (git mode), for provenance in status."""

    commit: str
    author: str = ""
    time: float | None = None
    subject: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "commit": self.commit,
            "author": self.author,
            "time": rfc3339(self.time),
            "subject": self.subject,
        }


class ConditionType(StrEnum):
    READY = "Ready"
    SYNCED = "Synced"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"
    SUSPENDED = "Suspended"  # present while it is suspended or preempted


@dataclass(frozen=True, slots=True)
class Condition:
    type: ConditionType
    status: str  # "True" | "False" | "Unknown"
    reason: Reason
    message: str
    last_transition: float

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type.value,
            "status": self.status,
            "reason": self.reason.value,
            "message": self.message,
            "lastTransitionTime": self.last_transition,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Condition:
        return cls(
            ConditionType(data["type"]),
            data["status"],
            Reason(data["reason"]),
            data["message"],
            float(data["lastTransitionTime"]),
        )


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A task as last observed (the status file's ``tasks`` entries come from these)."""

    task_id: str
    key: TaskKey
    attempt: int
    state: TaskState
    host: str | None = None
    port: int | None = None
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.task_id,
            "role": self.key.role.value,
            "index": self.key.index,
            "attempt": self.attempt,
            "state": self.state.value,
            "host": self.host,
            "port": self.port,
            "exitCode": self.exit_code,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskRecord:
        return cls(
            task_id=data["id"],
            key=TaskKey(Role(data["role"]), int(data["index"])),
            attempt=int(data["attempt"]),
            state=TaskState(data["state"]),
            host=data.get("host"),
            port=data.get("port"),
            exit_code=data.get("exitCode"),
            started_at=data.get("startedAt"),
            finished_at=data.get("finishedAt"),
            message=data.get("message", ""),
        )


@dataclass(frozen=True, slots=True)
class TaskRestarts:
    """The restarts of one task alone (``restartScope: Task``), counted against
    ``backoffLimit`` for that task, over the job's run (a new run of the job starts afresh).

    A restart is *pending* from the failure until a task of the slot's new configuration is
    alive: ``next_launch_at`` is when its backoff ends, ``waiting_since`` when its launch was
    first asked for (the slot keeps its address, so a backend may have to wait for it), and
    ``attempt`` the job attempt it belongs to (a whole-job restart takes over a pending one)."""

    count: int
    message: str  # how the task ended, the last time
    at: float  # when the last restart was decided
    attempt: int
    exit_code: int | None = None
    next_launch_at: float | None = None  # None once a task of its new configuration is alive
    waiting_since: float | None = None
    fallbacks: int = 0  # whole-job restarts made because its address did not come back in time
    # Restarts of it alone for a platform event (``EndCause``): never against backoffLimit
    platform: int = 0

    @property
    def relaunches(self) -> int:
        """Every restart of it alone, of both kinds: part of its configuration."""
        return self.count + self.platform

    @property
    def pending(self) -> bool:
        return self.next_launch_at is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "message": self.message,
            "at": self.at,
            "attempt": self.attempt,
            "exitCode": self.exit_code,
            "nextLaunchAt": self.next_launch_at,
            "waitingSince": self.waiting_since,
            "fallbacks": self.fallbacks,
            "platform": self.platform,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskRestarts:
        return cls(
            count=int(data["count"]),
            message=str(data.get("message", "")),
            at=float(data["at"]),
            attempt=int(data.get("attempt", 0)),
            exit_code=data.get("exitCode"),
            next_launch_at=data.get("nextLaunchAt"),
            waiting_since=data.get("waitingSince"),
            fallbacks=int(data.get("fallbacks", 0)),
            platform=int(data.get("platform", 0)),
        )


PLATFORM_HISTORY = 20  # the platform events a record (and status) keeps, newest last


@dataclass(frozen=True, slots=True)
class PlatformEvent:
    """One time a platform event (``cause``) ended tasks of the job and it was restarted
    without counting against ``backoffLimit`` (or failed, its platform budget spent)."""

    cause: EndCause
    at: float
    tasks: tuple[str, ...]  # the tasks it took ("worker-0")
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause.value, "at": self.at, "tasks": list(self.tasks), "message": self.message}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PlatformEvent:
        return cls(
            cause=EndCause(data["cause"]),
            at=float(data["at"]),
            tasks=tuple(str(t) for t in data.get("tasks", ())),
            message=str(data.get("message", "")),
        )


SUSPENSION_HISTORY = 20  # the suspensions and preemptions a record (and status) keeps, newest last


@dataclass(frozen=True, slots=True)
class Suspension:
    """One time the job was stopped on purpose: by ``spec.suspend`` (reason Suspended) or by a
    higher-priority job (reason Preempted, ``by`` names it). ``resumed_at`` None: still so."""

    reason: Reason  # SUSPENDED | PREEMPTED
    at: float
    by: str | None = None  # the job that preempted it
    message: str = ""
    tasks: int = 0  # tasks alive when it was stopped
    resumed_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "reason": self.reason.value,
            "at": self.at,
            "by": self.by,
            "message": self.message,
            "tasks": self.tasks,
            "resumedAt": self.resumed_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Suspension:
        return cls(
            reason=Reason(data["reason"]),
            at=float(data["at"]),
            by=data.get("by"),
            message=str(data.get("message", "")),
            tasks=int(data.get("tasks", 0)),
            resumed_at=data.get("resumedAt"),
        )


@dataclass(frozen=True, slots=True)
class JobRecord:
    name: str
    uid: str  # distinguishes this job from an earlier one of the same name (task ids)
    canonical: Mapping[str, Any]
    spec_hash: str
    phase: Phase = Phase.PENDING
    reason: Reason = Reason.CREATED
    message: str = ""
    source: SourceRef | None = None
    source_dir: str | None = None  # absolute folder of the spec file when applied (local working dir)
    # The folder the spec was read from (links resolved when applied), which the source-folder
    # rule bounds a relative workingDir by: checked again at every launch. None: ``source_dir``.
    source_root: str | None = None
    revision: str | None = None
    revision_info: Mapping[str, Any] | None = None
    last_attempted_revision: str | None = None
    backend: str = "local"
    # While a job moves to ``backend``: the backend it leaves, until its tasks there are gone
    moving_from: str | None = None
    attempt: int = 0  # +1 per whole-job (re)launch after a failure or a restart-forcing change
    restarts: int = 0  # whole-job restarts after failures (backoffLimit counts these)
    # restartScope Task: each task's restarts alone, by task name ("worker-1")
    task_restarts: Mapping[str, TaskRestarts] = field(default_factory=dict)
    launches: int = 0  # launch batches so far; part of every task id
    addresses: Mapping[str, str] = field(default_factory=dict)  # "worker-0" -> "host:port"
    start_time: float | None = None
    completion_time: float | None = None
    next_launch_at: float | None = None  # backoff: no launch before this
    # How the last run ended when failures restarted the whole job ("worker-0 exited 5"): said
    # while it backs off. Empty otherwise (and in records of releases before it).
    restart_cause: str = ""
    # Training succeeded at this time; the evaluator finishes its final evaluation (a grace)
    final_evaluation_since: float | None = None
    cleaned_at: float | None = None  # ttlSecondsAfterFinished deleted its ended tasks and logs
    deleting: bool = False
    # Why the files' newest word on this job is not applied (Synced=False): its file is invalid,
    # unreadable or empty, pruning was refused, a change has not settled. None: applied.
    not_synced: tuple[Reason, str] | None = None
    conditions: tuple[Condition, ...] = ()
    tasks: tuple[TaskRecord, ...] = ()
    # Stopped on purpose (phase Suspended) since ``suspension.at``; None while it may run.
    suspension: Suspension | None = None
    suspensions: int = 0  # times spec.suspend stopped it (never counted in ``restarts``)
    preemptions: int = 0  # times a higher-priority job stopped it
    # Ended suspensions and preemptions, newest last (at most ``SUSPENSION_HISTORY``)
    suspension_history: tuple[Suspension, ...] = ()
    # What its checkpoint folder and event files said when last read (``core/run/progress``)
    progress: Progress | None = None
    # Restarts (of the job or of tasks alone) for platform events, never against backoffLimit:
    # ``platformRestartLimit`` bounds them; the last ``PLATFORM_HISTORY`` of them, newest last
    platform_restarts: int = 0
    platform_events: tuple[PlatformEvent, ...] = ()
    # The last runtime error a pass met for this job (``core.errors``) and when it was first
    # met; cleared by the next pass that gets through the job without one
    last_error: RuntimeProblem | None = None
    last_error_at: float | None = None
    # ``spec``, made once per canonical spec (a pass asked for it about ten times a job)
    _spec: JobSpec | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def restarted_alone(self) -> dict[str, int]:
        """Task name -> how often it was restarted alone (part of its configuration)."""
        return {name: entry.relaunches for name, entry in self.task_restarts.items() if entry.relaunches}

    @property
    def spec(self) -> JobSpec:
        """The typed spec (made from ``canonical`` once; its hash is the record's, not
        worked out again)."""
        if self._spec is None:
            object.__setattr__(self, "_spec", JobSpec.from_canonical(self.canonical, self.spec_hash))
        assert self._spec is not None
        return self._spec

    def evolve(self, **changes: Any) -> JobRecord:
        """``dataclasses.replace``, without its call of ``__init__`` (a pass evolves each
        record several times: 50,000 calls in `apply` of 10,000 jobs, half the time each).
        The typed spec is kept unless ``canonical`` changes."""
        if not changes.keys() <= _RECORD_FIELDS:
            raise TypeError(f"JobRecord has no field {sorted(changes.keys() - _RECORD_FIELDS)[0]!r}")
        evolved = object.__new__(JobRecord)
        assign = object.__setattr__
        for name, value in zip(_RECORD_SLOTS, _record_values(self), strict=True):
            assign(evolved, name, value)
        for name, value in changes.items():
            assign(evolved, name, value)
        if "canonical" in changes:
            assign(evolved, "_spec", None)
        return evolved

    def to_json(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "name": self.name,
            "uid": self.uid,
            "spec": self.canonical,
            "specHash": self.spec_hash,
            "phase": self.phase.value,
            "reason": self.reason.value,
            "message": self.message,
            "source": {"file": self.source.file, "line": self.source.line} if self.source else None,
            "sourceDir": self.source_dir,
            "sourceRoot": self.source_root,
            "revision": self.revision,
            "revisionInfo": self.revision_info,
            "lastAttemptedRevision": self.last_attempted_revision,
            "backend": self.backend,
            "movingFrom": self.moving_from,
            "attempt": self.attempt,
            "restarts": self.restarts,
            "taskRestarts": {name: entry.to_json() for name, entry in sorted(self.task_restarts.items())},
            "launches": self.launches,
            "addresses": dict(self.addresses),
            "startTime": self.start_time,
            "completionTime": self.completion_time,
            "nextLaunchAt": self.next_launch_at,
            **({"restartCause": self.restart_cause} if self.restart_cause else {}),
            "finalEvaluationSince": self.final_evaluation_since,
            "cleanedAt": self.cleaned_at,
            "deleting": self.deleting,
            "notSynced": (
                {"reason": self.not_synced[0].value, "message": self.not_synced[1]}
                if self.not_synced
                else None
            ),
            "conditions": [c.to_json() for c in self.conditions],
            "tasks": [t.to_json() for t in self.tasks],
            "suspension": self.suspension.to_json() if self.suspension else None,
            "suspensions": self.suspensions,
            "preemptions": self.preemptions,
            "suspensionHistory": [entry.to_json() for entry in self.suspension_history],
            **({"progress": self.progress.to_json()} if self.progress is not None else {}),
            "platformRestarts": self.platform_restarts,
            "platformEvents": [event.to_json() for event in self.platform_events],
            **(
                {"lastError": {**self.last_error.to_json(), "at": self.last_error_at}}
                if self.last_error is not None
                else {}
            ),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobRecord:
        if data.get("version") != RECORD_VERSION:
            raise ValueError(f"unsupported record version {data.get('version')!r}")
        source = data.get("source")
        return cls(
            name=data["name"],
            uid=data["uid"],
            canonical=data["spec"],
            spec_hash=data["specHash"],
            phase=Phase(data["phase"]),
            reason=Reason(data.get("reason") or Reason.CREATED),
            message=data.get("message", ""),
            source=SourceRef(source["file"], int(source["line"])) if source else None,
            source_dir=data.get("sourceDir"),
            source_root=data.get("sourceRoot"),
            revision=data.get("revision"),
            revision_info=data.get("revisionInfo"),
            last_attempted_revision=data.get("lastAttemptedRevision"),
            backend=data.get("backend", "local"),
            moving_from=data.get("movingFrom"),
            attempt=int(data.get("attempt", 0)),
            restarts=int(data.get("restarts", 0)),
            task_restarts={
                name: TaskRestarts.from_json(entry) for name, entry in data.get("taskRestarts", {}).items()
            },
            launches=int(data.get("launches", 0)),
            addresses=dict(data.get("addresses", {})),
            start_time=data.get("startTime"),
            completion_time=data.get("completionTime"),
            next_launch_at=data.get("nextLaunchAt"),
            restart_cause=str(data.get("restartCause") or ""),
            final_evaluation_since=data.get("finalEvaluationSince"),
            cleaned_at=data.get("cleanedAt"),
            deleting=bool(data.get("deleting", False)),
            not_synced=_not_synced(data),
            conditions=tuple(Condition.from_json(c) for c in data.get("conditions", ())),
            tasks=tuple(TaskRecord.from_json(t) for t in data.get("tasks", ())),
            suspension=Suspension.from_json(data["suspension"]) if data.get("suspension") else None,
            suspensions=int(data.get("suspensions", 0)),
            preemptions=int(data.get("preemptions", 0)),
            suspension_history=tuple(Suspension.from_json(e) for e in data.get("suspensionHistory", ())),
            progress=Progress.from_json(data["progress"]) if data.get("progress") else None,
            platform_restarts=int(data.get("platformRestarts", 0)),
            platform_events=tuple(PlatformEvent.from_json(e) for e in data.get("platformEvents", ())),
            last_error=RuntimeProblem.from_json(data["lastError"]) if data.get("lastError") else None,
            last_error_at=(data.get("lastError") or {}).get("at"),
        )


_RECORD_SLOTS: tuple[str, ...] = tuple(f.name for f in fields(JobRecord))
_RECORD_FIELDS = frozenset(f.name for f in fields(JobRecord) if f.init)
_record_values = attrgetter(*_RECORD_SLOTS)


def _not_synced(data: Mapping[str, Any]) -> tuple[Reason, str] | None:
    entry = data.get("notSynced")
    if entry:
        return Reason(entry["reason"]), str(entry["message"])
    invalid = data.get("invalid")  # records written before notSynced: the file's errors
    return (Reason.INVALID_SPEC, str(invalid[0])) if invalid else None
