"""A full state disk under running local tasks (issue: the end read as a supervisor death, the
daemon looped and restarts were burnt): a task's exit code is kept whether the disk filled
under it or the task's own log filled it (``supervisor.ExitRecord``), with real supervisors and
task processes on a real tmpfs (as root; CI runs as root)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backend_conformance import PY, Harness, start, wait_for
from tests.conftest import cli, kill_leftovers, worker_ports
from tests.test_daemon import CONFIG as DAEMON_CONFIG
from tests.test_daemon import Daemon, status
from tests.test_write_failures_shown import fill, mount_tmpfs
from tests.waiting import wait_until
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.backends.local.process_driver import GONE_MESSAGE
from tfdeclare.backends.local.supervisor import SPARE_FILE
from tfdeclare.core.enums import TaskState

PORTS = worker_ports(20)
CAPACITY = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=PORTS[0], port_last=PORTS[1])


@pytest.fixture
def on_tmpfs(tmp_path: Path) -> Iterator[Harness]:
    """A local backend whose state folder is a 3 MiB tmpfs."""
    state = tmp_path / "state"
    mount_tmpfs(state, "3m")
    harness = Harness(lambda: LocalBackend(state, CAPACITY), tmp_path)
    try:
        yield harness
    finally:
        (state / "filler").unlink(missing_ok=True)
        for backend in harness.backends:
            backend.stop([t.task_id for t in backend.observe() if t.state.alive], 0.5)
        harness.close()
        subprocess.run(["umount", "-l", str(state)], check=False)


def test_a_task_that_ends_while_the_state_disk_is_full_keeps_its_exit_code(
    on_tmpfs: Harness, tmp_path: Path
) -> None:
    go = tmp_path / "go"  # outside the full disk: the test says when the task ends
    waits = f"import os, time\nwhile not os.path.exists({str(go)!r}): time.sleep(0.05)\nraise SystemExit(3)"
    backend = on_tmpfs.backend()
    task_id = start(on_tmpfs, backend, "flaky", 1, [PY, "-c", waits])[0].task_id
    wait_for(backend, lambda ts: ts[task_id].state is TaskState.RUNNING)
    state = backend.tasks_dir.parent
    fill(state)
    go.touch()
    ended = wait_for(backend, lambda ts: ts[task_id].state.ended)[task_id]
    assert (ended.state, ended.exit_code) == (TaskState.FAILED, 3), ended
    assert ended.message != GONE_MESSAGE
    assert os.statvfs(state).f_bavail == 0, "the disk was full all along"
    assert not (backend.tasks_dir / task_id / SPARE_FILE).exists(), "the spare block became the record"


def test_a_task_whose_own_log_fills_the_state_disk_keeps_its_exit_code(on_tmpfs: Harness) -> None:
    floods = (
        "import os, sys\n"
        "try:\n"
        "    while True:\n"
        "        os.write(1, b'x' * 65536)\n"
        "except OSError:\n"
        "    os._exit(5)\n"
    )
    backend = on_tmpfs.backend()
    task_id = start(on_tmpfs, backend, "noisy", 1, [PY, "-c", floods])[0].task_id
    ended = wait_for(backend, lambda ts: task_id in ts and ts[task_id].state.ended)[task_id]
    assert (ended.state, ended.exit_code) == (TaskState.FAILED, 5), ended
    assert ended.message != GONE_MESSAGE
    assert os.statvfs(backend.tasks_dir).f_bavail == 0, "the log filled the disk"


def test_a_normal_end_leaves_no_spare_block(on_tmpfs: Harness) -> None:
    backend = on_tmpfs.backend()
    task_id = start(on_tmpfs, backend, "fine", 1, [PY, "-c", "pass"])[0].task_id
    ended = wait_for(backend, lambda ts: task_id in ts and ts[task_id].state.ended)[task_id]
    assert (ended.state, ended.exit_code) == (TaskState.SUCCEEDED, 0)
    assert sorted(p.name for p in (backend.tasks_dir / task_id).iterdir() if p.name.startswith(".")) == []


WAITS_THEN_FAILS = (
    "import os, sys, time\n"
    "while not os.path.exists(sys.argv[1]):\n"
    "    time.sleep(0.05)\n"
    "raise SystemExit(1)\n"
)


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Path]:
    """A project whose state folder is a 3 MiB tmpfs; its specs and status on the ordinary disk."""
    project = tmp_path / "project"
    (project / "specs").mkdir(parents=True)
    (project / "tfdeclare.yaml").write_text(DAEMON_CONFIG)
    state = project / ".tfdeclare"
    mount_tmpfs(state, "3m")
    try:
        yield project
    finally:
        (state / "filler").unlink(missing_ok=True)
        cli("delete", "--all", cwd=project)
        leftovers = kill_leftovers(project)
        subprocess.run(["umount", "-l", str(state)], check=False)
        assert leftovers == [], "a task outlived its job"


@pytest.mark.parametrize("end", ["the task exits 1", "its supervisor is killed"])
def test_a_daemon_on_a_full_state_disk_waits_and_counts_one_restart(
    project: Path, tmp_path: Path, end: str
) -> None:
    go = tmp_path / "go"  # outside the full disk: when it exists, the task exits 1
    (project / "specs" / "flaky.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: flaky}\nspec:\n"
        f"  command: [python, -c, {json.dumps(WAITS_THEN_FAILS)}, {json.dumps(str(go))}]\n"
        "  restartPolicy: OnFailure\n  backoffLimit: 3\n"
        "  replicas:\n    worker: {count: 1, resources: {cpus: 0.1, mem: 64}}\n"
    )
    state = project / ".tfdeclare"
    daemon = Daemon(project, "--specs", "specs", "--interval", "2")
    try:
        wait_until(
            lambda: [t["state"] for t in (status(project, "flaky") or {}).get("tasks", [])] == ["running"]
        )
        fill(state)
        if end == "the task exits 1":
            go.touch()
        else:
            (launch,) = state.glob("local/tasks/*/launch.json")
            os.kill(json.loads(launch.read_text())["supervisorPid"], signal.SIGKILL)
        wait_until(lambda: "flaky" in daemon.get("/healthz")[1]["writeFailures"], timeout=30)
        go.unlink(missing_ok=True)  # the next attempt waits again
        # while the restart cannot be recorded, passes come at the write-retry pace (2 s, the
        # interval), not at the restart's backoff (0.2 s) nor as fast as the backend's watch
        before = daemon.passes()
        time.sleep(6)
        assert daemon.passes() - before <= 6, f"{daemon.passes() - before} passes in 6 s"
        text = daemon.text()
        assert text.count(f"flaky: cannot write {state / 'records.sqlite'}") == 1, text
        assert "restarting the whole job" not in text, "a restart is told once it is recorded"
        assert status(project, "flaky")["restarts"] == 0  # type: ignore[index]

        (state / "filler").unlink()
        wait_until(lambda: (status(project, "flaky") or {}).get("restarts") == 1, timeout=30)
        wait_until(lambda: [t["state"] for t in status(project, "flaky")["tasks"]] == ["running"])  # type: ignore[index]
        text = daemon.text()
        told = (
            "worker-0 exited 1" if end == "the task exits 1" else f"worker-0 ended (failed): {GONE_MESSAGE}"
        )
        assert text.count(f"flaky: {told}; restarting the whole job (1/3") == 1, text
        assert "(2/3" not in text and "Traceback" not in text, text
        if end == "the task exits 1":
            assert GONE_MESSAGE not in text, text
        document = status(project, "flaky")
        assert document is not None and (document["phase"], document["restarts"]) == ("Running", 1), document
    finally:
        daemon.stop()


def _sleeper(seconds: int) -> str:
    return (
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: sleeper}\nspec:\n"
        f"  command: [python, -c, 'import time; time.sleep({seconds})']\n"
        "  replicas:\n    worker: {count: 1, resources: {cpus: 0.1, mem: 64}}\n"
    )


def _synced(project: Path) -> tuple[str, str, str] | None:
    for condition in (status(project, "sleeper") or {}).get("conditions", []):
        if condition["type"] == "Synced":
            return condition["status"], condition["reason"], condition["message"]
    return None


def test_a_change_the_full_state_disk_cannot_take_is_not_applied_in_history_status_and_jobs(
    project: Path,
) -> None:
    state = project / ".tfdeclare"
    record = state / "records.sqlite"
    (project / "specs" / "sleeper.yaml").write_text(_sleeper(600))
    daemon = Daemon(project, "--specs", "specs", "--interval", "2")
    try:
        wait_until(
            lambda: [t["state"] for t in (status(project, "sleeper") or {}).get("tasks", [])] == ["running"]
        )
        applied_hash = status(project, "sleeper")["specHash"]  # type: ignore[index]
        fill(state)
        (project / "specs" / "sleeper.yaml").write_text(_sleeper(601))  # -/+ restart, once settled
        wait_until(lambda: (_synced(project) or ("", "", ""))[1] == "StateWriteFailed", timeout=30)
        synced = _synced(project)
        assert synced is not None and synced[0] == "False", synced
        assert f"its new spec is not applied: cannot write {record} (No space left on device)" in synced[2]
        document = status(project, "sleeper")
        assert document is not None and document["specHash"] == applied_hash, "it runs as last applied"
        error = document["lastError"]
        assert error["code"] == "StateWriteFailed" and str(record) in error["detail"], error
        (listed,) = [j for j in daemon.get("/jobs")[1] if j["name"] == "sleeper"]
        assert listed["lastError"]["code"] == "StateWriteFailed", listed
        assert [(c["status"], c["reason"]) for c in listed["conditions"] if c["type"] == "Synced"] == [
            ("False", "StateWriteFailed")
        ]
        at = daemon.passes()
        wait_until(lambda: daemon.passes() >= at + 3, timeout=30)  # the same failure, pass after pass
        text = daemon.text()
        assert text.count("sleeper: not applied: cannot write") == 1, text
        assert text.count("history: folder: specs/sleeper.yaml — not applied: cannot write") == 1, text

        (state / "filler").unlink()
        wait_until(lambda: (_synced(project) or ("",))[0] == "True", timeout=30)
        document = status(project, "sleeper")
        assert document is not None and document["specHash"] != applied_hash and document["lastError"] is None
        listed = cli("history", "sleeper", "-o", "json", cwd=project)
        assert listed.returncode == 0, listed.stderr
        outcomes = [(e["outcome"], e["changes"]) for e in reversed(json.loads(listed.stdout))]
        assert outcomes == [("applied", 1), ("not-applied", 0), ("applied", 1)], outcomes
        (refused,) = [e for e in json.loads(listed.stdout) if e["outcome"] == "not-applied"]
        assert refused["notApplied"] == {"sleeper": f"cannot write {record} (No space left on device)"}
        table = cli("history", cwd=project).stdout
        assert f"not applied: cannot write {record} (No space left on device)" in table, table
    finally:
        daemon.stop()


def test_a_change_not_written_then_taken_back_leaves_the_status_synced_again(project: Path) -> None:
    state = project / ".tfdeclare"
    (project / "specs" / "sleeper.yaml").write_text(_sleeper(600))
    daemon = Daemon(project, "--specs", "specs", "--interval", "2")
    try:
        wait_until(
            lambda: [t["state"] for t in (status(project, "sleeper") or {}).get("tasks", [])] == ["running"]
        )
        applied_hash = status(project, "sleeper")["specHash"]  # type: ignore[index]
        fill(state)
        (project / "specs" / "sleeper.yaml").write_text(_sleeper(601))
        wait_until(lambda: (_synced(project) or ("", "", ""))[1] == "StateWriteFailed", timeout=30)
        (project / "specs" / "sleeper.yaml").write_text(_sleeper(600))  # taken back: nothing to write
        wait_until(lambda: (_synced(project) or ("",))[0] == "True", timeout=30)
        document = status(project, "sleeper")
        assert document is not None and document["lastError"] is None, document
        assert document["specHash"] == applied_hash
        (listed,) = [j for j in daemon.get("/jobs")[1] if j["name"] == "sleeper"]
        assert listed["lastError"] is None, listed
    finally:
        daemon.stop()
