"""A job's status document (docs/reference.md#status-files, ``schemas/status.schema.json``),
computed from its record and its tasks. Pure: the shell writes the result atomically.

Conditions are recomputed every time; a condition keeps its ``lastTransitionTime`` while its
status and reason stay the same. ``Reconciling`` and ``Stalled`` appear only while true.

**Bounded.** A document lists at most ``TASKS_LISTED`` tasks (the first, in role and index
order; as many as ``policy.maxTasksPerJob`` allows by default, so a job within the default
policy is always listed whole). A bigger job's document says so: ``tasksTruncated: true`` and
``taskCount`` (all its tasks) follow ``tasks``; ``replicas`` still counts every task. The
rest are paged with ``task_entries`` (the daemon's ``/jobs/NAME?tasksOffset=``, ``tfdeclare
status NAME --tasks``). So a 100,000-task job costs a status file of 1,000 tasks, not one of
17 MB that took a minute to read.
"""

from __future__ import annotations

import calendar
import math
import time
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from tfdeclare.core.enums import ROLE_ORDER, Phase, Reason, Role, TaskState
from tfdeclare.core.run import progress
from tfdeclare.core.run.record import Condition, ConditionType, JobRecord, Suspension, TaskRecord, rfc3339
from tfdeclare.core.run.tasks import ObservedTask, TaskKey
from tfdeclare.core.spec.keys import ORDER
from tfdeclare.core.spec.model import SCOPE_WHY, TENSORBOARD_KEY, JobSpec


def task_records(current: Sequence[ObservedTask]) -> tuple[TaskRecord, ...]:
    """The newest task of each desired slot, in role and index order."""
    by_key: dict[TaskKey, ObservedTask] = {}
    for task in current:
        seen = by_key.get(task.key)
        if seen is None or (task.started_at or 0.0) >= (seen.started_at or 0.0):
            by_key[task.key] = task
    return tuple(
        TaskRecord(
            task_id=t.task_id,
            key=t.key,
            attempt=t.attempt,
            state=t.state,
            host=t.host,
            port=t.port,
            exit_code=t.exit_code,
            started_at=t.started_at,
            finished_at=t.finished_at,
            message=t.message,
        )
        for t in sorted(by_key.values(), key=lambda t: ORDER(t.key))
    )


def with_last_runs(
    shown: Mapping[TaskKey, TaskRecord],
    slots: Collection[TaskKey],
    tasks: Sequence[ObservedTask],
    before: Sequence[TaskRecord],
) -> dict[TaskKey, TaskRecord]:
    """``shown`` (the current run's tasks) with each of ``slots`` that has none yet keeping
    its last run's entry once that ended: the newest ended one of ``tasks``, else the
    record's (``before``; the backend lets ended tasks of an earlier run go at once). So while
    the job (or a task alone) waits to restart, its status says which task failed and how
    (``exitCode``, its own ``attempt``) and ``logs`` finds that run's log, until a task of the
    new run is launched into the slot."""
    out = dict(shown)
    ended = [t for t in tasks if t.state.ended and t.key in slots and t.key not in out]
    out.update((t.key, t) for t in task_records(ended))
    for entry in before:
        if entry.key in slots and entry.key not in out and entry.task_id and entry.state.ended:
            out[entry.key] = entry
    return out


def waiting_to_restart(record: JobRecord, task: TaskRecord, now: float) -> str | None:
    """What ``logs`` says of a task entry of the last run kept while its slot waits to
    restart (``with_last_runs``): how it ended and when it restarts ("worker-0: exited 5;
    restarts in 26 s"); None for a task of the current run, or a job that is done."""
    if not task.state.ended or record.phase.terminal or record.deleting or record.suspension is not None:
        return None
    alone = record.task_restarts.get(task.key.name)
    if task.attempt < record.attempt:
        at = record.next_launch_at
    elif alone is not None and alone.pending and alone.attempt == record.attempt:
        at = alone.next_launch_at
    else:
        return None
    if task.exit_code is not None and task.exit_code > 128:
        how = f"killed by signal {task.exit_code - 128}"
    elif task.exit_code is not None:
        how = f"exited {task.exit_code}"
    else:
        how = task.state.value
    when = f"restarts in {math.ceil(at - now - 1e-9)} s" if at is not None and at > now else "restarts next"
    return f"{task.key.name}: {how}; {when}"


def conditions(record: JobRecord, now: float) -> tuple[Condition, ...]:
    previous = {c.type: c for c in record.conditions}

    def make(kind: ConditionType, status: str, reason: Reason, message: str) -> Condition:
        before = previous.get(kind)
        since = (
            before.last_transition if before and (before.status, before.reason) == (status, reason) else now
        )
        return Condition(kind, status, reason, message, since)

    phase = record.phase
    out = [
        make(
            ConditionType.READY,
            "True" if phase is Phase.RUNNING else "False",
            record.reason,
            record.message,
        )
    ]
    if record.not_synced:
        out.append(make(ConditionType.SYNCED, "False", *record.not_synced))
    else:
        applied = f"revision {record.revision}" if record.revision else f"spec {record.spec_hash[:12]}"
        out.append(make(ConditionType.SYNCED, "True", Reason.SPEC_APPLIED, f"{applied} is applied"))
    if record.suspension is not None:
        hold = record.suspension
        out.append(make(ConditionType.SUSPENDED, "True", hold.reason, record.message))
    if record.reason.stalled:
        out.append(make(ConditionType.STALLED, "True", record.reason, record.message))
    elif phase in (Phase.PENDING, Phase.RESTARTING, Phase.DELETING):
        out.append(make(ConditionType.RECONCILING, "True", record.reason, record.message))
    return tuple(out)


TASKS_LISTED = 1000  # tasks a status document lists at most (module docstring)


def _groups(record: JobRecord) -> list[tuple[Role, Sequence[int]]]:
    """A status document's tasks, by role in ``ORDER`` (a role sorts by its name), each role's
    indices in order: the spec's and those still recorded (a deleting job: only those
    recorded). Ranges where they can be, so a 100,000-task job costs no list of keys."""
    recorded: dict[Role, set[int]] = {}
    for task in record.tasks:
        recorded.setdefault(task.key.role, set()).add(task.key.index)
    counts: dict[Role, int] = {}
    if not record.deleting:
        spec = record.spec
        counts = {r.role: r.count for r in spec.replicas if r.count}
        if spec.tensorboard is not None:
            counts[Role.TENSORBOARD] = 1
    out: list[tuple[Role, Sequence[int]]] = []
    for role in sorted(counts.keys() | recorded.keys()):
        count = counts.get(role, 0)
        extra = sorted(i for i in recorded.get(role, ()) if i >= count)
        out.append((role, [*range(count), *extra] if extra else range(count)))
    return out


def task_keys(record: JobRecord, offset: int = 0, limit: int | None = None) -> list[TaskKey]:
    """A status document's tasks from ``offset``, at most ``limit`` (None: all), in role and
    index order (``_groups``)."""
    out: list[TaskKey] = []
    for role, indices in _groups(record):
        if offset >= len(indices):
            offset -= len(indices)
            continue
        wanted = None if limit is None else limit - len(out)
        chosen = indices[offset:] if wanted is None else indices[offset : offset + wanted]
        out.extend(TaskKey(role, i) for i in chosen)
        offset = 0
        if limit is not None and len(out) >= limit:
            break
    return out


def task_count(record: JobRecord) -> int:
    """How many tasks a status document of the record has (listed or not)."""
    return sum(len(indices) for _, indices in _groups(record))


def task_entries(record: JobRecord, offset: int = 0, limit: int | None = None) -> list[dict[str, Any]]:
    """The status document's task entries from ``offset``, at most ``limit`` (None: all)."""
    return _entries(record, task_keys(record, offset, None if limit is None else max(0, limit)))


def _entries(record: JobRecord, keys: Sequence[TaskKey]) -> list[dict[str, Any]]:
    tasks = {t.key: t for t in record.tasks}
    task_entries = []
    for key in keys:
        task = tasks.get(key)
        if task is None:
            task_entries.append(
                {
                    "id": "",
                    "role": key.role.value,
                    "index": key.index,
                    "attempt": record.attempt,
                    "state": "pending",
                    "host": None,
                    "port": None,
                    "exitCode": None,
                    "startTime": None,
                    "finishTime": None,
                    "message": "",
                    "log": None,
                }
            )
            continue
        task_entries.append(
            {
                "id": task.task_id,
                "role": key.role.value,
                "index": key.index,
                "attempt": task.attempt,
                "state": task.state.value,
                "host": task.host,
                "port": task.port,
                "exitCode": task.exit_code,
                "startTime": rfc3339(task.started_at),
                "finishTime": rfc3339(task.finished_at),
                "message": task.message,
                "log": f"tfdeclare logs {record.name} --task {key.name}",
            }
        )
    return task_entries


def status_document(record: JobRecord, now: float, *, tasks_listed: int | None = None) -> dict[str, Any]:
    """The job's status document, listing at most ``tasks_listed`` tasks (default
    ``TASKS_LISTED``; module docstring)."""
    spec = record.spec
    tasks = {t.key: t for t in record.tasks}
    replicas: dict[str, dict[str, int]] = {}
    for role in ROLE_ORDER:
        desired = spec.count(role)
        of_role = [t for t in record.tasks if t.key.role is role]
        if not desired and not of_role:
            continue
        replicas[role.value] = {
            "desired": desired,
            "running": sum(1 for t in of_role if t.state is TaskState.RUNNING),
            "succeeded": sum(1 for t in of_role if t.state is TaskState.SUCCEEDED),
            "failed": sum(1 for t in of_role if t.state in (TaskState.FAILED, TaskState.GONE)),
        }
    listed = task_entries(record, 0, TASKS_LISTED if tasks_listed is None else tasks_listed)
    total = task_count(record)
    truncated = {"tasksTruncated": True, "taskCount": total} if total > len(listed) else {}
    return {
        "apiVersion": "tfdeclare/v1",
        "kind": "TFJobStatus",
        "name": record.name,
        "phase": (Phase.DELETING if record.deleting else record.phase).value,
        "specHash": record.spec_hash,
        "revision": record.revision,
        "revisionInfo": dict(record.revision_info) if record.revision_info else None,
        "lastAttemptedRevision": record.last_attempted_revision,
        "source": {"file": record.source.file, "line": record.source.line} if record.source else None,
        "backend": record.backend,
        "attempt": record.attempt,
        "restarts": record.restarts,
        "nextRestartTime": rfc3339(_next_restart(record)),
        "restartScopes": restart_scopes(record.spec),
        "taskRestarts": _task_restarts(record),
        "suspension": _suspension(record.suspension),
        "suspensions": record.suspensions,
        "preemptions": record.preemptions,
        "suspensionHistory": [_suspension(entry) for entry in record.suspension_history],
        "platformRestarts": record.platform_restarts,
        "platformRestartLimit": spec.platform_restart_limit,
        "platformEvents": [
            {"cause": e.cause.value, "time": rfc3339(e.at), "tasks": list(e.tasks), "message": e.message}
            for e in record.platform_events
        ],
        "replicas": replicas,
        "tasks": listed,
        **truncated,
        "tensorboard": _tensorboard(record, tasks.get(TENSORBOARD_KEY)),
        "progress": progress_entry(record),
        "conditions": [
            {**c.to_json(), "lastTransitionTime": rfc3339(c.last_transition)} for c in record.conditions
        ],
        "startTime": rfc3339(record.start_time),
        "completionTime": rfc3339(record.completion_time),
        "cleanupTime": rfc3339(record.cleaned_at),
        "message": record.message,
        "lastError": last_error(record),
        "updatedAt": rfc3339(now),
    }


def last_error(record: JobRecord) -> dict[str, Any] | None:
    """The status file's ``lastError``: the last runtime error a pass met for the job, with its
    code (``core.errors``), or None."""
    if record.last_error is None:
        return None
    entry = record.last_error.to_json()
    entry.pop("job", None)
    return {**entry, "time": rfc3339(record.last_error_at)}


def restart_scopes(spec: JobSpec) -> dict[str, dict[str, str]]:
    """Per role (TensorBoard's included): what a failure of its task restarts, and why."""
    roles = [replica.role for replica in spec.replicas]
    if spec.tensorboard is not None:
        roles.append(Role.TENSORBOARD)
    out = {}
    for role in roles:
        scope, why = spec.restart_scope_for(role)
        out[role.value] = {
            "scope": scope.value,
            "reason": why.value,
            "message": SCOPE_WHY[why].format(role=role.value),
        }
    return out


def _next_restart(record: JobRecord) -> float | None:
    """When a Restarting job relaunches: the first relaunch of its tasks restarting alone
    (pending in this attempt: the job itself then does not restart), else the job's."""
    if record.phase is not Phase.RESTARTING:
        return None
    alone = [
        entry.next_launch_at
        for entry in record.task_restarts.values()
        if entry.pending and entry.attempt == record.attempt and entry.next_launch_at is not None
    ]
    return min(alone) if alone else record.next_launch_at


def task_restarts_total(document: Mapping[str, Any]) -> int:
    """A status document's restarts of tasks alone after their failures, all its tasks
    together (``taskRestarts``), apart from ``restarts`` (the whole job's); as there, the
    platform's events are not counted."""
    rows = document.get("taskRestarts") or ()
    return sum(int(row.get("restarts") or 0) for row in rows if isinstance(row, Mapping))


def _task_restarts(record: JobRecord) -> list[dict[str, Any]]:
    """Each task restarted alone: how often, why the last time, and whether it waits."""
    out = []
    for name, entry in sorted(record.task_restarts.items(), key=lambda item: TaskKey.parse(item[0])):
        pending = entry.pending and entry.attempt == record.attempt
        out.append(
            {
                "task": name,
                "restarts": entry.count,
                "backoffLimit": record.spec.backoff_limit,
                "lastRestartTime": rfc3339(entry.at),
                "exitCode": entry.exit_code,
                "message": entry.message,
                "pending": pending,
                "nextLaunchTime": rfc3339(entry.next_launch_at) if pending else None,
                "jobRestartsForItsAddress": entry.fallbacks,
                "platformRestarts": entry.platform,
            }
        )
    return out


# What a suspension whose record says no words (written by an earlier release) is shown with
_WHY_HELD = {
    Reason.SUSPENDED: "spec.suspend is true",
    Reason.PREEMPTED: "a job of higher priority needed its room",
}


def _suspension(hold: Suspension | None) -> dict[str, Any] | None:
    """A suspension or preemption: why, by whom, when, and when it ended (null: not yet)."""
    if hold is None:
        return None
    return {
        "reason": hold.reason.value,
        "preemptedBy": hold.by,
        "time": rfc3339(hold.at),
        "tasks": hold.tasks,
        "message": hold.message or _WHY_HELD[hold.reason],  # a record of before it was said
        "resumeTime": rfc3339(hold.resumed_at),
    }


def _tensorboard(record: JobRecord, task: TaskRecord | None) -> dict[str, Any] | None:
    """Where the job's TensorBoard is (null without ``spec.tensorboard``)."""
    board = record.spec.tensorboard
    if board is None:
        return None
    if task is None:
        return {"logDir": board.log_dir, "state": "pending", "address": None, "url": None}
    running = task.state is TaskState.RUNNING and task.host and task.port
    return {
        "logDir": board.log_dir,
        "state": task.state.value,
        "address": f"{task.host}:{task.port}" if running else None,
        "url": f"http://{_url_host(task.host or '')}:{task.port}/" if running else None,
    }


def progress_entry(record: JobRecord) -> dict[str, Any] | None:
    """The job's progress (``core/run/progress``): null when it declares no checkpoint folder
    and no TensorBoard log folder. Times, not ages, so the file changes only when it does."""
    spec = record.spec
    if spec.checkpoint is None and spec.tensorboard is None:
        return None
    seen = progress.with_total(record.progress, spec.checkpoint.total_steps if spec.checkpoint else None)
    if seen is None:
        seen = progress.Progress(total_steps=spec.checkpoint.total_steps if spec.checkpoint else None)
    checkpoint = seen.checkpoint
    return {
        "step": seen.step,
        "stepTime": rfc3339(seen.step_at),
        "stepsPerSecond": seen.steps_per_second,
        "totalSteps": seen.total_steps,
        "estimatedCompletionTime": rfc3339(seen.estimated_completion),
        "checkpoint": (
            {"name": checkpoint.name, "step": checkpoint.step, "time": rfc3339(checkpoint.at)}
            if checkpoint is not None
            else None
        ),
        "message": seen.message,
    }


def _seconds(timestamp: str | None) -> float | None:
    if not timestamp:
        return None
    try:
        return float(calendar.timegm(time.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, TypeError):
        return None


def progress_lines(entry: Mapping[str, Any] | None, now: float) -> list[str]:
    """A status document's ``progress`` in words, for ``tfdeclare status NAME`` and the page:
    "step 1,200 of 10,000 (12 %), 3.2 steps/s, done in about 47 min", "checkpoint ckpt-1200 at
    step 1,200, saved 2 min ago", and what could not be read. Empty without progress."""
    if not entry:
        return []
    lines = []
    step, total, rate = entry.get("step"), entry.get("totalSteps"), entry.get("stepsPerSecond")
    if step is not None:
        words = f"step {step:,}"
        if total:
            words += f" of {total:,} ({min(100.0, 100.0 * step / total):.0f} %)"
        reached = _seconds(entry.get("stepTime"))
        if reached is not None:
            words += f", {progress.duration(now - reached)} ago"
        if rate is not None:
            words += f", {rate:.3g} steps/s"
        eta = _seconds(entry.get("estimatedCompletionTime"))
        if eta is not None and total and step < total:
            words += f", done in about {progress.duration(eta - now)}" if eta > now else ", due by now"
        lines.append(words)
    checkpoint = entry.get("checkpoint")
    if checkpoint:
        at = f" at step {checkpoint['step']:,}" if checkpoint.get("step") is not None else ""
        saved = _seconds(checkpoint.get("time"))
        when = f", saved {progress.duration(now - saved)} ago" if saved is not None else ""
        lines.append(f"checkpoint {checkpoint['name']}{at}{when}")
    elif step is not None or entry.get("message"):
        lines.append("no checkpoint yet")
    if entry.get("message"):
        lines.append(str(entry["message"]))
    return lines


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def summary(document: Mapping[str, Any]) -> dict[str, Any]:
    """What a one-line view of a job shows (``tfdeclare status``, the daemon's page), from its
    status document, whole or truncated: its tasks, running and succeeded are counted over
    every task (``replicas`` and ``tensorboard`` when ``tasks`` lists only the first)."""
    tasks = document.get("tasks") or []
    if document.get("tasksTruncated"):
        replicas = (document.get("replicas") or {}).values()
        board = (document.get("tensorboard") or {}).get("state")
        running = sum(r.get("running", 0) for r in replicas) + (board == TaskState.RUNNING)
        succeeded = sum(r.get("succeeded", 0) for r in replicas) + (board == TaskState.SUCCEEDED)
        total = int(document.get("taskCount", len(tasks)))
    else:
        running = sum(1 for t in tasks if t.get("state") == TaskState.RUNNING)
        succeeded = sum(1 for t in tasks if t.get("state") == TaskState.SUCCEEDED)
        total = len(tasks)
    return {
        "name": document.get("name"),
        "phase": document.get("phase"),
        "restarts": document.get("restarts", 0),
        "taskRestarts": task_restarts_total(document),
        "startTime": document.get("startTime"),
        "message": document.get("message", ""),
        "tasks": total,
        "running": running,
        "succeeded": succeeded,
    }
