"""Container tasks of the local backend: what ``backend.py`` does with a task folder whose
``task.json`` says ``runtime: docker`` — make its container, read its state, stop it, read its
log — over the engine calls of ``docker_runtime.py``.

The folder stays the record (see ``backend.py``): ``launch.json`` says the container was made
(its id, start time, and how long the log was then), ``exit.json`` how it ended, written by
the controller that sees it ended, which then removes the container; the container's output
is kept in the task's log. A folder without a container and without ``launch.json`` (the
controller died before making it) gets its container from the next controller; a container
made but not started (it died in between) is started. The listing of the owner's containers
is made once per ``observe`` pass (``new_pass``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tfdeclare.backends.local.docker_runtime import (
    KILL_SLACK_S,
    DockerRuntime,
    EngineError,
    ImageUnavailable,
    container_name,
)
from tfdeclare.core.enums import TaskState
from tfdeclare.files import write_atomic

START_TIMEOUT_S = 60.0  # a container this controller asked for less long ago is on its way


def _size(path: str | Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


def _record_end(
    task_dir: Path, exit_code: int | None, finished_at: float, message: str, stopped: bool
) -> dict[str, Any]:
    """Write the task's ``exit.json``; returns what it says."""
    end = {"exitCode": exit_code, "finishedAt": finished_at, "stopped": stopped, "message": message}
    write_atomic(task_dir / "exit.json", json.dumps(end).encode())
    return end


def _note(spec: dict[str, Any], line: str) -> None:
    """A line of tfdeclare's own in the task's log (before its container's output)."""
    log_path = Path(spec["logPath"])
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"tfdeclare: {line}\n".encode())


class ContainerTasks:
    def __init__(self, owner: str, started: dict[str, float]) -> None:
        self.engine = DockerRuntime(owner)
        self._started = started  # task id -> when this controller asked for it (monotonic)
        self._listing: dict[str, str] | None = None

    def _name(self, task_id: str) -> str:
        return container_name(self.engine.owner, task_id)

    def new_pass(self) -> None:
        self._listing = None

    def listing(self) -> dict[str, str]:
        return self.engine.listing()

    def observe(
        self,
        task_dir: Path,
        spec: dict[str, Any],
        launch_info: dict[str, Any],
        stop_request: dict[str, Any] | None,
    ) -> dict[str, Any] | TaskState:
        """A task with no recorded end: STARTING or RUNNING while its container is on its way
        or runs; an ended container's end is recorded and the container removed: the end
        (``exit.json``) is returned. Raises ``EngineError``."""
        name = self._name(spec["taskId"])
        stopping = stop_request is not None
        asked = self._started.get(task_dir.name)
        recent = asked is not None and time.monotonic() - asked < START_TIMEOUT_S
        if self._listing is None:
            self._listing = self.engine.listing()
        state = self._listing.get(name)
        if state is None and launch_info.get("container"):
            return _record_end(
                task_dir, None, time.time(), "its container was removed outside tfdeclare", stopping
            )
        if state in (None, "created") and stopping:  # stopped before it ever ran
            self.engine.remove(name)
            return _record_end(task_dir, None, time.time(), "stopped before it started", True)
        if state is None:
            if recent:
                return TaskState.STARTING
            _note(spec, "this task's container was never made (its controller stopped); making it")
            return self.run(task_dir, spec) or TaskState.STARTING
        if state == "created":
            if not recent:
                self.engine.start(name)
            return TaskState.STARTING
        if state in ("exited", "dead"):
            end = self.engine.end(name)
            self._keep_output(spec, launch_info, (self.engine.logs(name) or (b"", True))[0])
            recorded = _record_end(task_dir, end.exit_code, end.finished_at, end.message, stopping)
            self.engine.remove(name)  # a controller that dies first leaves it to forget()
            return recorded
        if stop_request is not None and time.time() > (
            stop_request.get("at", 0) + stop_request.get("graceSeconds", 0) + KILL_SLACK_S
        ):
            self.engine.kill(name)  # the engine's own stop did not finish (an older engine)
        return TaskState.RUNNING

    def run(self, task_dir: Path, spec: dict[str, Any]) -> dict[str, Any] | None:
        """Pull its image as its policy says, make and start the task's container and record it
        in ``launch.json``; an image that cannot be had (a pull the registry refused, a missing
        one under ``Never``) ends the task without an exit code, with the reason as its
        message; an engine that refuses (a host path that does not exist) ends it with exit
        code 127: that end is returned."""
        self._started[task_dir.name] = time.monotonic()
        try:
            container_id = self.engine.run(spec)
        except ImageUnavailable as err:  # it never ran: no exit code, the reason is its end
            _note(spec, str(err))
            return _record_end(task_dir, None, time.time(), str(err), False)
        except EngineError as err:
            _note(spec, f"cannot start its container: {err}")
            return _record_end(task_dir, 127, time.time(), f"cannot start: {err}", False)
        launched = {"container": container_id, "startedAt": time.time(), "logOffset": _size(spec["logPath"])}
        write_atomic(task_dir / "launch.json", json.dumps(launched).encode())
        return None

    @staticmethod
    def _keep_output(spec: dict[str, Any], launch_info: dict[str, Any], output: bytes) -> None:
        """The log becomes what tfdeclare wrote before the container started, then the
        container's whole output: written atomically, so doing it twice (a controller that
        died before recording the end) changes nothing."""
        path = Path(spec["logPath"])
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            before = path.read_bytes()[: launch_info.get("logOffset", _size(path))]
        except FileNotFoundError:
            before = b""
        write_atomic(path, before + output)

    def live_log(self, task_dir: Path, spec: dict[str, Any]) -> tuple[bytes, bool] | None:
        """A container task's log while its container is there: what tfdeclare wrote before
        it started, then its output so far, from the engine, and whether it has ended; None
        for a process task, or once the end is recorded (the log file has it all then)."""
        if spec.get("runtime") != "docker" or (task_dir / "exit.json").exists():
            return None
        live = self.engine.logs(self._name(spec["taskId"]))
        if live is None:
            return None
        try:
            launch_info = json.loads((task_dir / "launch.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            launch_info = {}
        try:
            before = Path(spec["logPath"]).read_bytes()[: launch_info.get("logOffset", 0)]
        except FileNotFoundError:
            before = b""
        return before + live[0], live[1]

    def stop(self, task_id: str, grace_s: float) -> None:
        self.engine.stop(self._name(task_id), grace_s)

    def remove(self, task_id: str) -> None:
        self.engine.remove(self._name(task_id))

    def close(self) -> None:
        self.engine.close()
