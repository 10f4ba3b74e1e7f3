"""The Mesos backend knows its own tasks by their ids (``tasktable.OUR_TASK_ID``): every task id the
controller makes, the TensorBoard task's included, must match, or a task the journal lost is
never killed (issue 23)."""

from __future__ import annotations

import pytest

from tfdeclare.backends.mesos.tasktable import OUR_TASK_ID
from tfdeclare.core.enums import Role
from tfdeclare.core.run.launches import task_id
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import TaskKey


def record() -> JobRecord:
    return JobRecord(name="mnist-2", uid="a1b2c3", canonical={}, spec_hash="0" * 16)


@pytest.mark.parametrize("role", list(Role))
def test_every_role_s_task_ids_are_ours(role: Role) -> None:
    for index, launch in ((0, 1), (12, 345)):
        assert OUR_TASK_ID.match(task_id(record(), TaskKey(role, index), launch))


@pytest.mark.parametrize(
    "foreign",
    [
        "mnist-2.a1b2c3.launcher-0.1",  # a role we do not have
        "mnist-2.a1b2c3.worker-x.1",
        "mnist-2/a1b2c3.worker-0.1",
        "Mnist.a1b2c3.tensorboard-0.1",
        "spark-executor-17",
    ],
)
def test_other_frameworks_task_ids_are_not(foreign: str) -> None:
    assert not OUR_TASK_ID.match(foreign)
