"""The Mesos backend's task table: every task it launched, and the rules for changing it.

This module owns ``TaskTable``: the tasks (``journal.TaskEntry`` by task id, loaded from the
journal and written to it before anything acts on a change), where each launch of this run
stands (``launching``: journaled but its ACCEPT not answered yet, ``Launch.UNSENT``; taken by
the master but no update came yet, ``Launch.AWAITING_UPDATE``, which ``close`` waits for) and
the updates journaled but not acknowledged yet (``acks_due``). One thread owns it (the
backend's loop).

The rules are pure functions of a task's record, tested as tables
(``tests/test_mesos_task_table.py``): which updates fold into a record and which mean the task
never existed (``status_rule``), what an update says in the reducer's terms (``reported``),
what an answer to an ACCEPT means (``accept_outcome``), which tasks of an ACCEPT still go out
(``launchable``), which tasks are gone with a removed framework (``gone_with_framework``), which
to reconcile after subscribing (``to_reconcile``), and when a stop changes a record
(``stop_changes``). The table applies what they say.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from enum import Enum
from pathlib import Path

from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.clusterserver import Fetched
from tfdeclare.backends.mesos.decide_messages import Reported
from tfdeclare.backends.mesos.errors import MesosConnectionError, MesosError
from tfdeclare.backends.mesos.events import TaskStatus
from tfdeclare.backends.mesos.journal import TaskEntry, TaskJournal
from tfdeclare.backends.mesos.taskstate import LOST_LIKE, NEVER_LAUNCHED, TERMINAL, apply_status, is_terminal

log = logging.getLogger("tfdeclare.mesos")

# Task ids the controller makes: <job>.<uid>.<role>-<index>.<launch>
OUR_TASK_ID = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\.[^./\\]+\.(chief|ps|worker|evaluator|tensorboard)-\d+\.[^./\\]+$"
)

Ack = tuple[str, str, str]  # (agent id, task id, update uuid)


# ---- the rules (pure) ------------------------------------------------------------------------------


class StatusRule(Enum):
    """What a status update does to the table."""

    UNKNOWN = "unknown"  # not in the table: the reducer decides (a live task of ours is killed)
    NEVER_LAUNCHED = "never-launched"  # it never reached an agent: forget it, the slot is launched again
    RECORD = "record"  # fold it into the task's record


def agent_refused(source: str | None, reason: str | None) -> bool:
    """An agent dropped the task because it could not set it up (e.g. its user does not exist
    there: "Failed to chown directory to 'u': No such user 'u'"). Launching it again would
    fail the same way, so it counts as a failure of the task, with the agent's message."""
    return source in ("SOURCE_AGENT", "SOURCE_SLAVE") and reason == "REASON_EXECUTOR_TERMINATED"


def status_rule(entry: TaskEntry | None, state: str, source: str | None, reason: str | None) -> StatusRule:
    """Never launched (no update came yet and the master says DROPPED or GONE, not an agent
    that refused it): forget it, so the controller launches the slot again (not a failure)."""
    if entry is None:
        return StatusRule.UNKNOWN
    if entry.state is None and state in NEVER_LAUNCHED and not agent_refused(source, reason):
        return StatusRule.NEVER_LAUNCHED
    return StatusRule.RECORD


def reported(state: str) -> Reported:
    """What an update's state says of a task, in the reducer's terms."""
    if state in TERMINAL:
        return Reported.ENDED
    if state in LOST_LIKE:
        return Reported.LOST
    if state == "TASK_KILLING":
        return Reported.KILLING
    if state in ("TASK_RUNNING", "TASK_STARTING"):
        return Reported.RUNNING
    return Reported.ACTIVE


class AcceptOutcome(Enum):
    """What the answer to one ACCEPT means for its tasks."""

    LAUNCHED = "launched"  # the master took it
    UNANSWERED = "unanswered"  # the connection broke: did the master get it? Reconcile them
    REFUSED = "refused"  # never launched: forget them, the controller launches the slots again


def accept_outcome(result: MesosError | None) -> AcceptOutcome:
    if result is None:
        return AcceptOutcome.LAUNCHED
    if isinstance(result, MesosConnectionError):
        return AcceptOutcome.UNANSWERED
    return AcceptOutcome.REFUSED


def launchable(entry: TaskEntry | None) -> bool:
    """A task of a queued ACCEPT still goes out: not stopped (nor forgotten) before it."""
    return entry is not None and not entry.kill_requested


def gone_with_framework(entries: Iterable[TaskEntry]) -> list[TaskEntry]:
    """The master removed the framework: every task of it that had not ended is gone."""
    return [e for e in entries if not is_terminal(e.state)]


def to_reconcile(entries: Iterable[TaskEntry], unsent: set[str]) -> tuple[tuple[str, str | None], ...]:
    """After subscribing: every live task whose ACCEPT went out, (task id, agent id)."""
    return tuple(
        (e.task_id, e.agent_id) for e in entries if not is_terminal(e.state) and e.task_id not in unsent
    )


def stopping(entries: Iterable[TaskEntry]) -> tuple[msg.KillTarget, ...]:
    """Live tasks the controller asked to stop (their KILLs are sent again)."""
    return tuple(
        msg.KillTarget(e.task_id, e.agent_id, e.kill_grace_s)
        for e in entries
        if e.kill_requested and not is_terminal(e.state)
    )


def stop_changes(entry: TaskEntry, grace_s: float) -> bool:
    """A stop changes the record when it is new or asks for another grace period."""
    return not entry.kill_requested or entry.kill_grace_s != grace_s


class Launch(Enum):
    """Where a launch of this run stands, until its task's first update."""

    UNSENT = "unsent"  # journaled, its ACCEPT not answered yet
    AWAITING_UPDATE = "awaiting update"  # the master took it, no update came yet


# ---- the table -------------------------------------------------------------------------------------


class TaskTable:
    """The tasks, the launches and acknowledgements in flight, and the journal; see the
    module docstring."""

    def __init__(self, root: Path) -> None:
        self.journal = TaskJournal(root)
        self.tasks: dict[str, TaskEntry] = self.journal.load()  # raises JournalError
        self.launching: dict[str, Launch] = {}  # the launches of this run, until a first update
        self.acks_due: list[Ack] = []  # journaled updates to acknowledge once synced

    def at(self, stage: Launch) -> set[str]:
        """The launches of this run at ``stage``."""
        return {t for t, at in self.launching.items() if at is stage}

    def get(self, task_id: str) -> TaskEntry | None:
        return self.tasks.get(task_id)

    def __contains__(self, task_id: str) -> bool:
        return task_id in self.tasks

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[TaskEntry]:
        return iter(self.tasks.values())

    def drop(self, task_id: str) -> None:
        self.launching.pop(task_id, None)
        self.tasks.pop(task_id, None)

    def live_on(self, agent_id: str) -> list[TaskEntry]:
        return [e for e in self.tasks.values() if e.agent_id == agent_id and not is_terminal(e.state)]

    def busy_agents(self) -> set[str]:
        return {e.agent_id for e in self.tasks.values() if not is_terminal(e.state)}

    # ---- changes (each journaled) ------------------------------------------------------------

    def record_launch(self, entries: Sequence[TaskEntry]) -> None:
        """Write-ahead: the tasks are journaled (synced) before any ACCEPT carries them."""
        for entry in entries:
            self.tasks[entry.task_id] = entry
        self.journal.put(entries, sync=True)
        self.launching.update((e.task_id, Launch.UNSENT) for e in entries)

    def forget_unlaunched(self, task_ids: Sequence[str], why: str) -> None:
        """Tasks whose ACCEPT was not sent or was refused never existed."""
        for task_id in task_ids:
            log.warning("task %s was not launched: %s", task_id, why)
            self.drop(task_id)
        self.journal.delete(task_ids, sync=True)

    def answered(self, task_ids: Iterable[str]) -> None:
        """The ACCEPT carrying these tasks was answered (or never sent)."""
        for task_id in task_ids:
            if self.launching.get(task_id) is Launch.UNSENT:
                self.launching.pop(task_id)

    def launched(self, task_ids: Iterable[str]) -> None:
        """The master took these tasks (informational: written with the task's next change)."""
        for task_id in task_ids:
            if (entry := self.tasks.get(task_id)) is not None:
                entry.accepted = True
                if entry.state is None:  # close() waits for its first update to be acknowledged
                    self.launching[task_id] = Launch.AWAITING_UPDATE

    def cluster_fetched(self, fetched: Fetched) -> None:
        """The cluster server answered a task of ``fetched.job`` in slot ``fetched.key``:
        the task this process registered for it, else (a generation an earlier process
        served) the oldest live task of that slot that fetches and has not (a task fetches
        once, as it starts). Journaled with the task's next write."""
        entry = self.tasks.get(fetched.task_id) if fetched.task_id is not None else None
        if entry is None:
            slot = (fetched.job, fetched.key.role.value, fetched.key.index)
            waiting = [
                e
                for e in self.tasks.values()
                if (e.job, e.role, e.index) == slot
                and e.fetches_cluster
                and not e.cluster_fetched
                and not is_terminal(e.state)
            ]
            entry = min(waiting, key=lambda e: e.attempt, default=None)
        if entry is not None and not entry.cluster_fetched:
            entry.cluster_fetched = True
            self.journal.put([entry], sync=False)

    def first_update(self, task_id: str) -> bool:
        """An update came: whether it is the first of a task launched in this run."""
        first = self.launching.get(task_id) is Launch.AWAITING_UPDATE
        if first:
            del self.launching[task_id]
        return first

    def apply(self, entry: TaskEntry, status: TaskStatus, now: float) -> bool:
        """Fold ``status`` into ``entry`` and journal it; whether it changed."""
        changed = apply_status(
            entry,
            status.state,
            reason=status.reason,
            source=status.source,
            message=status.message,
            timestamp=status.timestamp,
            now=now,
            healthy=status.healthy,
        )
        if changed:
            self.journal.put([entry], sync=False)
        return changed

    def remove(self, task_ids: Sequence[str], sync: bool) -> None:
        for task_id in task_ids:
            self.drop(task_id)
        self.journal.delete(task_ids, sync=sync)

    def framework_removed(self, framework_id: str, now: float) -> None:
        """Every live task is gone with the framework (journaled)."""
        gone = gone_with_framework(self.tasks.values())
        for entry in gone:
            apply_status(
                entry,
                "TASK_GONE",
                reason="REASON_FRAMEWORK_REMOVED",
                source="SOURCE_MASTER",
                message=f"framework {framework_id} was removed by the master",
                timestamp=None,
                now=now,
            )
        self.journal.put(gone, sync=True)

    def request_stop(self, task_ids: Sequence[str], grace_s: float) -> tuple[list[msg.KillTarget], bool]:
        """Mark live tasks to stop (journaled); their KILL targets, and whether a record changed."""
        changed, targets = [], []
        for task_id in task_ids:
            entry = self.tasks.get(task_id)
            if entry is None or is_terminal(entry.state):
                continue
            if stop_changes(entry, grace_s):
                entry.kill_requested = True
                entry.kill_grace_s = grace_s
                changed.append(entry)
            targets.append(msg.KillTarget(task_id, entry.agent_id, grace_s))
        self.journal.put(changed, sync=True)
        return targets, bool(changed)

    def move_off(self, task_ids: Sequence[str], cause: str) -> list[msg.KillTarget]:
        """Mark live tasks not stopping yet to stop, for ``cause`` (journaled); their targets."""
        changed, targets = [], []
        for task_id in task_ids:
            entry = self.tasks.get(task_id)
            if entry is None or is_terminal(entry.state) or entry.kill_requested:
                continue
            entry.kill_requested = True
            entry.moved_for = cause
            changed.append(entry)
            targets.append(msg.KillTarget(task_id, entry.agent_id, entry.kill_grace_s))
        if changed:
            self.journal.put(changed, sync=True)
        return targets

    def forget(self, task_ids: Sequence[str], ended: Callable[[TaskEntry], bool]) -> None:
        """Out of ``observe`` (kept for their logs until purged): the ended ones of these."""
        forgotten = []
        for task_id in task_ids:
            entry = self.tasks.get(task_id)
            if entry is not None and not entry.forgotten and ended(entry):
                entry.forgotten = True
                forgotten.append(entry)
        self.journal.put(forgotten, sync=False)

    def take_acks(self) -> list[Ack]:
        acks, self.acks_due = self.acks_due, []
        return acks

    def compact(self) -> None:
        try:
            self.journal.compact(self.tasks.values())
        except OSError as err:
            log.error("cannot compact the task journal: %s", err)
