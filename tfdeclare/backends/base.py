"""The backend protocol: the one small interface that ``local`` and ``mesos`` implement.

A backend owns the running tasks and nothing else: it does not know about specs, plans or
phases. The controller asks it to ``place`` a gang (all tasks of one job attempt), builds the
TF cluster description from the answer, ``launch``-es the tasks, ``stop``-s tasks, and
each pass lets the backend ``tend`` its tasks and then ``observe``-s them (``observe`` only
reports). ``tests/backend_conformance.py`` is the suite every backend
passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from tfdeclare.backends.errors import BackendError, LogOffsetError
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.run.tasks import GangRequest, ObservedTask, Placement, TaskKey, TaskLaunch, Unplaced

__all__ = [
    "STDERR_HEADER",
    "STREAMS",
    "Backend",
    "BackendError",
    "LogChunk",
    "LogOffsetError",
    "LogStreams",
    "LogTimes",
    "TaskFolders",
    "log_streams",
    "read_log_part",
]

STREAMS = ("stdout", "stderr")  # a task's two logs, where a backend reads them apart (``LogStreams``)
STDERR_HEADER = b"\n--- stderr ---\n"  # between a task's stdout and its stderr shown as one text


@dataclass(frozen=True, slots=True)
class LogChunk:
    data: bytes
    next_offset: int
    complete: bool  # the task has ended and no more output will come


@runtime_checkable
class LogTimes(Protocol):
    """A backend that knows when its tasks' log lines were written (``logs --timestamps``,
    ``--since``): the local backend's process tasks. Others have no such method."""

    def read_log_times(self, task_id: str) -> list[tuple[int, float]] | None:
        """(size of the log, time it had grown to that size) samples in order; None: not known.
        ``BackendError`` when the backend has them but cannot read them (named)."""
        ...


@runtime_checkable
class LogStreams(Protocol):
    """A backend whose tasks' stdout and stderr are two logs, each read on its own as it grows
    (the Mesos backend: the sandbox's two files), where ``read_log`` has only stdout until the
    task has ended. ``logs`` reads both in turn. Others have no such method: their log holds
    both streams as written."""

    def read_log_stream(self, task_id: str, stream: str, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        """Bytes of the task's ``stream`` (``stdout`` or ``stderr``) from ``offset``, as in
        ``read_log``; complete once the task has ended and all of it is read."""
        ...


def log_streams(backend: object) -> tuple[str, ...]:
    """The logs each task of ``backend`` has, read apart: ``STREAMS`` for a ``LogStreams``
    backend, none (its one log holds both streams as written) for another. Asked by
    ``tfdeclare logs`` and the daemon's page alike, so both show a running task's stderr."""
    return STREAMS if isinstance(backend, LogStreams) else ()


def read_log_part(
    backend: Backend, task_id: str, stream: str | None, offset: int = 0, limit: int = 1 << 20
) -> LogChunk:
    """The task's one log (``stream`` None: ``read_log``) or one of its streams
    (``read_log_stream``), from ``offset``, at most ``limit`` bytes. ``BackendError`` for a
    stream the backend does not read apart (``log_streams``)."""
    if stream is None:
        return backend.read_log(task_id, offset, limit)
    if stream not in log_streams(backend):
        raise BackendError(
            f"the {backend.name} backend's tasks have one log, stdout and stderr as written: "
            f"no {stream!r} alone",
            code=ErrorCode.LOG_UNAVAILABLE,
        )
    assert isinstance(backend, LogStreams)
    return backend.read_log_stream(task_id, stream, offset, limit)


@runtime_checkable
class TaskFolders(Protocol):
    """A backend whose tasks' working folders lie on the controller's machine (the local
    backend), where a job's progress files are read (``spec.checkpoint``, TensorBoard's
    ``logDir``). Others have no such method: their relative folders are not read."""

    def task_folder(self, job: str, key: TaskKey) -> str | None:
        """The absolute working folder of the job's task ``key`` (it may not exist yet)."""
        ...


@runtime_checkable
class Backend(Protocol):
    name: str

    @property
    def address_wait_s(self) -> float | None:
        """How long a task restarting alone may wait for its own address (a slot ``pinned``
        to it) before the controller restarts the whole job instead; None: for ever."""
        ...

    def tend(self) -> None:
        """The backend's own upkeep, run by the controller once per pass before ``observe``:
        finish what a controller that died left half-done, record how tasks ended and clear
        away what they left, kill what outlived its grace period. ``BackendError`` for what
        it could not do (the pass reports it and goes on)."""
        ...

    def observe(self) -> Sequence[ObservedTask]:
        """Every task this controller owns that the backend still knows, in any state. Only
        reports: it starts, stops, records and removes nothing."""
        ...

    def place(self, request: GangRequest) -> Placement | Unplaced:
        """Place the whole gang or nothing. A placement holds resources until launch/release.
        A ``pinned`` slot gets exactly its ``previous`` address, or the answer is
        ``Unplaced(WAITING_FOR_ADDRESS)`` until it can."""
        ...

    def release(self, placement: Placement) -> None:
        """Give back a placement that will not be launched."""
        ...

    def launch(self, placement: Placement, tasks: Sequence[TaskLaunch]) -> None:
        """Start every task of a placement. Task ids already known are not started twice."""
        ...

    def stop(self, task_ids: Sequence[str], grace_s: float) -> None:
        """Ask tasks to stop: SIGTERM (or the backend's kill), ``grace_s``, then SIGKILL.

        Returns at once; the tasks show as ``stopping`` until they have ended.
        """
        ...

    def forget(self, task_ids: Sequence[str]) -> None:
        """Drop ended tasks from ``observe`` (their logs stay readable until the job is gone)."""
        ...

    def purge(self, job: str) -> None:
        """Forget every ended task of a deleted job, and its logs."""
        ...

    def read_log(self, task_id: str, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        """Bytes of a task's output from ``offset`` (at most ``limit``). ``LogOffsetError`` when
        ``offset`` is past the end of what the task has written so far."""
        ...

    def watch(self, notify: Callable[[], None]) -> None:
        """Call ``notify`` (from any thread) whenever ``observe`` may have changed."""
        ...

    def close(self) -> None:
        """Let go of connections and threads. Running tasks keep running."""
        ...
