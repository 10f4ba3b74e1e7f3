"""A task that ended while no controller ran, on the Mesos backend, as a user meets it: the next
command's first pass (``status --refresh``, a plain ``apply``) sees it ended and handles it by
policy, before the agent re-sends the update nobody acknowledged (the emulator's retry is 30 s
here, so only the answer to the command's own RECONCILE can tell it). Against the master
emulator, real task processes, no background controller."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import cli, processes_of
from tests.mesos_emulator import Emulator
from tests.mesos_fixtures import emulated_project, eventually, slots_running, start_emulator

pytestmark = pytest.mark.slow  # real task processes behind the emulator

JOB = """\
apiVersion: tfdeclare/v1
kind: TFJob
metadata: {name: rj}
spec:
  command: [sleep, '400']
  replicas:
    ps: {count: 1, resources: {cpus: 0.5, mem: 64}}
    worker: {count: 2, resources: {cpus: 0.5, mem: 64}}
"""


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[Path, Emulator]]:
    emulator = start_emulator(tmp_path, agents=2, update_retry_interval=30.0, update_retry_max=60.0)
    with emulated_project(tmp_path, emulator) as (root, emu):
        with (root / "tfdeclare.yaml").open("a") as config:
            config.write("backgroundController: false\n")
        (root / "specs" / "rj.yaml").write_text(JOB)
        yield root, emu


def kill_slot(root: Path, emulator: Emulator, slot: str) -> str:
    """SIGKILL the process of ``slot`` (no controller runs); wait until the master has the
    task ended. Its task id."""
    (task_id,) = slots_running(emulator, "rj")[slot]
    (pid,) = [p for p, env in processes_of(root, "sleep").items() if env.get("MESOS_TASK_ID") == task_id]
    os.kill(pid, signal.SIGKILL)
    eventually(lambda: emulator.tasks()[task_id]["state"] == "TASK_FAILED", timeout=10)
    return task_id


def test_status_refresh_and_apply_notice_a_task_that_ended_meanwhile(project: tuple[Path, Emulator]) -> None:
    root, emulator = project
    applied = cli("apply", "specs/rj.yaml", cwd=root)
    assert applied.returncode == 0, applied.stderr
    eventually(lambda: sorted(slots_running(emulator, "rj")) == ["ps-0", "worker-0", "worker-1"], timeout=20)

    killed = kill_slot(root, emulator, "worker-0")
    refreshed = cli("status", "--refresh", cwd=root)
    assert refreshed.returncode == 0, refreshed.stderr
    assert "restarting worker-0" in refreshed.stdout, refreshed.stdout
    assert "3/3" not in refreshed.stdout

    killed = kill_slot(root, emulator, "worker-1")
    again = cli("apply", "specs/rj.yaml", cwd=root)
    assert again.returncode == 0, again.stderr
    assert "worker-1" in again.stdout and "restart" in again.stdout, again.stdout
    # the restarted task runs on an agent, a new attempt of the slot
    eventually(
        lambda: [t for t in slots_running(emulator, "rj").get("worker-1", []) if t != killed], timeout=20
    )


def test_a_command_that_ends_well_says_nothing_of_its_own_disconnection(
    project: tuple[Path, Emulator],
) -> None:
    """Every Mesos command closes its stream as it ends: that is no news, and a warning on
    stderr ("disconnected from the Mesos master: client stopped") read as an error."""
    root, _ = project
    for args in (("apply", "specs/rj.yaml"), ("status", "--refresh"), ("delete", "rj")):
        done = cli(*args, cwd=root)
        assert done.returncode == 0, done.stderr
        assert "disconnected from the Mesos master" not in done.stderr, (args, done.stderr)
