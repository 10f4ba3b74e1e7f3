"""The planner: a pure function of (desired, observed, options) -> Plan.

Per job exactly one action, each with the reasons that make it:

- ``+ create``  — a name that nothing runs under yet;
- ``~ update``  — only fields that touch no running task changed (labels, backoffLimit,
  activeDeadlineSeconds, restartPolicy and restartScope (also a role's),
  terminationGracePeriodSeconds, successPolicy, ttlSecondsAfterFinished, evaluatorGraceSeconds,
  imagePullPolicy (also a role's): it says how the next launch gets the image, and a running
  task keeps the one it has, so it is not part of a task's config hash either; priority and
  priorityClassName;
  suspend: a job suspended or resumed is an update too (reason ``Suspends`` / ``Resumes``,
  saying what stops), whatever else changed with it, since its tasks stop or start anyway and
  the next launch runs the new spec);
- ``± resize``  — replica counts changed (a role appeared or went): the TF cluster spec is
  static, so every running task whose view of the cluster changes restarts; adding or
  removing the evaluator touches nothing else;
- ``-/+ restart`` — anything else that changes a running task (image, command, env,
  resources, ...), naming each field that forces it; a Succeeded/Failed job whose spec
  changed runs again;
- ``-/+ move`` — a running job planned for another backend than the one that runs it (a job
  belongs to its backend): its tasks there stop before it starts on the new one;
- ``- delete``  — gone from the files, only with ``prune`` (never everything at once unless
  ``allow_empty``); without prune it is listed as an *orphan*. Planned once: a job gone from
  the files that is already being deleted (its tasks still stopping) is a no-op
  (``BeingDeleted``), so each pass until it is gone plans no change again;
- no-op; and ``keep`` — the job stays as applied: its file is now invalid, unreadable or
  holds no job document, the listing is incomplete (nothing is pruned on a partial view), or
  what the files say has not settled yet.

The settle rule (``PlanOptions.settle_s``, for the daemon, which sees files while they are
written): a change that stops or restarts running tasks — resize, restart, delete — is made
only once the files have said the same of the job for ``settle_s`` seconds. Creates and
in-place updates, which stop nothing, are made at once. The caller passes ``now`` and the
previous plan's ``sightings`` (when each pending change was first seen); the plan gives the
new ones and ``wake_at``, when the next pending change settles.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Any

from tfdeclare.core import enums
from tfdeclare.core.diagnostics import Code, Diagnostic, format_json_path
from tfdeclare.core.enums import Phase, RestartScope, Role, ScopeReason
from tfdeclare.core.plan.desired import DesiredState
from tfdeclare.core.plan.observed import ObservedJob, ObservedState, observed_fingerprint
from tfdeclare.core.plan.preempting import Held, Preempted, Room, Want, foretell, needs, priority_of
from tfdeclare.core.plan.quotas import enforce_max_jobs, enforce_quotas, within_max_jobs
from tfdeclare.core.plan.scope import PruneScope
from tfdeclare.core.run.clusterspec import replaced_by_resize
from tfdeclare.core.run.progress import restart_cost, since_checkpoint
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.keys import ORDER
from tfdeclare.core.spec.loader import LoadedJob, SourceRef
from tfdeclare.core.spec.model import SCOPE_WHY, TENSORBOARD_KEY, JobSpec, restart_scopes_of, task_keys_of
from tfdeclare.core.spec.policy import Quota


class Action(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    RESIZE = "resize"
    RESTART = "restart"
    DELETE = "delete"
    NOOP = "no-op"
    ORPHAN = "orphan"
    KEEP = "keep"
    MOVE = "move"  # to another backend: stopped there before it starts on the new one

    @property
    def symbol(self) -> str:
        return _SYMBOLS[self]

    @property
    def changes_something(self) -> bool:
        return self in _CHANGING  # a set made once: a tuple built per call cost a re-plan 200k of them


_CHANGING = frozenset(
    {Action.CREATE, Action.UPDATE, Action.RESIZE, Action.RESTART, Action.DELETE, Action.MOVE}
)


_SYMBOLS = {
    Action.CREATE: "+",
    Action.UPDATE: "~",
    Action.RESIZE: "±",
    Action.RESTART: "-/+",
    Action.DELETE: "-",
    Action.NOOP: "=",
    Action.ORPHAN: "?",
    Action.KEEP: "!",
    Action.MOVE: "-/+",
}


class PlanReason(StrEnum):
    """Why a job gets its plan action (the plan's ``reasons``); not the status ``Reason`` of
    ``core.enums``, which says why a job is in its phase."""

    NEW_JOB = "NewJob"
    RECREATE_AFTER_DELETE = "RecreateAfterDelete"
    UNCHANGED = "Unchanged"
    COMPLETED = "Completed"
    IN_PLACE_CHANGE = "InPlaceChange"
    REPLICAS_CHANGED = "ReplicasChanged"
    FIELDS_FORCE_RESTART = "FieldsForceRestart"
    RERUN_AFTER_COMPLETION = "RerunAfterCompletion"
    REMOVED_FROM_SOURCE = "RemovedFromSource"
    NOT_IN_SOURCE = "NotInSource"
    PRUNE_EVERYTHING_REFUSED = "PruneEverythingRefused"
    INVALID_SPEC = "InvalidSpec"
    BACKEND_CHANGED = "BackendChanged"
    FILE_HOLDS_NO_JOB = "FileHoldsNoJob"
    FILES_UNREADABLE = "FilesUnreadable"
    NOT_SETTLED = "NotSettled"
    TENSORBOARD_CHANGED = "TensorBoardChanged"
    OUTSIDE_SCOPE = "OutsideScope"  # last applied from a file outside the paths given (``scope``)
    BEING_DELETED = "BeingDeleted"  # gone from the files and already being deleted: nothing new to do
    SUSPENDS = "Suspends"  # spec.suspend became true: its tasks stop the graceful way
    RESUMES = "Resumes"  # spec.suspend became false: its tasks start again
    CREATED_SUSPENDED = "CreatedSuspended"  # a new job with spec.suspend true: it starts nothing
    PREEMPTS = "Preempts"  # the room it asks for is taken from running jobs of lower priority
    PREEMPTED = "Preempted"  # a job of higher priority takes its room: its tasks stop until there is room
    # runs as an earlier release read its unchanged Kubeflow manifest (``LoadedJob.earlier_hash``)
    READ_DIFFERENTLY = "ReadDifferently"


_NOT_SYNCED = {
    PlanReason.INVALID_SPEC: enums.Reason.INVALID_SPEC,
    PlanReason.FILE_HOLDS_NO_JOB: enums.Reason.FILE_HOLDS_NO_JOB,
    PlanReason.FILES_UNREADABLE: enums.Reason.FILES_UNREADABLE,
    PlanReason.NOT_SETTLED: enums.Reason.NOT_SETTLED,
    PlanReason.PRUNE_EVERYTHING_REFUSED: enums.Reason.PRUNE_REFUSED,
    PlanReason.NOT_IN_SOURCE: enums.Reason.NOT_IN_SOURCE,
}


class Effect(StrEnum):
    IN_PLACE = "in-place"
    RESIZE = "resize"
    RESTART = "restart"


_IN_PLACE_FIELDS = frozenset(
    {
        ("spec", "backoffLimit"),
        ("spec", "activeDeadlineSeconds"),
        ("spec", "restartPolicy"),
        ("spec", "terminationGracePeriodSeconds"),
        ("spec", "successPolicy"),
        ("spec", "ttlSecondsAfterFinished"),
        ("spec", "evaluatorGraceSeconds"),
        ("spec", "imagePullPolicy"),
        ("spec", "restartScope"),
        ("spec", "priority"),  # the queue's order and whom it may preempt: no running task changes
        ("spec", "priorityClassName"),  # the same, through the config's class
        ("spec", "suspend"),  # stops or starts the job's tasks, never changes what they run
        ("spec", "checkpoint"),  # only read by the controller (progress): no task changes
        ("spec", "platformRestartLimit"),  # a budget, like backoffLimit
    }
)
_IN_PLACE_ROLE_FIELDS = frozenset({"restartPolicy", "restartScope", "imagePullPolicy"})

ABSENT: Any = type("Absent", (), {"__repr__": lambda self: "(absent)"})()


@dataclass(frozen=True, slots=True)
class FieldChange:
    path: tuple[str | int, ...]
    old: Any  # ABSENT when the field was not there
    new: Any
    effect: Effect

    @property
    def dotted(self) -> str:
        return format_json_path(self.path).removeprefix("$.")


@dataclass(frozen=True, slots=True)
class PlanOptions:
    prune: bool = False
    allow_empty: bool = False
    # The backend the plan is applied to: a running job on another one moves (None: not checked)
    backend: str | None = None
    settle_s: float = 0.0  # a change is made once the files have said so this long (0: at once)
    quotas: tuple[Quota, ...] = ()  # the config's policy.quotas, counted over what the plan runs
    max_jobs: int | None = None  # the config's policy.maxJobs (None: not bounded, as in golden cases)
    # The jobs the plan may act on when their files are gone: those last applied from the
    # paths given (``scope``). None: every job of the state folder (plans of golden cases).
    scope: PruneScope | None = None
    # What the backend offers in all, when the plan can know it (the local backend): the plan
    # then says whom applying it preempts (``preempting``). None: it says nothing of that.
    room: Room | None = None

    def reaches(self, job: ObservedJob) -> bool:
        """Whether a job absent from the files is this plan's to orphan or prune."""
        return self.scope is None or self.scope.holds(job)


@dataclass(frozen=True, slots=True)
class Sighting:
    """A change the files ask for and since when: the desired spec hash, or None for a job
    gone from a complete listing."""

    spec_hash: str | None
    since: float


@dataclass(frozen=True, slots=True)
class RoleScope:
    """What a failed task of ``role`` restarts (``restartScope``), and why."""

    role: Role
    scope: RestartScope
    reason: ScopeReason

    @property
    def message(self) -> str:
        return SCOPE_WHY[self.reason].format(role=self.role.value)


def role_scopes(spec: JobSpec) -> tuple[RoleScope, ...]:
    """Every role's restart scope (the cluster's roles; TensorBoard always restarts alone)."""
    return tuple(RoleScope(r.role, *spec.restart_scope_for(r.role)) for r in spec.replicas)


def scopes_shown(old: JobSpec | None, new: JobSpec) -> tuple[RoleScope, ...]:
    """The restart scopes a plan shows for a job: when it is created (``old`` None) or a role
    it keeps gets another scope, and only where it says something: a role restarts alone or
    the spec sets ``restartScope`` (a job whose every failure restarts it whole, as every job's
    did before ``restartScope``, shows nothing new)."""
    scopes = _said(role_scopes(new))
    if scopes and old is not None:
        before = {s.role: s.scope for s in role_scopes(old)}
        if all(before.get(s.role, s.scope) is s.scope for s in scopes) and not _set_changed(old, new):
            return ()
    return scopes


_SET = (ScopeReason.SET_FOR_ROLE, ScopeReason.SET_FOR_JOB)


def _said(scopes: tuple[RoleScope, ...]) -> tuple[RoleScope, ...]:
    """``scopes`` when they say something (a role restarts alone, or the spec sets a scope)."""
    return scopes if any(s.scope is RestartScope.TASK or s.reason in _SET for s in scopes) else ()


def created_scopes(canonical: Mapping[str, Any]) -> tuple[RoleScope, ...]:
    """``scopes_shown(None, spec)`` of a job created from ``canonical``, without its ``JobSpec``.
    Jobs whose scopes are read off the same fields share one tuple (the text plan words each
    such tuple once)."""
    spec = canonical["spec"]
    replicas = spec["replicas"]
    fields = (
        spec.get("restartScope"),
        replicas.get("ps", {}).get("count", 0) > 0,
        *((name, entry.get("restartScope")) for name, entry in replicas.items()),
    )
    scopes = _CREATED_SCOPES.get(fields)
    if scopes is None:
        scopes = _said(tuple(RoleScope(*each) for each in restart_scopes_of(canonical)))
        if len(_CREATED_SCOPES) >= 1024:  # a bound: the fields take few values
            _CREATED_SCOPES.clear()
        _CREATED_SCOPES[fields] = scopes
    return scopes


_CREATED_SCOPES: dict[tuple[Any, ...], tuple[RoleScope, ...]] = {}


def _set_changed(old: JobSpec, new: JobSpec) -> bool:
    roles = {r.role for r in (*old.replicas, *new.replicas)}
    return any(
        old.restart_scope_for(r)[1] in _SET or new.restart_scope_for(r)[1] in _SET for r in roles
    ) and any(old.restart_scope_for(r) != new.restart_scope_for(r) for r in roles)


@dataclass(frozen=True, slots=True)
class RestartCost:
    """What a restart of a running job's training tasks loses, from its observed progress:
    the checkpoint it resumes from (its step; None: none since its tasks started) and since
    when its work is lost (that checkpoint's time, else its tasks' start; None: not known).
    Times, not durations: the plan stays the same while the time passes (``words``)."""

    checkpoint_step: int | None
    since: float | None

    def words(self, now: float) -> str:
        return restart_cost(self.checkpoint_step, self.since, now, declared=True)

    def lost_s(self, now: float) -> float | None:
        return None if self.since is None else max(0.0, now - self.since)


def cost_of(observed: ObservedJob, restart: tuple[TaskKey, ...]) -> RestartCost | None:
    """The cost of restarting ``restart`` (of ``observed``): only when a training task restarts
    and the job declares ``spec.checkpoint`` (without it nothing says where it saves)."""
    if "checkpoint" not in observed.canonical["spec"] or not any(k.role.in_cluster for k in restart):
        return None
    return RestartCost(*since_checkpoint(observed.progress, observed.started_at))


@dataclass(frozen=True, slots=True)
class JobPlan:
    name: str
    action: Action
    reasons: tuple[PlanReason, ...]
    message: str
    changes: tuple[FieldChange, ...] = ()
    restart: tuple[TaskKey, ...] = ()  # running tasks that restart
    start: tuple[TaskKey, ...] = ()  # tasks that start (new, or every task of a created job)
    stop: tuple[TaskKey, ...] = ()  # tasks that stop for good
    source: SourceRef | None = None
    phase: Phase | None = None  # observed
    spec_hash: str | None = None  # desired
    previous_hash: str | None = None  # applied
    diagnostics: tuple[Diagnostic, ...] = ()
    moves: tuple[str, str] | None = None  # (from, to) backend of a move
    # What a failed task of each role restarts, shown when new or changed (``scopes_shown``)
    scopes: tuple[RoleScope, ...] = ()
    # What restarting its running training tasks loses (``cost_of``); None: nothing restarts,
    # or the job declares no checkpoint folder
    cost: RestartCost | None = None
    # The running jobs of lower priority whose room applying the plan takes for it (reason
    # PREEMPTS), and the job that takes its own (reason PREEMPTED): ``PlanOptions.room``
    preempts: tuple[Preempted, ...] = ()
    preempted_by: Preempted | None = None

    @property
    def not_synced(self) -> tuple[enums.Reason, str] | None:
        """Why this job is not brought in line with its files now (its Synced condition is
        False), or None."""
        reason = _NOT_SYNCED.get(self.reasons[0]) if self.reasons else None
        return (reason, self.message) if reason is not None else None


@dataclass(frozen=True)
class Plan:
    jobs: tuple[JobPlan, ...]
    options: PlanOptions
    observed: ObservedState
    diagnostics: tuple[Diagnostic, ...] = ()
    now: float = 0.0  # when it was made: what a restart costs is worded for it (``RestartCost``)
    desired: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # canonical specs acted on
    sources: Mapping[str, SourceRef] = field(default_factory=dict)
    sightings: Mapping[str, Sighting] = field(default_factory=dict)  # pending changes (settle rule)
    wake_at: float | None = None  # when the first pending change settles
    # name -> why it cannot be applied now (the desired state's, quotas' refusals included)
    protected: Mapping[str, tuple[Diagnostic, ...]] = field(default_factory=dict)

    @cached_property
    def observed_fingerprint(self) -> str:
        """What this plan was computed from (a saved plan is stale once it differs)."""
        return observed_fingerprint(self.observed)

    def count(self, action: Action) -> int:
        return sum(1 for job in self.jobs if job.action is action)

    @property
    def has_changes(self) -> bool:
        return any(job.action.changes_something for job in self.jobs)

    @property
    def has_errors(self) -> bool:
        return any(d.is_error for d in self.diagnostics)

    def job(self, name: str) -> JobPlan:
        for job in self.jobs:
            if job.name == name:
                return job
        raise KeyError(name)


def _unset(value: Any) -> bool:
    return value is ABSENT or value is None or (isinstance(value, dict | list) and not value)


def diff(
    old: Any, new: Any, path: tuple[str | int, ...] = ()
) -> list[tuple[tuple[str | int, ...], Any, Any]]:
    """Leaf differences between two canonical specs. Mappings recurse; lists of the same
    length recurse by index (``spec.command[3]``); other lists are leaves.

    A key missing on one side equals an unset value on the other (``None``, ``{}``, ``[]``):
    a record applied by an earlier release lacks the fields added since, and that must never
    count as a change (an upgrade never changes a running job's plan:
    docs/reference.md#job-semantics). So a field added to the canonical form must be unset
    there when the user did not set it
    (``tests/test_upgrade.py`` holds records of earlier releases)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(old.keys() | new.keys()):
            before, after = old.get(key, ABSENT), new.get(key, ABSENT)
            if (before is ABSENT or after is ABSENT) and _unset(before) and _unset(after):
                continue
            out.extend(diff(before, after, (*path, key)))
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in diff(a, b, (*path, i))]
    if old == new and type(old) is type(new):
        return []
    return [(path, old, new)]


def classify(path: tuple[str | int, ...]) -> Effect:
    if path[:2] == ("metadata", "labels") or path[:2] in _IN_PLACE_FIELDS or path in _IN_PLACE_FIELDS:
        return Effect.IN_PLACE
    if path[:2] == ("spec", "healthCheck") or (
        path[:2] == ("spec", "replicas") and path[3:4] == ("healthCheck",)
    ):
        return Effect.IN_PLACE  # a task keeps the check it was launched with until its next launch
    if len(path) == 4 and path[:2] == ("spec", "replicas") and path[3] in _IN_PLACE_ROLE_FIELDS:
        return Effect.IN_PLACE
    if len(path) == 3 and path[:2] == ("spec", "replicas"):
        return Effect.RESIZE  # a whole role appeared or went
    if len(path) == 4 and path[:2] == ("spec", "replicas") and path[3] == "count":
        return Effect.RESIZE
    if path[:2] == ("spec", "tensorboard"):
        return Effect.RESIZE  # only the TensorBoard task starts, stops or restarts
    return Effect.RESTART


def field_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[FieldChange, ...]:
    return tuple(FieldChange(path, a, b, classify(path)) for path, a, b in diff(old, new))


def _task_sets(
    old: JobSpec, new: JobSpec, running: tuple[TaskKey, ...]
) -> tuple[tuple[TaskKey, ...], tuple[TaskKey, ...], tuple[TaskKey, ...]]:
    """(running tasks that restart, tasks that start, tasks that stop) for a resize."""
    alive = set(running)
    restart = tuple(k for k in replaced_by_resize(old, new) if k in alive)
    old_keys, new_keys = set(old.task_keys()), set(new.task_keys())
    start = tuple(sorted(new_keys - old_keys, key=ORDER))
    stop = tuple(sorted(old_keys - new_keys, key=ORDER))
    return restart, start, stop


def _unchanged(loaded: LoadedJob, observed: ObservedJob) -> JobPlan:
    reason, why = (
        (PlanReason.COMPLETED, f"{observed.phase.value}; not run again unless its spec changes")
        if observed.phase.terminal
        else (PlanReason.UNCHANGED, "up to date")
    )
    return JobPlan(
        loaded.name,
        Action.NOOP,
        (reason,),
        why,
        source=loaded.source,
        phase=observed.phase,
        spec_hash=loaded.spec_hash,
        previous_hash=observed.spec_hash,
    )


def _read_differently(loaded: LoadedJob, observed: ObservedJob) -> JobPlan:
    """A job applied by an earlier release from the Kubeflow manifest it is still read from,
    which this version reads otherwise: nothing changes (an upgrade changes no plan); the new
    reading takes effect with the file's next change. The notes say what reads differently."""
    what = "; ".join(dict.fromkeys(d.message for d in loaded.reread)) or "its fields"
    state = f"{observed.phase.value}, as applied" if observed.phase.terminal else "runs as applied"
    return JobPlan(
        loaded.name,
        Action.NOOP,
        (PlanReason.READ_DIFFERENTLY,),
        f"{state}: this version reads its unchanged Kubeflow manifest differently ({what}); "
        "that takes effect when the file next changes",
        source=loaded.source,
        phase=observed.phase,
        spec_hash=observed.spec_hash,
        previous_hash=observed.spec_hash,
        diagnostics=loaded.reread,
    )


def _plan_present(loaded: LoadedJob, observed: ObservedJob | None) -> JobPlan:
    """The job's action, with its restart scopes where the plan should say them."""
    if observed is None and not loaded.canonical["spec"].get("suspend"):
        return JobPlan(  # a new job (the common case of a big first plan), made in one go
            loaded.name,
            Action.CREATE,
            _NEW_JOB,
            "new job",
            start=task_keys_of(loaded.canonical),
            source=loaded.source,
            spec_hash=loaded.spec_hash,
            scopes=created_scopes(loaded.canonical),
        )
    planned = _action_of_present(loaded, observed)
    if planned.action not in _SCOPED:
        return planned
    fresh = planned.action is Action.CREATE or observed is None or observed.phase.terminal
    if fresh or observed is None:
        scopes = created_scopes(loaded.canonical)
    else:
        scopes = scopes_shown(JobSpec.from_canonical(observed.canonical), loaded.spec)
    return replace(planned, scopes=scopes) if scopes else planned


_SCOPED = (Action.CREATE, Action.UPDATE, Action.RESIZE, Action.RESTART)
_NEW_JOB = (PlanReason.NEW_JOB,)


def _action_of_present(loaded: LoadedJob, observed: ObservedJob | None) -> JobPlan:
    name, source, desired_canonical = loaded.name, loaded.source, loaded.canonical
    if observed is None:
        if desired_canonical["spec"].get("suspend"):
            return JobPlan(
                name,
                Action.CREATE,
                (PlanReason.NEW_JOB, PlanReason.CREATED_SUSPENDED),
                "new job, suspended (spec.suspend): it starts nothing until suspend is false",
                source=source,
                spec_hash=loaded.spec_hash,
            )
        return JobPlan(
            name,
            Action.CREATE,
            (PlanReason.NEW_JOB,),
            "new job",
            start=task_keys_of(desired_canonical),
            source=source,
            spec_hash=loaded.spec_hash,
        )
    if observed.spec_hash == loaded.spec_hash and observed.phase is not Phase.DELETING:
        return _unchanged(loaded, observed)
    if observed.spec_hash == loaded.earlier_hash and observed.phase is not Phase.DELETING:
        return _read_differently(loaded, observed)
    desired_spec = loaded.spec
    common: dict[str, Any] = {
        "source": source,
        "phase": observed.phase,
        "spec_hash": desired_spec.spec_hash,
        "previous_hash": observed.spec_hash,
    }
    if observed.phase is Phase.DELETING:
        return JobPlan(
            name,
            Action.CREATE,
            (PlanReason.RECREATE_AFTER_DELETE,),
            "being deleted; it is created again once its tasks have stopped",
            start=desired_spec.task_keys(),
            **common,
        )
    changes = field_changes(observed.canonical, desired_canonical)
    effects = {c.effect for c in changes}
    if not changes:  # a different hash for the same spec: only after a change of the hashing
        return _unchanged(loaded, observed)
    if not observed.phase.terminal:
        suspension = _suspension(observed, desired_spec, changes, common)
        if suspension is not None:
            return replace(suspension, name=name)
    if effects == {Effect.IN_PLACE}:
        return JobPlan(
            name,
            Action.UPDATE,
            (PlanReason.IN_PLACE_CHANGE,),
            "only fields that touch no running task changed",
            changes=changes,
            **common,
        )
    old_spec = JobSpec.from_canonical(observed.canonical)
    if observed.phase.terminal:
        return JobPlan(
            name,
            Action.RESTART,
            (PlanReason.RERUN_AFTER_COMPLETION,),
            f"{observed.phase.value}, and its spec changed: it runs again",
            changes=changes,
            start=desired_spec.task_keys(),
            **common,
        )
    if Effect.RESTART in effects:
        forcing = [c.dotted for c in changes if c.effect is Effect.RESTART]
        reasons = (PlanReason.FIELDS_FORCE_RESTART,) + (
            (PlanReason.REPLICAS_CHANGED,) if Effect.RESIZE in effects else ()
        )
        new_keys, old_keys = set(desired_spec.task_keys()), set(old_spec.task_keys())
        board_restarts = TENSORBOARD_KEY in _task_sets(old_spec, desired_spec, observed.running)[0]
        restart = tuple(
            k for k in observed.running if k in new_keys and (k.role.in_cluster or board_restarts)
        )
        return JobPlan(
            name,
            Action.RESTART,
            reasons,
            f"{', '.join(forcing)} changed: every task restarts",
            changes=changes,
            restart=restart,
            cost=cost_of(observed, restart),
            start=tuple(sorted(new_keys - old_keys, key=ORDER)),
            stop=tuple(sorted(old_keys - new_keys, key=ORDER)),
            **common,
        )
    restart, start, stop = _task_sets(old_spec, desired_spec, observed.running)
    resized = [c for c in changes if c.effect is Effect.RESIZE]
    counts = [f"{c.path[2]} {_count(c.old)} → {_count(c.new)}" for c in resized if c.path[1] == "replicas"]
    board = [c for c in resized if c.path[1] == "tensorboard"]
    if board:
        added, removed = _unset(board[0].old), _unset(board[0].new)
        counts.append("tensorboard " + ("added" if added else "removed" if removed else "changed"))
    message = "; ".join(counts)
    static = ": the TF cluster spec is static" if any(k.role.in_cluster for k in restart) else ""
    message += (
        f"; {len(restart)} running task(s) restart{static}" if restart else "; no running task restarts"
    )
    reasons = ((PlanReason.REPLICAS_CHANGED,) if len(counts) > len(board) else ()) + (
        (PlanReason.TENSORBOARD_CHANGED,) if board else ()
    )
    return JobPlan(
        name,
        Action.RESIZE,
        reasons,
        message,
        changes=changes,
        restart=restart,
        start=start,
        stop=stop,
        cost=cost_of(observed, restart),
        **common,
    )


def _suspension(
    observed: ObservedJob, desired: JobSpec, changes: tuple[FieldChange, ...], common: Mapping[str, Any]
) -> JobPlan | None:
    """A job suspended, resumed, or changed while it stays suspended: an update in place,
    whatever else changed (its tasks stop or start anyway, and its next launch runs the new
    spec). None when neither side is suspended."""
    before = bool(observed.canonical["spec"].get("suspend"))
    if not before and not desired.suspend:
        return None
    others = [c for c in changes if c.path != ("spec", "suspend")]
    later = "; its other changes apply when it resumes" if others and desired.suspend else ""
    if desired.suspend and not before:
        running = len(observed.running)
        message = (
            f"suspends: stops {running} task(s) after a {desired.grace_period_s:g} s grace{later}"
            if running
            else f"suspends: nothing of it runs now, nothing starts{later}"
        )
        reasons: tuple[PlanReason, ...] = (PlanReason.SUSPENDS,)
        start: tuple[TaskKey, ...] = ()
        stop = observed.running
    elif before and not desired.suspend:
        start = desired.task_keys()
        message = f"resumes: starts its {len(start)} task(s) again"
        reasons, stop = (PlanReason.RESUMES,), ()
    else:
        message = "suspended: its changes apply when it resumes"
        reasons, start, stop = (PlanReason.IN_PLACE_CHANGE,), (), ()
    # Nothing restarts for them: its tasks stop (or start) for the suspension anyway.
    in_place = tuple(replace(c, effect=Effect.IN_PLACE) for c in changes)
    return JobPlan("", Action.UPDATE, reasons, message, changes=in_place, start=start, stop=stop, **common)


def _count(value: Any) -> int:
    if value is ABSENT:
        return 0
    if isinstance(value, dict):
        return int(value.get("count", 0))
    return int(value)


def _plan_absent(
    observed: ObservedJob, desired: DesiredState, options: PlanOptions, prune_all: bool
) -> JobPlan:
    common: dict[str, Any] = {
        "source": observed.source,
        "phase": observed.phase,
        "previous_hash": observed.spec_hash,
    }
    if not options.reaches(observed):
        assert options.scope is not None
        why = options.scope.outside_message(observed)
        return JobPlan(observed.name, Action.NOOP, (PlanReason.OUTSIDE_SCOPE,), why, **common)
    if observed.phase is Phase.DELETING:  # the delete was planned and applied once: no change now
        return JobPlan(
            observed.name,
            Action.NOOP,
            (PlanReason.BEING_DELETED,),
            "being deleted: its tasks are stopping",
            **common,
        )
    file = observed.source.file if observed.source is not None else None
    protected = desired.protected.get(observed.name)
    if protected is None and file in desired.invalid_files:
        protected = tuple(d for d in desired.diagnostics if d.path == file and d.is_error)
    if protected is not None:
        first = protected[0].format() if protected else "its file has errors"
        unreadable = bool(protected) and all(d.code is Code.READ_ERROR for d in protected)
        what = "file cannot be read" if unreadable else "spec is invalid"
        return JobPlan(
            observed.name,
            Action.KEEP,
            (PlanReason.FILES_UNREADABLE if unreadable else PlanReason.INVALID_SPEC,),
            f"its {what}, so it keeps running as applied: {first}",
            diagnostics=protected,
            **common,
        )
    if file in desired.empty_files:
        return JobPlan(
            observed.name,
            Action.KEEP,
            (PlanReason.FILE_HOLDS_NO_JOB,),
            f"its file {file} holds no job document now, so it keeps running as applied "
            "(delete the file to delete the job)",
            **common,
        )
    if not options.prune:
        return JobPlan(
            observed.name,
            Action.ORPHAN,
            (PlanReason.NOT_IN_SOURCE,),
            "not in the files any more; use --prune to delete it",
            **common,
        )
    if desired.read_errors:
        return JobPlan(
            observed.name,
            Action.KEEP,
            (PlanReason.FILES_UNREADABLE,),
            f"not pruned: the files could not all be read ({desired.read_errors[0].format()})",
            diagnostics=desired.read_errors,
            **common,
        )
    if prune_all and not options.allow_empty:
        return JobPlan(
            observed.name,
            Action.ORPHAN,
            (PlanReason.PRUNE_EVERYTHING_REFUSED,),
            "the files define no jobs at all, so nothing is pruned (use --allow-empty to delete everything)",
            **common,
        )
    return JobPlan(
        observed.name,
        Action.DELETE,
        (PlanReason.REMOVED_FROM_SOURCE,),
        "not in the files any more (--prune): its tasks are stopped",
        stop=observed.running,
        **common,
    )


def _plan_move(loaded: LoadedJob, observed: ObservedJob, old: str, backend: str) -> JobPlan:
    """A job belongs to the backend that runs it: another one means a move, never a second
    copy. Its tasks there stop before it starts on ``backend``
    (docs/reference.md#job-semantics)."""
    spec = loaded.spec
    return JobPlan(
        loaded.name,
        Action.MOVE,
        (PlanReason.BACKEND_CHANGED,),
        f"moves {old} → {backend}: its tasks on {old} stop before it starts on {backend}",
        changes=field_changes(observed.canonical, loaded.canonical),
        start=spec.task_keys(),
        stop=observed.running,
        source=loaded.source,
        phase=observed.phase,
        spec_hash=loaded.spec_hash,
        previous_hash=observed.spec_hash,
        moves=(old, backend),
    )


def _move(observed: ObservedJob | None, options: PlanOptions) -> tuple[str, str] | None:
    """(from, to) when a running job is planned for another backend than it runs on. A
    finished job is not moved (it is not re-run unless its spec changes)."""
    if observed is None or options.backend is None or observed.backend is None:
        return None
    if observed.backend == options.backend or observed.phase in (
        Phase.SUCCEEDED,
        Phase.FAILED,
        Phase.DELETING,
    ):
        return None
    return observed.backend, options.backend


class PlanCache:
    """Remembers each job's plan by the identity of its loaded and observed inputs, so a warm
    re-plan (the daemon's) only plans what changed. Correct because both inputs are frozen:
    the same objects always give the same job plan.

    Kept because the target needs it (bench/core_bench.py, 10,000 jobs, one file changed, told
    which): a re-plan takes 42 ms with it and 309 ms without it (target 50 ms; 2026-12-03).

    It also remembers the last plan and what it was made from: a desired state patched from
    that one (``DesiredState.patch``, the daemon's file events) against the same observed state
    and options is planned by re-planning only the names the patch changed (``_replan``), so
    the cost does not grow with the number of jobs (issue 23: ≤ 5 ms at 10,000 jobs); that
    state itself again (a rescan that found nothing changed) re-plans no job. The observed
    state must be the same, or equal job by job (the daemon's store gives the same
    ``ObservedJob`` objects while a record is unchanged, so comparing is one C-speed dict
    comparison): it is what the backend said, and may differ from one pass to the next."""

    def __init__(self) -> None:
        self._plans: dict[str, tuple[LoadedJob, ObservedJob | None, JobPlan]] = {}
        self.last: _Last | None = None

    def present(self, loaded: LoadedJob, observed: ObservedJob | None) -> JobPlan:
        remembered = self._plans.get(loaded.name)
        if remembered is not None and remembered[0] is loaded and remembered[1] is observed:
            return remembered[2]
        job_plan = _plan_present(loaded, observed)
        self._plans[loaded.name] = (loaded, observed, job_plan)
        return job_plan


@dataclass(slots=True)
class _Last:
    """The last plan a ``PlanCache`` made, its inputs, and its jobs' names (sorted) and plans
    in that order. The lists are the cache's own: ``_replan`` edits them in place, so a told
    re-plan copies nothing per job but the new plan's tuple (issue 23)."""

    desired: DesiredState
    observed: ObservedState
    options: PlanOptions
    prune_all: bool
    plan: Plan
    names: list[str]
    jobs: list[JobPlan]

    def get(self, name: str) -> JobPlan | None:
        at = bisect.bisect_left(self.names, name)
        return self.jobs[at] if at < len(self.names) and self.names[at] == name else None


def _replan(
    last: _Last,
    desired: DesiredState,
    changed: frozenset[str],
    cache: PlanCache,
    prune_all: bool,
    now: float = 0.0,
) -> _Last:
    """``last.plan`` with the jobs of ``changed`` planned again (see ``PlanCache``): what
    ``plan`` would give, when nothing but those jobs differs and no rule spans jobs. Edits
    ``last``'s lists in place (the cache forgets ``last`` until they are whole again)."""
    cache.last = None
    names, jobs = last.names, last.jobs
    acted, sources = dict(last.plan.desired), dict(last.plan.sources)  # the jobs with changes only
    observed, options = last.observed, last.options
    for name in changed:
        loaded, current = desired.jobs.get(name), observed.get(name)
        acted.pop(name, None)
        sources.pop(name, None)
        job_plan: JobPlan | None = None
        if loaded is not None:
            move = _move(current, options)
            if current is not None and move is not None:
                job_plan = _plan_move(loaded, current, *move)
            else:
                job_plan = cache.present(loaded, current)
            if job_plan.action.changes_something:
                acted[name] = loaded.canonical
                sources[name] = loaded.source
        elif current is not None:
            job_plan = _plan_absent(current, desired, options, prune_all)
        at = bisect.bisect_left(names, name)
        present = at < len(names) and names[at] == name
        if job_plan is None:
            if present:
                del names[at]
                del jobs[at]
        elif present:
            jobs[at] = job_plan
        else:
            names.insert(at, name)
            jobs.insert(at, job_plan)
    made = Plan(
        jobs=tuple(jobs),
        options=options,
        observed=observed,
        diagnostics=desired.diagnostics,
        now=now,
        desired=acted,
        sources=sources,
        protected=desired.protected,
    )
    cache.last = _Last(desired, observed, options, prune_all, made, names, jobs)
    return cache.last


# The changes that wait for the files to settle (they stop or restart tasks), as done.
_SETTLED = {Action.RESIZE: "resized", Action.RESTART: "restarted", Action.DELETE: "deleted"}


def _settles(job: JobPlan) -> str | None:
    """What the change does, in words, when it must wait for the files to settle (it stops
    or restarts tasks: a suspension too); None when it is made at once."""
    if PlanReason.SUSPENDS in job.reasons:
        return "suspended"
    return _SETTLED.get(job.action)


class _Settling:
    """The settle rule over one plan: holds back changes that stop or restart tasks until the
    files have said them for long enough, and remembers when each was first seen."""

    def __init__(self, seconds: float, now: float, seen: Mapping[str, Sighting]) -> None:
        self.seconds, self.now, self.seen = seconds, now, seen
        self.sightings: dict[str, Sighting] = {}
        self.wake_at: float | None = None

    def hold(self, job: JobPlan, spec_hash: str | None) -> JobPlan:
        done = _settles(job)
        if self.seconds <= 0 or done is None:
            return job
        before = self.seen.get(job.name)
        sighting = before if before and before.spec_hash == spec_hash else Sighting(spec_hash, self.now)
        self.sightings[job.name] = sighting
        settles_at = sighting.since + self.seconds
        if settles_at <= self.now:
            return job
        self.wake_at = settles_at if self.wake_at is None else min(self.wake_at, settles_at)
        what = "gone from the files" if spec_hash is None else "its file changed"
        return replace(
            job,
            action=Action.KEEP,
            reasons=(PlanReason.NOT_SETTLED,),
            message=f"{what} less than {self.seconds:g} s ago: it is {done} "
            f"once the files have stayed so for {self.seconds:g} s",
            restart=(),
            start=(),
            stop=(),
            cost=None,
        )


def plan(
    desired: DesiredState,
    observed: ObservedState,
    options: PlanOptions | None = None,
    cache: PlanCache | None = None,
    *,
    now: float = 0.0,
    sightings: Mapping[str, Sighting] | None = None,
) -> Plan:
    """``now`` and ``sightings`` (the previous plan's) matter only with ``options.settle_s``."""
    options = options or PlanOptions()
    given = desired
    if cache is not None and cache.last is not None and not sightings:
        replanned = _replan_patch(cache, cache.last, desired, observed, options, now)
        if replanned is not None:
            return replanned
    desired = enforce_quotas(desired, observed, options.quotas, options.prune, options.scope)
    desired = enforce_max_jobs(desired, observed, options.max_jobs, options.prune, options.scope)
    settling = _Settling(options.settle_s, now, sightings or {})
    jobs: list[JobPlan] = []
    acted: dict[str, Mapping[str, Any]] = {}
    sources: dict[str, SourceRef] = {}
    prune_all = not desired.jobs and not desired.protected and not desired.invalid_files
    present = cache.present if cache is not None else _plan_present
    for name in sorted(desired.jobs.keys() | observed.keys()):
        loaded = desired.jobs.get(name)
        current = observed.get(name)
        if loaded is not None:
            move = _move(current, options)
            if current is not None and move is not None:  # not held to the settle time: no file changed
                job_plan = _plan_move(loaded, current, *move)
            else:
                job_plan = settling.hold(present(loaded, current), loaded.spec_hash)
            if job_plan.action.changes_something:
                acted[name] = loaded.canonical
                sources[name] = loaded.source
        else:
            assert current is not None
            job_plan = settling.hold(_plan_absent(current, desired, options, prune_all), None)
        jobs.append(job_plan)
    if options.room is not None:
        jobs = _with_preemptions(jobs, desired, observed, options.room, options.backend, now)
    made = Plan(
        jobs=tuple(jobs),
        options=options,
        observed=observed,
        diagnostics=desired.diagnostics,
        now=now,
        desired=acted,
        sources=sources,
        sightings=settling.sightings,
        wake_at=settling.wake_at,
        protected=desired.protected,
    )
    if cache is not None:
        cache.last = _Last(given, observed, options, prune_all, made, [job.name for job in jobs], jobs)
    return made


def _replan_patch(
    cache: PlanCache,
    last: _Last,
    desired: DesiredState,
    observed: ObservedState,
    options: PlanOptions,
    now: float = 0.0,
) -> Plan | None:
    """The plan of ``desired`` made from ``last`` when ``desired`` is a patch of the state
    ``last`` was made from, or that state itself (a rescan that found nothing changed), and
    nothing spans jobs; None when a full plan is needed."""
    unchanged = desired is last.desired
    if (
        (not unchanged and (desired.patch is None or desired.patch[0] is not last.desired.token))
        or (
            observed is not last.observed and observed != last.observed
        )  # the daemon's: equal jobs, same objects
        or options != last.options
        or options.quotas  # they count every job
        or options.room is not None  # a preemption spans jobs
        or not within_max_jobs(desired, observed, options.max_jobs)  # creates may be refused
        or last.plan.sightings  # something waits to settle: the time may change its plan
        or desired.diagnostics
        or last.desired.diagnostics
    ):
        return None
    prune_all = not desired.jobs and not desired.protected and not desired.invalid_files
    if prune_all != last.prune_all:
        return None
    changed = frozenset() if unchanged or desired.patch is None else desired.patch[1]
    now_last = _replan(last, desired, changed, cache, prune_all, now)
    made = now_last.plan
    jobs = (now_last.get(n) for n in changed)
    if options.settle_s > 0 and any(_settles(job) for job in jobs if job is not None):
        return None  # the settle rule holds it back: the full plan does that
    return made


# A job that asks for room once the plan is applied, by what the plan does to it
_ASKS = {
    Action.CREATE: PlanReason.NEW_JOB,
    Action.UPDATE: PlanReason.RESUMES,
    Action.RESTART: PlanReason.RERUN_AFTER_COMPLETION,
    Action.MOVE: PlanReason.BACKEND_CHANGED,
}
_STOPS = (Action.DELETE, Action.MOVE)  # its tasks here stop anyway


def _with_preemptions(
    jobs: list[JobPlan],
    desired: DesiredState,
    observed: ObservedState,
    room: Room,
    backend: str | None,
    now: float,
) -> list[JobPlan]:
    """``jobs`` with whom applying them preempts, and for whom (``preempting``). What each
    job needs is worked out only when a job of lower priority runs (a plan of 10,000 new
    jobs on an empty state folder looks no further than their priorities)."""
    asking = [(job, keys) for job in jobs if (keys := _asks(job, desired, observed))]
    if not asking:
        return jobs
    top = max(priority_of(desired.jobs[job.name].canonical) for job, _ in asking)
    by_name = {job.name: job for job in jobs}
    held = [
        _held(current, by_name.get(current.name), desired, room, now)
        for current in observed.values()
        if current.running and (backend is None or current.backend in (None, backend))
    ]
    if not any(h.preemptible and not h.stopping and h.priority < top for h in held):
        return jobs  # nothing any of them could preempt
    wants = []
    for job, keys in asking:
        canonical = desired.jobs[job.name].canonical
        wants.append(Want(job.name, priority_of(canonical), needs(canonical, keys)))
    found = foretell(wants, held, room, now)
    if not found:
        return jobs
    victims = {p.job: p for p in found}
    takers: dict[str, list[Preempted]] = {}
    for p in found:
        takers.setdefault(p.by, []).append(p)
    out = []
    for job in jobs:
        made = job
        if job.name in victims:
            made = replace(
                made, reasons=(*made.reasons, PlanReason.PREEMPTED), preempted_by=victims[job.name]
            )
        if job.name in takers:
            made = replace(
                made, reasons=(*made.reasons, PlanReason.PREEMPTS), preempts=tuple(takers[job.name])
            )
        out.append(made)
    return out


def _asks(job: JobPlan, desired: DesiredState, observed: ObservedState) -> tuple[TaskKey, ...]:
    """The tasks ``job`` asks room for once the plan is applied (none: it asks for none):
    created, resumed, run again, moved here, or waiting for room now."""
    loaded = desired.jobs.get(job.name)
    if loaded is None or job.action in (Action.KEEP, Action.DELETE, Action.ORPHAN):
        return ()
    canonical = loaded.canonical
    keys: tuple[TaskKey, ...] = ()
    if _ASKS.get(job.action) in job.reasons and PlanReason.CREATED_SUSPENDED not in job.reasons:
        keys = job.start
    elif job.action in (Action.NOOP, Action.UPDATE) and not job.start:
        current = observed.get(job.name)
        waiting = current is not None and current.phase is Phase.PENDING and not current.running
        if waiting and not canonical["spec"].get("suspend"):
            keys = task_keys_of(canonical)
    return keys


def _held(current: ObservedJob, job: JobPlan | None, desired: DesiredState, room: Room, now: float) -> Held:
    """What ``current``'s alive tasks hold, and whether the plan leaves them preemptible."""
    loaded = desired.jobs.get(current.name)
    after = (
        loaded.canonical
        if loaded is not None and job is not None and job.action is not Action.KEEP
        else current.canonical
    )
    held = needs(current.canonical, current.running)
    stopping = (
        current.phase in (Phase.SUSPENDED, Phase.DELETING)
        or current.phase.terminal
        or (job is not None and (job.action in _STOPS or PlanReason.SUSPENDS in job.reasons))
    )
    rank = priority_of(after)
    protected = (room.non_preemptible is not None and rank >= room.non_preemptible) or (
        after["spec"].get("priorityClassName") in room.protected_classes
    )
    started = current.started_at if current.started_at is not None else now
    since = since_checkpoint(current.progress, started)[1]
    grace = float(after["spec"]["terminationGracePeriodSeconds"])
    return Held(current.name, rank, held, current.running, started, since, grace, stopping, not protected)
