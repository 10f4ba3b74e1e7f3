"""When ``logs --follow`` ends (``logs_command._followed_to_the_end``), over the records the real
controller writes (in process: the fake backend, an injected clock), each taken as a follower
may read it while every log it follows is already complete (the worst case), with and without
a controller holding the lock. The follow ends only once the record's own rules say the
followed task runs no more; a task that ended before any controller judged it is not decided
yet while a controller is to come (the background controller on: ``logs_command._kept``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.controller_world import BACKOFF, World
from tfdeclare.cli.logs_command import _followed_to_the_end, _kept, _Tail
from tfdeclare.core.enums import Phase, Role, TaskState
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import TaskKey

CHIEF = TaskKey(Role.CHIEF, 0)
WORKER = TaskKey(Role.WORKER, 0)
PS_JOB = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: retried}
spec:
  restartPolicy: OnFailure
  backoffLimit: 2
  command: [python, train.py]
  replicas:
    chief: {count: 1, resources: {cpus: 0.1, mem: 64}}
    ps: {count: 1, resources: {cpus: 0.1, mem: 64}}
    worker: {count: 2, resources: {cpus: 0.1, mem: 64}}
"""


WORKERS_ALONE = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: retried}
spec:
  restartPolicy: OnFailure
  restartScope: Task
  backoffLimit: 2
  command: [python, train.py]
  replicas:
    worker: {count: 2, resources: {cpus: 0.1, mem: 64}}
"""


def _written(world: World) -> list[JobRecord]:
    """Every record of the job the controller writes from now on, in order (the store's two
    ways of writing: one at once, and a pass's batch at its end)."""
    written: list[JobRecord] = []
    save, save_many = world.store.save, world.store.save_many

    def one(record: JobRecord) -> None:
        save(record)
        written.append(record)

    def many(records: Sequence[JobRecord]) -> dict[str, OSError]:
        failed = save_many(records)
        written.extend(r for r in records if r.name not in failed)
        return failed

    world.store.save = one  # type: ignore[method-assign]
    world.store.save_many = many  # type: ignore[method-assign]
    return written


def _alive(world: World, key: TaskKey) -> str:
    return world.tasks("retried")[key.name].task_id


def _run(world: World, followed: TaskKey) -> list[tuple[JobRecord, set[str]]]:
    """The run: attempt 0's ``followed`` fails once, the controller restarts it (the whole job,
    or it alone) after its backoff, and then every task that decides completion exits 0. Each
    record written, with the ids of the followed task's launches a follower has seen by then."""
    written = _written(world)
    world.apply()
    world.settle()
    world.backend.finish(_alive(world, followed), 1)
    world.settle()
    world.clock.advance(BACKOFF.max_s)
    world.settle()
    for task in world.tasks("retried").values():
        if task.key.role in (Role.CHIEF, Role.WORKER):
            world.backend.finish(task.task_id, 0)
    world.settle()
    seen: list[tuple[JobRecord, set[str]]] = []
    ids: set[str] = set()
    for record in written:
        ids |= {t.task_id for t in record.tasks if t.key == followed}
        seen.append((record, set(ids)))
    return seen


def _tails(ids: set[str], followed: TaskKey) -> dict[str, list[_Tail]]:
    return {task_id: [_Tail(followed, task_id, complete=True)] for task_id in ids}


@pytest.mark.parametrize("running", [True, False], ids=["controller-holds-lock", "handing-over"])
@pytest.mark.parametrize("restarts_alone", [False, True], ids=["job-restarts", "task-restarts-alone"])
def test_a_follow_across_a_restart_ends_only_with_the_job(
    tmp_path: Path, running: bool, restarts_alone: bool
) -> None:
    world = World(tmp_path)
    if restarts_alone:  # no chief, no ps: a worker restarts alone while the other runs on
        world.write("retried", WORKERS_ALONE)
    else:  # a failed chief of a job with ps roles restarts the whole job
        world.write("retried", PS_JOB)
    followed = WORKER if restarts_alone else CHIEF
    seen = _run(world, followed)
    assert len({i for _, ids in seen for i in ids}) == 2, "the follow saw both launches"
    ends = [
        _followed_to_the_end(record, followed, _tails(ids, followed), _kept(record, running, True))
        for record, ids in seen
    ]
    finished = [record.phase.terminal for record, _ in seen]
    assert ends == finished, [(r.phase.value, r.reason.value) for r, _ in seen]
    assert finished[-1]


def test_a_task_that_ended_unjudged_is_not_decided_while_a_controller_is_to_come(tmp_path: Path) -> None:
    """The window of the failure seen once under load: the command that launched the job has
    let go of the lock and the background controller it started has not taken it yet, while
    the chief has already failed and its log is complete. The record still shows it running:
    the follow waits for the controller's word. With the background controller off no
    controller comes before the next command: the backend's word (the log is complete) is
    the last."""
    world = World(tmp_path)
    world.write("retried", PS_JOB)
    world.apply()
    world.settle()
    record = world.record("retried")
    chief = _alive(world, CHIEF)
    assert [t.state for t in record.tasks if t.key == CHIEF] == [TaskState.RUNNING]
    world.backend.finish(chief, 1)
    tails = _tails({chief}, CHIEF)
    assert not _followed_to_the_end(record, CHIEF, tails, _kept(record, running=False, background=True))
    assert not _followed_to_the_end(record, None, tails, _kept(record, running=False, background=True))
    assert not _followed_to_the_end(record, CHIEF, tails, _kept(record, running=True, background=False))
    assert _followed_to_the_end(record, CHIEF, tails, _kept(record, running=False, background=False))
    world.settle()  # a controller judges it: the job restarts
    judged = world.record("retried")
    assert judged.phase is Phase.RESTARTING
    for running, background in ((True, True), (False, True), (True, False)):
        kept = _kept(judged, running, background)
        assert not _followed_to_the_end(judged, CHIEF, tails, kept), (running, background)


def test_a_follow_that_waits_for_a_controller_none_runs_says_so_once(tmp_path: Path) -> None:
    """A follow that expects the background controller and sees none hold the lock says so once
    after ``UNKEPT_NOTICE_S`` (its start failed, it was killed), naming the job and the
    controller's log; a controller holding the lock, or a record that needs none, resets it."""
    from tfdeclare.cli.logs_command import UNKEPT_NOTICE_S, unkept_notice

    world = World(tmp_path)
    world.write("retried", PS_JOB)
    world.apply()
    record = world.record("retried")
    assert not record.phase.terminal
    log = tmp_path / "state" / "controller.log"
    said = []
    since: float | None = None
    for now, running, background in [
        (0.0, False, True),
        (UNKEPT_NOTICE_S - 1, False, True),
        (UNKEPT_NOTICE_S, False, True),  # said here
        (UNKEPT_NOTICE_S + 5, False, True),
        (UNKEPT_NOTICE_S * 3, False, True),  # not again
    ]:
        since, notice = unkept_notice(record, running, background, since, now, log)
        said.append((now, notice))
    notices = [(now, n) for now, n in said if n is not None]
    assert [now for now, _ in notices] == [UNKEPT_NOTICE_S]
    assert "job retried" in notices[0][1] and str(log) in notices[0][1]
    # a controller holds the lock: the wait starts again, and would be said again
    since, notice = unkept_notice(record, True, True, since, 100.0, log)
    assert (since, notice) == (None, None)
    assert unkept_notice(record, False, True, None, 100.0, log) == (100.0, None)
    # no background controller: none is expected, nothing to say
    assert unkept_notice(record, False, False, 0.0, 1000.0, log) == (None, None)
