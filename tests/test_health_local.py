"""Hung tasks on the local backend, end to end (issue 34): real CLI processes and real task
processes that stop answering their port, fail their check command or stop writing their
log; the controller's prober finds them, the job restarts them by their restart scope, and the
status says why (reason ``Unhealthy``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO, cli, kill_leftovers, worker_ports
from tests.waiting import wait_until
from tfdeclare.backends.local.prober import Prober
from tfdeclare.backends.local.record import LocalTask
from tfdeclare.core.enums import Role
from tfdeclare.core.run.tasks import TaskKey
from tfdeclare.core.spec.health import HealthCheck, HealthCheckKind
from tfdeclare.core.spec.resources import Resources

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

TASK = str(REPO / "tests" / "hung_task.py")
PORTS = worker_ports()
TIMING = "initialDelaySeconds: 1, periodSeconds: 0.3, timeoutSeconds: 0.5, failureThreshold: 2"


def config(backoff_s: float) -> str:
    return (
        f"restartBackoff: {{initialSeconds: {backoff_s}, maxSeconds: {backoff_s}}}\n"
        f"local: {{cpus: 8, mem: 8Gi, gpus: 0, portRange: {{first: {PORTS[0]}, last: {PORTS[1]}}}}}\n"
    )


def job(name: str, mode: str, check: str, extra: str = "") -> str:
    return f"""\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 1
  healthCheck: {{{check}, {TIMING}}}
  replicas:
    worker: {{count: 1, resources: {{cpus: 0.1, mem: 64}}, command: [{sys.executable}, {TASK}, {mode}, '3']}}
{extra}"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "specs").mkdir()
    yield tmp_path
    cli("delete", "--all", cwd=tmp_path)
    assert kill_leftovers(tmp_path) == [], "a task outlived its job"


def status_of(project: Path, name: str) -> dict[str, Any]:
    path = project / "status" / f"{name}.yaml"
    return yaml.safe_load(path.read_text()) if path.exists() else {}


def launches(project: Path, name: str) -> int:
    """Launches of worker-0 so far (its working folder's marker has a line per launch)."""
    marker = project / ".tfdeclare" / "local" / "work" / name / "worker-0" / "launched-worker-0"
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def test_a_task_that_stops_answering_its_port_restarts_alone_and_the_status_says_why(project: Path) -> None:
    (project / "tfdeclare.yaml").write_text(config(0.2))
    (project / "specs" / "job.yaml").write_text(
        job("deaf", "port", "tcpSocket: {}", "  restartScope: Task\n")
    )
    result = cli("apply", "specs", "--wait", "--timeout", "90", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    document = status_of(project, "deaf")
    assert document["phase"] == "Succeeded", document
    assert launches(project, "deaf") == 2
    (entry,) = document["taskRestarts"]
    assert entry["task"] == "worker-0" and entry["restarts"] == 1
    assert entry["message"].startswith(
        "worker-0 was unhealthy: its port accepts a connection failed 2 time(s)"
    )
    shown = cli("status", "deaf", cwd=project)
    assert "worker-0 restarted alone 1/3: worker-0 was unhealthy" in shown.stdout, shown.stdout


def test_a_failing_check_command_restarts_the_job_with_reason_unhealthy(project: Path) -> None:
    (project / "tfdeclare.yaml").write_text(config(3.0))  # a long backoff: the reason is seen
    check = f"exec: {{command: [{sys.executable}, -c, 'import os, sys; sys.exit(0 if os.path.exists(\"alive\") else 3)']}}"
    (project / "specs" / "job.yaml").write_text(job("stuck", "file", check))
    apply = subprocess.Popen(
        [sys.executable, "-m", "tfdeclare", "apply", "specs", "--wait", "--timeout", "90"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:

        def unhealthy() -> dict[str, Any] | None:
            document = status_of(project, "stuck")
            reasons = {c["type"]: c["reason"] for c in document.get("conditions") or []}
            return document if reasons.get("Ready") == "Unhealthy" else None

        seen = wait_until(
            unhealthy,
            60,
            what="reason Unhealthy",
            stop=lambda: None if apply.poll() is None else "apply ended",
        )
        assert seen["phase"] == "Restarting" and seen["restarts"] == 1
        conditions = {c["type"]: c for c in seen["conditions"]}
        assert conditions["Reconciling"]["reason"] == "Unhealthy"
        assert "unhealthy" in seen["message"] or "restart 1 of 3" in seen["message"]
        assert launches(project, "stuck") == 1
        output, _ = apply.communicate(timeout=90)
    finally:
        if apply.poll() is None:
            apply.kill()
            apply.communicate()
    assert apply.returncode == 0, output
    document = status_of(project, "stuck")
    assert document["phase"] == "Succeeded" and document["restarts"] == 1
    assert launches(project, "stuck") == 2


def test_a_task_whose_log_stalls_is_restarted(project: Path) -> None:
    (project / "tfdeclare.yaml").write_text(config(0.2))
    check = "progress: {stalledSeconds: 1}"
    (project / "specs" / "job.yaml").write_text(job("quiet", "quiet", check, "  restartScope: Task\n"))
    result = cli("apply", "specs", "--wait", "--timeout", "90", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    document = status_of(project, "quiet")
    (entry,) = document["taskRestarts"]
    assert "its log not written for" in entry["message"], entry
    assert launches(project, "quiet") == 2


# ---- the prober itself: real sockets and processes, a short period ----------------------------


def local_task(tmp_path: Path, check: HealthCheck, port: int | None = None) -> LocalTask:
    return LocalTask(
        task_id="j.u.worker-0.1",
        job="j",
        key=TaskKey(Role.WORKER, 0),
        attempt=0,
        config_hash="c",
        spec_hash="s",
        argv=("train",),
        env={"PATH": os.environ.get("PATH", ""), "MARK": "from-the-task"},
        cwd=str(tmp_path),
        work_dir=str(tmp_path),
        source_dir=None,
        resources=Resources(0.1, 64, 0),
        host="127.0.0.1",
        port=port,
        gpu_devices=(),
        grace_s=1.0,
        log_path=tmp_path / "task.log",
        created_at=time.time(),
        health_check=check,
    )


def verdict_within(prober: Prober, task: LocalTask, timeout: float = 20.0) -> str:
    return wait_until(
        lambda: prober.track([(task, time.time() - 60)]).get(task.task_id), timeout, what="unhealthy"
    )


FAST = {"period_s": 0.1, "timeout_s": 0.5, "failure_threshold": 2}


def test_the_prober_finds_a_port_that_stops_answering_and_notifies(tmp_path: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    port = server.getsockname()[1]
    answered: list[None] = []
    closing = threading.Event()

    def answer() -> None:  # each probe's connection, accepted and counted
        while not closing.is_set():
            try:
                server.accept()[0].close()
                answered.append(None)
            except TimeoutError:
                pass

    answering = threading.Thread(target=answer, daemon=True)
    answering.start()
    notified = threading.Event()
    prober = Prober(notified.set)
    task = local_task(tmp_path, HealthCheck(HealthCheckKind.TCP, **FAST), port)  # type: ignore[arg-type]
    try:
        assert prober.track([(task, time.time())]) == {}
        wait_until(lambda: len(answered) >= 10, what="ten probes, every one answered")
        assert prober.track([(task, time.time())]) == {} and not notified.is_set()
        closing.set()
        answering.join()
        server.close()
        why = verdict_within(prober, task)
        assert why.startswith("unhealthy: its port accepts a connection failed 2 time(s) in a row")
        assert f"127.0.0.1:{port}" in why
        assert notified.wait(5), "a pass is asked for at once"
        assert prober.track([]) == {}  # no longer running: forgotten
    finally:
        server.close()
        prober.close()


def test_the_prober_runs_a_command_in_the_tasks_folder_with_its_environment(tmp_path: Path) -> None:
    script = (
        "import os, sys; open('probes', 'a').write('.'); "
        "sys.exit(0 if os.environ['MARK'] == 'from-the-task' and os.path.exists('ok') else 4)"
    )
    check = HealthCheck(HealthCheckKind.EXEC, command=(sys.executable, "-c", script), **FAST)  # type: ignore[arg-type]
    (tmp_path / "ok").write_text("")
    probes = tmp_path / "probes"
    prober = Prober(lambda: None)
    task = local_task(tmp_path, check)
    try:
        prober.track([(task, time.time())])
        wait_until(
            lambda: probes.exists() and len(probes.read_text()) >= 10, what="ten probes, every one passed"
        )
        assert prober.track([(task, time.time())]) == {}
        (tmp_path / "ok").unlink()
        assert verdict_within(prober, task).endswith("last: exited 4")
    finally:
        prober.close()


def test_a_command_that_runs_over_its_timeout_is_killed_and_fails(tmp_path: Path) -> None:
    check = HealthCheck(
        HealthCheckKind.EXEC, command=("sleep", "30"), period_s=0.1, timeout_s=0.3, failure_threshold=1
    )
    prober = Prober(lambda: None)
    task = local_task(tmp_path, check)
    try:
        started = time.monotonic()
        why = verdict_within(prober, task)
        assert why.endswith("still running after 0.3 s (timeoutSeconds)"), why
        assert time.monotonic() - started < 10
    finally:
        prober.close()
    ours = subprocess.run(["pgrep", "-P", str(os.getpid()), "-x", "sleep"], capture_output=True, text=True)
    assert ours.stdout.split() == [], "the check's process was killed"
