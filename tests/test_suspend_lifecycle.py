"""Suspension and preemption in the pure lifecycle, with an injected clock: ``spec.suspend``
stops every task with the job's grace (phase Suspended, reason Suspended), ``false`` resumes
it; a preempted job stops, then asks to be placed again; neither is a failure, a restart or
counted against ``backoffLimit``."""

from __future__ import annotations

from dataclasses import replace

from tests.test_lifecycle import BACKOFF, MWMS, PSS, T0, record_for, task
from tfdeclare.cli.status_command import _interruptions
from tfdeclare.core.enums import Phase, Reason, TaskState
from tfdeclare.core.run import status
from tfdeclare.core.run.lifecycle import RESUME_HINT, resumed, step, suspend
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.spec.loader import SourceRef, load_file
from tfdeclare.core.spec.model import fingerprint
from tfdeclare.daemon import page

R, ST = TaskState.RUNNING, TaskState.STOPPED
NAMES = ("chief-0", "ps-0", "worker-0", "worker-1")


def with_suspend(record: JobRecord, value: bool) -> JobRecord:
    """The record as an apply of the same spec with ``suspend: value`` leaves it."""
    canonical = {**record.canonical, "spec": {**record.canonical["spec"]}}
    if value:
        canonical["spec"]["suspend"] = True
    else:
        canonical["spec"].pop("suspend", None)
    return record.evolve(canonical=canonical, spec_hash=fingerprint(canonical))


def test_unset_or_false_suspend_and_zero_priority_keep_the_spec_hash() -> None:
    base = load_file(
        "a.yaml",
        b"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: a}\n"
        b"spec: {command: [t], replicas: {worker: {count: 1}}}\n",
    ).jobs[0]
    same = load_file(
        "a.yaml",
        b"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: a}\n"
        b"spec: {command: [t], suspend: false, priority: 0, replicas: {worker: {count: 1}}}\n",
    ).jobs[0]
    other = load_file(
        "a.yaml",
        b"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: a}\n"
        b"spec: {command: [t], priority: 3, replicas: {worker: {count: 1}}}\n",
    ).jobs[0]
    assert base.spec_hash == same.spec_hash
    assert "suspend" not in base.canonical["spec"] and "priority" not in base.canonical["spec"]
    assert other.spec_hash != base.spec_hash and other.spec.priority == 3


def test_suspend_stops_every_task_and_counts_no_restart() -> None:
    record = with_suspend(record_for(MWMS, phase=Phase.RUNNING, restarts=1), True)
    running = [task(record, n, R) for n in ("worker-0", "worker-1")]
    result = step(record, running, T0 + 50, BACKOFF)
    after = result.record
    assert sorted(result.stop) == sorted(t.task_id for t in running)  # all at once
    assert result.launch == ()
    assert after.phase is Phase.SUSPENDED and after.reason is Reason.SUSPENDED
    assert after.restarts == 1 and after.suspensions == 1 and after.preemptions == 0
    assert after.attempt == record.attempt + 1  # its next run is a fresh gang
    assert after.suspension is not None and after.suspension.tasks == 2
    assert "stopping 2 task(s)" in after.message
    assert any("suspended (spec.suspend)" in e for e in result.events)


def test_a_pss_job_stops_its_chief_first_and_the_rest_once_it_has_exited() -> None:
    """The coordinator's save on SIGTERM reads the variables the ps hold: they get their
    SIGTERM only once it has exited (saved, or killed at the end of its grace)."""
    for held in (
        with_suspend(record_for(PSS, phase=Phase.RUNNING), True),
        suspend(record_for(PSS, phase=Phase.RUNNING), Reason.PREEMPTED, T0, by="urgent", tasks=4),
    ):
        running = {n: task(held, n, R) for n in NAMES}
        first = step(held, list(running.values()), T0 + 50, BACKOFF)
        assert first.stop == (running["chief-0"].task_id,)
        assert first.record.suspension is not None and first.record.suspension.tasks == 4
        assert (
            "stopping the chief first (it saves while the ps serve), then 3 task(s)" in first.record.message
        )
        # the chief is stopping (its grace running): the ps and workers still serve, nothing more stops
        chief_stopping = {**running, "chief-0": task(held, "chief-0", TaskState.STOPPING)}
        waiting = step(first.record, list(chief_stopping.values()), T0 + 52, BACKOFF)
        assert waiting.stop == () and waiting.launch == ()
        # the chief has exited (42: saved): now the rest, all at once
        saved = {**running, "chief-0": task(held, "chief-0", ST, 42)}
        rest = step(waiting.record, list(saved.values()), T0 + 53, BACKOFF)
        assert sorted(rest.stop) == sorted(running[n].task_id for n in NAMES[1:])
        assert "stopping 3 task(s)" in rest.record.message
        assert rest.record.phase is Phase.SUSPENDED and rest.record.restarts == 0
    # a chief already gone (it crashed, say): nothing to wait for
    record = with_suspend(record_for(PSS, phase=Phase.RUNNING), True)
    no_chief = [task(record, n, R) for n in NAMES[1:]]
    assert sorted(step(record, no_chief, T0, BACKOFF).stop) == sorted(t.task_id for t in no_chief)


def test_stopped_tasks_of_a_suspended_job_are_not_failures() -> None:
    record = with_suspend(record_for(MWMS, phase=Phase.RUNNING), True)
    first = step(record, [task(record, n, R) for n in ("worker-0", "worker-1")], T0, BACKOFF).record
    # its tasks ended by SIGTERM (exit 143) or as stopped: nothing restarts, nothing launches
    ended = [task(record, "worker-0", ST, 143), task(record, "worker-1", TaskState.FAILED, 137)]
    later = step(first, ended, T0 + 10, BACKOFF)
    assert later.record.phase is Phase.SUSPENDED and later.record.restarts == 0
    assert later.launch == () and later.stop == ()
    assert set(later.forget) == {t.task_id for t in ended}
    assert RESUME_HINT in later.record.message
    # and many passes later it is still just suspended
    again = step(later.record, [], T0 + 10_000, BACKOFF)
    assert again.record == later.record and again.launch == ()


def test_suspend_false_resumes_on_the_same_addresses() -> None:
    record = with_suspend(record_for(MWMS, phase=Phase.RUNNING), True)
    suspended = step(record, [], T0, BACKOFF).record
    resumed_step = step(with_suspend(suspended, False), [], T0 + 30, BACKOFF)
    after = resumed_step.record
    assert [k.name for k in resumed_step.launch] == ["worker-0", "worker-1"]
    assert after.suspension is None and after.phase is Phase.PENDING
    assert after.addresses == record.addresses  # the backend reuses them where it can
    assert len(after.suspension_history) == 1
    entry = after.suspension_history[0]
    assert entry.reason is Reason.SUSPENDED and entry.resumed_at == T0 + 30
    assert after.suspensions == 1 and after.restarts == 0


def test_a_job_created_suspended_launches_nothing() -> None:
    record = with_suspend(record_for(MWMS, start_time=None, launches=0), True)
    result = step(record, [], T0, BACKOFF)
    assert result.launch == () and result.record.phase is Phase.SUSPENDED


def test_a_preempted_job_stops_then_asks_to_be_placed_and_is_resumed_when_placed() -> None:
    record = record_for(MWMS, phase=Phase.RUNNING)
    marked = suspend(record, Reason.PREEMPTED, T0, by="urgent", message="priority 10 > 0", tasks=2)
    assert marked.preemptions == 1 and marked.suspensions == 0 and marked.restarts == 0
    running = [task(record, n, R) for n in ("worker-0", "worker-1")]
    stopping = step(marked, running, T0, BACKOFF)
    assert len(stopping.stop) == 2 and stopping.launch == ()
    assert stopping.record.phase is Phase.SUSPENDED and stopping.record.reason is Reason.PREEMPTED
    assert "preempted by urgent" in stopping.record.message and "priority 10 > 0" in stopping.record.message
    # once nothing runs it waits in the queue: it asks for its whole gang each pass
    ended = [task(record, n, ST, 143) for n in ("worker-0", "worker-1")]
    waiting = step(stopping.record, ended, T0 + 12, BACKOFF)
    assert [k.name for k in waiting.launch] == ["worker-0", "worker-1"]
    assert waiting.record.phase is Phase.SUSPENDED and waiting.record.restarts == 0
    # the controller resumes it once it is placed
    back = resumed(waiting.record, T0 + 100)
    assert back.suspension is None and back.phase is Phase.PENDING and back.reason is Reason.RESUMED
    assert back.suspension_history[-1].by == "urgent"
    assert back.suspension_history[-1].resumed_at == T0 + 100


def test_suspend_from_the_file_takes_over_a_preemption() -> None:
    record = record_for(MWMS, phase=Phase.RUNNING)
    marked = suspend(record, Reason.PREEMPTED, T0, by="urgent")
    held = step(with_suspend(marked, True), [], T0 + 5, BACKOFF)
    assert held.record.reason is Reason.SUSPENDED and held.launch == ()  # waits for the file now
    assert held.record.suspension_history[-1].reason is Reason.PREEMPTED


def test_a_failed_job_is_not_suspended_again() -> None:
    record = with_suspend(record_for(MWMS, phase=Phase.FAILED, reason=Reason.TASK_FAILED), True)
    result = step(record, [], T0, BACKOFF)
    assert result.record.phase is Phase.FAILED and result.record.suspension is None


def test_status_shows_the_suspension_its_counters_and_history() -> None:
    record = record_for(MWMS, phase=Phase.RUNNING, restarts=2)
    marked = suspend(record, Reason.PREEMPTED, T0, by="urgent", message="priority 10 > 0", tasks=2)
    marked = marked.evolve(conditions=status.conditions(marked, T0))
    document = status.status_document(marked, T0)
    assert document["phase"] == "Suspended"
    assert document["restarts"] == 2 and document["preemptions"] == 1 and document["suspensions"] == 0
    assert document["suspension"]["reason"] == "Preempted"
    assert document["suspension"]["preemptedBy"] == "urgent"
    assert document["suspension"]["resumeTime"] is None
    kinds = {c["type"]: c for c in document["conditions"]}
    assert kinds["Suspended"]["reason"] == "Preempted" and kinds["Ready"]["status"] == "False"
    back = resumed(marked, T0 + 60)
    shown = status.status_document(replace(back, conditions=status.conditions(back, T0 + 60)), T0 + 60)
    assert shown["suspension"] is None and shown["suspensionHistory"][0]["preemptedBy"] == "urgent"
    assert "Suspended" not in {c["type"] for c in shown["conditions"]}


def test_record_round_trips_its_suspension() -> None:
    record = suspend(record_for(MWMS), Reason.PREEMPTED, T0, by="urgent", tasks=2)
    again = JobRecord.from_json(record.to_json())
    assert again == record


def _loaded(text: str):  # type: ignore[no-untyped-def]
    result = load_file("specs/a.yaml", text.encode())
    assert not result.diagnostics, [d.format() for d in result.diagnostics]
    return result.jobs[0]


A = "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {command: [t], %sreplicas: {worker: {count: 2}}}\n"


def test_a_suspension_waits_for_the_files_to_settle_and_a_resume_does_not() -> None:
    from tfdeclare.core.enums import Role
    from tfdeclare.core.plan.desired import DesiredState
    from tfdeclare.core.plan.observed import ObservedJob
    from tfdeclare.core.plan.planner import Action, PlanOptions, PlanReason, Sighting, plan
    from tfdeclare.core.run.tasks import TaskKey

    running, suspended = _loaded(A % ""), _loaded(A % "suspend: true, ")
    workers = (TaskKey(Role.WORKER, 0), TaskKey(Role.WORKER, 1))

    def planned(applied, wanted, phase, now, seen=None):  # type: ignore[no-untyped-def]
        observed = {"a": ObservedJob("a", applied.canonical, applied.spec_hash, phase, None, workers)}
        desired = DesiredState({"a": wanted}, (), {}, frozenset(), ("specs/a.yaml",))
        return plan(desired, observed, PlanOptions(settle_s=3.0), now=now, sightings=seen)

    first = planned(running, suspended, Phase.RUNNING, 100.0)
    job = first.job("a")
    assert job.action is Action.KEEP and job.reasons == (PlanReason.NOT_SETTLED,)
    assert "it is suspended once the files have stayed so for 3 s" in job.message
    later = planned(running, suspended, Phase.RUNNING, 103.5, {"a": Sighting(suspended.spec_hash, 100.0)})
    assert later.job("a").action is Action.UPDATE and later.job("a").reasons == (PlanReason.SUSPENDS,)
    back = planned(suspended, running, Phase.SUSPENDED, 200.0)
    assert back.job("a").action is Action.UPDATE and back.job("a").reasons == (PlanReason.RESUMES,)


def test_active_deadline_counts_from_the_resumption() -> None:
    record = with_suspend(record_for(MWMS, "  activeDeadlineSeconds: 100\n", phase=Phase.RUNNING), True)
    suspended = step(record, [], T0 + 50, BACKOFF).record
    back = step(with_suspend(suspended, False), [], T0 + 500, BACKOFF)
    assert back.record.phase is Phase.PENDING and back.record.start_time is None
    assert [k.name for k in back.launch] == ["worker-0", "worker-1"]  # not DeadlineExceeded


def test_a_suspension_says_why_in_words_in_the_status_its_text_and_the_page() -> None:
    """``suspension.message`` is "Why, in words" (schemas/status.schema.json): a job suspended
    by its file names the field and the file, in the status file, `status` and the page alike;
    a record an earlier release wrote without words is shown with the reason's words."""
    record = with_suspend(record_for(MWMS, phase=Phase.RUNNING), True).evolve(
        source=SourceRef("specs/bert.yaml", 1)
    )
    running = [task(record, n, R) for n in ("worker-0", "worker-1")]
    held = step(record, running, T0 + 50, BACKOFF).record
    assert held.suspension is not None
    assert held.suspension.message == "spec.suspend is true in specs/bert.yaml"
    document = status.status_document(held.evolve(conditions=status.conditions(held, T0 + 50)), T0 + 50)
    assert document["suspension"]["message"] == "spec.suspend is true in specs/bert.yaml"
    text = "\n".join(_interruptions(document))
    assert "suspended at " in text and "(spec.suspend is true in specs/bert.yaml)" in text, text
    html = page.render([document], [], {}, 0, now=T0 + 60)
    assert "(spec.suspend is true in specs/bert.yaml)" in html
    preempted = suspend(
        record_for(MWMS, phase=Phase.RUNNING), Reason.PREEMPTED, T0, by="urgent", message="priority 10 > 0"
    )
    shown = status.status_document(preempted, T0)["suspension"]
    assert shown["message"] == "priority 10 > 0"
    assert "(priority 10 &gt; 0)" in page.render([status.status_document(preempted, T0)], [], {}, 0, now=T0)
    # a record written before the words were kept
    for reason, words in (
        (Reason.SUSPENDED, "spec.suspend is true"),
        (Reason.PREEMPTED, "a job of higher priority"),
    ):
        old = suspend(record_for(MWMS, phase=Phase.RUNNING), reason, T0, by="urgent")
        assert old.suspension is not None and old.suspension.message == ""
        assert status.status_document(old, T0)["suspension"]["message"].startswith(words)
