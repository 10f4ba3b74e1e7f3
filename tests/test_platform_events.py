"""The platform's own events are not the job's failures: the pure classification (a table)
and the lifecycle with an injected clock. A task lost with its agent, drained, moved off for
maintenance, taken by an operator, dropped at launch or found gone by a restarted controller
restarts the job (or the task alone, by its scope) at once, counted in ``platformRestarts``
against ``platformRestartLimit``, never in ``restarts`` nor against ``backoffLimit``."""

from __future__ import annotations

import json
from dataclasses import replace

import jsonschema
import pytest

from tests.test_lifecycle import BACKOFF, MWMS, PSS, T0, record_for, task
from tfdeclare.core.enums import EndCause, Phase, Reason, TaskState
from tfdeclare.core.run import status
from tfdeclare.core.run.causes import classify
from tfdeclare.core.run.lifecycle import step
from tfdeclare.core.run.record import JobRecord, rfc3339
from tfdeclare.core.run.tasks import ObservedTask
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.schema import schema_text

R, F, G, L, ST, S = (
    TaskState.RUNNING,
    TaskState.FAILED,
    TaskState.GONE,
    TaskState.LOST,
    TaskState.STOPPED,
    TaskState.SUCCEEDED,
)
DRAINED, LOST_AGENT = EndCause.AGENT_DRAINED, EndCause.AGENT_LOST


@pytest.mark.parametrize(
    ("state", "reported", "counts_as"),
    [
        # the job's own: whatever ended by itself, or a backend that saw nothing of the platform
        (F, EndCause.JOB, EndCause.JOB),
        (G, EndCause.JOB, EndCause.JOB),
        (L, EndCause.JOB, EndCause.JOB),
        (ST, EndCause.JOB, EndCause.JOB),
        # exiting 0 is the task's own end, whatever a backend says
        (S, DRAINED, EndCause.JOB),
        # still running or starting: nothing ended yet
        (R, LOST_AGENT, EndCause.JOB),
        (TaskState.STARTING, EndCause.LAUNCH_DROPPED, EndCause.JOB),
        (TaskState.STOPPING, DRAINED, EndCause.JOB),
        # taken by the platform
        (L, LOST_AGENT, LOST_AGENT),
        (G, LOST_AGENT, LOST_AGENT),
        (ST, DRAINED, DRAINED),
        (F, DRAINED, DRAINED),  # killed by the drain's SIGTERM: exit 143 is not the job's
        (ST, EndCause.MAINTENANCE, EndCause.MAINTENANCE),
        (G, EndCause.KILLED_BY_OPERATOR, EndCause.KILLED_BY_OPERATOR),
        (G, EndCause.LAUNCH_DROPPED, EndCause.LAUNCH_DROPPED),
        (F, EndCause.CONTROLLER_RESTART, EndCause.CONTROLLER_RESTART),
    ],
)
def test_what_counts_as_a_platform_event(state: TaskState, reported: EndCause, counts_as: EndCause) -> None:
    assert classify(state, reported) is counts_as


def test_every_platform_cause_is_one_the_status_schema_names() -> None:
    schema = json.loads(schema_text("status"))
    named = set(schema["properties"]["platformEvents"]["items"]["properties"]["cause"]["enum"])
    assert named == {c.value for c in EndCause if c.platform}


def taken(
    record: JobRecord, name: str, state: TaskState, cause: EndCause, code: int | None = None
) -> ObservedTask:
    return replace(task(record, name, state, code), cause=cause, message="agent a1")


def test_a_drained_worker_restarts_the_job_without_touching_restarts() -> None:
    record = record_for(MWMS, phase=Phase.RUNNING, restarts=2)
    seen = [taken(record, "worker-0", F, DRAINED, 143), task(record, "worker-1", R)]
    result = step(record, seen, T0 + 10, BACKOFF)
    after = result.record
    assert after.phase is Phase.RESTARTING and after.reason is Reason.PLATFORM_RESTART
    assert after.restarts == 2  # backoffLimit untouched
    assert after.platform_restarts == 1
    assert after.attempt == record.attempt + 1
    assert after.next_launch_at == T0 + 10  # no backoff: the platform took it
    assert result.stop == (seen[1].task_id,)
    assert "its agent was drained" in after.message and "platform restart 1 of 10" in after.message
    [event] = after.platform_events
    assert event.cause is DRAINED and event.tasks == ("worker-0",) and event.at == T0 + 10
    # the replacement gang launches on the next pass, once the old task is stopped
    again = step(after, [replace(seen[1], state=ST)], T0 + 11, BACKOFF)
    assert sorted(k.name for k in again.launch) == ["worker-0", "worker-1"]


def test_three_drains_do_not_exhaust_a_backoff_limit_of_three() -> None:
    """The rolling upgrade of the issue: three drains in a row, then a failure of its own is
    still allowed its restarts."""
    record = record_for(MWMS, phase=Phase.RUNNING)
    now = T0
    for _ in range(3):
        now += 100
        record = step(record, [taken(record, "worker-0", ST, DRAINED)], now, BACKOFF).record
        assert record.phase is Phase.RESTARTING
    assert record.restarts == 0 and record.platform_restarts == 3
    own = step(record, [task(record, "worker-1", F, 1)], now + 100, BACKOFF).record
    assert own.reason is Reason.RESTARTING and own.restarts == 1 and own.platform_restarts == 3


def test_a_failure_of_its_own_beside_a_platform_event_is_counted() -> None:
    record = record_for(MWMS, phase=Phase.RUNNING)
    seen = [taken(record, "worker-0", G, LOST_AGENT), task(record, "worker-1", F, 1)]
    after = step(record, seen, T0, BACKOFF).record
    assert after.reason is Reason.RESTARTING and after.restarts == 1 and after.platform_restarts == 0


def test_the_platform_budget_runs_out_and_fails_the_job() -> None:
    record = record_for(MWMS, "  platformRestartLimit: 1\n", phase=Phase.RUNNING)
    assert record.spec.platform_restart_limit == 1
    first = step(record, [taken(record, "worker-0", G, LOST_AGENT)], T0, BACKOFF).record
    assert first.platform_restarts == 1 and first.phase is Phase.RESTARTING
    second = step(first, [taken(first, "worker-1", G, LOST_AGENT)], T0 + 5, BACKOFF)
    after = second.record
    assert after.phase is Phase.FAILED and after.reason is Reason.PLATFORM_RESTART_LIMIT_EXCEEDED
    assert after.reason.stalled and after.restarts == 0
    assert "1 platform restart(s) used of platformRestartLimit 1" in after.message
    assert len(after.platform_events) == 2


def test_a_lost_worker_of_a_ps_job_restarts_alone_on_the_platform_budget() -> None:
    record = record_for(PSS, phase=Phase.RUNNING, restarts=0)
    running = [task(record, n, R) for n in ("chief-0", "ps-0", "worker-1")]
    lost = taken(record, "worker-0", L, LOST_AGENT)
    result = step(record, [*running, lost], T0, BACKOFF)
    after = result.record
    assert after.phase is Phase.RESTARTING and after.reason is Reason.PLATFORM_RESTART
    assert result.stop == (lost.task_id,)  # it may still run: stopped first
    entry = after.task_restarts["worker-0"]
    assert entry.count == 0 and entry.platform == 1 and entry.pending
    assert after.restarted_alone == {"worker-0": 1}  # its configuration changes, so it is replaced
    assert after.platform_restarts == 1 and after.restarts == 0
    # once it is gone, it is relaunched alone at once; the others keep running
    gone = replace(lost, state=G)
    again = step(after, [*running, gone], T0 + 1, BACKOFF)
    assert [k.name for k in again.launch] == ["worker-0"] and again.stop == ()
    # its own failure later is its first against backoffLimit
    doc = status.status_document(again.record, T0 + 1)
    [row] = doc["taskRestarts"]
    assert row["restarts"] == 0 and row["platformRestarts"] == 1


def test_the_status_shows_the_platform_restarts_apart_and_is_valid() -> None:
    record = record_for(MWMS, phase=Phase.RUNNING, restarts=1)
    after = step(record, [taken(record, "worker-1", ST, EndCause.MAINTENANCE)], T0, BACKOFF).record
    doc = status.status_document(after, T0)
    jsonschema.validate(doc, json.loads(schema_text("status")))
    assert doc["restarts"] == 1 and doc["platformRestarts"] == 1 and doc["platformRestartLimit"] == 10
    assert doc["platformEvents"] == [
        {
            "cause": "Maintenance",
            "time": rfc3339(T0),
            "tasks": ["worker-1"],
            "message": "worker-1 was taken: its agent goes into maintenance (agent a1)",
        }
    ]
    again = JobRecord.from_json(json.loads(json.dumps(after.to_json())))
    assert again.platform_events == after.platform_events and again.platform_restarts == 1


def test_an_absent_or_default_limit_keeps_the_spec_hash() -> None:
    def load(extra: bytes) -> str:
        doc = b"apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: a}\nspec: {command: [t], " + extra
        return load_file("a.yaml", doc + b"replicas: {worker: {count: 1}}}\n").jobs[0].spec_hash

    assert load(b"") == load(b"platformRestartLimit: 10, ")
    assert load(b"") != load(b"platformRestartLimit: 2, ")


def test_tfdeclare_status_shows_platform_restarts_apart() -> None:
    from tfdeclare.cli.status_command import _status_detail

    record = record_for(PSS, phase=Phase.RUNNING)
    running = [task(record, n, R) for n in ("chief-0", "ps-0", "worker-1")]
    after = step(record, [*running, taken(record, "worker-0", G, LOST_AGENT)], T0, BACKOFF).record
    text = _status_detail(status.status_document(after, T0))
    assert "restarts 0" in text
    assert "platform restarts 1 of 10 (not counted against backoffLimit)" in text
    assert f"AgentLost at {rfc3339(T0)}: worker-0" in text
    assert "worker-0 restarted alone 0/3 (+1 for platform events)" in text


def test_the_status_page_shows_platform_restarts_apart() -> None:
    from tfdeclare.daemon.page import render

    record = record_for(MWMS, phase=Phase.RUNNING, restarts=1)
    after = step(record, [taken(record, "worker-0", ST, DRAINED)], T0, BACKOFF).record
    html = render([status.status_document(after, T0)], (), {}, 0, now=T0)
    assert "1 of 10 platform restart(s), not counted against backoffLimit" in html
    assert f"last: AgentDrained at {rfc3339(T0)}" in html
    quiet = render([status.status_document(record, T0)], (), {}, 0, now=T0)
    assert "platform restart" not in quiet
