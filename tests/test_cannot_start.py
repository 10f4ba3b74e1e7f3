"""A task the local backend cannot start says what is missing: its ``workingDir`` (the job then
fails at once, ``WorkingDirMissing``: a restart cannot make the folder) or its program (the
restart policy's to handle, as exit code 127). Real supervisors, the real CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backend_conformance import Harness, start, wait_for
from tests.conftest import cli, kill_leftovers, worker_ports
from tests.test_e2e_local import CONFIG
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.core.enums import TaskState
from tfdeclare.core.errors import ErrorCode

PORTS = worker_ports(20)
CAPACITY = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=PORTS[0], port_last=PORTS[1])


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(lambda: LocalBackend(tmp_path / "state", CAPACITY), tmp_path)
    yield harness
    harness.close()


@pytest.mark.parametrize(
    ("what", "argv", "working_dir", "told", "code"),
    [
        (
            "a working folder that is not there",
            ["python", "-c", "pass"],
            "{tmp}/nonexistent-dir/x",
            "its workingDir {tmp}/nonexistent-dir/x: No such file or directory",
            ErrorCode.WORKING_DIR_MISSING,
        ),
        (
            "a working folder that is a file",
            ["python", "-c", "pass"],
            "{tmp}/a-file",
            "its workingDir {tmp}/a-file: Not a directory",
            ErrorCode.WORKING_DIR_MISSING,
        ),
        (
            "a program not on the PATH",
            ["no-such-program-tfdeclare", "x"],
            None,
            "its program 'no-such-program-tfdeclare' (looked for on the task's PATH): No such file or directory",
            None,
        ),
        (
            "a program by its path",
            ["{tmp}/nonexistent-dir/train", "x"],
            "{tmp}",
            "its program '{tmp}/nonexistent-dir/train': No such file or directory",
            None,
        ),
    ],
)
def test_what_cannot_be_started_is_named_in_the_log_and_the_end(
    harness: Harness,
    tmp_path: Path,
    what: str,
    argv: list[str],
    working_dir: str | None,
    told: str,
    code: ErrorCode | None,
) -> None:
    (tmp_path / "a-file").write_text("")
    backend = harness.backend()
    argv = [a.format(tmp=tmp_path) for a in argv]
    cwd = working_dir.format(tmp=tmp_path) if working_dir else None
    task_id = start(harness, backend, "nostart", 1, argv, working_dir=cwd)[0].task_id
    ended = wait_for(backend, lambda ts: task_id in ts and ts[task_id].state.ended)[task_id]
    reason = told.format(tmp=tmp_path)
    assert (ended.state, ended.exit_code) == (TaskState.FAILED, 127), what
    assert ended.message == f"cannot start: {reason}", what
    assert ended.error is code, what
    log = backend.read_log(task_id).data.decode()
    assert f"tfdeclare: cannot start {argv[0]!r}: {reason}\n" in log, log


def test_a_job_whose_working_folder_is_missing_fails_at_once_naming_it(tmp_path: Path) -> None:
    (tmp_path / "specs").mkdir()
    (tmp_path / "tfdeclare.yaml").write_text(CONFIG)
    missing = tmp_path / "nonexistent-dir" / "x"
    (tmp_path / "specs" / "lost.yaml").write_text(
        "apiVersion: tfdeclare/v1\nkind: TFJob\nmetadata: {name: lost}\nspec:\n"
        f"  command: [python, -c, 'pass']\n  workingDir: {missing}\n  backoffLimit: 3\n"
        "  replicas:\n    worker: {count: 1, resources: {cpus: 0.1, mem: 64}}\n"
    )
    try:
        applied = cli("apply", "specs", "--wait", "--timeout", "60", cwd=tmp_path)
        assert applied.returncode == 1, applied.stdout + applied.stderr
        document = json.loads(cli("status", "lost", "-o", "json", cwd=tmp_path).stdout)
        assert (document["phase"], document["restarts"]) == ("Failed", 0), document
        assert document["lastError"]["code"] == "WorkingDirMissing", document
        why = f"its workingDir {missing}: No such file or directory"
        assert why in document["lastError"]["detail"], document["lastError"]
        assert why in document["message"] and "not retried" in document["message"], document["message"]
        logs = cli("logs", "lost", cwd=tmp_path)
        assert f"tfdeclare: cannot start 'python': {why}" in logs.stdout, logs.stdout + logs.stderr
    finally:
        cli("delete", "--all", cwd=tmp_path)
        assert kill_leftovers(tmp_path) == []
