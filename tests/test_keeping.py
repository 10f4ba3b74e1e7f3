"""Which jobs need a controller between commands (core.run.keeping), and the background
controller's log bound (cli.background.open_log)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.test_lifecycle import record_for
from tfdeclare.cli import background
from tfdeclare.core.enums import Phase, Reason, TaskState
from tfdeclare.core.run.keeping import any_needs_controller, needs_controller
from tfdeclare.core.run.record import Suspension, TaskRecord
from tfdeclare.core.run.tasks import TaskKey

WORKER = "{worker: {count: 1}}"


def _task(state: TaskState) -> TaskRecord:
    return TaskRecord("t1", TaskKey.parse("worker-0"), 0, state)


@pytest.mark.parametrize(
    ("fields", "extra", "needed"),
    [
        ({"phase": Phase.RUNNING, "reason": Reason.ALL_TASKS_RUNNING}, "", True),
        ({"phase": Phase.PENDING, "reason": Reason.WAITING_FOR_OFFERS}, "", True),  # a gang to place
        ({"phase": Phase.RESTARTING, "reason": Reason.BACKING_OFF}, "", True),
        ({"phase": Phase.PENDING, "reason": Reason.UNSCHEDULABLE}, "", False),  # waits for a change
        ({"phase": Phase.SUCCEEDED, "reason": Reason.ALL_TASKS_RUNNING}, "", False),
        ({"phase": Phase.SUCCEEDED, "tasks": (_task(TaskState.STOPPING),)}, "", True),  # the rest stop
        ({"phase": Phase.SUCCEEDED, "completion_time": 5.0}, "  ttlSecondsAfterFinished: 60\n", True),
        ({"phase": Phase.FAILED, "cleaned_at": 70.0}, "  ttlSecondsAfterFinished: 60\n", False),
        ({"phase": Phase.SUCCEEDED, "deleting": True}, "", True),
        ({"phase": Phase.FAILED, "tasks": (_task(TaskState.FAILED),)}, "", False),
    ],
)
def test_which_jobs_need_a_controller(fields: dict[str, object], extra: str, needed: bool) -> None:
    record = record_for(WORKER, extra, **fields)
    assert needs_controller(record) is needed
    assert any_needs_controller([record_for(WORKER, phase=Phase.SUCCEEDED), record]) is needed


def test_a_suspended_job_needs_one_only_when_preempted() -> None:
    for reason, needed in ((Reason.SUSPENDED, False), (Reason.PREEMPTED, True)):
        suspension = Suspension(reason=reason, at=1.0, tasks=1)
        record = record_for(WORKER, phase=Phase.SUSPENDED, reason=reason, suspension=suspension)
        assert needs_controller(record) is needed


def test_the_log_is_moved_aside_past_its_bound(tmp_path: Path) -> None:
    log = tmp_path / background.LOG_NAME
    log.write_bytes(b"x" * (background.LOG_LIMIT_BYTES + 1))
    fd = background.open_log(log)
    os.write(fd, b"new\n")
    os.close(fd)
    assert log.read_bytes() == b"new\n"
    assert (tmp_path / (background.LOG_NAME + ".1")).stat().st_size == background.LOG_LIMIT_BYTES + 1
    (tmp_path / "elsewhere").write_text("")
    log.unlink()
    log.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(OSError):
        background.open_log(log)  # never through a link
