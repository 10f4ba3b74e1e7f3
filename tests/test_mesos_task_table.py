"""The Mesos backend's task table (``tasktable``): its rules as tables, and the table itself
over a real journal in a temporary folder (each change survives a reload)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tfdeclare.backends.mesos import decide_messages as msg
from tfdeclare.backends.mesos.decide_messages import Reported
from tfdeclare.backends.mesos.errors import BadRequestError, MesosConnectionError, MesosError
from tfdeclare.backends.mesos.events import TaskStatus
from tfdeclare.backends.mesos.journal import TaskEntry
from tfdeclare.backends.mesos.tasktable import (
    AcceptOutcome,
    Launch,
    StatusRule,
    TaskTable,
    accept_outcome,
    agent_refused,
    gone_with_framework,
    launchable,
    reported,
    status_rule,
    stop_changes,
    stopping,
    to_reconcile,
)


def entry(task_id: str = "j.u.worker-0.1", agent: str = "a1", **changes: object) -> TaskEntry:
    made = TaskEntry(task_id, "j", "worker", 0, 1, "c", "s", 1.0, 256, 0, agent, "h", 4000, "", 0.0)
    return replace(made, **changes)  # type: ignore[arg-type]


def status(task_id: str, state: str, source: str = "SOURCE_MASTER", reason: str | None = None) -> TaskStatus:
    raw = {"task_id": {"value": task_id}, "state": state, "source": source}
    return TaskStatus(task_id, state, "a1", None, source, reason, "m", None, 5.0, raw)


# ---- the rules ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("known", "state_before", "update", "source", "reason", "rule"),
    [
        (False, None, "TASK_RUNNING", "SOURCE_MASTER", None, StatusRule.UNKNOWN),
        (False, None, "TASK_DROPPED", "SOURCE_MASTER", None, StatusRule.UNKNOWN),
        # never launched: no update came yet and the master says it was dropped or is gone
        (True, None, "TASK_DROPPED", "SOURCE_MASTER", None, StatusRule.NEVER_LAUNCHED),
        (True, None, "TASK_GONE", "SOURCE_MASTER", None, StatusRule.NEVER_LAUNCHED),
        # an agent that could not set it up: a failure of the task, recorded
        (True, None, "TASK_DROPPED", "SOURCE_AGENT", "REASON_EXECUTOR_TERMINATED", StatusRule.RECORD),
        (True, None, "TASK_GONE", "SOURCE_SLAVE", "REASON_EXECUTOR_TERMINATED", StatusRule.RECORD),
        # it ran: whatever comes is recorded
        (True, "TASK_RUNNING", "TASK_GONE", "SOURCE_MASTER", None, StatusRule.RECORD),
        (True, None, "TASK_FAILED", "SOURCE_AGENT", None, StatusRule.RECORD),
        (True, None, "TASK_RUNNING", "SOURCE_EXECUTOR", None, StatusRule.RECORD),
    ],
)
def test_status_rule(
    known: bool, state_before: str | None, update: str, source: str, reason: str | None, rule: StatusRule
) -> None:
    before = entry(state=state_before) if known else None
    assert status_rule(before, update, source, reason) is rule


def test_agent_refused_only_for_an_agent_whose_executor_ended() -> None:
    assert agent_refused("SOURCE_AGENT", "REASON_EXECUTOR_TERMINATED")
    assert not agent_refused("SOURCE_MASTER", "REASON_EXECUTOR_TERMINATED")
    assert not agent_refused("SOURCE_AGENT", "REASON_COMMAND_EXECUTOR_FAILED")


@pytest.mark.parametrize(
    ("state", "said"),
    [
        ("TASK_STAGING", Reported.ACTIVE),
        ("TASK_STARTING", Reported.RUNNING),
        ("TASK_RUNNING", Reported.RUNNING),
        ("TASK_KILLING", Reported.KILLING),
        ("TASK_LOST", Reported.LOST),
        ("TASK_UNREACHABLE", Reported.LOST),
        ("TASK_UNKNOWN", Reported.LOST),
        ("TASK_FINISHED", Reported.ENDED),
        ("TASK_FAILED", Reported.ENDED),
        ("TASK_KILLED", Reported.ENDED),
        ("TASK_GONE", Reported.ENDED),
        ("TASK_DROPPED", Reported.ENDED),
    ],
)
def test_reported(state: str, said: Reported) -> None:
    assert reported(state) is said


@pytest.mark.parametrize(
    ("result", "outcome"),
    [
        (None, AcceptOutcome.LAUNCHED),
        (MesosConnectionError("reset"), AcceptOutcome.UNANSWERED),
        (BadRequestError(400, "offer gone", "ACCEPT"), AcceptOutcome.REFUSED),
        (MesosError("other"), AcceptOutcome.REFUSED),
    ],
)
def test_accept_outcome(result: MesosError | None, outcome: AcceptOutcome) -> None:
    assert accept_outcome(result) is outcome


def test_launchable_only_when_known_and_not_stopped() -> None:
    assert launchable(entry())
    assert not launchable(entry(kill_requested=True))  # stopped before its ACCEPT
    assert not launchable(None)  # forgotten before its ACCEPT


def test_framework_removed_takes_every_live_task() -> None:
    tasks = [entry("a", state="TASK_RUNNING"), entry("b", state=None), entry("c", state="TASK_FINISHED")]
    assert [e.task_id for e in gone_with_framework(tasks)] == ["a", "b"]


def test_to_reconcile_skips_ended_and_unsent_tasks() -> None:
    tasks = [
        entry("a", "a1", state="TASK_RUNNING"),
        entry("b", "a2", state=None),
        entry("c", "a1", state="TASK_FAILED"),
        entry("d", "a3", state=None),
    ]
    assert to_reconcile(tasks, {"d"}) == (("a", "a1"), ("b", "a2"))


def test_stopping_lists_live_tasks_asked_to_stop() -> None:
    tasks = [
        entry("a", kill_requested=True, kill_grace_s=5.0, state="TASK_RUNNING"),
        entry("b", kill_requested=True, state="TASK_KILLED"),
        entry("c", state="TASK_RUNNING"),
    ]
    assert stopping(tasks) == (msg.KillTarget("a", "a1", 5.0),)


@pytest.mark.parametrize(
    ("requested", "grace_before", "grace", "changes"),
    [(False, None, 5.0, True), (True, 5.0, 5.0, False), (True, 5.0, 30.0, True)],
)
def test_stop_changes(requested: bool, grace_before: float | None, grace: float, changes: bool) -> None:
    assert stop_changes(entry(kill_requested=requested, kill_grace_s=grace_before), grace) is changes


# ---- the table, over a real journal -----------------------------------------------------------------


def reloaded(root: Path) -> TaskTable:
    return TaskTable(root)


def test_launch_is_journaled_before_its_accept_and_answered_later(tmp_path: Path) -> None:
    table = TaskTable(tmp_path)
    table.record_launch([entry("a", "a1"), entry("b", "a2")])
    assert table.at(Launch.UNSENT) == {"a", "b"}
    assert set(reloaded(tmp_path).tasks) == {"a", "b"}  # write-ahead: durable already
    table.answered(["a", "b"])
    table.launched(["a"])
    assert not table.at(Launch.UNSENT)
    assert table.at(Launch.AWAITING_UPDATE) == {"a"}
    assert table.tasks["a"].accepted
    table.journal.close()


def test_never_launched_tasks_are_forgotten(tmp_path: Path) -> None:
    table = TaskTable(tmp_path)
    table.record_launch([entry("a", "a1"), entry("b", "a1")])
    table.forget_unlaunched(["a"], "the master refused its launch")
    assert "a" not in table
    assert [e.task_id for e in table.live_on("a1")] == ["b"]
    table.journal.close()
    assert set(reloaded(tmp_path).tasks) == {"b"}


def test_framework_removed_every_task_gone(tmp_path: Path) -> None:
    table = TaskTable(tmp_path)
    table.record_launch([entry("a", state="TASK_RUNNING"), entry("b", state="TASK_FINISHED")])
    table.framework_removed("fw-1", now=9.0)
    assert table.tasks["a"].state == "TASK_GONE"
    assert table.tasks["a"].reason == "REASON_FRAMEWORK_REMOVED"
    assert table.tasks["b"].state == "TASK_FINISHED"
    assert not table.busy_agents()
    table.journal.close()
    assert reloaded(tmp_path).tasks["a"].state == "TASK_GONE"


def test_updates_apply_once_and_are_journaled(tmp_path: Path) -> None:
    table = TaskTable(tmp_path)
    table.record_launch([entry("a")])
    record = table.tasks["a"]
    assert table.apply(record, status("a", "TASK_RUNNING", "SOURCE_EXECUTOR"), now=3.0)
    assert not table.apply(record, status("a", "TASK_RUNNING", "SOURCE_EXECUTOR"), now=4.0)  # a duplicate
    table.journal.close()
    assert reloaded(tmp_path).tasks["a"].state == "TASK_RUNNING"


def test_stop_then_move_off_and_forget(tmp_path: Path) -> None:
    table = TaskTable(tmp_path)
    table.record_launch([entry("a", state="TASK_RUNNING"), entry("b", state="TASK_RUNNING")])
    targets, changed = table.request_stop(["a", "gone"], 5.0)
    assert (targets, changed) == ([msg.KillTarget("a", "a1", 5.0)], True)
    assert table.request_stop(["a"], 5.0) == ([msg.KillTarget("a", "a1", 5.0)], False)
    assert table.move_off(["a", "b"], "Maintenance") == [msg.KillTarget("b", "a1", None)]
    table.forget(["a", "b"], ended=lambda e: e.task_id == "a")
    table.journal.close()
    again = reloaded(tmp_path)
    assert again.tasks["a"].forgotten and not again.tasks["b"].forgotten
    assert again.tasks["b"].moved_for == "Maintenance"
    assert again.tasks["a"].kill_grace_s == 5.0
