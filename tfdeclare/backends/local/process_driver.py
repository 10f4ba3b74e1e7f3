"""The process driver: a task is a process group under a detached supervisor of its own
(``supervisor.py``), which records in the task's folder when the task runs (``state.json``)
and how it ended (``exit.json``), and polls for a stop request (``stop.json``).

What a controller that died left half-done is finished here (``tend``): a folder whose
supervisor never started (the controller died between writing the folder and starting it)
is started again, once per controller, and is never counted as a failure; a task whose
supervisor died without recording an end (killed from outside) has what is left of its group
killed and its end recorded, so the job's policy can act on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from tfdeclare.backends.base import BackendError, LogChunk
from tfdeclare.backends.local import ports
from tfdeclare.backends.local.drivers import (
    Chore,
    Preparation,
    Seen,
    TaskFolder,
    read_json,
    read_log_file,
    seen_from_end,
)
from tfdeclare.backends.local.record import TASK_FILE, TaskRuntime
from tfdeclare.backends.local.supervisor import kill_group, process_start_ticks
from tfdeclare.core.enums import EndCause, TaskState
from tfdeclare.core.errors import ErrorCode
from tfdeclare.core.run.tasks import TaskLaunch
from tfdeclare.files import open_regular

START_TIMEOUT_S = 60.0  # a supervisor that has not started its task by then failed
GONE_MESSAGE = "its supervisor process died; the task was killed"
# Found so by a controller that never saw it alive (nor started it): it ended while no
# controller watched, e.g. across a restart of the machine or of tfdeclare's controller.
UNWATCHED_MESSAGE = "its supervisor process ended while no controller watched it; the task was killed"


def alive(pid: object, ticks: object) -> bool:
    """Is the process ``pid`` that started at ``ticks`` still there (not a later one reusing
    its pid)?"""
    return isinstance(pid, int) and isinstance(ticks, int) and process_start_ticks(pid) == ticks


def supervisor_holds(task_dir: Path) -> bool:
    """Does a supervisor hold this task's lock (an exclusive ``flock`` on ``task.json``)?"""
    try:
        fd = open_regular(task_dir / TASK_FILE)  # never through a link, never waiting on a FIFO
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


class ProcessDriver:
    runtime = TaskRuntime.PROCESS

    def __init__(self, python: str, started: dict[str, float]) -> None:
        self.python = python
        self._seen_alive: set[str] = set()  # tasks this controller saw alive (their end is watched)
        self._started = started  # task id -> when this controller started its supervisor (monotonic)
        self._supervisors: dict[str, tuple[int, int]] = {}  # task id -> its live supervisor, last seen
        self._gone: dict[str, float] = {}  # task id -> when its supervisor was first seen gone

    def prepare(self, launch: TaskLaunch, gpu_machine: bool) -> Preparation:
        env = dict(launch.env)
        python_bin = str(Path(self.python).parent)
        env["PATH"] = python_bin + os.pathsep + env.get("PATH", os.environ.get("PATH", os.defpath))
        if gpu_machine or launch.resources.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in launch.slot.gpu_devices)
        return Preparation(env, host_working_dir=True)

    # ---- start ------------------------------------------------------------------------------

    def _start_supervisor(self, folder: TaskFolder, port_fd: int | None) -> subprocess.Popen[bytes]:
        """Start the task's supervisor (it forks and detaches; the returned process exits at
        once), handing it the descriptor that holds the task's port reservation."""
        try:
            starter = subprocess.Popen(
                [
                    self.python,
                    "-m",
                    "tfdeclare.backends.local.supervisor",
                    "--detach",
                    *(["--port-fd", str(port_fd)] if port_fd is not None else []),
                    str(folder.path),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(port_fd,) if port_fd is not None else (),
            )
        except OSError as err:
            raise BackendError(
                f"cannot start the supervisor of {folder.task_id}: {err}", code=ErrorCode.LAUNCH_FAILED
            ) from err
        self._started[folder.task_id] = time.monotonic()
        return starter

    def start(self, folders: Iterable[tuple[TaskFolder, int | None]]) -> None:
        starters: list[subprocess.Popen[bytes]] = []
        try:
            for folder, port_fd in folders:
                starters.append(self._start_supervisor(folder, port_fd))
        finally:
            for starter in starters:  # each forks the real supervisor and exits at once
                starter.wait()

    # ---- inspect ----------------------------------------------------------------------------

    def begin_pass(self) -> None:
        pass

    def state_token(self) -> object:
        return None  # the supervisor writes every change into the task's folder

    def quiet(self, task_id: str) -> bool:
        supervisor = self._supervisors.get(task_id)
        return supervisor is not None and alive(*supervisor)

    def inspect(self, folder: TaskFolder) -> Seen:
        """From its folder (what the supervisor wrote) and whether its supervisor is alive."""
        task_id = folder.task_id
        state_info = read_json(folder.path / "state.json")
        started_at = state_info.get("startedAt") if state_info else None
        end = folder.exit()
        if end is not None:
            return replace(seen_from_end(end), started_at=started_at)
        launch_info = folder.launch()
        stopping = (folder.path / "stop.json").exists()
        pid, ticks = launch_info.get("supervisorPid"), launch_info.get("supervisorTicks")
        if alive(pid, ticks):
            assert isinstance(pid, int) and isinstance(ticks, int)
            self._supervisors[task_id] = (pid, ticks)
            self._seen_alive.add(task_id)
            if state_info is None:
                return Seen(TaskState.STARTING)
            return Seen(TaskState.STOPPING if stopping else TaskState.RUNNING, started_at=started_at)
        self._supervisors.pop(task_id, None)
        if state_info is None:
            asked = self._started.get(task_id)
            if asked is not None and time.monotonic() - asked < START_TIMEOUT_S:
                return Seen(TaskState.STARTING)  # its supervisor is on its way
            if asked is None and supervisor_holds(folder.path):
                return Seen(TaskState.STARTING)  # started by another controller, not yet written
            if asked is None:
                return Seen(TaskState.STARTING, chore=Chore.START)  # never started: tend starts it
        end = folder.exit()  # the supervisor may have recorded its end as it went
        if end is not None:
            return replace(seen_from_end(end), started_at=started_at)
        finished_at = self._gone.setdefault(task_id, time.time())
        state = TaskState.STOPPED if stopping else TaskState.FAILED
        if task_id in self._seen_alive or task_id in self._started:
            return Seen(state, None, started_at, finished_at, GONE_MESSAGE, chore=Chore.RECORD_END)
        cause = EndCause.CONTROLLER_RESTART  # a platform event: not counted against backoffLimit
        return Seen(
            state, None, started_at, finished_at, UNWATCHED_MESSAGE, chore=Chore.RECORD_END, cause=cause
        )

    # ---- tend -------------------------------------------------------------------------------

    def tend(self, folder: TaskFolder, seen: Seen) -> None:
        if seen.chore is Chore.START:
            self._start_again(folder)
        elif seen.chore is Chore.RECORD_END:
            self._record_gone(folder, seen)

    def _start_again(self, folder: TaskFolder) -> None:
        """A launch whose supervisor never started: start it, once per controller (after
        ``START_TIMEOUT_S`` without its task running it has failed)."""
        if folder.task_id in self._started:
            return
        folder.note("this task's launch never started (its controller stopped); starting it")
        port = folder.task.port
        fd = ports.reserve(port) if port is not None else None
        try:
            self._start_supervisor(folder, fd).wait()
        finally:
            if fd is not None:
                os.close(fd)

    def _record_gone(self, folder: TaskFolder, seen: Seen) -> None:
        """Its supervisor died without recording an end: kill what is left of the task and
        record the end, so the job's policy can act on it."""
        state_info = read_json(folder.path / "state.json")
        if state_info is not None and alive(state_info.get("pid"), state_info.get("ticks")):
            kill_group(int(state_info["pid"]), signal.SIGKILL)
        if folder.ended_on_record():
            return
        with contextlib.suppress(OSError):
            folder.record_end(
                None,
                seen.finished_at or time.time(),
                seen.message or GONE_MESSAGE,
                seen.state is TaskState.STOPPED,
                cause=seen.cause.value,
            )
        self._gone.pop(folder.task_id, None)

    # ---- stop, destroy, logs ----------------------------------------------------------------

    def stop(self, folder: TaskFolder, grace_s: float) -> None:
        """The supervisor polls ``stop.json``; SIGTERM only wakes it sooner."""
        launch_info = folder.launch()
        pid, ticks = launch_info.get("supervisorPid"), launch_info.get("supervisorTicks")
        if alive(pid, ticks):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGTERM)  # type: ignore[arg-type]

    def destroy(self, folder: TaskFolder) -> None:
        self._gone.pop(folder.task_id, None)
        self._supervisors.pop(folder.task_id, None)

    def read_log(self, folder: TaskFolder, offset: int, limit: int) -> LogChunk:
        return read_log_file(folder.task.log_path, offset, limit, folder.ended_on_record())

    def close(self) -> None:
        pass
