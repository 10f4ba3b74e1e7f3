"""A new run of the job (``lifecycle.new_run``), table by table with an injected clock: which
transitions start one (the attempt, ``TFDECLARE_ATTEMPT``, moves on and the restarts of tasks
alone start afresh) and which do not; what a job backing off before a whole-job restart says;
and that a record of an earlier release runs on as it is."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.test_lifecycle import BACKOFF, T0, record_for, task
from tests.test_restart_scope import PSS, _all
from tfdeclare.core.enums import Phase, Reason, Role, TaskState
from tfdeclare.core.run.clusterspec import TASK_RESTARTS_ENV
from tfdeclare.core.run.lifecycle import desired_configs, resized, step
from tfdeclare.core.run.record import JobRecord, TaskRecord
from tfdeclare.core.run.status import task_records, waiting_to_restart, with_last_runs
from tfdeclare.core.run.tasks import TaskKey

R, F = TaskState.RUNNING, TaskState.FAILED
WORKER_1 = TaskKey(Role.WORKER, 1)


def _env(record: JobRecord, key: TaskKey) -> dict[str, str]:
    return {k: str(v) for k, v in desired_configs(record.spec, record)[key].env}


def _restarted_alone_once(replicas: str = PSS, extra: str = "") -> JobRecord:
    """A running ps job whose worker-1 failed and was restarted alone once (its relaunch alive)."""
    record = record_for(replicas, extra, phase=Phase.RUNNING)
    record = step(record, _all(record, "worker-1"), T0, BACKOFF).record
    record = record.evolve(launches=2)
    alive = [task(record, k.name, R) for k in record.spec.task_keys()]
    record = step(record, alive, T0 + 2, BACKOFF).record
    assert record.task_restarts["worker-1"].count == 1 and not record.task_restarts["worker-1"].pending
    assert _env(record, WORKER_1)[TASK_RESTARTS_ENV] == "1"
    return record


@pytest.mark.parametrize(
    ("after", "extra", "new_run"),
    [
        ("{chief: {count: 1}, ps: {count: 1}, worker: {count: 3}}", "", True),  # a worker more
        ("{chief: {count: 1}, ps: {count: 1}, worker: {count: 1}}", "", True),  # a worker fewer
        ("{chief: {count: 1}, ps: {count: 2}, worker: {count: 2}}", "", True),  # a ps more
        ("{ps: {count: 1}, worker: {count: 2}}", "", True),  # the chief gone
        ("{chief: {count: 1}, ps: {count: 1}, worker: {count: 2}, evaluator: {count: 1}}", "", False),
        (PSS, "  tensorboard: {logDir: /tmp/tb}\n", False),
    ],
)
def test_a_resize_is_a_new_run_when_it_changes_the_tf_cluster(after: str, extra: str, new_run: bool) -> None:
    before = _restarted_alone_once()
    target = record_for(after, extra)
    changed = before.evolve(canonical=target.canonical, spec_hash=target.spec_hash)
    result = resized(before, changed, reason=Reason.RESIZED, message="replica counts changed")
    assert result.reason is Reason.RESIZED
    if new_run:
        assert result.attempt == before.attempt + 1, "every task restarts with the new cluster"
        assert result.task_restarts == {}, "the restarts of tasks alone are counted per run"
        keys = [k for k in result.spec.task_keys() if k.role.in_cluster]
        assert all(_env(result, k)["TFDECLARE_ATTEMPT"] == str(result.attempt) for k in keys)
        assert all(TASK_RESTARTS_ENV not in _env(result, k) for k in keys)
    else:
        assert result.attempt == before.attempt, "adding the evaluator or TensorBoard restarts nothing else"
        assert result.task_restarts == before.task_restarts
        assert _env(result, WORKER_1) == _env(before, WORKER_1)


@pytest.mark.parametrize(
    ("replicas", "failing", "code", "what"),
    [
        (PSS, "ps-0", 137, "ps-0 was killed by signal 9"),  # a ps failing restarts the whole job
        (PSS, "chief-0", 1, "chief-0 exited 1"),
        ("{worker: {count: 2}}", "worker-1", 5, "worker-1 exited 5"),  # no ps: the whole job
    ],
)
def test_a_whole_job_restart_is_a_new_run(replicas: str, failing: str, code: int, what: str) -> None:
    record = record_for(replicas, phase=Phase.RUNNING)
    if replicas == PSS:
        record = _restarted_alone_once(replicas)
    result = step(record, _all(record, failing, code=code), T0 + 10, BACKOFF)
    after = result.record
    assert after.phase is Phase.RESTARTING and after.attempt == record.attempt + 1
    assert after.task_restarts == {}, "worker-1's restarts alone belonged to the last run"
    assert all(TASK_RESTARTS_ENV not in _env(after, k) for k in after.spec.task_keys())
    assert after.message == f"{what}; restart 1 of 3 in 1 s"
    assert step(after, [], T0 + 10.5, BACKOFF).record.message == f"{what}; restart 1 of 3 in 1 s"


def test_a_job_backing_off_says_which_task_failed_and_how() -> None:
    record = record_for("{worker: {count: 2}}", "  backoffLimit: 5\n", phase=Phase.RUNNING)
    slow = BACKOFF.__class__(initial_s=30.0, max_s=300.0)
    failed = step(record, _all(record, "worker-0", code=5), T0, slow).record
    assert failed.message == "worker-0 exited 5; restart 1 of 5 in 30 s"
    for at, left in ((T0 + 0.5, 30), (T0 + 4, 26), (T0 + 29.5, 1)):
        waiting = step(failed, [], at, slow).record
        assert waiting.reason is Reason.BACKING_OFF
        assert waiting.message == f"worker-0 exited 5; restart 1 of 5 in {left} s"
    relaunch = step(failed, [], T0 + 30, slow)
    assert len(relaunch.launch) == 2 and relaunch.record.reason is Reason.LAUNCHING


def test_a_task_restarting_alone_says_how_it_ended_while_it_backs_off() -> None:
    record = record_for(PSS, phase=Phase.RUNNING)
    failed = step(record, _all(record, "worker-1", code=5), T0, BACKOFF).record
    others = [task(failed, n, R) for n in ("chief-0", "ps-0", "worker-0")]
    waiting = step(failed, others, T0 + 0.5, BACKOFF).record
    assert waiting.message.startswith("worker-1 exited 5; worker-1 restarting alone (1 of backoffLimit 3")


def test_a_suspension_is_a_new_run() -> None:
    record = _restarted_alone_once()
    suspended = record_for(PSS, "  suspend: true\n")
    changed = record.evolve(canonical=suspended.canonical, spec_hash=suspended.spec_hash)
    held = step(changed, [task(record, k.name, R) for k in record.spec.task_keys()], T0 + 10, BACKOFF)
    assert held.record.phase is Phase.SUSPENDED
    assert (held.record.attempt, held.record.task_restarts) == (record.attempt + 1, {})


def test_a_record_of_an_earlier_release_runs_on_as_it_is() -> None:
    """Written before a whole-job restart reset the restarts of tasks alone: its tasks keep
    their identities (none is replaced by the upgrade) and its plan stays a no-op."""
    record = _restarted_alone_once()
    earlier = record.evolve(attempt=record.attempt + 1, restarts=1)  # restarted, counts kept
    data = earlier.to_json()
    assert "restartCause" not in data
    loaded = JobRecord.from_json(data)
    assert loaded == earlier
    assert _env(loaded, WORKER_1)[TASK_RESTARTS_ENV] == "1", "the running task keeps its identity"
    assert desired_configs(loaded.spec, loaded) == desired_configs(earlier.spec, earlier)
    waiting = earlier.evolve(phase=Phase.RESTARTING, next_launch_at=T0 + 50)
    assert step(waiting, [], T0 + 20, BACKOFF).record.message == "restart 1 of 3 in 30 s"


def _observed(record: JobRecord, name: str, state: TaskState, code: int | None) -> TaskRecord:
    (entry,) = task_records([task(record, name, state, code)])
    return entry


@pytest.mark.parametrize(
    ("what", "said"),
    [
        ("whole-job restart, backing off", "worker-0: exited 5; restarts in 30 s"),
        ("a task of the current run", None),
        ("the job is done", None),
    ],
)
def test_the_last_runs_entry_stays_until_its_slot_is_relaunched(what: str, said: str | None) -> None:
    record = record_for("{worker: {count: 1}}", phase=Phase.RUNNING)
    slow = BACKOFF.__class__(initial_s=30.0, max_s=300.0)
    failed = _observed(record, "worker-0", F, 5)
    after = step(record, _all(record, "worker-0", code=5), T0, slow)
    if what == "a task of the current run":
        after = step(record, [], T0, slow)  # nothing failed: the record's attempt is the task's
    if what == "the job is done":
        after = replace(after, record=after.record.evolve(phase=Phase.FAILED))
    shown = with_last_runs({}, after.desired, [], (failed,))
    assert list(shown.values()) == [failed]  # the record's entry, once the backend let it go
    assert waiting_to_restart(after.record, failed, T0) == said
    again = with_last_runs({}, after.desired, [task(record, "worker-0", F, 5)], ())
    assert [e.exit_code for e in again.values()] == [5]
    relaunched = with_last_runs({failed.key: replace(failed, task_id="new")}, after.desired, [], (failed,))
    assert relaunched[failed.key].task_id == "new", "a task of the new run replaces it"
