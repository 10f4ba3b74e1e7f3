"""Crash safety of the local backend, with real supervisors and task processes.

Crash points are produced by leaving on disk exactly what a controller killed at that point
leaves: a stop request written but never signalled; a task folder made but no supervisor
started (here by a controller whose Python cannot start, which writes the same files and
nothing else). Ports are checked across two state folders on one machine.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backend_conformance import PY, Harness, gang, launches, place_soon, start, wait_for
from tests.conftest import worker_ports
from tfdeclare.backends.base import BackendError
from tfdeclare.backends.local.backend import LocalBackend, LocalCapacity
from tfdeclare.core.enums import TaskState
from tfdeclare.core.run.tasks import Address, Placement
from tfdeclare.files import write_atomic

SERVE = [PY, "-c", "import time; time.sleep(60)"]
PORTS = worker_ports(20)
CAPACITY = LocalCapacity(cpus=4, mem_mib=4096, gpus=0, port_first=PORTS[0], port_last=PORTS[1])


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    harness = Harness(lambda: LocalBackend(tmp_path / "state", CAPACITY), tmp_path)
    yield harness
    for backend in harness.backends:
        backend.stop([t.task_id for t in backend.observe() if t.state.alive], 0.5)
    harness.close()


def test_a_stop_request_that_was_never_signalled_still_stops_the_task(harness: Harness) -> None:
    backend = harness.backend()
    task_id = start(harness, backend, "stuck", 1, SERVE)[0].task_id
    wait_for(backend, lambda ts: ts[task_id].state is TaskState.RUNNING)
    # the controller died after writing the request and before its SIGTERM
    write_atomic(
        backend.tasks_dir / task_id / "stop.json",
        json.dumps({"graceSeconds": 1.0, "at": time.time()}).encode(),
    )
    tasks = wait_for(harness.backend(), lambda ts: ts[task_id].state.ended, timeout=10)
    assert tasks[task_id].state is TaskState.STOPPED


def test_a_launch_that_never_started_is_started_by_the_next_controller(
    harness: Harness, tmp_path: Path
) -> None:
    crashed = LocalBackend(tmp_path / "state", CAPACITY, python=str(tmp_path / "no-python"))
    placement = place_soon(crashed, gang("late", 2))
    planned = launches(harness, placement, SERVE)
    with pytest.raises(BackendError):
        crashed.launch(placement, planned)
    task_ids = [t.task_id for t in planned[:1]]  # the folder of the first task was made
    assert (crashed.tasks_dir / task_ids[0] / "task.json").exists()
    assert not (crashed.tasks_dir / task_ids[0] / "launch.json").exists()

    backend = harness.backend()  # the next controller
    seen: list[TaskState] = []

    def running(tasks: dict[str, object]) -> bool:
        task = tasks[task_ids[0]]
        seen.append(task.state)  # type: ignore[attr-defined]
        return task.state is TaskState.RUNNING  # type: ignore[attr-defined]

    wait_for(backend, running, timeout=10)
    assert TaskState.FAILED not in seen, "a launch that never started is not a failure"
    assert b"never started" in backend.read_log(task_ids[0]).data
    again = harness.backend()  # another controller finds it running: nothing starts twice
    wait_for(again, lambda ts: ts[task_ids[0]].state is TaskState.RUNNING)
    pids = {json.loads((backend.tasks_dir / task_ids[0] / "state.json").read_text())["pid"]}
    assert len(pids) == 1


def test_two_state_folders_never_hand_out_the_same_port(harness: Harness, tmp_path: Path) -> None:
    mine = harness.backend()
    theirs = LocalBackend(tmp_path / "other-state", CAPACITY)  # another project, same machine
    harness.backends.append(theirs)
    held = place_soon(mine, gang("mine", 1))
    port = held.slots[0].port
    placed = place_soon(theirs, gang("theirs", 1, previous={0: Address("127.0.0.1", port)}))
    assert placed.slots[0].port != port, "a placed, not yet launched port is reserved machine-wide"
    theirs.release(placed)

    tasks = launches(harness, held, SERVE)
    mine.launch(held, tasks)  # the reservation passes to the task's supervisor
    task_id = tasks[0].task_id
    wait_for(mine, lambda ts: ts[task_id].state is TaskState.RUNNING)
    placed = place_soon(theirs, gang("theirs", 1, previous={0: Address("127.0.0.1", port)}))
    assert placed.slots[0].port != port, "a running task's port stays reserved"
    theirs.release(placed)

    mine.stop([task_id], 0.5)
    wait_for(mine, lambda ts: ts[task_id].state.ended)
    placed = place_soon(theirs, gang("theirs", 1, previous={0: Address("127.0.0.1", port)}))
    assert isinstance(placed, Placement) and placed.slots[0].port == port, "released when the task ended"
    theirs.release(placed)
