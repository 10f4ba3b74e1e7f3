"""Health checks (issue 34, hung tasks), pure: the spec field (schema, canonical form, no
change to an existing job's hash, in-place plan), the probe state machine in virtual time,
the progress judgement, and the lifecycle's restart of an unhealthy task by its scope."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.test_lifecycle import BACKOFF, PSS, T0, R, record_for, task
from tfdeclare.backends.local.record import LocalTask, read_task, write_task
from tfdeclare.core.enums import Phase, Reason, RestartPolicy, Role, TaskState
from tfdeclare.core.plan.planner import Effect, classify
from tfdeclare.core.run import health
from tfdeclare.core.run.lifecycle import step
from tfdeclare.core.run.tasks import ObservedTask, TaskKey
from tfdeclare.core.spec.health import HealthCheck, HealthCheckKind
from tfdeclare.core.spec.loader import load_file
from tfdeclare.core.spec.resources import Resources

MWMS = "{worker: {count: 2}}"


# ---- the spec field ----------------------------------------------------------------------------


def test_an_absent_health_check_leaves_the_hash_and_canonical_form_alone() -> None:
    without = record_for(MWMS)
    with_check = record_for(MWMS, "  healthCheck: {tcpSocket: {}}\n")
    assert "healthCheck" not in without.canonical["spec"]
    assert "healthCheck" not in without.canonical["spec"]["replicas"]["worker"]
    assert without.spec_hash != with_check.spec_hash
    assert without.spec.health_check_for(Role.WORKER) is None


def test_defaults_are_filled_and_a_role_overrides_the_job() -> None:
    record = record_for(
        "{ps: {count: 1}, worker: {count: 1, healthCheck: {exec: {command: [check, --fast]}, timeoutSeconds: 2.5}}}",
        "  healthCheck: {tcpSocket: {}, initialDelaySeconds: 30}\n",
    )
    spec = record.spec
    assert spec.health_check_for(Role.PS) == HealthCheck(HealthCheckKind.TCP, initial_delay_s=30.0)
    worker = spec.health_check_for(Role.WORKER)
    assert worker == HealthCheck(HealthCheckKind.EXEC, command=("check", "--fast"), timeout_s=2.5)
    assert spec.health_check_for(Role.TENSORBOARD) is None
    assert record.canonical["spec"]["healthCheck"] == {
        "tcpSocket": {},
        "initialDelaySeconds": 30,
        "periodSeconds": 10,
        "timeoutSeconds": 1,
        "failureThreshold": 3,
    }
    # the canonical form reads back to the same value (a backend stores it with a task)
    assert HealthCheck.from_json(worker.to_json()) == worker


@pytest.mark.parametrize(
    ("check", "message"),
    [
        ("{tcpSocket: {}, exec: {command: [x]}}", "give exactly one of tcpSocket, exec or progress"),
        ("{periodSeconds: 5}", "give exactly one of tcpSocket, exec or progress"),
        ("{exec: {command: []}}", ""),
        ("{exec: {command: 'sh -c x'}}", ""),
        ("{progress: {stalledSeconds: 0}}", "must be more than 0"),
        ("{progress: {}}", "stalledSeconds"),
        ("{tcpSocket: {}, failureThreshold: 0}", ""),
        ("{tcpSocket: {port: 80}}", "port"),
    ],
)
def test_invalid_checks_are_errors_at_their_path(check: str, message: str) -> None:
    text = f"""\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {{name: job}}
spec:
  command: [train]
  replicas: {{worker: {{count: 1, healthCheck: {check}}}}}
"""
    result = load_file("job.yaml", text.encode())
    assert result.diagnostics, check
    assert all(d.line == 6 for d in result.diagnostics)
    assert any("$.spec.replicas.worker.healthCheck" in d.format() for d in result.diagnostics)
    assert any(message in d.format() for d in result.diagnostics)


@pytest.mark.parametrize(
    ("path", "effect"),
    [
        (("spec", "healthCheck"), Effect.IN_PLACE),
        (("spec", "healthCheck", "periodSeconds"), Effect.IN_PLACE),
        (("spec", "replicas", "worker", "healthCheck"), Effect.IN_PLACE),
        (("spec", "replicas", "worker", "healthCheck", "exec", "command", 0), Effect.IN_PLACE),
        (("spec", "replicas", "worker", "command"), Effect.RESTART),
    ],
)
def test_a_changed_check_updates_in_place(path: tuple[str | int, ...], effect: Effect) -> None:
    assert classify(path) is effect


# ---- the probe state machine, in virtual time --------------------------------------------------

CHECK = HealthCheck(HealthCheckKind.TCP, initial_delay_s=5, period_s=10, timeout_s=1, failure_threshold=3)


def run(check: HealthCheck, results: list[tuple[float, str | None, float]]) -> health.ProbeState:
    """Probes at the times given: (start, failure or None, when it answered)."""
    state = health.begin(check, 100.0)
    for start, failure, end in results:
        assert health.due(state, start), (start, state)
        state = health.started(state, start)
        assert not health.due(state, start)  # never two at once
        state = health.finished(state, check, failure, end)
    return state


def test_the_first_probe_waits_for_the_initial_delay() -> None:
    state = health.begin(CHECK, 100.0)
    assert not health.due(state, 104.9)
    assert health.due(state, 105.0)
    assert health.wake_at(state, CHECK) == 105.0


@pytest.mark.parametrize(
    ("results", "unhealthy", "failures"),
    [
        ([(105, None, 105.1), (115.1, None, 115.2)], False, 0),
        ([(105, "refused", 105), (115, "refused", 115)], False, 2),
        ([(105, "refused", 105), (115, "refused", 115), (125, "refused", 125)], True, 3),
        # a success in between starts the count again
        ([(105, "x", 105), (115, "x", 115), (125, None, 125), (135, "x", 135), (145, "x", 145)], False, 2),
    ],
)
def test_failure_threshold_counts_failures_in_a_row(
    results: list[tuple[float, str | None, float]], unhealthy: bool, failures: int
) -> None:
    state = run(CHECK, results)
    assert state.unhealthy is unhealthy
    assert state.failures == failures
    verdict = health.verdict(state, CHECK)
    assert (verdict is not None) is unhealthy
    if unhealthy:
        assert verdict == (
            "unhealthy: its port accepts a connection failed 3 time(s) in a row (failureThreshold 3); last: refused"
        )
        assert not health.due(state, 1e9)  # judged for good: the lifecycle stops it
        assert health.wake_at(state, CHECK) is None


def test_the_period_counts_from_a_probe_start_and_a_slow_probe_is_not_repeated_at_once() -> None:
    state = health.started(health.begin(CHECK, 100.0), 105.0)
    state = health.finished(state, CHECK, None, 105.5)
    assert state.next_at == 115.0
    slow = health.finished(health.started(state, 115.0), CHECK, None, 126.0)
    assert slow.next_at == 126.0


def test_a_probe_that_does_not_answer_counts_as_failed_after_its_timeout() -> None:
    state = health.started(health.begin(CHECK, 100.0), 105.0)
    assert health.wake_at(state, CHECK) == 105.0 + 1 + health.EXPIRY_SLACK_S
    assert health.expire(state, CHECK, 106.9) == state
    expired = health.expire(state, CHECK, 107.0)
    assert expired.failures == 1 and expired.in_flight_since is None
    assert expired.last_failure == "no answer within 1 s"
    # its late answer, should it come, is not counted (the backend drops the probe)


@pytest.mark.parametrize(
    ("modified", "now", "failure"),
    [
        (None, 10.0, "its log does not exist"),
        (100.0, 160.0, None),
        (100.0, 160.5, "its log not written for 60 s (stalledSeconds 60)"),
        (100.0, 99.0, None),  # written "in the future" (a clock step): not stalled
    ],
)
def test_progress_is_stalled_after_stalled_seconds(
    modified: float | None, now: float, failure: str | None
) -> None:
    assert health.progress_failure(modified, now, 60.0, "its log") == failure


# ---- the lifecycle: an unhealthy task is a failure of its role ---------------------------------


def unhealthy(observed: ObservedTask) -> ObservedTask:
    return replace(observed, unhealthy="unhealthy: its port accepts a connection failed 3 time(s) in a row")


def test_an_unhealthy_worker_restarts_the_whole_job_with_reason_unhealthy() -> None:
    record = record_for(MWMS, "  healthCheck: {tcpSocket: {}}\n")
    tasks = [unhealthy(task(record, "worker-0", R)), task(record, "worker-1", R)]
    result = step(record, tasks, T0, BACKOFF)
    assert result.record.phase is Phase.RESTARTING
    assert result.record.reason is Reason.UNHEALTHY
    assert result.record.restarts == 1 and result.record.attempt == record.attempt + 1
    assert set(result.stop) == {t.task_id for t in tasks}
    assert result.record.message.startswith("worker-0 was unhealthy: its port")
    # while its tasks stop and it backs off, the reason stays Unhealthy
    stopping = [replace(t, state=TaskState.STOPPING) for t in tasks]
    later = step(result.record, stopping, T0 + 0.1, BACKOFF)
    assert later.record.reason is Reason.UNHEALTHY and later.record.phase is Phase.RESTARTING
    gone = [replace(t, state=TaskState.STOPPED) for t in tasks]
    backing_off = step(later.record, gone, T0 + 0.2, BACKOFF)
    assert backing_off.record.reason is Reason.UNHEALTHY and not backing_off.launch
    relaunch = step(backing_off.record, gone, T0 + 1.5, BACKOFF)
    assert relaunch.record.reason is Reason.LAUNCHING and len(relaunch.launch) == 2


def test_an_unhealthy_worker_with_ps_restarts_alone_and_its_restart_says_why() -> None:
    record = record_for(PSS, "  healthCheck: {tcpSocket: {}}\n")
    names = ("chief-0", "ps-0", "worker-0", "worker-1")
    tasks = [task(record, n, R) for n in names]
    tasks[3] = unhealthy(tasks[3])
    result = step(record, tasks, T0, BACKOFF)
    assert result.record.reason is Reason.UNHEALTHY
    assert result.record.restarts == 0 and result.record.attempt == record.attempt
    assert result.stop == (tasks[3].task_id,)  # only it, the others keep running
    entry = result.record.task_restarts["worker-1"]
    assert entry.count == 1 and entry.message.startswith("worker-1 was unhealthy")


def test_an_unhealthy_task_under_restart_policy_never_fails_the_job() -> None:
    record = record_for(
        MWMS, f"  restartPolicy: {RestartPolicy.NEVER.value}\n  healthCheck: {{tcpSocket: {{}}}}\n"
    )
    tasks = [unhealthy(task(record, "worker-0", R)), task(record, "worker-1", R)]
    result = step(record, tasks, T0, BACKOFF)
    assert result.record.phase is Phase.FAILED
    assert "worker-0 was unhealthy" in result.record.message
    assert set(result.stop) == {t.task_id for t in tasks}


def test_an_unhealthy_task_counts_against_backoff_limit() -> None:
    record = record_for(MWMS, "  backoffLimit: 1\n  healthCheck: {tcpSocket: {}}\n", restarts=1)
    tasks = [unhealthy(task(record, "worker-0", R)), task(record, "worker-1", R)]
    result = step(record, tasks, T0, BACKOFF)
    assert result.record.phase is Phase.FAILED
    assert result.record.reason is Reason.BACKOFF_LIMIT_EXCEEDED


def test_a_stopping_unhealthy_task_is_not_a_second_failure() -> None:
    record = record_for(MWMS, "  healthCheck: {tcpSocket: {}}\n")
    tasks = [
        replace(unhealthy(task(record, "worker-0", R)), state=TaskState.STOPPING),
        task(record, "worker-1", R),
    ]
    result = step(record, tasks, T0, BACKOFF)
    assert result.record.restarts == 0


# ---- a Kubeflow TFJob's livenessProbe ------------------------------------------------------------

KUBEFLOW = """\
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: probed}
spec:
  tfReplicaSpecs:
    Worker:
      replicas: 2
      template:
        spec:
          containers:
            - name: tensorflow
              image: tf:2.21
              command: [python, train.py]
              resources: {requests: {cpu: 1, memory: 1Gi}}
              livenessProbe: PROBE
"""


@pytest.mark.parametrize(
    ("probe", "check", "warned"),
    [
        (
            "{tcpSocket: {port: 2222}, initialDelaySeconds: 60, periodSeconds: 20, successThreshold: 1}",
            HealthCheck(HealthCheckKind.TCP, initial_delay_s=60, period_s=20),
            False,
        ),
        ("{tcpSocket: {port: tfjob-port}}", HealthCheck(HealthCheckKind.TCP), False),
        (
            "{exec: {command: [cat, /tmp/ok]}, failureThreshold: 5, timeoutSeconds: 3}",
            HealthCheck(HealthCheckKind.EXEC, command=("cat", "/tmp/ok"), failure_threshold=5, timeout_s=3),
            False,
        ),
        ("{httpGet: {path: /healthz, port: 8080}}", None, True),
        ("{tcpSocket: {port: 6006}}", None, True),
    ],
)
def test_a_kubeflow_liveness_probe_becomes_the_roles_health_check(
    probe: str, check: HealthCheck | None, warned: bool
) -> None:
    result = load_file("tf.yaml", KUBEFLOW.replace("PROBE", probe).encode())
    assert not [d for d in result.diagnostics if d.is_error], result.diagnostics
    (job,) = result.jobs
    assert job.spec.health_check_for(Role.WORKER) == check
    warnings = [d.format() for d in result.diagnostics if "livenessProbe" in d.format()]
    assert bool(warnings) is warned, warnings
    if warned:
        assert warnings[0].startswith("tf.yaml:15:")


def test_a_local_task_record_keeps_its_check_and_older_records_have_none(tmp_path: Path) -> None:
    check = HealthCheck(HealthCheckKind.PROGRESS, path="ckpt", stalled_s=90, failure_threshold=1)
    task = LocalTask(
        task_id="j.u.worker-0.1",
        job="j",
        key=TaskKey(Role.WORKER, 0),
        attempt=0,
        config_hash="c",
        spec_hash="s",
        argv=("train",),
        env={},
        cwd=None,
        work_dir=None,
        source_dir=None,
        resources=Resources(1, 64, 0),
        host="127.0.0.1",
        port=20000,
        gpu_devices=(),
        grace_s=10.0,
        log_path=tmp_path / "log",
        created_at=0.0,
        health_check=check,
    )
    write_task(tmp_path, task)
    assert read_task(tmp_path) == task
    assert "healthCheck" not in replace(task, health_check=None).to_json()
