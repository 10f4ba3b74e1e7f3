"""The job lifecycle, table by table, with an injected clock: completion, restart policies,
backoff, deadlines, rollouts of changed tasks, deletion, lost tasks."""

from __future__ import annotations

import textwrap

import pytest

from tfdeclare.core.enums import Phase, Reason, Role, TaskState
from tfdeclare.core.run.lifecycle import Backoff, desired_configs, step
from tfdeclare.core.run.record import JobRecord
from tfdeclare.core.run.tasks import ObservedTask, TaskKey
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.resources import Resources

BACKOFF = Backoff(initial_s=1.0, max_s=8.0)
T0 = 1_000_000.0


def job_document(replicas: str, extra: str = "") -> str:
    """A job named ``job`` running ``train`` with these replicas, ``extra`` appended to its spec."""
    head = f"""\
        apiVersion: tfdeclare/v1
        kind: TFJob
        metadata: {{name: job}}
        spec:
          command: [train]
          replicas: {replicas}
        """
    return textwrap.dedent(head) + extra


def record_for(replicas: str, extra: str = "", **fields: object) -> JobRecord:
    result = load_file("job.yaml", job_document(replicas, extra).encode())
    assert not result.diagnostics, result.diagnostics
    job = result.jobs[0]
    record = JobRecord(name="job", uid="u1", canonical=job.canonical, spec_hash=job.spec_hash)
    addresses = {key.name: f"127.0.0.1:{20000 + i}" for i, key in enumerate(record.spec.task_keys())}
    return record.evolve(**{"addresses": addresses, "start_time": T0, "launches": 1, **fields})


def task(
    record: JobRecord, name: str, state: TaskState, exit_code: int | None = None, *, stale: bool = False
) -> ObservedTask:
    role, index = name.rsplit("-", 1)
    key = TaskKey(Role(role), int(index))
    configs = desired_configs(record.spec, record)
    config_hash = "0000stale" if stale or key not in configs else configs[key].config_hash
    return ObservedTask(
        task_id=f"job.u1.{name}.{record.launches}",
        job="job",
        key=key,
        attempt=record.attempt,
        config_hash=config_hash,
        state=state,
        resources=Resources(1, 64),
        exit_code=exit_code,
        started_at=T0,
    )


PSS = "{chief: {count: 1}, ps: {count: 1}, worker: {count: 2}}"
MWMS = "{worker: {count: 2}}"
R, S, F = TaskState.RUNNING, TaskState.SUCCEEDED, TaskState.FAILED


def test_new_job_launches_every_task_as_one_gang() -> None:
    record = record_for(PSS, start_time=None, launches=0)
    result = step(record, [], T0, BACKOFF)
    assert [k.name for k in result.launch] == ["chief-0", "ps-0", "worker-0", "worker-1"]
    assert result.record.reason == Reason.LAUNCHING


def test_all_running_is_running_and_starting_is_not() -> None:
    record = record_for(PSS)
    running = [task(record, n, R) for n in ("chief-0", "ps-0", "worker-0", "worker-1")]
    assert step(record, running, T0, BACKOFF).record.phase is Phase.RUNNING
    starting = [*running[:3], task(record, "worker-1", TaskState.STARTING)]
    result = step(record, starting, T0, BACKOFF)
    assert result.record.phase is Phase.PENDING and result.record.reason == Reason.TASKS_STARTING
    assert result.launch == ()


@pytest.mark.parametrize(
    ("replicas", "ended", "still_running", "why"),
    [
        (PSS, {"chief-0": (S, 0)}, ["ps-0", "worker-0", "worker-1"], Reason.CHIEF_SUCCEEDED),
        (MWMS, {"worker-0": (S, 0), "worker-1": (S, 0)}, [], Reason.WORKERS_SUCCEEDED),
        (
            "{ps: {count: 1}, worker: {count: 2}}",
            {"worker-0": (S, 0), "worker-1": (S, 0)},
            ["ps-0"],
            Reason.WORKERS_SUCCEEDED,
        ),
    ],
)
def test_completion_stops_what_still_runs(
    replicas: str, ended: dict[str, tuple[TaskState, int]], still_running: list[str], why: Reason
) -> None:
    record = record_for(replicas)
    tasks = [task(record, n, s, c) for n, (s, c) in ended.items()] + [
        task(record, n, R) for n in still_running
    ]
    result = step(record, tasks, T0 + 5, BACKOFF)
    assert result.record.phase is Phase.SUCCEEDED and result.record.reason == why
    assert result.record.completion_time == T0 + 5
    assert sorted(result.stop) == sorted(f"job.u1.{n}.1" for n in still_running)


EVALUATED = "{chief: {count: 1}, ps: {count: 1}, worker: {count: 1}, evaluator: {count: 1}}"
TRAINED = {"chief-0": (S, 0)}


def evaluated(extra: str = "", **fields: object) -> tuple[JobRecord, list[ObservedTask]]:
    record = record_for(EVALUATED, extra, **fields)
    tasks = [
        task(record, "chief-0", S, 0),
        *(task(record, n, R) for n in ("ps-0", "worker-0", "evaluator-0")),
    ]
    return record, tasks


def test_without_a_grace_the_evaluator_is_stopped_with_the_rest() -> None:
    record, tasks = evaluated("  evaluatorGraceSeconds: 0\n")
    result = step(record, tasks, T0 + 5, BACKOFF)
    assert result.record.phase is Phase.SUCCEEDED and result.record.reason == Reason.CHIEF_SUCCEEDED
    assert sorted(result.stop) == ["job.u1.evaluator-0.1", "job.u1.ps-0.1", "job.u1.worker-0.1"]


STOPPING = TaskState.STOPPING
TRAINING = ["job.u1.ps-0.1", "job.u1.worker-0.1"]
EVALUATOR = "job.u1.evaluator-0.1"


@pytest.mark.parametrize(
    ("extra", "evaluator", "stopped", "wake", "said"),
    [
        # no grace: the evaluator is stopped with the rest
        ("  evaluatorGraceSeconds: 0\n", R, [*TRAINING, EVALUATOR], None, "the chief exited 0"),
        # the default grace: stopping it waits up to 60 s
        ("", R, TRAINING, T0 + 65, "finishes its final evaluation (up to 60 s, evaluatorGraceSeconds)"),
        ("  evaluatorGraceSeconds: 120\n", R, TRAINING, T0 + 125, "(up to 120 s, evaluatorGraceSeconds)"),
        # an evaluator already ended or being stopped has nothing to finish
        ("", (S, 0), TRAINING, None, "the chief exited 0"),
        ("", STOPPING, TRAINING, None, "the chief exited 0"),
        ("  activeDeadlineSeconds: 10\n", R, TRAINING, T0 + 65, "finishes its final evaluation"),
    ],
)
def test_the_chief_exiting_0_is_success_at_once_whatever_the_evaluator_does(
    extra: str, evaluator: object, stopped: list[str], wake: float | None, said: str
) -> None:
    record, tasks = evaluated(extra)
    state, code = evaluator if isinstance(evaluator, tuple) else (evaluator, None)
    tasks[3] = task(record, "evaluator-0", state, code)
    result = step(record, tasks, T0 + 5, BACKOFF)
    after = result.record
    assert (after.phase, after.reason, after.completion_time) == (
        Phase.SUCCEEDED,
        Reason.CHIEF_SUCCEEDED,
        T0 + 5,
    )
    assert sorted(result.stop) == sorted(stopped) and result.launch == ()
    assert result.wake_at == wake and said in after.message


@pytest.mark.parametrize(
    ("evaluator", "at", "stopped", "said"),
    [
        (R, T0 + 60, [], "finishes its final evaluation"),  # within its grace: it goes on
        (R, T0 + 125, [EVALUATOR], "the evaluator was stopped after evaluatorGraceSeconds"),
        ((S, 0), T0 + 70, [], "the chief exited 0; evaluator-0 exited 0"),
        ((F, 1), T0 + 70, [], "the chief exited 0; evaluator-0 exited 1"),  # no failure of the job
        ((F, 137), T0 + 200, [], "evaluator-0 was killed by signal 9"),
    ],
)
def test_the_evaluators_grace_is_part_of_stopping_a_succeeded_job(
    evaluator: object, at: float, stopped: list[str], said: str
) -> None:
    # past activeDeadlineSeconds (10 s) too: a deadline does not fail a trained job
    record, tasks = evaluated("  evaluatorGraceSeconds: 120\n  activeDeadlineSeconds: 10\n")
    first = step(record, tasks, T0 + 5, BACKOFF).record
    state, code = evaluator if isinstance(evaluator, tuple) else (evaluator, None)
    training = [task(record, n, TaskState.STOPPED, 143) for n in ("ps-0", "worker-0")]
    later = step(first, [tasks[0], *training, task(record, "evaluator-0", state, code)], at, BACKOFF)
    after = later.record
    assert (after.phase, after.reason, after.completion_time) == (
        Phase.SUCCEEDED,
        Reason.CHIEF_SUCCEEDED,
        T0 + 5,
    )
    assert sorted(later.stop) == stopped and later.launch == (), "nothing restarts"
    assert said in after.message
    if stopped or state is not R:  # over: once
        assert after.final_evaluation_since is None
        assert step(after, [tasks[0], *training], at + 1, BACKOFF).record.message == after.message


def test_a_record_of_an_earlier_release_running_its_final_evaluation_has_succeeded() -> None:
    record, tasks = evaluated(
        "  evaluatorGraceSeconds: 30\n",
        phase=Phase.RUNNING,
        reason=Reason.FINAL_EVALUATION,
        message="the chief exited 0; the evaluator finishes its final evaluation",
        final_evaluation_since=T0 + 5,
    )
    going_on = step(record, [tasks[0], tasks[3]], T0 + 20, BACKOFF)
    after = going_on.record
    assert (after.phase, after.reason, after.completion_time) == (
        Phase.SUCCEEDED,
        Reason.CHIEF_SUCCEEDED,
        T0 + 5,
    )
    assert going_on.stop == () and going_on.wake_at == T0 + 35
    late = step(after, [tasks[0], tasks[3]], T0 + 35, BACKOFF)
    assert late.stop == (EVALUATOR,) and late.record.phase is Phase.SUCCEEDED


def test_worker0_success_policy_completes_when_worker_0_exits_0() -> None:
    record = record_for("{worker: {count: 3}}", "  successPolicy: Worker0\n")
    tasks = [task(record, "worker-0", S, 0), task(record, "worker-1", R), task(record, "worker-2", R)]
    result = step(record, tasks, T0 + 5, BACKOFF)
    assert result.record.phase is Phase.SUCCEEDED and result.record.reason == Reason.WORKER0_SUCCEEDED
    assert sorted(result.stop) == ["job.u1.worker-1.1", "job.u1.worker-2.1"]
    default = record_for("{worker: {count: 3}}")
    assert step(default, tasks, T0 + 5, BACKOFF).record.phase is not Phase.SUCCEEDED


def test_each_role_fails_by_its_own_restart_policy() -> None:
    replicas = "{ps: {count: 1, restartPolicy: Never}, worker: {count: 1}}"
    record = record_for(replicas, "  restartPolicy: OnFailure\n")
    worker_failed = step(record, [task(record, "ps-0", R), task(record, "worker-0", F, 1)], T0, BACKOFF)
    assert worker_failed.record.reason is Reason.TASK_RESTARTING  # alone: the job has ps roles
    assert worker_failed.record.task_restarts["worker-0"].count == 1
    ps_failed = step(record, [task(record, "ps-0", F, 1), task(record, "worker-0", R)], T0, BACKOFF)
    assert ps_failed.record.phase is Phase.FAILED and ps_failed.record.reason == Reason.TASK_FAILED
    assert "restartPolicy Never" in ps_failed.record.message


def test_ttl_after_finished_purges_once_nothing_runs() -> None:
    finished = {"phase": Phase.SUCCEEDED, "completion_time": T0 + 10}
    record = record_for(MWMS, "  ttlSecondsAfterFinished: 100\n", **finished)
    ended = [task(record, "worker-0", S, 0), task(record, "worker-1", S, 0)]
    early = step(record, ended, T0 + 50, BACKOFF)
    assert not early.purge and early.wake_at == T0 + 110
    still = step(record, [ended[0], task(record, "worker-1", TaskState.STOPPING)], T0 + 120, BACKOFF)
    assert not still.purge, "nothing is purged while a task of it still runs"
    due = step(record, ended, T0 + 120, BACKOFF)
    assert due.purge and due.record.cleaned_at == T0 + 120 and due.record.phase is Phase.SUCCEEDED
    assert not step(due.record, [], T0 + 500, BACKOFF).purge, "cleaned up once"
    kept = record_for(MWMS, **finished)
    assert not step(kept, ended, T0 + 10**6, BACKOFF).purge, "no TTL: kept until deleted"


def test_one_worker_done_is_not_completion_without_chief() -> None:
    record = record_for(MWMS)
    result = step(record, [task(record, "worker-0", S, 0), task(record, "worker-1", R)], T0, BACKOFF)
    assert result.record.phase is not Phase.SUCCEEDED
    assert result.launch == () and result.stop == ()


@pytest.mark.parametrize(
    ("policy", "exit_code", "outcome"),
    [
        ("OnFailure", 1, "restart"),
        ("OnFailure", 137, "restart"),
        ("Never", 137, Reason.TASK_FAILED),
        ("ExitCode", 1, Reason.PERMANENT_EXIT_CODE),
        ("ExitCode", 127, Reason.PERMANENT_EXIT_CODE),
        ("ExitCode", 42, "restart"),
        ("ExitCode", 137, "restart"),
        ("ExitCode", 255, "restart"),
        ("Always", 3, "restart"),
    ],
)
def test_restart_policies(policy: str, exit_code: int, outcome: object) -> None:
    record = record_for(MWMS, f"  restartPolicy: {policy}\n", phase=Phase.RUNNING)
    tasks = [task(record, "worker-0", F, exit_code), task(record, "worker-1", R)]
    result = step(record, tasks, T0 + 10, BACKOFF)
    if outcome == "restart":
        assert result.record.phase is Phase.RESTARTING
        assert (result.record.attempt, result.record.restarts) == (1, 1)
        assert result.record.next_launch_at == T0 + 11
        assert result.stop == ("job.u1.worker-1.1",)
        assert result.launch == ()
    else:
        assert result.record.phase is Phase.FAILED and result.record.reason == outcome
        assert result.stop == ("job.u1.worker-1.1",)


def test_backoff_then_relaunch_of_the_whole_job_on_the_same_ports() -> None:
    record = record_for(MWMS, phase=Phase.RESTARTING, attempt=1, restarts=1, next_launch_at=T0 + 1)
    old = [
        task(record, "worker-0", F, 1, stale=True),
        task(record, "worker-1", TaskState.STOPPING, stale=True),
    ]
    waiting = step(record, old, T0 + 0.5, BACKOFF)
    assert waiting.record.reason == Reason.WAITING_FOR_TASKS_TO_STOP and waiting.launch == ()
    stopped = [old[0], task(record, "worker-1", TaskState.STOPPED, 143, stale=True)]
    backing = step(record, stopped, T0 + 0.5, BACKOFF)
    assert backing.record.reason == Reason.BACKING_OFF and backing.wake_at == T0 + 1 and backing.launch == ()
    assert set(backing.forget) == {"job.u1.worker-0.1", "job.u1.worker-1.1"}
    relaunch = step(record, stopped, T0 + 1, BACKOFF)
    assert [k.name for k in relaunch.launch] == ["worker-0", "worker-1"]
    assert relaunch.record.addresses == record.addresses


def test_backoff_limit_fails_the_job() -> None:
    record = record_for(MWMS, "  backoffLimit: 2\n", phase=Phase.RUNNING, restarts=2, attempt=2)
    result = step(record, [task(record, "worker-0", F, 1), task(record, "worker-1", R)], T0, BACKOFF)
    assert result.record.phase is Phase.FAILED and result.record.reason == Reason.BACKOFF_LIMIT_EXCEEDED


def test_backoff_grows_exponentially_and_is_capped() -> None:
    assert [BACKOFF.delay(n) for n in range(0, 7)] == [0.0, 1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


@pytest.mark.parametrize(("policy", "restarts"), [("OnFailure", False), ("Always", True)])
def test_a_ps_that_exits_0_early_restarts_only_under_always(policy: str, restarts: bool) -> None:
    record = record_for(PSS, f"  restartPolicy: {policy}\n", phase=Phase.RUNNING)
    tasks = [
        task(record, "chief-0", R),
        task(record, "ps-0", S, 0),
        task(record, "worker-0", R),
        task(record, "worker-1", R),
    ]
    result = step(record, tasks, T0, BACKOFF)
    assert (result.record.phase is Phase.RESTARTING) is restarts
    if not restarts:
        assert result.launch == ()


def test_deadline_fails_and_stops_everything() -> None:
    record = record_for(MWMS, "  activeDeadlineSeconds: 60\n", phase=Phase.RUNNING)
    tasks = [task(record, "worker-0", R), task(record, "worker-1", R)]
    assert step(record, tasks, T0 + 59, BACKOFF).record.phase is Phase.RUNNING
    result = step(record, tasks, T0 + 60, BACKOFF)
    assert result.record.phase is Phase.FAILED and result.record.reason == Reason.DEADLINE_EXCEEDED
    assert len(result.stop) == 2


def test_deleting_stops_then_removes() -> None:
    record = record_for(MWMS, phase=Phase.RUNNING, deleting=True)
    stopping = step(
        record, [task(record, "worker-0", R), task(record, "worker-1", TaskState.STOPPING)], T0, BACKOFF
    )
    assert stopping.stop == ("job.u1.worker-0.1",) and not stopping.remove
    assert stopping.record.phase is Phase.DELETING
    done = step(record, [task(record, "worker-0", TaskState.STOPPED, 143)], T0, BACKOFF)
    assert done.remove and done.forget == ("job.u1.worker-0.1",)


def test_finished_jobs_never_launch_and_stop_leftovers() -> None:
    record = record_for(PSS, phase=Phase.SUCCEEDED, reason=Reason.CHIEF_SUCCEEDED)
    result = step(record, [task(record, "chief-0", S, 0), task(record, "ps-0", R)], T0, BACKOFF)
    assert result.launch == () and result.stop == ("job.u1.ps-0.1",)
    assert result.record.phase is Phase.SUCCEEDED


def test_resize_replaces_tasks_whose_cluster_changed() -> None:
    before = record_for(PSS, phase=Phase.RUNNING)
    running = [task(before, n, R) for n in ("chief-0", "ps-0", "worker-0", "worker-1")]
    after = record_for("{chief: {count: 1}, ps: {count: 1}, worker: {count: 3}}", phase=Phase.RUNNING)
    after = after.evolve(addresses={k: v for k, v in after.addresses.items() if k != "worker-2"})
    result = step(after, running, T0, BACKOFF)
    assert len(result.stop) == 4 and result.launch == ()  # everyone sees a new cluster: stop first
    stopped = [task(before, n, TaskState.STOPPED, 143) for n in ("chief-0", "ps-0", "worker-0", "worker-1")]
    result = step(after, stopped, T0, BACKOFF)
    assert [k.name for k in result.launch] == ["chief-0", "ps-0", "worker-0", "worker-1", "worker-2"]


def test_adding_an_evaluator_touches_nothing_else() -> None:
    before = record_for(PSS, phase=Phase.RUNNING)
    running = [task(before, n, R) for n in ("chief-0", "ps-0", "worker-0", "worker-1")]
    after = record_for(
        "{chief: {count: 1}, ps: {count: 1}, worker: {count: 2}, evaluator: {count: 1}}", phase=Phase.RUNNING
    )
    after = after.evolve(addresses=dict(before.addresses))
    result = step(after, running, T0, BACKOFF)
    assert result.stop == ()
    assert [k.name for k in result.launch] == ["evaluator-0"]


def test_a_lost_task_restarts_the_job_but_its_replacement_waits_until_it_is_gone() -> None:
    record = record_for(MWMS, phase=Phase.RUNNING)
    lost = [task(record, "worker-0", TaskState.LOST), task(record, "worker-1", R)]
    result = step(record, lost, T0, BACKOFF)
    assert result.record.phase is Phase.RESTARTING and result.record.restarts == 1
    restarted = result.record
    still_lost = [task(record, "worker-0", TaskState.LOST), task(record, "worker-1", TaskState.STOPPED, 143)]
    waiting = step(restarted, still_lost, T0 + 100, BACKOFF)
    assert waiting.launch == () and waiting.record.reason == Reason.WAITING_FOR_TASKS_TO_STOP
    gone = [task(record, "worker-0", TaskState.GONE), task(record, "worker-1", TaskState.STOPPED, 143)]
    assert [k.name for k in step(restarted, gone, T0 + 100, BACKOFF).launch] == ["worker-0", "worker-1"]


# ---- the last pass's configs, kept (issue 23) --------------------------------------------


def _fresh_hashes(record: JobRecord) -> dict[TaskKey, str]:
    return {k: c.config_hash for k, c in desired_configs(record.spec, record).items()}


def test_a_pass_keeps_the_configs_that_did_not_change_and_their_identities() -> None:
    record = record_for("{chief: {count: 1}, ps: {count: 2}, worker: {count: 3}, evaluator: {count: 1}}")
    first = desired_configs(record.spec, record)
    again = desired_configs(record.spec, record, first)
    assert all(again[k] is first[k] for k in first), "nothing changed: every config is last pass's"

    evaluator = TaskKey(Role.EVALUATOR, 0)
    moved = record.evolve(addresses={**record.addresses, "evaluator-0": "10.0.0.9:1"})
    after = desired_configs(moved.spec, moved, first)
    # the evaluator is in no training task's cluster: only its own config changed
    assert [k for k in after if after[k] is not first[k]] == [evaluator]
    assert {k: c.config_hash for k, c in after.items()} == _fresh_hashes(moved)

    worker = record.evolve(addresses={**record.addresses, "worker-2": "10.0.0.9:2"})
    after = desired_configs(worker.spec, worker, first)
    assert all(after[k] is not first[k] for k in first), "every task sees the worker's address"
    assert {k: c.config_hash for k, c in after.items()} == _fresh_hashes(worker)

    restarted = record.evolve(attempt=record.attempt + 1)
    after = desired_configs(restarted.spec, restarted, first)
    assert {k: c.config_hash for k, c in after.items()} == _fresh_hashes(restarted) != _fresh_hashes(record)


def test_a_step_given_the_last_pass_decides_what_it_decides_without() -> None:
    record = record_for("{chief: {count: 1}, worker: {count: 2}}")
    tasks = [
        task(record, "chief-0", TaskState.RUNNING),
        task(record, "worker-0", TaskState.FAILED, 1),
        task(record, "worker-1", TaskState.RUNNING, stale=True),
    ]
    fresh = step(record, tasks, T0 + 5, BACKOFF)
    kept = step(record, tasks, T0 + 5, BACKOFF, previous=desired_configs(record.spec, record))
    assert (kept.record, kept.stop, kept.launch, kept.forget, kept.events, kept.wake_at) == (
        fresh.record,
        fresh.stop,
        fresh.launch,
        fresh.forget,
        fresh.events,
        fresh.wake_at,
    )
    assert {k: c.config_hash for k, c in kept.desired.items()} == {
        k: c.config_hash for k, c in fresh.desired.items()
    }
