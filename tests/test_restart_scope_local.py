"""The local backend keeps the port of a task that restarts alone (``restartScope: Task``)
reserved while the task is down: another project on this machine cannot take it, the slot's
pinned relaunch gets it, and it goes back once the job is purged. With real supervised
processes and the machine-wide port reservations."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import worker_ports
from tests.waiting import wait_until
from tfdeclare.backends.local import ports
from tfdeclare.backends.local.backend import HOST, LocalBackend, LocalCapacity
from tfdeclare.core.enums import Role, TaskState
from tfdeclare.core.run.tasks import (
    Address,
    GangRequest,
    ObservedTask,
    Placement,
    SlotRequest,
    TaskKey,
    TaskLaunch,
    Unplaced,
    UnplacedReason,
)
from tfdeclare.core.spec.resources import Resources

pytestmark = pytest.mark.slow

PORTS = worker_ports(20)
CAPACITY = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=PORTS[0], port_last=PORTS[1])
KEY = TaskKey(Role.WORKER, 1)
SMALL = Resources(0.1, 64, 0)


def launch(backend: LocalBackend, placement: Placement, task_id: str, *, keep: bool) -> None:
    slot = placement.slots[0]
    task = TaskLaunch(
        task_id=task_id,
        job="j",
        key=KEY,
        attempt=0,
        spec_hash="s",
        config_hash="c",
        argv=(sys.executable, "-c", "import time; time.sleep(120)"),
        env=(),
        resources=SMALL,
        slot=slot,
        keep_address=keep,
    )
    backend.launch(placement, [task])


def in_state(backend: LocalBackend, task_id: str, state: TaskState) -> Callable[[], ObservedTask | None]:
    return lambda: next((t for t in backend.observe() if t.task_id == task_id and t.state is state), None)


def kill(backend: LocalBackend, task_id: str) -> None:
    state = json.loads((backend.tasks_dir / task_id / "state.json").read_text())
    os.kill(int(state["pid"]), signal.SIGKILL)


@pytest.mark.parametrize("keep", [True, False])
def test_a_task_that_restarts_alone_keeps_its_port_while_it_is_down(tmp_path: Path, keep: bool) -> None:
    ours = LocalBackend(tmp_path / "state", CAPACITY)
    theirs = LocalBackend(tmp_path / "other-state", CAPACITY)  # another project, same machine
    try:
        placed = ours.place(GangRequest("j", 0, (SlotRequest(KEY, SMALL),)))
        assert isinstance(placed, Placement)
        port = placed.slots[0].port
        launch(ours, placed, "j.u.worker-1.1", keep=keep)
        wait_until(in_state(ours, "j.u.worker-1.1", TaskState.RUNNING))
        kill(ours, "j.u.worker-1.1")
        ended = wait_until(in_state(ours, "j.u.worker-1.1", TaskState.FAILED))
        assert ended.exit_code == 137

        fd = ports.reserve(port)
        if fd is not None:
            os.close(fd)
        assert (fd is None) is keep, "held while the task is down exactly when it restarts alone"
        pinned = GangRequest("k", 0, (SlotRequest(KEY, SMALL, Address(HOST, port), pinned=True),))
        answer = theirs.place(pinned)
        if not keep:
            assert isinstance(answer, Placement)
            theirs.release(answer)
            return
        assert isinstance(answer, Unplaced) and answer.reason is UnplacedReason.WAITING_FOR_ADDRESS
        assert str(port) in answer.message

        ours.forget(["j.u.worker-1.1"])  # its failure was accounted for: the hold stays
        again = ours.place(GangRequest("j", 0, (SlotRequest(KEY, SMALL, Address(HOST, port), pinned=True),)))
        assert isinstance(again, Placement) and again.slots[0].port == port
        launch(ours, again, "j.u.worker-1.2", keep=True)
        wait_until(in_state(ours, "j.u.worker-1.2", TaskState.RUNNING))
        ours.stop(["j.u.worker-1.2"], 1.0)  # stopped on purpose: the port need not stay ours
        wait_until(in_state(ours, "j.u.worker-1.2", TaskState.STOPPED))
        fd = ports.reserve(port)
        assert fd is not None, "released once stopped"
        os.close(fd)
    finally:
        for backend in (ours, theirs):
            for task in backend.observe():
                if task.state.alive:
                    backend.stop([task.task_id], 0.5)
            backend.purge("j")
            backend.close()


def test_purging_the_job_gives_its_held_ports_back(tmp_path: Path) -> None:
    ours = LocalBackend(tmp_path / "state", CAPACITY)
    try:
        placed = ours.place(GangRequest("j", 0, (SlotRequest(KEY, SMALL),)))
        assert isinstance(placed, Placement)
        port = placed.slots[0].port
        launch(ours, placed, "j.u.worker-1.1", keep=True)
        wait_until(in_state(ours, "j.u.worker-1.1", TaskState.RUNNING))
        kill(ours, "j.u.worker-1.1")
        wait_until(in_state(ours, "j.u.worker-1.1", TaskState.FAILED))
        assert ports.reserve(port) is None
        ours.purge("j")
        fd = ports.reserve(port)
        assert fd is not None
        os.close(fd)
    finally:
        ours.close()
