"""The stand-in runner of tests/tf_runner.py, checked with tiny Python tasks (no TensorFlow)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from tests.tf_runner import build_cluster, plan_tasks, run_job, substitute_legacy_flags, tf_config

CLUSTER = {
    "chief": ["127.0.0.1:1000"],
    "ps": ["127.0.0.1:1001"],
    "worker": ["127.0.0.1:1002", "127.0.0.1:1003"],
    "evaluator": ["127.0.0.1:1004"],
}


def job(replicas: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "tfdeclare/v1",
        "kind": "TFJob",
        "metadata": {"name": "t"},
        "spec": {"replicas": replicas, **spec},
    }


def py(code: str) -> list[str]:
    return ["python", "-c", code]


def test_training_tasks_do_not_see_the_evaluator() -> None:
    worker = json.loads(tf_config(CLUSTER, "worker", 1))
    assert worker["task"] == {"type": "worker", "index": 1}
    assert set(worker["cluster"]) == {"chief", "ps", "worker"}
    evaluator = json.loads(tf_config(CLUSTER, "evaluator", 0))
    assert evaluator["cluster"]["evaluator"] == ["127.0.0.1:1004"]


def test_legacy_flags_are_substituted_inside_arguments() -> None:
    argv = [
        "x.py",
        "--ps_hosts={ps_hosts}",
        "--worker_hosts={worker_hosts}",
        "--job_name={job_name}",
        "{task_index}",
    ]
    assert substitute_legacy_flags(argv, CLUSTER, "worker", 1) == [
        "x.py",
        "--ps_hosts=127.0.0.1:1001",
        "--worker_hosts=127.0.0.1:1002,127.0.0.1:1003",
        "--job_name=worker",
        "1",
    ]


def test_cluster_ports_are_distinct() -> None:
    cluster = build_cluster({"ps": 2, "worker": 3})
    addresses = cluster["ps"] + cluster["worker"]
    assert len(set(addresses)) == 5
    assert all(a.startswith("127.0.0.1:") for a in addresses)


def test_plan_sets_env_path_cwd_and_per_role_commands(tmp_path: Path) -> None:
    spec = job(
        {"ps": {"count": 1, "command": ["python", "ps.py"]}, "worker": {"count": 1, "env": {"B": "2"}}},
        command=["python", "w.py", "{job_name}"],
        env={"A": "1"},
        clusterSpec="both",
    )
    cluster = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"]}
    ps, worker = plan_tasks(spec, tmp_path, cluster, Path(sys.executable).parent, attempt=2)
    assert ps.argv[1:] == ("ps.py",)
    assert worker.argv[1:] == ("w.py", "worker")
    assert Path(worker.argv[0]).parent == Path(sys.executable).parent  # `python` is this venv's
    assert worker.cwd == tmp_path
    assert (worker.env["A"], worker.env["B"]) == ("1", "2")
    assert "B" not in ps.env
    assert worker.env["TFDECLARE_JOB"] == "t"
    assert (worker.env["TFDECLARE_ROLE"], worker.env["TFDECLARE_INDEX"]) == ("worker", "0")
    assert worker.env["TFDECLARE_ATTEMPT"] == "2"
    assert json.loads(worker.env["TF_CONFIG"])["task"] == {"type": "worker", "index": 0}


def test_without_chief_every_worker_must_exit_zero(tmp_path: Path) -> None:
    code = "import os; print('hello', os.environ['TFDECLARE_INDEX'])"
    result = run_job(job({"worker": {"count": 2}}, command=py(code)), tmp_path)
    assert result.succeeded, result.summary()
    assert [w.output.strip() for w in result.of_role("worker")] == ["hello 0", "hello 1"]


def test_a_failing_worker_fails_the_job_and_the_rest_is_stopped(tmp_path: Path) -> None:
    code = "import os, sys, time\nif os.environ['TFDECLARE_INDEX'] == '1': sys.exit(3)\ntime.sleep(60)"
    result = run_job(job({"worker": {"count": 2}}, command=py(code)), tmp_path, grace_s=2)
    assert not result.succeeded
    assert result.reason == "worker-1 exited 3"
    assert result.task("worker", 1).exit_code == 3
    assert result.task("worker", 0).stopped_by_runner
    assert result.total_s < 30


def test_chief_decides_and_a_server_ignoring_sigterm_is_killed(tmp_path: Path) -> None:
    server = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)"
    chief = "import time; time.sleep(1)"  # time for the server to install its handler
    spec = job({"chief": {"count": 1, "command": py(chief)}, "ps": {"count": 1, "command": py(server)}})
    result = run_job(spec, tmp_path, grace_s=0.5)
    assert result.succeeded, result.summary()
    assert result.reason == "chief exited 0"
    ps = result.task("ps", 0)
    assert ps.stopped_by_runner
    assert ps.exit_code == -signal.SIGKILL


def test_stopping_a_task_stops_its_children_too(tmp_path: Path) -> None:
    server = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('CHILD', child.pid, flush=True)\n"
        "time.sleep(60)"
    )
    spec = job(
        {"chief": {"count": 1, "command": py("import time; time.sleep(1)")}, "ps": {"count": 1}},
        command=py(server),
    )
    result = run_job(spec, tmp_path, grace_s=2)
    assert result.succeeded, result.summary()
    (line,) = result.task("ps", 0).lines_starting("CHILD ")
    child = int(line.split()[1])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.1)
    assert not _alive(child)


def test_a_job_past_its_timeout_fails_and_is_stopped(tmp_path: Path) -> None:
    result = run_job(
        job({"worker": {"count": 1}}, command=py("import time; time.sleep(60)")), tmp_path, timeout_s=1
    )
    assert not result.succeeded
    assert result.reason.startswith("timed out")
    assert result.task("worker", 0).stopped_by_runner


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state == "Z":
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
