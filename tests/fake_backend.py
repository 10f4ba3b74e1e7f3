"""An in-memory backend for fast, in-process tests of the controller and the daemon.

It implements the protocol of ``tfdeclare/backends/base.py`` over a ``FakeCluster`` (the
"machine": capacity, tasks, logs), so a second ``FakeBackend`` over the same cluster adopts
its tasks like a restarted controller. Time is an injected clock; nothing runs: a launched task
runs until the test ends it (``finish``) or it is stopped. A stopped task ends at the next
``observe`` (it obeys SIGTERM) unless it was launched with an ``ignores-sigterm`` argument, in
which case it ends ``grace_s`` later on the clock, killed. Tasks are the same ``ObservedTask``
objects while nothing changes, as the real backends hand them out. Safe to use from a daemon's
thread and the test's at once.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tfdeclare.backends.base import BackendError, LogChunk, LogOffsetError
from tfdeclare.core.enums import TaskState
from tfdeclare.core.run.tasks import (
    GangRequest,
    ObservedTask,
    Placement,
    Slot,
    TaskLaunch,
    Unplaced,
    UnplacedReason,
)
from tfdeclare.core.spec.resources import Resources

IGNORES_SIGTERM = "ignores-sigterm"  # an argv element that makes a fake task stubborn
HOST = "fake-host"
CAPACITY = Resources(4, 4096, 0)  # what the conformance suite expects


class Clock:
    """The injected clock: time moves only when the test says so."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class _Task:
    observed: ObservedTask
    launch: TaskLaunch
    stop_at: float | None = None  # when a stop was asked
    grace_s: float = 0.0


@dataclass
class FakeCluster:
    """What outlives one backend instance: the capacity and every task and log."""

    capacity: Resources = CAPACITY
    port_first: int = 31000
    port_last: int = 31999
    tasks: dict[str, _Task] = field(default_factory=dict)
    logs: dict[str, bytearray] = field(default_factory=dict)
    log_jobs: dict[str, str] = field(default_factory=dict)  # task id -> job, for purge
    launched: list[str] = field(default_factory=list)  # every task id ever started, in order
    lock: threading.RLock = field(default_factory=threading.RLock)  # a daemon's thread and the test


class FakeBackend:
    name = "local"  # the controller records it; jobs created here look like local jobs
    address_wait_s: float | None = 30.0

    def __init__(self, cluster: FakeCluster | None = None, clock: Callable[[], float] | None = None) -> None:
        self.cluster = cluster or FakeCluster()
        self.clock = clock or Clock()
        self._reservations: dict[str, tuple[Resources, set[int]]] = {}
        self._watchers: list[Callable[[], None]] = []
        self._tokens = 0
        self.closed = False

    # ---- what the test does to the tasks ---------------------------------------------------

    def finish(self, task_id: str, exit_code: int) -> None:
        """The task exits by itself with ``exit_code``."""
        with self.cluster.lock:
            task = self.cluster.tasks[task_id]
            assert task.observed.state.alive, f"{task_id} has already ended"
            state = TaskState.SUCCEEDED if exit_code == 0 else TaskState.FAILED
            self._end(task, state, exit_code)

    def write_log(self, task_id: str, data: bytes) -> None:
        with self.cluster.lock:
            self.cluster.logs.setdefault(task_id, bytearray()).extend(data)

    # ---- the protocol ----------------------------------------------------------------------

    def tend(self) -> None:
        """Nothing to look after: the fake's tasks change only as the test says."""

    def observe(self) -> Sequence[ObservedTask]:
        with self.cluster.lock:
            now = self.clock()
            for task in self.cluster.tasks.values():
                if task.observed.state is TaskState.STOPPING and task.stop_at is not None:
                    stubborn = IGNORES_SIGTERM in task.launch.argv
                    if not stubborn:
                        self._end(task, TaskState.STOPPED, 128 + signal.SIGTERM)
                    elif now >= task.stop_at + task.grace_s:
                        self._end(task, TaskState.STOPPED, 128 + signal.SIGKILL)
            return [task.observed for task in self.cluster.tasks.values()]

    def place(self, request: GangRequest) -> Placement | Unplaced:
        with self.cluster.lock:
            need = request.total
            if not need.fits_in(self.cluster.capacity):
                return Unplaced(UnplacedReason.UNSCHEDULABLE, f"needs {need.describe()}")
            used = Resources(0.0, 0, 0)
            taken: set[int] = set()
            for task in self.cluster.tasks.values():
                if task.observed.state.alive:
                    used = used + task.observed.resources
                    taken.add(task.launch.slot.port)
            for resources, ports in self._reservations.values():
                used = used + resources
                taken |= ports
            free = self.cluster.capacity - used
            if not need.fits_in(free):
                short = Resources(
                    max(0.0, need.cpus - free.cpus),
                    max(0, need.mem_mib - free.mem_mib),
                    max(0, need.gpus - free.gpus),
                )
                return Unplaced(UnplacedReason.WAITING_FOR_RESOURCES, f"needs {need.describe()}", short)
            slots = []
            for slot in request.slots:
                previous = slot.previous.port if slot.previous else None
                if previous is not None and previous not in taken:
                    port = previous
                elif slot.pinned:
                    return Unplaced(UnplacedReason.WAITING_FOR_ADDRESS, f"port {previous} is taken")
                else:
                    port = next(
                        p
                        for p in range(self.cluster.port_first, self.cluster.port_last + 1)
                        if p not in taken
                    )
                taken.add(port)
                slots.append(Slot(slot.key, HOST, port))
            self._tokens += 1
            token = f"fake-{self._tokens}"
            self._reservations[token] = (need, {s.port for s in slots})
            return Placement(request.job, request.attempt, tuple(slots), token)

    def release(self, placement: Placement) -> None:
        with self.cluster.lock:
            self._reservations.pop(placement.token, None)

    def launch(self, placement: Placement, tasks: Sequence[TaskLaunch]) -> None:
        with self.cluster.lock:
            if self.closed:
                raise BackendError("the fake backend is closed")
            for launch in tasks:
                if launch.task_id in self.cluster.tasks:
                    continue  # launched before: never twice
                self.cluster.launched.append(launch.task_id)
                self.cluster.tasks[launch.task_id] = _Task(
                    ObservedTask(
                        task_id=launch.task_id,
                        job=launch.job,
                        key=launch.key,
                        attempt=launch.attempt,
                        config_hash=launch.config_hash,
                        state=TaskState.RUNNING,
                        resources=launch.resources,
                        host=launch.slot.host,
                        port=launch.slot.port,
                        started_at=self.clock(),
                        spec_hash=launch.spec_hash,
                    ),
                    launch,
                )
                self.cluster.logs.setdefault(launch.task_id, bytearray())
                self.cluster.log_jobs[launch.task_id] = launch.job
            self.release(placement)
            self._notify()

    def stop(self, task_ids: Sequence[str], grace_s: float) -> None:
        with self.cluster.lock:
            for task_id in task_ids:
                task = self.cluster.tasks.get(task_id)
                if task is None or not task.observed.state.alive or task.stop_at is not None:
                    continue
                task.stop_at, task.grace_s = self.clock(), grace_s
                task.observed = dataclasses.replace(task.observed, state=TaskState.STOPPING)
            self._notify()

    def forget(self, task_ids: Sequence[str]) -> None:
        with self.cluster.lock:
            for task_id in task_ids:
                task = self.cluster.tasks.get(task_id)
                if task is not None and task.observed.state.ended:
                    del self.cluster.tasks[task_id]

    def purge(self, job: str) -> None:
        with self.cluster.lock:
            for task_id, task in list(self.cluster.tasks.items()):
                if task.observed.job == job and task.observed.state.ended:
                    del self.cluster.tasks[task_id]
            for task_id in [t for t, j in self.cluster.log_jobs.items() if j == job]:
                if task_id not in self.cluster.tasks:
                    del self.cluster.logs[task_id], self.cluster.log_jobs[task_id]

    def read_log(self, task_id: str, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        with self.cluster.lock:
            log = self.cluster.logs.get(task_id)
            if log is None:
                raise BackendError(f"no log for task {task_id}")
            if offset > len(log):
                raise LogOffsetError(offset, len(log))
            data = bytes(log[offset : offset + limit])
            task = self.cluster.tasks.get(task_id)
            complete = task is None or task.observed.state.ended
            return LogChunk(data, offset + len(data), complete and offset + len(data) >= len(log))

    def watch(self, notify: Callable[[], None]) -> None:
        with self.cluster.lock:
            self._watchers.append(notify)

    def close(self) -> None:
        self.closed = True

    # ---- inside ----------------------------------------------------------------------------

    def _end(self, task: _Task, state: TaskState, exit_code: int) -> None:
        task.observed = dataclasses.replace(
            task.observed, state=state, exit_code=exit_code, finished_at=self.clock()
        )
        self._notify()

    def _notify(self) -> None:
        for notify in list(self._watchers):
            notify()
