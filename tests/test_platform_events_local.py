"""A controller restart that finds tasks gone is a platform event on the local backend, as a
user meets it: a job runs (real CLI processes, a real supervisor and task), everything of it
dies while no controller runs (a machine restart: the supervisor and its task are killed),
and the next ``apply`` restarts it without counting against ``backoffLimit`` (0 here), the
status saying ``ControllerRestart``. A supervisor that dies while a controller watches is
still the job's failure (``backoffLimit: 0`` fails it)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import cli, kill_leftovers, worker_ports
from tests.test_daemon import Daemon
from tests.test_e2e_local import wait_until

pytestmark = pytest.mark.e2e

PORTS = (worker_ports()[0] + 600, worker_ports()[0] + 649)
JOB = (
    "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: train}\n"
    "spec:\n  backoffLimit: 0\n  terminationGracePeriodSeconds: 2\n"
    "  replicas:\n    worker: {count: 1, resources: {cpus: 0.1, mem: 64}, command: [sleep, '300']}\n"
)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "train.yaml").write_text(JOB)
    config = f"local: {{runtime: process, portRange: {{first: {PORTS[0]}, last: {PORTS[1]}}}}}\n"
    (tmp_path / "tfdeclare.yaml").write_text(config)
    yield tmp_path
    cli("delete", "--all", cwd=tmp_path)
    assert kill_leftovers(tmp_path) == [], "a task outlived its job"


def status(project: Path) -> dict[str, object]:
    path = project / "status" / "train.yaml"
    return dict(yaml.safe_load(path.read_text())) if path.exists() else {}


def kill_everything_of_the_task(project: Path) -> None:
    """What a machine restart does: the supervisor and the task's process group are gone, and
    nothing recorded how the task ended. The supervisor goes first: killed second, it could
    see its task end and record the SIGKILL (a failure of the job's own) in between, as it did
    once on a loaded machine."""
    [folder] = (project / ".tfdeclare" / "local" / "tasks").iterdir()
    launch = json.loads((folder / "launch.json").read_text())
    state = json.loads((folder / "state.json").read_text())
    os.kill(int(launch["supervisorPid"]), signal.SIGKILL)
    os.killpg(int(state["pid"]), signal.SIGKILL)


def test_tasks_found_gone_by_a_restarted_controller_are_not_the_jobs_failure(project: Path) -> None:
    def running() -> bool:
        assert cli("apply", "specs", cwd=project).returncode == 0
        return status(project).get("phase") == "Running"

    wait_until(running, 30)
    kill_everything_of_the_task(project)
    again = cli("apply", "specs", cwd=project)  # a new controller: it never saw the task alive
    assert again.returncode == 0, again.stderr

    def restarted() -> bool:
        cli("apply", "specs", cwd=project)
        return status(project).get("phase") == "Running" and status(project).get("platformRestarts") == 1

    wait_until(restarted, 60)
    doc = status(project)
    assert doc["restarts"] == 0
    [event] = doc["platformEvents"]  # type: ignore[misc]
    assert event["cause"] == "ControllerRestart" and event["tasks"] == ["worker-0"]
    assert "no controller watched it" in event["message"]


def test_a_supervisor_that_dies_while_watched_is_the_jobs_failure(project: Path) -> None:
    daemon = Daemon(project, "--specs", "specs", "--interval", "1")
    try:
        wait_until(lambda: status(project).get("phase") == "Running", 30)
        kill_everything_of_the_task(project)
        wait_until(lambda: status(project).get("phase") == "Failed", 30)
        doc = status(project)
        assert doc["platformRestarts"] == 0 and doc["platformEvents"] == []
        assert "BackoffLimitExceeded" in str(doc["conditions"])
    finally:
        daemon.stop()
