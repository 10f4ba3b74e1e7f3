"""Mesos task states in tfdeclare's terms: pure functions, table-tested.

This module owns two mappings:

- ``apply_status``: which status updates change a journal entry. Updates of one task arrive
  in order from its agent, but duplicates and master-generated answers (reconciliation,
  agent removal) interleave: a terminal state is final; a state never goes back (RUNNING
  never returns to STARTING); LOST / UNREACHABLE / UNKNOWN may come back to RUNNING (a
  partition healed).
- ``observed_state``: an entry as the controller sees it (``TaskState``, exit code,
  message). STAGING/STARTING -> starting; RUNNING -> running, or stopping once a kill was
  asked for; KILLING -> stopping; FINISHED -> succeeded (0); FAILED -> failed with the exit
  code from the executor's message ("Command exited with status N" -> N, "... terminated
  with signal S" -> 128 + S); KILLED -> stopped when we asked, else failed; ERROR -> failed;
  DROPPED / GONE / GONE_BY_OPERATOR -> gone; LOST / UNREACHABLE / UNKNOWN -> lost (may
  still run: no replacement starts; stopping if a kill was asked for) until ``fencing_s``
  has passed, then gone ("presumed gone").

A task that fails its health check (``healthCheck``, run by the executor) gets ``healthy``
updates on TASK_RUNNING (kept in the entry) and is killed by its executor: ``unhealthy``
says so, and the lifecycle restarts it as a failure.
- ``observed_task``: an entry as ``observe`` reports it; a task whose end the master's
  reconciliation answer told (``REASON_RECONCILIATION``: no exit code) has its exit code due
  for ``EXIT_CODE_WAIT_S`` from that answer (``exit_code_due``): the agent's own terminal
  update, re-sent until acknowledged, names it, and restartPolicy ExitCode waits for it.
- ``cause_of``: which of the platform's own events (``EndCause``), if any, a state and reason
  say ended the task, for the lifecycle's separate budget: the agent's drain
  (``REASON_AGENT_DRAINING``, on TASK_KILLING/KILLED/GONE_BY_OPERATOR), an agent lost,
  removed or restarted (LOST / UNREACHABLE / UNKNOWN / GONE, ``REASON_AGENT_REMOVED`` and its
  v0 spelling ``REASON_SLAVE_REMOVED``), an agent an operator marked gone
  (TASK_GONE_BY_OPERATOR), a launch the cluster dropped (TASK_DROPPED), and tfdeclare's own
  move off an agent going into maintenance (``TaskEntry.moved_for``). Anything else, an exit
  code, an OOM kill, a container that failed to launch, is the job's own.
"""

from __future__ import annotations

import re
import signal

from tfdeclare.backends.mesos.bootstrap import FETCH_FAILED_EXIT
from tfdeclare.backends.mesos.journal import TaskEntry
from tfdeclare.core.enums import EndCause, Role, TaskState
from tfdeclare.core.run.tasks import ObservedTask, TaskKey
from tfdeclare.core.spec.resources import Resources

TERMINAL = frozenset(
    {
        "TASK_FINISHED",
        "TASK_FAILED",
        "TASK_KILLED",
        "TASK_ERROR",
        "TASK_DROPPED",
        "TASK_GONE",
        "TASK_GONE_BY_OPERATOR",
    }
)
LOST_LIKE = frozenset({"TASK_LOST", "TASK_UNREACHABLE", "TASK_UNKNOWN"})
# Progress of a live task; a lower rank never replaces a higher one.
_RANK = {"TASK_STAGING": 0, "TASK_STARTING": 1, "TASK_RUNNING": 2, "TASK_KILLING": 3}
# Definite answers that a task never reached an agent (it did not run, and never will).
NEVER_LAUNCHED = frozenset({"TASK_DROPPED", "TASK_GONE"})

_EXITED = re.compile(r"exited with status (-?\d+)")
_SIGNALED = re.compile(r"terminated with signal (.+?)\s*$")


def _signal_numbers() -> dict[str, int]:
    names: dict[str, int] = {}
    for sig in signal.Signals:
        names[sig.name.upper()] = sig.value
        names[sig.name[3:].upper()] = sig.value
        text = signal.strsignal(sig)
        if text:
            names[text.upper()] = sig.value
    return names


_SIGNALS = _signal_numbers()


def exit_code_from(message: str | None) -> int | None:
    """The exit code an executor's message describes (128 + N for signal N), if any."""
    if not message:
        return None
    exited = _EXITED.search(message)
    if exited:
        return int(exited.group(1))
    signaled = _SIGNALED.search(message)
    if signaled:
        name = signaled.group(1).strip().rstrip(".").upper()
        if name.isdigit():
            return 128 + int(name)
        number = _SIGNALS.get(name)
        if number is not None:
            return 128 + number
    return None


_RECONCILED = "REASON_RECONCILIATION"
# How long after the master's reconciliation answer told a task's end (naming no exit code)
# its exit code is expected from the agent's own terminal update: the agents resume sending
# their unacknowledged updates once the framework is subscribed again and re-send one first
# after 10 s, so this covers a resume and one re-send. restartPolicy ExitCode decides no
# sooner (``lifecycle``); past it, without a code, it decides as for any unknown code.
EXIT_CODE_WAIT_S = 15.0


def is_terminal(state: str | None) -> bool:
    return state in TERMINAL


def apply_status(
    entry: TaskEntry,
    state: str,
    *,
    reason: str | None,
    source: str | None,
    message: str | None,
    timestamp: float | None,
    now: float,
    healthy: bool | None = None,
) -> bool:
    """Fold one status update into ``entry``; True when the entry changed. ``healthy``: the
    update's (a health check's result, on TASK_RUNNING and on the terminal update)."""
    current = entry.state
    if current in TERMINAL:
        if state == current and entry.reason == _RECONCILED and reason != _RECONCILED and message:
            # The master's answer to a reconciliation names no exit code ("Reconciliation:
            # Latest task state"); the agent's own update, re-sent until acknowledged, does.
            entry.reason, entry.source, entry.message, entry.updated_at = reason, source, message, now
            if timestamp is not None:
                entry.finished_at = timestamp
            return True
        return False  # final: a late duplicate or a reconciliation echo
    if state == current == "TASK_RUNNING" and healthy is not None and healthy != entry.healthy:
        entry.healthy = healthy  # REASON_TASK_HEALTH_CHECK_STATUS_UPDATED
        entry.reason, entry.message, entry.updated_at = reason, message or entry.message, now
        return True
    if healthy is not None:
        entry.healthy = healthy
    if current is not None and current not in LOST_LIKE and state not in TERMINAL and state not in LOST_LIKE:
        if _RANK.get(state, 0) < _RANK.get(current, 0):
            return False  # never backwards (a stale answer)
        if state == current:
            return False  # a duplicate
    if state == current and state in LOST_LIKE:
        return False
    when = timestamp if timestamp is not None else now
    entry.state = state
    entry.reason = reason
    entry.source = source
    entry.message = message or ""
    entry.updated_at = now
    if state in LOST_LIKE:
        if entry.lost_since is None:
            entry.lost_since = now
    else:
        entry.lost_since = None
    if state in ("TASK_STARTING", "TASK_RUNNING") and entry.started_at is None:
        entry.started_at = when
    if state in TERMINAL:
        entry.finished_at = when
    elif entry.forgotten and state not in LOST_LIKE:
        entry.forgotten = False  # it came back (a healed partition): show it again
    return True


def unhealthy(entry: TaskEntry) -> str:
    """Why the executor killed the task for its health check ("" when it did not): it ended,
    not by our kill, with ``healthy: false`` (upstream's executor sets it on the terminal
    update of a task it killed after ``consecutive_failures``)."""
    if (
        entry.healthy is not False
        or entry.kill_requested
        or entry.state not in ("TASK_KILLED", "TASK_FAILED")
    ):
        return ""
    return (
        "unhealthy: it failed its health check (healthCheck) failureThreshold times in a row; "
        "the Mesos executor killed it"
    )


def observed_state(entry: TaskEntry, now: float, fencing_s: float) -> tuple[TaskState, int | None, str]:
    """(state, exit code, message) of ``entry`` for ``observe()``."""
    state = entry.state
    message = entry.message
    if state is None or state in ("TASK_STAGING", "TASK_STARTING"):
        return (TaskState.STOPPING if entry.kill_requested else TaskState.STARTING), None, message
    if state == "TASK_RUNNING":
        return (TaskState.STOPPING if entry.kill_requested else TaskState.RUNNING), None, message
    if state == "TASK_KILLING":
        return TaskState.STOPPING, None, message
    if state == "TASK_FINISHED":
        return TaskState.SUCCEEDED, 0, message
    if state == "TASK_FAILED":
        return TaskState.FAILED, exit_code_from(message), message or "failed"
    if state == "TASK_KILLED":
        code = exit_code_from(message)
        if entry.kill_requested:
            return TaskState.STOPPED, code, message
        return TaskState.FAILED, code, message or "killed, not by tfdeclare"
    if state == "TASK_ERROR":
        return TaskState.FAILED, None, message or "the master refused the task"
    if state in LOST_LIKE:
        since = entry.lost_since if entry.lost_since is not None else now
        if now - since >= fencing_s:
            why = f" ({message})" if message else ""
            return (
                TaskState.GONE,
                None,
                f"presumed gone: unreachable for {now - since:.0f} s (fencingTimeoutSeconds){why}",
            )
        # Asked to stop and cut off: it may still run, so it stays alive, and stopping is
        # what the controller asked for (it does not ask again every pass).
        lost = TaskState.STOPPING if entry.kill_requested else TaskState.LOST
        return lost, None, message or state.removeprefix("TASK_").lower()
    return TaskState.GONE, None, message or state.removeprefix("TASK_").lower()


_AGENT_LOST_REASONS = frozenset(
    {
        "REASON_AGENT_REMOVED",
        "REASON_SLAVE_REMOVED",
        "REASON_AGENT_DISCONNECTED",
        "REASON_SLAVE_DISCONNECTED",
        "REASON_AGENT_RESTARTED",
        "REASON_SLAVE_RESTARTED",
        "REASON_AGENT_UNKNOWN",
        "REASON_SLAVE_UNKNOWN",
    }
)
_OPERATOR_REASONS = frozenset({"REASON_AGENT_REMOVED_BY_OPERATOR", "REASON_SLAVE_REMOVED_BY_OPERATOR"})


def cause_of(
    state: str | None, reason: str | None, moved_for: str | None = None, cluster_unfetched: bool = False
) -> EndCause:
    """The platform event (or ``EndCause.JOB``) a task's latest Mesos state and reason tell
    of; ``moved_for``: tfdeclare itself moved it off its agent for that cause;
    ``cluster_unfetched``: a task whose cluster is fetched at its start exited with the
    bootstrap's code for a failed fetch (``bootstrap.FETCH_FAILED_EXIT``)."""
    if moved_for is not None:
        return EndCause(moved_for)
    if cluster_unfetched and state == "TASK_FAILED":
        return EndCause.CLUSTER_UNDELIVERED
    if reason == "REASON_AGENT_DRAINING":
        return EndCause.AGENT_DRAINED
    if state == "TASK_GONE_BY_OPERATOR" or reason in _OPERATOR_REASONS:
        return EndCause.KILLED_BY_OPERATOR
    if state == "TASK_DROPPED":
        return EndCause.LAUNCH_DROPPED
    if state in LOST_LIKE or state == "TASK_GONE" or reason in _AGENT_LOST_REASONS:
        return EndCause.AGENT_LOST
    return EndCause.JOB


def exit_code_due(entry: TaskEntry, state: TaskState, exit_code: int | None) -> float | None:
    """Until when the exit code of a task that failed is still expected: its end came from
    the master's reconciliation answer (no code in it), ``EXIT_CODE_WAIT_S`` from then; None
    when what is known is all there will be."""
    if state is not TaskState.FAILED or exit_code is not None or entry.reason != _RECONCILED:
        return None
    if entry.state not in ("TASK_FAILED", "TASK_KILLED") or entry.updated_at is None:
        return None
    return entry.updated_at + EXIT_CODE_WAIT_S


def observed_task(entry: TaskEntry, now: float, fencing_s: float) -> ObservedTask:
    """``entry`` as the controller observes it (``observed_state``, with what the journal
    knows: where it runs, its resources, its Mesos state and reason as extras, and whether its
    exit code is still to come, ``exit_code_due``)."""
    state, exit_code, message = observed_state(entry, now, fencing_s)
    # the bootstrap's exit: 86 of a task the server answered is its program's (never retried
    # as a platform event); one answered by an earlier process that did not journal it is
    # taken as the bootstrap's
    unfetched = entry.fetches_cluster and not entry.cluster_fetched and exit_code == FETCH_FAILED_EXIT
    extra = {"agentId": entry.agent_id}
    if entry.state is not None:
        extra["mesosState"] = entry.state
    if entry.reason:
        extra["mesosReason"] = entry.reason
    return ObservedTask(
        task_id=entry.task_id,
        job=entry.job,
        key=TaskKey(Role(entry.role), entry.index),
        attempt=entry.attempt,
        config_hash=entry.config_hash,
        state=state,
        resources=Resources(entry.cpus, entry.mem_mib, entry.gpus),
        host=entry.host,
        port=entry.port,
        exit_code=exit_code,
        started_at=entry.started_at,
        finished_at=entry.finished_at if state.ended else None,
        message=message,
        spec_hash=entry.spec_hash,
        extra=extra,
        unhealthy=unhealthy(entry),
        cause=cause_of(entry.state, entry.reason, entry.moved_for, unfetched),
        where=entry.agent_id,
        exit_code_due=exit_code_due(entry, state, exit_code),
    )
