"""Priorities and preemption through the real controller, in-process (fake backend, injected
clock): the queue is ordered by priority; a job that does not fit preempts the lower-priority
jobs that free its room while losing the least work, waits for them to stop (never choosing
more for the same room), and a preempted job does not take the room back while the job that
preempted it waits; it runs again once there is room. Nothing of it counts as a restart."""

from __future__ import annotations

from pathlib import Path

from tests.controller_world import World, job_text
from tests.fake_backend import IGNORES_SIGTERM, FakeCluster
from tfdeclare.core.enums import Phase, Reason, Role
from tfdeclare.core.spec.resources import Resources


def job(name: str, cpus: float, *, priority: int = 0, stubborn: bool = False, grace: int = 30) -> str:
    argv = f", command: [python, train.py, {IGNORES_SIGTERM}]" if stubborn else ""
    return job_text(
        name,
        f"worker: {{count: 1, resources: {{cpus: {cpus}, mem: 64}}{argv}}}",
        extra=f"priority: {priority}\nterminationGracePeriodSeconds: {grace}",
    )


def world(tmp_path: Path) -> World:
    return World(tmp_path, FakeCluster(capacity=Resources(4, 4096, 0)))


def test_the_preempted_job_waits_while_its_preemptor_waits_then_resumes(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.write("slow", job("slow", 2, stubborn=True))  # ignores SIGTERM: stopped after its grace
    w.write("quick", job("quick", 2))
    w.apply()
    w.settle()
    assert w.record("slow").phase is Phase.RUNNING and w.record("quick").phase is Phase.RUNNING
    w.clock.advance(100)

    w.write("urgent", job("urgent", 4, priority=10))
    w.apply()
    first = w.reconcile()
    assert any("preempted by urgent" in e for e in first.events)
    for name in ("slow", "quick"):
        record = w.record(name)
        assert record.phase is Phase.SUSPENDED and record.reason is Reason.PREEMPTED
        assert record.suspension is not None and record.suspension.by == "urgent"
    assert "preempting quick, slow" in w.record("urgent").message

    # quick has stopped, slow still has its grace: urgent waits, chooses nobody else, and
    # quick does not take back the room it left
    w.settle()
    assert w.tasks("quick") == {} and w.tasks("slow") != {}
    assert w.tasks("urgent") == {}
    assert w.record("quick").phase is Phase.SUSPENDED
    assert "waiting for 1 task(s) of suspended or preempted jobs to stop" in w.record("urgent").message

    w.clock.advance(31)  # slow is killed after its grace
    w.settle()
    assert set(w.tasks("urgent")) == {"worker-0"}
    assert w.record("urgent").phase is Phase.RUNNING
    assert w.tasks("slow") == {} and w.tasks("quick") == {}

    w.backend.finish(w.task("urgent", Role.WORKER).task_id, 0)
    w.settle()
    assert w.record("urgent").phase is Phase.SUCCEEDED
    for name in ("slow", "quick"):
        record = w.record(name)
        assert record.phase is Phase.RUNNING, (name, record.message)
        assert record.restarts == 0 and record.preemptions == 1 and record.suspension is None
        assert record.suspension_history[-1].by == "urgent"
    status = w.status("quick")
    assert status is not None and status["preemptions"] == 1 and status["restarts"] == 0


def test_the_least_work_is_preempted_and_only_what_is_needed(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.write("old", job("old", 2))
    w.apply()
    w.settle()
    w.clock.advance(1000)
    w.write("young", job("young", 2))
    w.apply()
    w.settle()
    w.clock.advance(10)
    w.write("urgent", job("urgent", 2, priority=1))
    w.apply()
    w.settle()
    assert w.record("young").phase is Phase.SUSPENDED, "10 s of work lost, not 1010"
    assert w.record("old").phase is Phase.RUNNING
    assert w.record("urgent").phase is Phase.RUNNING


def test_the_queue_is_ordered_by_priority_and_equal_priorities_never_preempt(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.write("a-first", job("a-first", 3, priority=0))
    w.write("b-first", job("b-first", 3, priority=5))  # after a-first by name, before it by priority
    w.apply()
    w.settle()
    assert w.record("b-first").phase is Phase.RUNNING
    assert w.record("a-first").phase is Phase.PENDING
    assert w.record("a-first").reason is Reason.WAITING_FOR_RESOURCES
    w.write("peer", job("peer", 3, priority=5))
    w.apply()
    w.settle()
    assert w.record("b-first").phase is Phase.RUNNING and w.record("peer").phase is Phase.PENDING
    assert "preempting" not in w.record("peer").message


def test_jobs_at_or_above_the_non_preemptible_priority_are_never_preempted(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.controller.non_preemptible = 5  # policy.nonPreemptiblePriority
    w.write("protected", job("protected", 2, priority=5))
    w.write("batch", job("batch", 2, priority=0))
    w.apply()
    w.settle()
    w.clock.advance(10)  # batch has lost less work than protected would: still chosen for that
    w.write("urgent", job("urgent", 4, priority=10))
    w.apply()
    w.settle()
    assert w.record("protected").phase is Phase.RUNNING, "protected by the policy"
    assert w.record("batch").phase is Phase.RUNNING, "preempting batch alone would not make room"
    assert w.record("urgent").phase is Phase.PENDING
    w.controller.non_preemptible = None
    w.settle()
    assert w.record("protected").phase is Phase.SUSPENDED and w.record("batch").phase is Phase.SUSPENDED


def test_a_controller_that_dies_after_marking_its_victims_leaves_them_to_the_next_one(
    tmp_path: Path,
) -> None:
    from tests.controller_world import PassCountingController
    from tfdeclare.backends.base import BackendError

    w = world(tmp_path)
    w.write("low", job("low", 3))
    w.apply()
    w.settle()
    first = w.task("low", Role.WORKER).task_id
    w.write("urgent", job("urgent", 3, priority=10))
    w.apply()
    real_stop = w.backend.stop

    def dies(task_ids: object, grace_s: float) -> None:
        raise BackendError("the controller was killed here")

    w.backend.stop = dies  # type: ignore[method-assign]
    w.reconcile()  # marks low (its record written first), then dies before its task is stopped
    assert w.task("low", Role.WORKER).task_id == first
    w.backend.stop = real_stop  # type: ignore[method-assign]
    # the next controller: the job that preempted low is gone by now, low's record still says
    w.controller = PassCountingController(w.store, w.backend, w.statuses, clock=w.clock, base_dir=tmp_path)
    assert w.controller.delete(["urgent"]) == []
    w.settle(5)
    low = w.record("low")
    assert low.phase is Phase.RUNNING and low.preemptions == 1 and low.restarts == 0
    assert w.task("low", Role.WORKER).task_id != first, "its task was stopped, and it ran again"


def test_a_higher_job_that_can_never_fit_does_not_keep_a_preempted_one_waiting(tmp_path: Path) -> None:
    w = world(tmp_path)
    w.write("low", job("low", 3))
    w.apply()
    w.settle()
    w.write("urgent", job("urgent", 3, priority=10))
    w.apply()
    w.settle()
    assert w.record("low").phase is Phase.SUSPENDED
    w.write("huge", job("huge", 64, priority=20))  # Unschedulable: more than the machine has
    w.apply()
    w.backend.finish(w.task("urgent", Role.WORKER).task_id, 0)
    w.settle()
    assert w.record("huge").reason is Reason.UNSCHEDULABLE
    assert w.record("low").phase is Phase.RUNNING, w.record("low").message
