"""The backend conformance suite: what every backend (local, mesos) must do, through the
protocol only. ``test_backend_conformance.py`` runs it against each backend.

A harness gives the suite a fresh backend over a state folder, the capacity it offers
(4 cpus, 4096 MiB, 0 GPUs, in one place), and a way to make a second backend instance over
the same state (adoption after a controller restart).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tfdeclare.backends.base import Backend
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

SMALL = Resources(0.5, 128, 0)


@dataclass
class Harness:
    make: Callable[[], Backend]  # a backend over the harness's state (a new instance each call)
    workdir: Path
    backends: list[Backend] = field(default_factory=list)
    counter: int = 0

    def backend(self) -> Backend:
        backend = self.make()
        self.backends.append(backend)
        return backend

    def close(self) -> None:
        for backend in self.backends:
            backend.close()


def gang(
    job: str, n: int, resources: Resources = SMALL, previous: dict[int, Address] | None = None
) -> GangRequest:
    slots = tuple(SlotRequest(TaskKey(Role.WORKER, i), resources, (previous or {}).get(i)) for i in range(n))
    return GangRequest(job, 0, slots)


def launches(
    harness: Harness,
    placement: Placement,
    argv: Sequence[str],
    *,
    grace: float = 5.0,
    env: dict[str, str] | None = None,
    resources: Resources = SMALL,
) -> list[TaskLaunch]:
    harness.counter += 1
    out = []
    for slot in placement.slots:
        out.append(
            TaskLaunch(
                task_id=f"{placement.job}.t{harness.counter}.{slot.key.name}",
                job=placement.job,
                key=slot.key,
                attempt=0,
                spec_hash="s" * 64,
                config_hash="c" * 16,
                argv=tuple(argv),
                env=tuple(
                    sorted({"PORT": str(slot.port), "PATH": os.environ["PATH"], **(env or {})}.items())
                ),
                resources=resources,
                slot=slot,
                grace_period_s=grace,
                source_dir=str(harness.workdir),
            )
        )
    return out


def wait_for(
    backend: Backend, predicate: Callable[[dict[str, ObservedTask]], bool], timeout: float = 20.0
) -> dict[str, ObservedTask]:
    deadline = time.monotonic() + timeout
    while True:
        tasks = {t.task_id: t for t in backend.observe()}
        if predicate(tasks):
            return tasks
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; tasks: {tasks}")
        time.sleep(0.05)


def place_soon(backend: Backend, request: GangRequest, timeout: float = 15.0) -> Placement:
    """Place a gang that fits, as the controller does: asking again on later passes while the
    backend waits for resources (Mesos: the next offer round after a launch)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = backend.place(request)
        if isinstance(answer, Placement):
            return answer
        assert answer.reason is not UnplacedReason.UNSCHEDULABLE, answer
        if time.monotonic() > deadline:
            raise AssertionError(f"never placed: {answer}")
        time.sleep(0.1)


def start(
    harness: Harness, backend: Backend, job: str, n: int, argv: Sequence[str], **kw: object
) -> list[TaskLaunch]:
    placement = place_soon(backend, gang(job, n))
    tasks = launches(harness, placement, argv, **kw)  # type: ignore[arg-type]
    backend.launch(placement, tasks)
    return tasks


def states(tasks: dict[str, ObservedTask], ids: Sequence[str]) -> list[TaskState]:
    return [tasks[i].state if i in tasks else None for i in ids]  # type: ignore[misc]


PY = sys.executable


# ---- the suite ---------------------------------------------------------------------------


def check_gang_launch_and_observe(harness: Harness) -> None:
    backend = harness.backend()
    launched = start(harness, backend, "g", 3, [PY, "-c", "import time; time.sleep(60)"])
    ids = [t.task_id for t in launched]
    tasks = wait_for(backend, lambda ts: states(ts, ids) == [TaskState.RUNNING] * 3)
    ports = {tasks[i].port for i in ids}
    assert len(ports) == 3, "every task of a gang gets its own port"
    assert all(tasks[i].host for i in ids)
    assert {tasks[i].key for i in ids} == {TaskKey(Role.WORKER, n) for n in range(3)}
    backend.stop(ids, 2.0)
    wait_for(backend, lambda ts: all(ts[i].state.ended for i in ids))


def check_exit_codes(harness: Harness) -> None:
    backend = harness.backend()
    ok = start(harness, backend, "ok", 1, [PY, "-c", "print('fine')"])[0].task_id
    bad = start(harness, backend, "bad", 1, [PY, "-c", "import sys; sys.exit(3)"])[0].task_id
    shell_free = start(
        harness, backend, "argv", 1, [PY, "-c", "import sys; sys.exit(len(sys.argv))", "a;b", "$X"]
    )[0].task_id
    tasks = wait_for(backend, lambda ts: all(ts[i].state.ended for i in (ok, bad, shell_free)))
    assert (tasks[ok].state, tasks[ok].exit_code) == (TaskState.SUCCEEDED, 0)
    assert (tasks[bad].state, tasks[bad].exit_code) == (TaskState.FAILED, 3)
    assert tasks[shell_free].exit_code == 3, "argv is passed as a list, never through a shell"


def check_killed_from_outside_is_a_failure_with_the_signal(harness: Harness) -> None:
    backend = harness.backend()
    pid_file = harness.workdir / "victim.pid"
    task_id = start(
        harness,
        backend,
        "victim",
        1,
        [PY, "-c", f"import os,time; open({str(pid_file)!r},'w').write(str(os.getpid())); time.sleep(60)"],
    )[0].task_id
    wait_for(
        backend,
        lambda ts: (
            ts[task_id].state is TaskState.RUNNING and pid_file.exists() and pid_file.read_text() != ""
        ),
    )
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    tasks = wait_for(backend, lambda ts: ts[task_id].state.ended)
    assert (tasks[task_id].state, tasks[task_id].exit_code) == (TaskState.FAILED, 128 + signal.SIGKILL)


def check_stop_with_grace_then_kill(harness: Harness) -> None:
    backend = harness.backend()
    polite = start(harness, backend, "polite", 1, [PY, "-c", "import time; time.sleep(60)"])[0].task_id
    stubborn = start(
        harness,
        backend,
        "stubborn",
        1,
        [
            PY,
            "-c",
            "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)",
        ],
    )[0].task_id
    wait_for(
        backend, lambda ts: ts[polite].state is TaskState.RUNNING and ts[stubborn].state is TaskState.RUNNING
    )
    time.sleep(0.5)  # let the stubborn one install its handler
    started = time.monotonic()
    backend.stop([polite, stubborn], 1.5)
    tasks = wait_for(backend, lambda ts: ts[polite].state.ended)
    assert tasks[polite].state is TaskState.STOPPED and tasks[polite].exit_code == 128 + signal.SIGTERM
    tasks = wait_for(backend, lambda ts: ts[stubborn].state.ended)
    assert time.monotonic() - started >= 1.4, "SIGKILL only after the grace period"
    assert tasks[stubborn].state is TaskState.STOPPED and tasks[stubborn].exit_code == 128 + signal.SIGKILL


def check_resources_are_accounted(harness: Harness) -> None:
    backend = harness.backend()
    too_big = backend.place(gang("huge", 1, Resources(64, 128, 0)))
    assert isinstance(too_big, Unplaced) and too_big.reason is UnplacedReason.UNSCHEDULABLE
    first = place_soon(backend, gang("first", 3, Resources(1, 512, 0)))
    tasks = launches(
        harness, first, [PY, "-c", "import time; time.sleep(60)"], resources=Resources(1, 512, 0)
    )
    backend.launch(first, tasks)
    ids = [t.task_id for t in tasks]
    wait_for(backend, lambda ts: states(ts, ids) == [TaskState.RUNNING] * 3)
    second = backend.place(gang("second", 2, Resources(1, 512, 0)))
    assert isinstance(second, Unplaced) and second.reason is not UnplacedReason.UNSCHEDULABLE, second
    backend.stop(ids, 1.0)
    wait_for(backend, lambda ts: all(ts[i].state.ended for i in ids))
    again = place_soon(backend, gang("second", 2, Resources(1, 512, 0)))
    backend.release(again)


def check_ports_are_reused_for_a_slot(harness: Harness) -> None:
    backend = harness.backend()
    first = start(harness, backend, "reuse", 2, [PY, "-c", "import time; time.sleep(60)"])
    ids = [t.task_id for t in first]
    tasks = wait_for(backend, lambda ts: states(ts, ids) == [TaskState.RUNNING] * 2)
    previous = {
        i: Address(tasks[t.task_id].host or "", tasks[t.task_id].port or 0) for i, t in enumerate(first)
    }
    backend.stop(ids, 1.0)
    wait_for(backend, lambda ts: all(ts[i].state.ended for i in ids))
    placement = place_soon(backend, gang("reuse", 2, previous=previous))
    assert [s.address for s in placement.slots] == [previous[0], previous[1]]
    backend.release(placement)


def check_launch_is_idempotent_and_adoptable(harness: Harness) -> None:
    backend = harness.backend()
    placement = place_soon(backend, gang("once", 1))
    tasks = launches(harness, placement, [PY, "-c", "import time; time.sleep(60)"])
    backend.launch(placement, tasks)
    backend.launch(placement, tasks)  # a retried launch never starts a task twice
    task_id = tasks[0].task_id
    wait_for(backend, lambda ts: ts.get(task_id) is not None and ts[task_id].state is TaskState.RUNNING)
    assert sum(1 for t in backend.observe() if t.job == "once") == 1
    other = harness.backend()  # a controller restart: the running task is adopted
    adopted = wait_for(other, lambda ts: task_id in ts and ts[task_id].state is TaskState.RUNNING)
    assert adopted[task_id].key == TaskKey(Role.WORKER, 0)
    other.stop([task_id], 1.0)
    wait_for(other, lambda ts: ts[task_id].state.ended)


def check_logs_and_forget(harness: Harness) -> None:
    backend = harness.backend()
    task_id = start(harness, backend, "talk", 1, [PY, "-c", "print('hello from the task'); print('é')"])[
        0
    ].task_id
    wait_for(backend, lambda ts: ts[task_id].state.ended)
    deadline = time.monotonic() + 10
    data = b""
    while time.monotonic() < deadline and b"\xc3\xa9" not in data:
        data = backend.read_log(task_id, 0).data
        time.sleep(0.05)
    assert b"hello from the task" in data and "é".encode() in data
    partial = backend.read_log(task_id, 6)
    assert partial.data.startswith(b"from")
    backend.forget([task_id])
    assert task_id not in {t.task_id for t in backend.observe()}
    assert b"hello" in backend.read_log(task_id, 0).data, "logs stay readable after forget"
    backend.purge("talk")


def check_working_dir_and_environment(harness: Harness) -> None:
    backend = harness.backend()
    out = harness.workdir / "env-out.txt"
    script = (
        "import os, json; "
        f"open({str(out)!r}, 'w').write(json.dumps({{'cwd': os.getcwd(), 'port': os.environ['PORT'], 'x': os.environ['X']}}))"
    )
    task_id = start(harness, backend, "env", 1, [PY, "-c", script], env={"X": "a b;c"})[0].task_id
    tasks = wait_for(backend, lambda ts: ts[task_id].state.ended)
    assert tasks[task_id].state is TaskState.SUCCEEDED, backend.read_log(task_id).data
    import json

    seen = json.loads(out.read_text())
    assert seen["x"] == "a b;c"
    assert int(seen["port"]) == tasks[task_id].port


SUITE = [
    check_gang_launch_and_observe,
    check_exit_codes,
    check_killed_from_outside_is_a_failure_with_the_signal,
    check_stop_with_grace_then_kill,
    check_resources_are_accounted,
    check_ports_are_reused_for_a_slot,
    check_launch_is_idempotent_and_adoptable,
    check_logs_and_forget,
    check_working_dir_and_environment,
]
