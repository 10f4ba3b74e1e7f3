"""A full state disk under running local tasks (issue: the end read as a supervisor death, the
daemon looped and restarts were burnt): a task's exit code is kept whether the disk filled
under it or the task's own log filled it (``supervisor.ExitRecord``), with real supervisors and
task processes on a real tmpfs (as root; CI runs as root)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backend_conformance import PY, Harness, start, wait_for
from tests.components import missing
from tests.conftest import worker_ports
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.backends.local.process_driver import GONE_MESSAGE
from tfdeclare.backends.local.supervisor import SPARE_FILE
from tfdeclare.core.enums import TaskState

PORTS = worker_ports(20)
CAPACITY = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=PORTS[0], port_last=PORTS[1])


def mount_tmpfs(folder: Path, size: str) -> None:
    """A small tmpfs at ``folder``, its root 0755 (a state folder anyone may write is refused)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(folder)], check=False
    )
    if mounted.returncode != 0:
        missing("cannot mount a tmpfs here (not root)")  # CI runs as root


def fill(folder: Path) -> None:
    """Write ``folder/filler`` until its disk is full."""
    try:
        with open(folder / "filler", "wb") as handle:
            while True:
                handle.write(b"\0" * 65536)
                handle.flush()
    except OSError:
        pass  # full


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
