"""``restartScope`` (issue 24), table by table with an injected clock: which scope each role
gets and why, what one failure restarts, per-task backoff and backoffLimit, the address a task
restarting alone keeps (and the whole-job restart when it does not come back in time), what
the plan and the status say, and the controller over the in-memory backend."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from tests.controller_world import World, job_text
from tests.test_lifecycle import BACKOFF, T0, job_document, record_for, task
from tfdeclare.core.enums import Phase, Reason, RestartScope, Role, ScopeReason, TaskState
from tfdeclare.core.plan.planner import Action, created_scopes, scopes_shown
from tfdeclare.core.plan.render import render_json, render_text
from tfdeclare.core.run.clusterspec import TASK_RESTARTS_ENV
from tfdeclare.core.run.launches import gang_request
from tfdeclare.core.run.lifecycle import desired_configs, step
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.status import conditions, status_document, summary
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.model import restart_scopes_of
from tfdeclare.core.spec.schema import schema_text

R, F, S = TaskState.RUNNING, TaskState.FAILED, TaskState.SUCCEEDED
PSS = "{chief: {count: 1}, ps: {count: 1}, worker: {count: 2}}"
PSS_EVAL = "{chief: {count: 1}, ps: {count: 1}, worker: {count: 2}, evaluator: {count: 1}}"
MWMS = "{worker: {count: 2}}"
MWMS_EVAL = "{worker: {count: 2}, evaluator: {count: 1}}"
TF1 = "{ps: {count: 1}, worker: {count: 2}}"
J, T = RestartScope.JOB, RestartScope.TASK
SMALL = "resources: {cpus: 0.5, mem: 64}"
SMALL_PSS = f"chief: {{count: 1, {SMALL}}}, ps: {{count: 1, {SMALL}}}, worker: {{count: 2, {SMALL}}}"


@pytest.mark.parametrize(
    ("replicas", "extra", "role", "scope", "why"),
    [
        (PSS, "", Role.WORKER, T, ScopeReason.WORKER_WITH_PS),
        (PSS, "", Role.PS, J, ScopeReason.PS_OR_CHIEF),
        (PSS, "", Role.CHIEF, J, ScopeReason.PS_OR_CHIEF),
        (TF1, "", Role.WORKER, T, ScopeReason.WORKER_WITH_PS),
        (MWMS, "", Role.WORKER, J, ScopeReason.WORKERS_ONLY),
        ("{chief: {count: 1}, worker: {count: 2}}", "", Role.CHIEF, J, ScopeReason.WORKERS_ONLY),
        (MWMS_EVAL, "", Role.EVALUATOR, T, ScopeReason.EVALUATOR),
        (MWMS_EVAL, "  restartScope: Job\n", Role.EVALUATOR, T, ScopeReason.EVALUATOR),
        (MWMS, "  restartScope: Task\n", Role.WORKER, T, ScopeReason.SET_FOR_JOB),
        (PSS, "  restartScope: Task\n", Role.CHIEF, T, ScopeReason.SET_FOR_JOB),
        (PSS, "  restartScope: Job\n", Role.WORKER, J, ScopeReason.SET_FOR_JOB),
        (
            "{chief: {count: 1}, ps: {count: 1}, worker: {count: 2, restartScope: Job}}",
            "  restartScope: Task\n",
            Role.WORKER,
            J,
            ScopeReason.SET_FOR_ROLE,
        ),
        (
            "{chief: {count: 1, restartScope: Task}, ps: {count: 1}}",
            "",
            Role.CHIEF,
            T,
            ScopeReason.SET_FOR_ROLE,
        ),
    ],
)
def test_each_role_gets_its_scope_and_why(
    replicas: str, extra: str, role: Role, scope: RestartScope, why: ScopeReason
) -> None:
    record = record_for(replicas, extra)
    assert record.spec.restart_scope_for(role) == (scope, why)
    # a plan of a new job reads the same off the canonical form (no JobSpec), role by role
    assert restart_scopes_of(record.canonical) == tuple(
        (r.role, *record.spec.restart_scope_for(r.role)) for r in record.spec.replicas
    )
    assert created_scopes(record.canonical) == scopes_shown(None, record.spec)


def test_tensorboard_always_restarts_alone() -> None:
    spec = record_for(MWMS, "  restartScope: Job\n  tensorboard: {logDir: runs}\n").spec
    assert spec.restart_scope_for(Role.TENSORBOARD) == (T, ScopeReason.TENSORBOARD)


def _load(replicas: str, extra: str = "") -> tuple[list[str], dict[str, object] | None]:
    result = load_file("job.yaml", job_document(replicas, extra).encode())
    errors = [d.format() for d in result.diagnostics]
    return errors, (dict(result.jobs[0].canonical["spec"]) if result.jobs else None)


def test_the_field_is_absent_from_the_canonical_form_unless_set() -> None:
    """Unset, no spec's hash changes (every earlier spec keeps its specHash and plan)."""
    errors, spec = _load(PSS)
    assert not errors and spec is not None
    assert "restartScope" not in spec
    assert all("restartScope" not in r for r in spec["replicas"].values())  # type: ignore[attr-defined]
    errors, spec = _load("{ps: {count: 1}, worker: {count: 1, restartScope: Job}}", "  restartScope: Task\n")
    assert not errors and spec is not None
    assert spec["restartScope"] == "Task"
    assert spec["replicas"]["worker"]["restartScope"] == "Job"  # type: ignore[index]


@pytest.mark.parametrize(
    ("replicas", "extra", "expected"),
    [
        ("{worker: {count: 1}, evaluator: {count: 1, restartScope: Job}}", "", "restartScope"),
        (MWMS, "  restartScope: Whole\n", "restartScope"),
        ("{worker: {count: 1, restartScope: task}}", "", "restartScope"),
    ],
)
def test_the_schema_refuses_what_cannot_be(replicas: str, extra: str, expected: str) -> None:
    errors, _ = _load(replicas, extra)
    assert errors and expected in errors[0], errors


def test_the_schema_describes_every_new_field() -> None:
    job = json.loads(schema_text("job"))
    spec = job["$defs"]["Spec"]["properties"]
    assert spec["restartScope"]["description"]
    for role in ("chief", "ps", "worker", "evaluator"):
        assert spec["replicas"]["properties"][role]["properties"]["restartScope"]["description"]
    status = json.loads(schema_text("status"))["properties"]
    reasons = status["restartScopes"]["additionalProperties"]["properties"]["reason"]["enum"]
    assert reasons == [r.value for r in ScopeReason]


# ---- one failure: what restarts -------------------------------------------------------------


def _all(record: JobRecord, failing: str, state: TaskState = F, code: int | None = 137) -> list:  # type: ignore[type-arg]
    return [
        task(record, key.name, state, code) if key.name == failing else task(record, key.name, R)
        for key in record.spec.task_keys()
    ]


@pytest.mark.parametrize(
    ("replicas", "extra", "failing", "outcome"),
    [
        (PSS, "", "worker-1", "alone"),
        (PSS, "", "ps-0", "job"),
        (PSS, "", "chief-0", "job"),
        (TF1, "", "worker-0", "alone"),
        (MWMS, "", "worker-1", "job"),
        (PSS_EVAL, "", "evaluator-0", "alone"),
        (MWMS_EVAL, "", "evaluator-0", "alone"),
        (PSS, "  restartScope: Job\n", "worker-1", "job"),
        (MWMS, "  restartScope: Task\n", "worker-1", "alone"),
        (PSS, "  restartPolicy: Never\n", "worker-1", Reason.TASK_FAILED),
        (PSS, "  restartPolicy: ExitCode\n", "worker-1", "alone"),
    ],
)
def test_one_failure_restarts_by_its_roles_scope(
    replicas: str, extra: str, failing: str, outcome: object
) -> None:
    record = record_for(replicas, extra, phase=Phase.RUNNING)
    result = step(record, _all(record, failing), T0, BACKOFF)
    after = result.record
    if outcome == "alone":
        assert after.phase is Phase.RESTARTING and after.reason is Reason.TASK_RESTARTING
        assert (after.attempt, after.restarts) == (0, 0), "the job itself does not restart"
        assert result.stop == () and result.launch == (), "the others keep running; it backs off"
        entry = after.task_restarts[failing]
        assert (entry.count, entry.exit_code, entry.next_launch_at) == (1, 137, T0 + 1)
        assert "killed by signal 9" in entry.message and result.wake_at == T0 + 1
        assert "restartScope Task" in after.message
    elif outcome == "job":
        assert after.phase is Phase.RESTARTING and after.reason is Reason.RESTARTING
        assert (after.attempt, after.restarts) == (1, 1) and not after.task_restarts
        assert len(result.stop) == len(record.spec.task_keys()) - 1
    else:
        assert after.phase is Phase.FAILED and after.reason is outcome


def test_failures_of_both_scopes_at_once_restart_the_job() -> None:
    record = record_for(PSS, phase=Phase.RUNNING)
    tasks = [task(record, "chief-0", R), task(record, "ps-0", F, 1), task(record, "worker-0", R)]
    tasks.append(task(record, "worker-1", F, 137))
    result = step(record, tasks, T0, BACKOFF)
    assert result.record.phase is Phase.RESTARTING and result.record.attempt == 1
    assert not result.record.task_restarts


# ---- a worker restarted alone, from failure to running again ---------------------------------


def test_a_worker_restarts_alone_at_its_address_and_only_it_changes() -> None:
    record = record_for(PSS, phase=Phase.RUNNING)
    before = desired_configs(record.spec, record)
    failed = step(record, _all(record, "worker-1"), T0, BACKOFF)
    assert failed.forget == ("job.u1.worker-1.1",), "its ended copy is accounted for"
    record = failed.record
    after = desired_configs(record.spec, record)
    changed = {k.name for k in after if after[k].config_hash != before[k].config_hash}
    assert changed == {"worker-1"}, "every other task's TF_CONFIG stays valid"
    assert dict(after[TaskKey(Role.WORKER, 1)].env)[TASK_RESTARTS_ENV] == "1"
    assert TASK_RESTARTS_ENV not in dict(after[TaskKey(Role.WORKER, 0)].env)

    others = [task(record, n, R) for n in ("chief-0", "ps-0", "worker-0")]
    early = step(record, others, T0 + 0.5, BACKOFF)
    assert early.launch == () and early.wake_at == T0 + 1 and early.record.phase is Phase.RESTARTING
    assert "worker-1 restarting alone (1 of backoffLimit 3): backing off 0.5 s" in early.record.message

    due = step(record, others, T0 + 1, BACKOFF)
    assert [k.name for k in due.launch] == ["worker-1"] and due.stop == ()
    assert due.record.task_restarts["worker-1"].waiting_since == T0 + 1
    assert due.record.phase is Phase.RESTARTING
    request = gang_request(due.record, due.launch)
    (slot,) = request.slots
    assert slot.pinned and str(slot.previous) == record.addresses["worker-1"]

    relaunched = due.record.evolve(launches=2)
    again = [*others, task(relaunched, "worker-1", R)]
    running = step(relaunched, again, T0 + 3, BACKOFF)
    assert running.record.reason is Reason.ALL_TASKS_RUNNING and running.record.phase is Phase.RUNNING
    entry = running.record.task_restarts["worker-1"]
    assert not entry.pending and entry.count == 1
    assert not gang_request(running.record, (TaskKey(Role.WORKER, 1),)).slots[0].pinned


def _alone_stages() -> dict[str, tuple[JobRecord, list]]:  # type: ignore[type-arg]
    """worker-1 of a ps job, from its failure until it runs again: (record, tasks) by stage."""
    record = record_for(PSS, phase=Phase.RUNNING)
    failed = step(record, _all(record, "worker-1", code=1), T0, BACKOFF).record
    others = [task(failed, n, R) for n in ("chief-0", "ps-0", "worker-0")]
    relaunched = step(failed, others, T0 + 1, BACKOFF).record.evolve(launches=2)
    return {
        "failed": (record, _all(record, "worker-1", code=1)),
        "lost": (record, _all(record, "worker-1", TaskState.LOST, None)),
        "backing off": (failed, others),
        "old copy stopping": (failed, [*others, task(record, "worker-1", TaskState.STOPPING)]),
        "relaunched": (failed, others),
        "starting": (relaunched, [*others, task(relaunched, "worker-1", TaskState.STARTING)]),
        "running": (relaunched, [*others, task(relaunched, "worker-1", R)]),
    }


@pytest.mark.parametrize(
    ("stage", "at", "phase", "reason", "said"),
    [
        (
            "failed",
            T0,
            Phase.RESTARTING,
            Reason.TASK_RESTARTING,
            "restarting worker-1 alone in 1 s (1 of backoffLimit 3",
        ),
        ("lost", T0, Phase.RESTARTING, Reason.TASK_RESTARTING, "restarting worker-1 alone in 1 s"),
        (
            "backing off",
            T0 + 0.25,
            Phase.RESTARTING,
            Reason.TASK_RESTARTING,
            "worker-1 restarting alone (1 of backoffLimit 3): backing off 0.8 s",
        ),
        (
            "old copy stopping",
            T0 + 2,
            Phase.RESTARTING,
            Reason.TASK_RESTARTING,
            "worker-1: waiting for its old copy to stop",
        ),
        (
            "relaunched",
            T0 + 1,
            Phase.RESTARTING,
            Reason.TASK_RESTARTING,
            "relaunching worker-1 at 127.0.0.1:20003 alone (1 of backoffLimit 3)",
        ),
        (
            "starting",
            T0 + 2,
            Phase.RESTARTING,
            Reason.TASKS_STARTING,
            "worker-1 restarting alone (1 of backoffLimit 3): starting",
        ),
        ("running", T0 + 3, Phase.RUNNING, Reason.ALL_TASKS_RUNNING, "4 task(s) running"),
    ],
)
def test_the_job_is_restarting_until_the_task_restarted_alone_runs_again(
    stage: str, at: float, phase: Phase, reason: Reason, said: str
) -> None:
    record, tasks = _alone_stages()[stage]
    after = step(record, tasks, at, BACKOFF).record
    assert (after.phase, after.reason) == (phase, reason)
    assert said in after.message
    assert (after.attempt, after.restarts) == (0, 0), "the job itself does not restart"
    (ready, *_) = conditions(after, at)
    assert ready.status == ("True" if phase is Phase.RUNNING else "False") and ready.message == after.message
    document = status_document(after, at)
    assert document["restarts"] == 0 and summary(document)["taskRestarts"] == 1
    pending = after.task_restarts["worker-1"].pending
    assert document["nextRestartTime"] == ("1970-01-12T13:46:41Z" if pending else None), "worker-1's relaunch"


def test_backoff_limit_counts_per_task_and_then_fails_the_job() -> None:
    record = record_for(PSS, "  backoffLimit: 2\n", phase=Phase.RUNNING)
    now = T0
    for count, delay in ((1, 1.0), (2, 2.0)):
        result = step(record, _all(record, "worker-1", code=1), now, BACKOFF)
        entry = result.record.task_restarts["worker-1"]
        assert (entry.count, entry.next_launch_at) == (count, now + delay)
        # the other worker fails once too: it has a count of its own
        record = result.record.evolve(launches=result.record.launches + 1)
        now += 10
    assert record.restarts == 0
    other = step(record, _all(record, "worker-0", code=1), now, BACKOFF)
    assert other.record.task_restarts["worker-0"].count == 1 and other.record.phase is Phase.RESTARTING
    third = step(record, _all(record, "worker-1", code=1), now, BACKOFF)
    assert third.record.phase is Phase.FAILED and third.record.reason is Reason.BACKOFF_LIMIT_EXCEEDED
    assert "worker-1 was restarted alone 2 time(s)" in third.record.message
    assert len(third.stop) == 3, "a failed job stops everything"


def test_a_lost_worker_is_stopped_and_its_replacement_waits_until_it_is_gone() -> None:
    record = record_for(PSS, phase=Phase.RUNNING)
    lost = _all(record, "worker-1", TaskState.LOST, None)
    result = step(record, lost, T0, BACKOFF)
    assert result.stop == ("job.u1.worker-1.1",) and result.record.reason is Reason.TASK_RESTARTING
    still = step(result.record, lost, T0 + 5, BACKOFF)
    assert still.launch == () and still.record.phase is Phase.RESTARTING
    assert "waiting for its old copy to stop" in still.record.message
    gone = [t for t in lost if t.key.name != "worker-1"]
    gone.append(task(record, "worker-1", TaskState.GONE))
    assert [k.name for k in step(result.record, gone, T0 + 5, BACKOFF).launch] == ["worker-1"]


@pytest.mark.parametrize("wait", [None, 30.0])
def test_no_address_in_time_restarts_the_whole_job_and_says_so(wait: float | None) -> None:
    record = record_for(PSS, phase=Phase.RUNNING)
    record = step(record, _all(record, "worker-1"), T0, BACKOFF).record
    others = [task(record, n, R) for n in ("chief-0", "ps-0", "worker-0")]
    asked = step(record, others, T0 + 1, BACKOFF, wait).record  # the backend answers Unplaced
    waiting = asked.evolve(reason=Reason.WAITING_FOR_ADDRESS, message="port 20003 is not offered")
    before = step(waiting, others, T0 + 30.9, BACKOFF, wait)
    assert [k.name for k in before.launch] == ["worker-1"], "asked again every pass"
    late = step(waiting, others, T0 + 31, BACKOFF, wait)
    if wait is None:
        assert [k.name for k in late.launch] == ["worker-1"] and late.record.attempt == 0
        return
    after = late.record
    assert after.phase is Phase.RESTARTING and after.reason is Reason.TASK_RESTART_TIMED_OUT
    assert (after.attempt, after.restarts) == (1, 0), "its failure was counted for the task"
    assert "could not get its address" in after.message and "30 s" in after.message
    assert sorted(late.stop) == sorted(t.task_id for t in others)
    assert after.task_restarts["worker-1"].fallbacks == 1 and not after.task_restarts["worker-1"].pending
    relaunch = step(after, [], T0 + 31, BACKOFF, wait)
    assert len(relaunch.launch) == 4
    assert not any(s.pinned for s in gang_request(relaunch.record, relaunch.launch).slots)
    document = status_document(after, T0 + 31)
    assert document["taskRestarts"][0]["jobRestartsForItsAddress"] == 1


def test_the_evaluator_restarted_alone_may_move() -> None:
    record = record_for(PSS_EVAL, phase=Phase.RUNNING)
    record = step(record, _all(record, "evaluator-0", code=3), T0, BACKOFF).record
    others = [task(record, n, R) for n in ("chief-0", "ps-0", "worker-0", "worker-1")]
    due = step(record, others, T0 + 1, BACKOFF, 30.0)
    assert [k.name for k in due.launch] == ["evaluator-0"]
    assert not gang_request(due.record, due.launch).slots[0].pinned, "no other task knows its address"


# ---- status and plan ---------------------------------------------------------------------------


def test_the_status_says_each_roles_scope_and_which_task_restarted_how_often_and_why() -> None:
    record = record_for(PSS_EVAL, phase=Phase.RUNNING)
    record = step(record, _all(record, "worker-1"), T0, BACKOFF).record
    document = status_document(record, T0)
    jsonschema.validate(document, json.loads(schema_text("status")))
    scopes = document["restartScopes"]
    assert {r: s["scope"] for r, s in scopes.items()} == {
        "chief": "Job",
        "ps": "Job",
        "worker": "Task",
        "evaluator": "Task",
    }
    assert scopes["worker"]["reason"] == "WorkerWithParameterServers" and scopes["worker"]["message"]
    (entry,) = document["taskRestarts"]
    assert entry["task"] == "worker-1" and entry["restarts"] == 1 and entry["backoffLimit"] == 3
    assert entry["exitCode"] == 137 and "signal 9" in entry["message"] and entry["pending"]
    again = JobRecord.from_json(json.loads(json.dumps(record.to_json())))
    assert again.task_restarts == record.task_restarts


def _plan_world(tmp_path: Path) -> World:
    return World(tmp_path)


def test_the_plan_says_the_scopes_of_a_new_job_that_restarts_a_task_alone(tmp_path: Path) -> None:
    world = _plan_world(tmp_path)
    pss = "chief: {count: 1}, ps: {count: 1}, worker: {count: 2}"
    world.write("p", job_text("p", pss))
    world.write("m", job_text("m"))
    plan = world.plan()
    assert not plan.job("m").scopes, "whole-job restarts, as every job had: nothing new to say"
    text = render_text(plan)
    assert "on failure: worker restarts alone (restartScope Task: the job has ps roles" in text
    assert "on failure: chief, ps restart the whole job (restartScope Job" in text
    data = json.loads(render_json(plan))
    jobs = {j["name"]: j for j in data["jobs"]}
    assert jobs["p"]["restartScopes"]["worker"]["scope"] == "Task" and "restartScopes" not in jobs["m"]

    world.apply()
    world.write("p", job_text("p", pss, "restartScope: Job"))
    world.write("m", job_text("m", "worker: {count: 3, resources: {cpus: 0.5, mem: 64}}"))
    changed = world.plan()
    assert changed.job("p").action is Action.UPDATE, "a scope touches no running task"
    assert {s.scope for s in changed.job("p").scopes} == {RestartScope.JOB}
    assert "spec.restartScope" in render_text(changed)
    assert changed.job("m").action is Action.RESIZE and not changed.job("m").scopes


# ---- the controller over the in-memory backend ------------------------------------------------


def test_the_controller_relaunches_only_the_worker_and_the_job_is_restarting_meanwhile(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    world.write("p", job_text("p", SMALL_PSS))
    world.apply()
    world.settle()
    first = world.tasks("p")
    ids = {name: t.task_id for name, t in first.items()}
    world.backend.finish(ids["worker-1"], 137)
    world.settle()
    assert world.record("p").phase is Phase.RESTARTING
    assert world.record("p").reason is Reason.TASK_RESTARTING
    world.clock.advance(10)  # the controller world's backoff starts at 10 s
    world.settle()
    now = world.tasks("p")
    assert {n: t.task_id for n, t in now.items() if n != "worker-1"} == {
        n: i for n, i in ids.items() if n != "worker-1"
    }, "no other task was replaced"
    assert now["worker-1"].task_id != ids["worker-1"] and now["worker-1"].port == first["worker-1"].port
    status = world.status("p")
    assert status is not None and status["taskRestarts"][0]["task"] == "worker-1"
    assert status["restarts"] == 0 and status["phase"] == "Running"


def test_a_pinned_slot_that_cannot_be_placed_keeps_the_job_restarting_then_falls_back(
    tmp_path: Path,
) -> None:
    world = World(tmp_path)
    world.write("p", job_text("p", SMALL_PSS))
    world.apply()
    world.settle()
    first = world.tasks("p")
    world.backend.finish(first["worker-1"].task_id, 137)
    world.settle()
    # something else takes the worker's port while it is down
    world.backend._reservations["squatter"] = (
        world.backend.cluster.capacity.scaled(0),
        {first["worker-1"].port},
    )
    world.clock.advance(10)
    world.settle()
    record = world.record("p")
    assert record.phase is Phase.RESTARTING and record.reason is Reason.WAITING_FOR_ADDRESS
    world.clock.advance(29)
    world.settle()
    assert world.record("p").reason is Reason.WAITING_FOR_ADDRESS
    world.clock.advance(2)
    world.settle()
    after = world.record("p")
    assert after.attempt == 1 and after.phase in (Phase.RESTARTING, Phase.RUNNING, Phase.PENDING)
    status = world.status("p")
    assert status is not None and status["taskRestarts"][0]["jobRestartsForItsAddress"] == 1


# ---- Mesos: a pinned slot gets its agent and port, or waits ---------------------------------


def test_mesos_placement_gives_a_pinned_slot_its_agent_and_port_or_waits() -> None:
    from tests.test_placement import ONE, agent
    from tfdeclare.backends.mesos.placement import place_gang
    from tfdeclare.backends.mesos.placement_values import GangFit, NoFit
    from tfdeclare.core.run.tasks import Address, GangRequest, SlotRequest, UnplacedReason

    def request(pinned: bool) -> GangRequest:
        slot = SlotRequest(TaskKey(Role.WORKER, 1), ONE, Address("b.example", 31005), pinned=pinned)
        return GangRequest("job", 0, (slot,))

    offered = [agent("a"), agent("b")]
    fit = place_gang(request(True), offered)
    assert isinstance(fit, GangFit) and (fit.assignments[0].agent_id, fit.assignments[0].port) == ("b", 31005)
    for offers in ([agent("a")], [agent("a"), agent("b", ports=((31006, 31009),))], [agent("b", cpus=0.5)]):
        refused = place_gang(request(True), offers)
        assert isinstance(refused, NoFit) and refused.reason is UnplacedReason.WAITING_FOR_ADDRESS, refused
        assert "b.example:31005" in refused.message
        moved = place_gang(request(False), [agent("a")])
        assert isinstance(moved, GangFit), "unpinned, a previous address is only a preference"


def test_mesos_a_pinned_gang_holds_no_line() -> None:
    from tests.test_placement import ONE
    from tfdeclare.backends.mesos.queueing import Waiting, head_of
    from tfdeclare.core.run.tasks import Address, GangRequest, SlotRequest

    pinned = SlotRequest(TaskKey(Role.WORKER, 1), ONE, Address("b.example", 31005), pinned=True)
    waiting_for_address = Waiting(GangRequest("a", 0, (pinned,)), 1.0, 1.0)
    other = Waiting(GangRequest("b", 0, (SlotRequest(TaskKey(Role.WORKER, 0), ONE),)), 2.0, 2.0)
    assert head_of([("a", waiting_for_address), ("b", other)]) == ("b", other)
