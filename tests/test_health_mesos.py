"""Hung tasks on Mesos (issue 34): the TaskInfo's ``health_check`` for each kind (pure), the
``healthy`` updates folded into the journal entry, and end to end against the master
emulator, whose command executor runs the check as upstream's does: a task that stops
answering its port is killed by its executor and restarted by its restart scope, and the
status says why."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, cli
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import PY, emulated_project, start_emulator
from tfdeclare.backends.mesos.healthcheck import health_check_json
from tfdeclare.backends.mesos.journal import TaskEntry
from tfdeclare.backends.mesos.taskinfo import CD_SCRIPT
from tfdeclare.backends.mesos.taskstate import apply_status, observed_state, unhealthy
from tfdeclare.core.enums import TaskState
from tfdeclare.core.spec.health import HealthCheck, HealthCheckKind

TIMING = {"delay_seconds": 5.0, "interval_seconds": 10.0, "timeout_seconds": 2.0, "consecutive_failures": 4}


def check(kind: HealthCheckKind, **fields: Any) -> HealthCheck:
    return HealthCheck(kind, initial_delay_s=5, period_s=10, timeout_s=2, failure_threshold=4, **fields)


def test_a_tcp_check_is_a_mesos_tcp_check_of_the_tasks_port() -> None:
    out = health_check_json(check(HealthCheckKind.TCP), 31005, [("A", "1")], "/workspace", CD_SCRIPT)
    assert out == {**TIMING, "grace_period_seconds": 0.0, "type": "TCP", "tcp": {"port": 31005}}


@pytest.mark.parametrize("directory", [None, "/workspace/dir"])
def test_an_exec_check_is_a_command_without_a_shell_in_the_tasks_folder(directory: str | None) -> None:
    out = health_check_json(
        check(HealthCheckKind.EXEC, command=("probe", "--x")), 1, [("A", "1")], directory, CD_SCRIPT
    )
    assert out["type"] == "COMMAND"
    command = out["command"]
    assert command["shell"] is False
    assert command["environment"] == {"variables": [{"name": "A", "value": "1"}]}
    if directory is None:
        assert (command["value"], command["arguments"]) == ("probe", ["probe", "--x"])
    else:  # the folder and the argv are positional parameters, never shell text
        assert command["value"] == "/bin/sh"
        assert command["arguments"] == ["sh", "-c", CD_SCRIPT, "tfdeclare-workdir", directory, "probe", "--x"]


@pytest.mark.parametrize(
    ("path", "age", "ok"),
    [
        ("train.log", 1, True),
        ("train.log", 100, False),
        ("missing.log", None, False),
        (None, 1, True),
        (None, 100, False),
    ],
)
def test_a_progress_check_runs_our_script_on_the_newest_write(
    tmp_path: Path, path: str | None, age: float | None, ok: bool
) -> None:
    """The script itself, run as the executor would: in the sandbox, MESOS_SANDBOX set."""
    sandbox = tmp_path / "sandbox"
    (sandbox / "work").mkdir(parents=True)
    for name in ("stdout", "stderr", "work/train.log"):
        (sandbox / name).write_text("x")
        if age is not None:
            os.utime(sandbox / name, (time.time() - age, time.time() - age))
    out = health_check_json(
        check(HealthCheckKind.PROGRESS, path=path, stalled_s=30), 1, [], "work", CD_SCRIPT
    )
    command = out["command"]
    assert out["type"] == "COMMAND" and command["shell"] is False and command["value"] == "python3"
    argv = [PY, *command["arguments"][1:]]
    done = subprocess.run(
        argv, cwd=sandbox, env={"MESOS_SANDBOX": str(sandbox)}, capture_output=True, text=True
    )
    assert (done.returncode == 0) is ok, done.stderr
    if not ok:
        assert "does not exist" in done.stderr or "not written for" in done.stderr


def entry() -> TaskEntry:
    return TaskEntry(
        "t", "job", "worker", 0, 0, "c", "s", 1.0, 64, 0, "a1", "h", 31000, "http://h:5051/slave(1)", 0.0
    )


def test_healthy_updates_are_kept_and_a_kill_by_the_executor_is_unhealthy() -> None:
    task = entry()

    def fold(state: str, healthy: bool | None = None, message: str | None = None) -> bool:
        return apply_status(
            task,
            state,
            reason=None,
            source="SOURCE_EXECUTOR",
            message=message,
            timestamp=None,
            now=1.0,
            healthy=healthy,
        )

    assert fold("TASK_RUNNING")
    assert (fold("TASK_RUNNING", True), task.healthy) == (True, True)
    assert not fold("TASK_RUNNING", True)  # a duplicate
    assert (fold("TASK_RUNNING", False), task.healthy) == (True, False)
    assert observed_state(task, 2.0, 60.0)[0] is TaskState.RUNNING and unhealthy(task) == ""
    assert fold("TASK_KILLED", False, "Command terminated with signal Terminated")
    state, code, _ = observed_state(task, 2.0, 60.0)
    assert (state, code) == (TaskState.FAILED, 143)
    assert unhealthy(task).startswith("unhealthy: it failed its health check")
    ours = entry()
    ours.kill_requested = True  # we stopped it: not a health kill, whatever it said before
    apply_status(
        ours, "TASK_RUNNING", reason=None, source=None, message=None, timestamp=None, now=1.0, healthy=False
    )
    apply_status(ours, "TASK_KILLED", reason=None, source=None, message=None, timestamp=None, now=1.0)
    assert unhealthy(ours) == ""


# ---- end to end against the master emulator ----------------------------------------------------


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Emulator]]:
    emulator = start_emulator(tmp_path)
    (tmp_path / "markers").mkdir()
    with emulated_project(tmp_path, emulator) as project:
        yield project


@pytest.mark.slow
def test_the_executor_kills_a_task_that_stops_answering_and_it_restarts_alone(
    project: tuple[Path, Emulator],
) -> None:
    root, emulator = project
    task = str(REPO / "tests" / "hung_task.py")
    (root / "specs" / "job.yaml").write_text(
        f"""\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {{name: deaf}}
spec:
  env: {{MARKERS: {root / "markers"}}}
  restartScope: Task
  terminationGracePeriodSeconds: 1
  healthCheck: {{tcpSocket: {{}}, initialDelaySeconds: 1, periodSeconds: 0.3, timeoutSeconds: 0.5, failureThreshold: 2}}
  replicas:
    worker: {{count: 1, resources: {{cpus: 0.5, mem: 128}}, command: [{PY}, {task}, port, '3']}}
"""
    )
    result = cli("apply", "specs", "--wait", "--timeout", "90", cwd=root)
    assert result.returncode == 0, result.stdout + result.stderr
    document = yaml.safe_load((root / "status" / "deaf.yaml").read_text())
    assert document["phase"] == "Succeeded", document
    (entry,) = document["taskRestarts"]
    assert entry["message"].startswith("worker-0 was unhealthy: it failed its health check"), entry
    assert entry["message"].endswith("the Mesos executor killed it")
    assert len((root / "markers" / "launched-worker-0").read_text().splitlines()) == 2
    launched = json.dumps(emulator.calls("ACCEPT"))
    assert '"health_check"' in launched and '"TCP"' in launched
    assert emulator.calls("KILL") == [], "the executor killed it, not the framework"
