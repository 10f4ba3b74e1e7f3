"""The local backend's task drivers: one interface for each way it runs a task, as Nomad's
task drivers are (start, inspect, stop, recover, destroy, logs).

``backend.py`` owns what is the same for every task (the task folder and its record,
placement, ports, GPUs, working folders) and picks a task's driver once, from its record's
``runtime`` (``record.py``); everything that differs by runtime is behind ``Driver``:
``process_driver.py`` (a supervised process group) and ``docker_driver.py`` (a container of
the Docker engine).

A task folder is the record for both (``TaskFolder``): ``task.json`` (what to run),
``launch.json`` (the runtime's start), ``stop.json`` (a stop request), ``exit.json`` (how it
ended). A driver's ``inspect`` only reads (its folder, a process table, the engine) and says
what it saw, and what is left to do (``Chore``): a launch that never started, an end not yet
recorded, a task past its grace period. That work is done by ``tend``, which the backend runs
from its own ``tend`` step (the controller's, once per pass), never by ``inspect``: so
``observe`` and ``place`` start, record and remove nothing.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from tfdeclare.backends.base import BackendError, LogChunk, LogOffsetError
from tfdeclare.backends.local.record import ContainerSpec, LocalTask, TaskRuntime
from tfdeclare.core.enums import EndCause, TaskState
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.run.tasks import TaskLaunch
from tfdeclare.files import open_append, read_regular, read_regular_at, write_atomic


class Chore(Enum):
    """What ``inspect`` saw that ``tend`` has to do for a task."""

    START = "start"  # its launch never started (its controller stopped first): start it
    RECORD_END = "record-end"  # it ended and its end is not recorded: record it, clear what it left
    KILL = "kill"  # asked to stop, past its grace period and still up: kill it


@dataclass(frozen=True, slots=True)
class Seen:
    """A task as its driver saw it just now."""

    state: TaskState
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    message: str = ""
    chore: Chore | None = None
    cause: EndCause = EndCause.JOB  # a platform event that ended it, where the driver saw one
    error: ErrorCode | None = None  # it never ran for this runtime error (an image missing)


JSON_MAX_BYTES = 1 << 20  # launch.json, stop.json, exit.json: a few hundred bytes each


def read_json(path: Path) -> dict[str, Any] | None:
    """A small JSON file of a task folder; None when there is none, or it is not a regular
    file of ours (a link, a FIFO, too large, damaged: ``files.read_regular``)."""
    try:
        data = json.loads(read_regular(path, JSON_MAX_BYTES))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True, slots=True)
class TaskFolder:
    """A task's folder and its record; the files in it are read when asked for."""

    path: Path
    task: LocalTask

    @property
    def task_id(self) -> str:
        return self.task.task_id

    def exit(self) -> dict[str, Any] | None:
        return read_json(self.path / "exit.json")

    def launch(self) -> dict[str, Any]:
        return read_json(self.path / "launch.json") or {}

    def stop_request(self) -> dict[str, Any] | None:
        """The stop request (``graceSeconds``, ``at``), or None when none was made."""
        if not (self.path / "stop.json").exists():
            return None
        return read_json(self.path / "stop.json") or {}

    def ended_on_record(self) -> bool:
        return (self.path / "exit.json").exists()

    def record_end(
        self, exit_code: int | None, finished_at: float, message: str, stopped: bool, **more: object
    ) -> None:
        """Write ``exit.json`` (atomically: written twice, it says the same)."""
        end = {
            "exitCode": exit_code,
            "finishedAt": finished_at,
            "stopped": stopped,
            "message": message,
            **more,
        }
        write_atomic(self.path / "exit.json", json.dumps(end).encode())

    def note(self, line: str) -> None:
        """A line of tfdeclare's own in the task's log."""
        self.task.log_path.parent.mkdir(parents=True, exist_ok=True)
        with os.fdopen(open_append(self.task.log_path), "ab") as log:
            log.write(f"tfdeclare: {line}\n".encode())


def seen_from_end(end: dict[str, Any]) -> Seen:
    """A recorded end (``exit.json``) as seen: 0 succeeded, a requested stop stopped, else failed."""
    exit_code = end.get("exitCode")
    if exit_code == 0:
        state = TaskState.SUCCEEDED
    elif end.get("stopped"):
        state = TaskState.STOPPED
    else:
        state = TaskState.FAILED
    cause = end.get("cause")
    known = EndCause(cause) if cause in _CAUSES else EndCause.JOB  # records of earlier versions: none
    error = end.get("error")
    code = ErrorCode(error) if error in _CODES else None
    message = end.get("message", "")
    return Seen(state, exit_code, None, end.get("finishedAt"), message, cause=known, error=code)


_CODES = frozenset(code.value for code in ErrorCode)


_CAUSES = frozenset(c.value for c in EndCause)


def read_log_file(path: Path, offset: int, limit: int, ended: bool) -> LogChunk:
    """``limit`` bytes of a log file from ``offset``; ``complete`` once the task has ``ended``
    and the file holds nothing more. The log is opened anew each time, never through a link
    nor waiting on a FIFO (``files.read_regular_at``): anything but a regular file is a
    ``BackendError`` naming it."""
    try:
        data, size = read_regular_at(path, offset, limit)
    except FileNotFoundError:
        if offset > 0:
            raise LogOffsetError(offset, 0) from None
        data, size = b"", 0
    except OSError as err:
        raise BackendError(
            f"cannot read the log {path}: {err.strerror or err}", code=ErrorCode.LOG_UNAVAILABLE
        ) from None
    if offset > size:
        raise LogOffsetError(offset, size)
    return LogChunk(data, offset + len(data), ended and len(data) < limit)


@dataclass(frozen=True, slots=True)
class Preparation:
    """What a runtime adds to a task's record at launch."""

    env: dict[
        str, str
    ]  # the task's environment as the runtime has it (a process: PATH, CUDA_VISIBLE_DEVICES)
    host_working_dir: bool  # an absolute workingDir is a folder of this machine (else of the image)
    container: ContainerSpec | None = None  # what a container task has beyond a process task


class Driver(Protocol):
    """One way of running the local backend's tasks. Every method but ``start`` and ``tend``
    may be called at any time (from ``observe``, ``place``, ``logs``) and changes nothing a
    later look would see; a failure of the runtime itself (an engine that does not answer)
    is a ``BackendError``."""

    runtime: TaskRuntime

    def prepare(self, launch: TaskLaunch, gpu_machine: bool) -> Preparation:
        """The runtime's part of a task's record."""
        ...

    def start(self, folders: Iterable[tuple[TaskFolder, int | None]]) -> None:
        """Start the task of each folder as it comes (written just now; with the descriptor
        that holds its port's reservation, or None), side by side where the runtime can. A
        task the runtime refuses ends (its end recorded), except a failure to start anything,
        which is a ``BackendError``; what ``folders`` raises is raised once the tasks started
        so far are on their way."""
        ...

    def begin_pass(self) -> None:
        """A new look at every task begins (a driver may ask its runtime once per pass)."""
        ...

    def inspect(self, folder: TaskFolder) -> Seen:
        """The task's state now (its recorded end, once there is one); reads only."""
        ...

    def state_token(self) -> object:
        """What changes when one of the driver's tasks changes outside its folder (the
        backend's ``watch`` compares it while such a task is alive); None: the folder says all."""
        ...

    def quiet(self, task_id: str) -> bool:
        """Is what ``inspect`` last saw of this task still so while its folder is unchanged
        (a live supervisor writes into the folder whatever changes)?"""
        ...

    def tend(self, folder: TaskFolder, seen: Seen) -> None:
        """Do ``seen.chore``: start a launch that never started (adopting what a dead
        controller left half-done), record an end and clear away what the task left, kill a
        task past its grace period."""
        ...

    def stop(self, folder: TaskFolder, grace_s: float) -> None:
        """Ask a task to stop (its ``stop.json`` is written): SIGTERM, ``grace_s``, SIGKILL.
        Returns at once."""
        ...

    def destroy(self, folder: TaskFolder) -> None:
        """Remove what the runtime keeps of an ended task (before its folder goes)."""
        ...

    def read_log(self, folder: TaskFolder, offset: int, limit: int) -> LogChunk:
        """Bytes of the task's output from ``offset``; asked again with the next offset, only
        what is new is read."""
        ...

    def close(self) -> None: ...
