"""The controller in-process (``tfdeclare/controller/reconciler.py``): applying plans, reconcile
passes, restarts per policy with backoff, completion, deadline, resize, delete, orphans and
adoption. Real spec files, planner, records and status files; the in-memory fake backend and an
injected clock, so every timing rule is checked at exact instants without sleeping."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.controller_world import BACKOFF, World, job_text
from tests.records_db import seq_of
from tfdeclare.backends.base import BackendError
from tfdeclare.core.enums import Phase, Reason, Role, TaskState
from tfdeclare.core.plan.planner import Action
from tfdeclare.core.run.tasks import ObservedTask


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_apply_only_records_and_a_pass_launches_the_whole_gang(world: World) -> None:
    world.write("a", job_text("a"))
    assert world.apply() == ["+ a: new job"]
    assert world.record("a").phase is Phase.PENDING
    assert world.backend.cluster.launched == [], "apply writes records; nothing runs before a pass"
    result = world.reconcile()
    assert result.launched == 2
    tasks = world.tasks("a")
    assert set(tasks) == {"worker-0", "worker-1"}
    record = world.record("a")
    addresses = [f"{t.host}:{t.port}" for t in (tasks["worker-0"], tasks["worker-1"])]
    assert [record.addresses["worker-0"], record.addresses["worker-1"]] == addresses
    for name, task in tasks.items():
        config = world.tf_config(task.task_id)
        assert config["cluster"] == {"worker": addresses}
        assert config["task"] == {"type": "worker", "index": int(name[-1])}
    world.reconcile()
    assert world.record("a").phase is Phase.RUNNING
    status = world.status("a")
    assert status is not None and status["phase"] == "Running"
    assert status["replicas"]["worker"] == {"desired": 2, "running": 2, "succeeded": 0, "failed": 0}


def test_a_pass_with_nothing_new_writes_nothing(world: World) -> None:
    world.write("a", job_text("a"))
    world.apply()
    world.settle()
    status_file = world.statuses.path("a")
    before = (seq_of(world.store.root, "a"), status_file.stat().st_ino)
    world.clock.advance(30)
    result = world.reconcile()
    assert (result.launched, result.stopped) == (0, 0)
    assert (
        seq_of(world.store.root, "a"),
        status_file.stat().st_ino,
    ) == before  # a write: a new inode, a new seq
    assert world.apply() == [], "applying the same files again changes nothing"


def test_completion_by_the_chief_stops_the_rest(world: World) -> None:
    replicas = (
        "chief: {count: 1, resources: {cpus: 0.5, mem: 64}}, ps: {count: 1, resources: {cpus: 0.5, mem: 64}}, "
        "worker: {count: 1, resources: {cpus: 0.5, mem: 64}}"
    )
    world.write("c", job_text("c", replicas))
    world.apply()
    world.settle()
    started = world.clock()
    world.clock.advance(100)
    world.backend.finish(world.task("c", Role.CHIEF).task_id, 0)
    result = world.reconcile()
    assert result.stopped == 2, "the ps and the worker still ran"
    record = world.record("c")
    assert (record.phase, record.reason) == (Phase.SUCCEEDED, "ChiefSucceeded")
    assert record.completion_time == started + 100 and record.start_time == started
    world.settle()
    assert world.tasks("c") == {}
    launched = len(world.backend.cluster.launched)
    world.clock.advance(3600)
    world.settle()
    assert len(world.backend.cluster.launched) == launched, "a finished job is not run again"
    assert world.status("c")["phase"] == "Succeeded"  # type: ignore[index]


def test_without_a_chief_every_worker_must_succeed(world: World) -> None:
    world.write("w", job_text("w"))
    world.apply()
    world.settle()
    world.backend.finish(world.task("w", Role.WORKER, 0).task_id, 0)
    world.settle()
    assert world.record("w").phase is Phase.RUNNING
    world.backend.finish(world.task("w", Role.WORKER, 1).task_id, 0)
    world.settle()
    assert world.record("w").phase is Phase.SUCCEEDED


def test_a_failure_restarts_the_whole_job_after_an_exponential_backoff_then_fails(world: World) -> None:
    world.write("r", job_text("r", extra="restartPolicy: OnFailure\nbackoffLimit: 2"))
    world.apply()
    world.settle()
    ports = {name: t.port for name, t in world.tasks("r").items()}
    for restart, delay in ((1, BACKOFF.delay(1)), (2, BACKOFF.delay(2))):
        failed_at = world.clock()
        world.backend.finish(world.task("r", Role.WORKER, 1).task_id, 1)
        result = world.settle()
        record = world.record("r")
        assert (record.phase, record.restarts) == (Phase.RESTARTING, restart)
        assert world.tasks("r") == {}, "every task of the job is stopped, not only the failed one"
        assert result.wake_at == failed_at + delay
        launched = len(world.backend.cluster.launched)
        world.clock.advance(delay - 0.01)  # nothing happens before the backoff is over
        world.settle()
        assert len(world.backend.cluster.launched) == launched
        world.clock.advance(0.01)
        assert world.reconcile().launched == 2
        tasks = world.tasks("r")
        assert {name: t.port for name, t in tasks.items()} == ports, "restarts reuse the ports"
        assert {t.attempt for t in tasks.values()} == {restart}
        world.settle()
        assert world.record("r").phase is Phase.RUNNING
    assert BACKOFF.delay(2) == 2 * BACKOFF.delay(1)
    world.backend.finish(world.task("r", Role.WORKER, 0).task_id, 1)
    world.settle()
    record = world.record("r")
    assert (record.phase, record.reason, record.restarts) == (Phase.FAILED, "BackoffLimitExceeded", 2)
    assert world.tasks("r") == {}
    world.clock.advance(3600)
    world.settle()
    assert world.tasks("r") == {}, "a failed job stays failed"


@pytest.mark.parametrize(
    ("policy", "exit_code", "restarts"),
    [("Never", 1, False), ("ExitCode", 3, False), ("ExitCode", 42, True), ("ExitCode", 137, True)],
)
def test_restart_policy_decides_what_a_failure_means(
    world: World, policy: str, exit_code: int, restarts: bool
) -> None:
    world.write("p", job_text("p", extra=f"restartPolicy: {policy}"))
    world.apply()
    world.settle()
    world.backend.finish(world.task("p", Role.WORKER, 0).task_id, exit_code)
    world.settle()
    world.clock.advance(BACKOFF.delay(1))
    world.settle()
    record = world.record("p")
    if restarts:
        assert (record.phase, record.restarts) == (Phase.RUNNING, 1)
        assert len(world.tasks("p")) == 2
    else:
        assert record.phase is Phase.FAILED and record.restarts == 0
        assert world.tasks("p") == {}


def test_the_deadline_fails_the_job_and_stops_its_tasks(world: World) -> None:
    world.write("d", job_text("d", extra="activeDeadlineSeconds: 60"))
    world.apply()
    world.settle()
    world.clock.advance(59.9)
    world.settle()
    assert world.record("d").phase is Phase.RUNNING
    world.clock.advance(0.2)
    result = world.reconcile()
    assert result.stopped == 2
    world.settle()
    record = world.record("d")
    assert (record.phase, record.reason) == (Phase.FAILED, "DeadlineExceeded")
    assert world.tasks("d") == {}


def test_resize_restarts_the_running_tasks_with_the_new_cluster(world: World) -> None:
    world.write("s", job_text("s", "worker: {count: 1, resources: {cpus: 0.5, mem: 64}}"))
    world.apply()
    world.settle()
    before = world.task("s", Role.WORKER, 0)
    world.write("s", job_text("s", "worker: {count: 3, resources: {cpus: 0.5, mem: 64}}"))
    plan = world.plan()
    assert [j.action for j in plan.jobs] == [Action.RESIZE]
    world.controller.apply(plan)
    world.settle()
    tasks = world.tasks("s")
    assert set(tasks) == {"worker-0", "worker-1", "worker-2"}
    assert tasks["worker-0"].task_id != before.task_id, "TF's cluster spec is static: worker-0 restarts"
    assert tasks["worker-0"].port == before.port
    cluster = world.tf_config(tasks["worker-2"].task_id)["cluster"]["worker"]
    assert cluster == [f"{tasks[f'worker-{i}'].host}:{tasks[f'worker-{i}'].port}" for i in range(3)]
    assert world.record("s").restarts == 0, "a resize is not a failure"


def test_an_update_in_place_touches_no_task(world: World) -> None:
    world.write("u", job_text("u"))
    world.apply()
    world.settle()
    ids = {t.task_id for t in world.tasks("u").values()}
    world.write("u", job_text("u", extra="backoffLimit: 7"))
    assert world.apply() == ["~ u: only fields that touch no running task changed"]
    world.settle()
    assert {t.task_id for t in world.tasks("u").values()} == ids
    assert world.record("u").spec.backoff_limit == 7


def test_delete_stops_the_tasks_then_forgets_the_job_its_status_and_logs(world: World) -> None:
    world.write("x", job_text("x"))
    world.write("y", job_text("y"))
    world.apply()
    world.settle()
    x_ids = [t.task_id for t in world.tasks("x").values()]
    world.backend.write_log(x_ids[0], b"epoch 1\n")
    assert world.controller.delete(["x", "nope"]) == ["nope"]
    result = world.reconcile()
    assert result.stopped == 2 and result.phases["x"] is Phase.DELETING
    world.settle()
    assert world.store.load("x") is None and world.status("x") is None
    assert world.tasks("x", alive=False) == {}
    assert x_ids[0] not in world.backend.cluster.logs, "a deleted job's logs are purged"
    assert len(world.tasks("y")) == 2 and world.record("y").phase is Phase.RUNNING


def test_prune_deletes_a_job_whose_file_is_gone(world: World) -> None:
    world.write("keep", job_text("keep"))
    gone = world.write("gone", job_text("gone"))
    world.apply()
    world.settle()
    gone.unlink()
    world.apply()  # without --prune the job stays
    world.settle()
    assert len(world.tasks("gone")) == 2
    world.apply(prune=True)
    world.settle()
    assert world.store.load("gone") is None and world.tasks("gone") == {}
    assert len(world.tasks("keep")) == 2


def test_an_invalid_file_keeps_its_job_running_and_says_why(world: World) -> None:
    world.write("v", job_text("v"))
    world.apply()
    world.settle()
    ids = {t.task_id for t in world.tasks("v").values()}
    world.write("v", job_text("v").replace("count: 2", "count: -1"))
    world.apply(prune=True)
    world.settle()
    assert {t.task_id for t in world.tasks("v").values()} == ids
    not_synced = world.record("v").not_synced
    assert not_synced is not None and not_synced[0] is Reason.INVALID_SPEC and "v.yaml" in not_synced[1]


def test_tasks_of_no_job_are_stopped(world: World, tmp_path: Path) -> None:
    other = World(tmp_path / "other", world.backend.cluster, world.clock)  # another state folder
    other.write("stray", job_text("stray"))
    other.apply()
    other.settle()
    result = world.reconcile()
    assert result.stopped == 2
    world.settle()
    assert world.tasks("stray") == {}


def test_a_restarted_controller_adopts_the_running_tasks(world: World, tmp_path: Path) -> None:
    world.write("a", job_text("a"))
    world.apply()
    world.settle()
    launched = list(world.backend.cluster.launched)
    again = World(tmp_path, world.backend.cluster, world.clock)  # same state folder and cluster
    again.settle()
    assert again.backend.cluster.launched == launched, "no duplicate launches after a restart"
    assert again.record("a").phase is Phase.RUNNING


def test_a_crash_between_the_write_ahead_and_the_launch_relaunches_on_the_same_ports(
    world: World, tmp_path: Path
) -> None:
    world.write("a", job_text("a"))
    world.apply()
    world.backend.closed = True  # the launch fails after the record was saved with its addresses
    result = world.reconcile()
    assert result.errors and world.backend.cluster.launched == []
    addresses = dict(world.record("a").addresses)
    assert len(addresses) == 2
    again = World(tmp_path, world.backend.cluster, world.clock)
    again.settle()
    tasks = again.tasks("a")
    assert {name: f"{t.host}:{t.port}" for name, t in tasks.items()} == addresses
    assert {t.state for t in tasks.values()} == {TaskState.RUNNING}


def test_a_gang_that_does_not_fit_waits_without_launching_part_of_it(world: World) -> None:
    world.write("big", job_text("big", "worker: {count: 3, resources: {cpus: 1, mem: 64}}"))
    world.write("more", job_text("more", "worker: {count: 2, resources: {cpus: 1, mem: 64}}"))
    world.apply()
    result = world.settle()
    assert len(world.tasks("big")) == 3 and world.tasks("more") == {}
    record = world.record("more")
    assert (record.phase, record.reason) == (Phase.PENDING, "WaitingForResources")
    assert result.wake_at is not None
    world.controller.delete(["big"])
    world.settle()
    assert len(world.tasks("more")) == 2


def test_a_pass_runs_the_backends_upkeep_before_it_looks_and_reports_what_failed(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tend`` (a stop the engine refused, a container it cannot remove) is the pass's error;
    the pass still looks at every task and steps every job."""
    world.write("a", job_text("a"))
    world.apply()
    world.settle()
    order: list[str] = []
    observe = world.backend.observe

    def tend() -> None:
        order.append("tend")
        raise BackendError("a0: the Docker engine did not stop its container (refused)")

    def looked() -> Sequence[ObservedTask]:
        order.append("observe")
        return observe()

    monkeypatch.setattr(world.backend, "tend", tend)
    monkeypatch.setattr(world.backend, "observe", looked)
    result = world.reconcile()
    assert order == ["tend", "observe"], "once per pass, upkeep first"
    assert [str(e) for e in result.errors] == [
        "local: a0: the Docker engine did not stop its container (refused)"
    ]
    assert result.phases == {"a": Phase.RUNNING}
