"""The local backend: each task a supervised process group on this machine.

State lives under ``<state-dir>/local``::

    tasks/<task-id>/task.json    what to run (written before the supervisor starts; mode 600)
    tasks/<task-id>/launch.json  the supervisor's pid and start tick
    tasks/<task-id>/state.json   written by the supervisor once the task runs
    tasks/<task-id>/stop.json    a stop request (grace period)
    tasks/<task-id>/exit.json    written by the supervisor when the task has ended
    logs/<job>/<task-id>.log     the task's output (kept after the task is forgotten)

Everything a later controller needs to adopt the tasks is in those files, so tasks survive
the CLI, and a crash at any point leaves a state the next run reads. Placement accounts for
the resources of every live task against the machine (or configured) capacity; a gang that
does not fit waits, and one that can never fit is unschedulable. Ports come from a range,
checked bindable, reused for a slot when its previous port is still free. GPU tasks get
``CUDA_VISIBLE_DEVICES`` with exactly their devices; other tasks on a GPU machine get none.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdeclare.backends.base import BackendError, LogChunk
from tfdeclare.backends.local import machine
from tfdeclare.backends.local.supervisor import kill_group, process_start_ticks
from tfdeclare.core.enums import Role, TaskState
from tfdeclare.core.run.tasks import (
    GangRequest,
    ObservedTask,
    Placement,
    Slot,
    TaskKey,
    TaskLaunch,
    Unplaced,
    UnplacedReason,
)
from tfdeclare.core.spec.resources import Resources
from tfdeclare.files import write_atomic

HOST = "127.0.0.1"
START_TIMEOUT_S = 60.0  # a supervisor that has not started its task by then failed


@dataclass(frozen=True, slots=True)
class LocalCapacity:
    cpus: float
    mem_mib: int
    gpus: int
    port_first: int = 20000
    port_last: int = 29999

    @property
    def resources(self) -> Resources:
        return Resources(self.cpus, self.mem_mib, self.gpus)

    @classmethod
    def detect(
        cls,
        cpus: float | None = None,
        mem_mib: int | None = None,
        gpus: int | None = None,
        port_first: int = 20000,
        port_last: int = 29999,
    ) -> LocalCapacity:
        return cls(
            cpus if cpus is not None else machine.cpu_count(),
            mem_mib if mem_mib is not None else machine.memory_mib(),
            gpus if gpus is not None else machine.gpu_count(),
            port_first,
            port_last,
        )


def _alive(pid: int | None, ticks: int | None) -> bool:
    return pid is not None and ticks is not None and process_start_ticks(pid) == ticks


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(slots=True)
class _Reservation:
    resources: Resources
    ports: set[int]
    gpus: set[int]


class LocalBackend:
    name = "local"

    def __init__(
        self, state_dir: Path, capacity: LocalCapacity | None = None, python: str | None = None
    ) -> None:
        self.root = state_dir / "local"
        self.tasks_dir = self.root / "tasks"
        self.logs_dir = self.root / "logs"
        self.capacity = capacity or LocalCapacity.detect()
        self.python = python or sys.executable
        self._reservations: dict[str, _Reservation] = {}
        self._specs: dict[str, dict[str, Any]] = {}  # task.json never changes: read once
        # task id -> (folder mtime, what was observed, launch.json): reused while unchanged
        self._observed: dict[str, tuple[int, ObservedTask, dict[str, Any]]] = {}
        self._watcher: threading.Thread | None = None
        self._notifiers: list[Callable[[], None]] = []
        self._closed = threading.Event()
        self._next_port = self.capacity.port_first

    # ---- observe --------------------------------------------------------------------------

    def _task_dirs(self) -> list[Path]:
        try:
            return [
                Path(e.path) for e in os.scandir(self.tasks_dir) if e.is_dir() and not e.name.startswith(".")
            ]
        except FileNotFoundError:
            return []

    def _spec(self, task_dir: Path) -> dict[str, Any] | None:
        spec = self._specs.get(task_dir.name)
        if spec is None:
            spec = _read_json(task_dir / "task.json")
            if spec is not None:
                self._specs[task_dir.name] = spec
        return spec

    def observe(self) -> Sequence[ObservedTask]:
        """Every task folder, read again only when it changed: supervisors write their files
        into it (changing its mtime), and a live task's supervisor is checked every time."""
        observed = []
        seen: set[str] = set()
        try:
            entries = [e for e in os.scandir(self.tasks_dir) if not e.name.startswith(".") and e.is_dir()]
        except FileNotFoundError:
            entries = []
        for entry in entries:
            seen.add(entry.name)
            try:
                mtime = entry.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            cached = self._observed.get(entry.name)
            unchanged = cached is not None and cached[0] == mtime
            if cached is not None and unchanged and (cached[1].state.ended or self._still_alive(cached[2])):
                observed.append(cached[1])
                continue
            task_dir = Path(entry.path)
            spec = self._spec(task_dir)
            if spec is None:
                continue  # a launch that crashed before writing task.json: nothing started
            task, launch_info = self._observe_one(task_dir, spec)
            self._observed[entry.name] = (mtime, task, launch_info)
            observed.append(task)
        for gone in self._observed.keys() - seen:
            del self._observed[gone]
        return observed

    @staticmethod
    def _still_alive(launch_info: dict[str, Any]) -> bool:
        return _alive(launch_info.get("supervisorPid"), launch_info.get("supervisorTicks"))

    def _observe_one(self, task_dir: Path, spec: dict[str, Any]) -> tuple[ObservedTask, dict[str, Any]]:
        exit_info = _read_json(task_dir / "exit.json")
        state_info = _read_json(task_dir / "state.json")
        launch_info = _read_json(task_dir / "launch.json") or {}
        stopping = (task_dir / "stop.json").exists()
        started_at = state_info.get("startedAt") if state_info else None
        message = ""
        exit_code: int | None = None
        finished_at: float | None = None
        if exit_info is not None:
            exit_code = exit_info.get("exitCode")
            finished_at = exit_info.get("finishedAt")
            message = exit_info.get("message", "")
            if exit_code == 0:
                state = TaskState.SUCCEEDED
            elif exit_info.get("stopped"):
                state = TaskState.STOPPED
            else:
                state = TaskState.FAILED
        else:
            supervisor_alive = _alive(launch_info.get("supervisorPid"), launch_info.get("supervisorTicks"))
            if supervisor_alive:
                if state_info is None:
                    state = TaskState.STARTING
                else:
                    state = TaskState.STOPPING if stopping else TaskState.RUNNING
            elif not launch_info and time.time() - spec["createdAt"] < START_TIMEOUT_S:
                state = TaskState.STARTING  # being launched right now by another call
                launch_info = {"supervisorPid": None}  # not cached as alive: look again
            else:
                state, exit_code, message = self._supervisor_gone(task_dir, state_info, stopping)
                finished_at = time.time()
        task = ObservedTask(
            task_id=spec["taskId"],
            job=spec["job"],
            key=TaskKey(Role(spec["role"]), int(spec["index"])),
            attempt=int(spec["attempt"]),
            config_hash=spec["configHash"],
            spec_hash=spec["specHash"],
            state=state,
            resources=Resources(*spec["resources"]),
            host=spec["host"],
            port=spec["port"],
            exit_code=exit_code,
            started_at=started_at,
            finished_at=finished_at,
            message=message,
            extra={"gpus": ",".join(str(g) for g in spec.get("gpuDevices", []))},
        )
        return task, launch_info

    def _supervisor_gone(
        self, task_dir: Path, state_info: dict[str, Any] | None, stopping: bool
    ) -> tuple[TaskState, int | None, str]:
        """The supervisor died without recording an exit (killed from outside): kill what is
        left of the task and record the end, so the job's policy can act on it."""
        if state_info is not None and _alive(state_info.get("pid"), state_info.get("ticks")):
            kill_group(int(state_info["pid"]), signal.SIGKILL)
        message = "its supervisor process died; the task was killed"
        state = TaskState.STOPPED if stopping else TaskState.FAILED
        exit_code = None
        with contextlib.suppress(OSError):
            write_atomic(
                task_dir / "exit.json",
                json.dumps(
                    {
                        "exitCode": exit_code,
                        "finishedAt": time.time(),
                        "stopped": stopping,
                        "message": message,
                    }
                ).encode(),
            )
        return state, exit_code, message

    # ---- place ----------------------------------------------------------------------------

    def _in_use(self, live: Sequence[ObservedTask]) -> tuple[Resources, set[int], set[int]]:
        used = Resources(0.0, 0, 0)
        ports: set[int] = set()
        gpus: set[int] = set()
        for task in live:
            used = used + task.resources
            if task.port is not None:
                ports.add(task.port)
            gpus.update(int(g) for g in task.extra.get("gpus", "").split(",") if g)
        for reservation in self._reservations.values():
            used = used + reservation.resources
            ports |= reservation.ports
            gpus |= reservation.gpus
        return used, ports, gpus

    def place(self, request: GangRequest) -> Placement | Unplaced:
        need = request.total
        total = self.capacity.resources
        if not need.fits_in(total):
            return Unplaced(
                UnplacedReason.UNSCHEDULABLE,
                f"the job needs {need.describe()} but this machine offers {total.describe()} "
                "(see `local` in the config to change what is offered)",
            )
        live = [t for t in self.observe() if t.state.alive]
        used, ports_used, gpus_used = self._in_use(live)
        free = total - used
        if not need.fits_in(free):
            reason = UnplacedReason.WAITING_FOR_RESOURCES
            if need.cpus <= free.cpus + 1e-9 and need.mem_mib <= free.mem_mib:
                reason = UnplacedReason.WAITING_FOR_GPUS
            return Unplaced(reason, f"needs {need.describe()}; free now: {free.describe()}")
        chosen_ports: set[int] = set()
        free_gpus = [g for g in range(self.capacity.gpus) if g not in gpus_used]
        slots = []
        for slot_request in request.slots:
            port = self._choose_port(
                slot_request.previous.port if slot_request.previous else None, ports_used | chosen_ports
            )
            if port is None:
                return Unplaced(UnplacedReason.WAITING_FOR_RESOURCES, "no free port in the configured range")
            chosen_ports.add(port)
            devices = tuple(free_gpus[: slot_request.resources.gpus])
            free_gpus = free_gpus[slot_request.resources.gpus :]
            slots.append(Slot(slot_request.key, HOST, port, None, devices))
        token = uuid.uuid4().hex
        self._reservations[token] = _Reservation(
            need, chosen_ports, {g for s in slots for g in s.gpu_devices}
        )
        return Placement(request.job, request.attempt, tuple(slots), token)

    def _choose_port(self, previous: int | None, taken: set[int]) -> int | None:
        first, last = self.capacity.port_first, self.capacity.port_last
        if (
            previous is not None
            and first <= previous <= last
            and previous not in taken
            and machine.port_is_free(previous)
        ):
            return previous
        span = last - first + 1
        for offset in range(span):
            port = first + (self._next_port - first + offset) % span
            if port not in taken and machine.port_is_free(port):
                self._next_port = port + 1 if port < last else first
                return port
        return None

    def release(self, placement: Placement) -> None:
        self._reservations.pop(placement.token, None)

    # ---- launch / stop --------------------------------------------------------------------

    def launch(self, placement: Placement, tasks: Sequence[TaskLaunch]) -> None:
        starters: list[subprocess.Popen[bytes]] = []
        try:
            for task in tasks:
                starter = self._launch_one(task)
                if starter is not None:
                    starters.append(starter)
        finally:
            for starter in starters:  # each forks the real supervisor and exits at once
                starter.wait()
            self.release(placement)

    def _launch_one(self, task: TaskLaunch) -> subprocess.Popen[bytes] | None:
        task_dir = self.tasks_dir / task.task_id
        if task_dir.exists():
            return None  # launched before (a retried apply): never twice
        env = dict(task.env)
        python_bin = str(Path(self.python).parent)
        env["PATH"] = python_bin + os.pathsep + env.get("PATH", os.environ.get("PATH", os.defpath))
        if self.capacity.gpus or task.resources.gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in task.slot.gpu_devices)
        spec = {
            "taskId": task.task_id,
            "job": task.job,
            "role": task.key.role.value,
            "index": task.key.index,
            "attempt": task.attempt,
            "configHash": task.config_hash,
            "specHash": task.spec_hash,
            "argv": list(task.argv),
            "env": env,
            "cwd": self._working_dir(task),
            "resources": [task.resources.cpus, task.resources.mem_mib, task.resources.gpus],
            "host": task.slot.host,
            "port": task.slot.port,
            "gpuDevices": list(task.slot.gpu_devices),
            "graceSeconds": task.grace_period_s,
            "logPath": str(self.logs_dir / task.job / f"{task.task_id}.log"),
            "createdAt": time.time(),
        }
        tmp_dir = self.tasks_dir / f".{task.task_id}.tmp"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        tmp_dir.mkdir(parents=True)
        write_atomic(tmp_dir / "task.json", json.dumps(spec).encode(), mode=0o600)
        tmp_dir.rename(task_dir)  # the task exists from here on, complete
        try:
            return subprocess.Popen(
                [self.python, "-m", "tfdeclare.backends.local.supervisor", "--detach", str(task_dir)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
            )
        except OSError as err:
            raise BackendError(f"cannot start the supervisor of {task.task_id}: {err}") from err

    @staticmethod
    def _working_dir(task: TaskLaunch) -> str | None:
        base = task.source_dir
        if task.working_dir is None:
            return base
        if Path(task.working_dir).is_absolute() or base is None:
            return task.working_dir
        return os.path.normpath(Path(base) / task.working_dir)

    def stop(self, task_ids: Sequence[str], grace_s: float) -> None:
        for task_id in task_ids:
            task_dir = self.tasks_dir / task_id
            if not task_dir.is_dir() or (task_dir / "exit.json").exists():
                continue
            write_atomic(
                task_dir / "stop.json", json.dumps({"graceSeconds": grace_s, "at": time.time()}).encode()
            )
            launch_info = _read_json(task_dir / "launch.json") or {}
            pid, ticks = launch_info.get("supervisorPid"), launch_info.get("supervisorTicks")
            if _alive(pid, ticks):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGTERM)  # type: ignore[arg-type]

    def forget(self, task_ids: Sequence[str]) -> None:
        for task_id in task_ids:
            task_dir = self.tasks_dir / task_id
            if (task_dir / "exit.json").exists():
                shutil.rmtree(task_dir, ignore_errors=True)
                self._specs.pop(task_id, None)

    def purge(self, job: str) -> None:
        """Forget every ended task of ``job`` and delete its logs (the job is deleted)."""
        for task in self.observe():
            if task.job == job and task.state.ended:
                self.forget([task.task_id])
        shutil.rmtree(self.logs_dir / job, ignore_errors=True)

    # ---- logs, watch, close ---------------------------------------------------------------

    def _log_path(self, task_id: str) -> Path | None:
        spec = self._spec(self.tasks_dir / task_id)
        if spec is not None:
            return Path(spec["logPath"])
        job = task_id.split(".", 1)[0]
        candidate = self.logs_dir / job / f"{task_id}.log"
        return candidate if candidate.exists() else None

    def read_log(self, task_id: str, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        path = self._log_path(task_id)
        if path is None:
            raise BackendError(f"no log for task {task_id}")
        try:
            with open(path, "rb") as handle:
                handle.seek(offset)
                data = handle.read(limit)
        except FileNotFoundError:
            data = b""
        task_dir = self.tasks_dir / task_id
        complete = (task_dir / "exit.json").exists() or not task_dir.exists()
        return LogChunk(data, offset + len(data), complete and len(data) < limit)

    def watch(self, notify: Callable[[], None]) -> None:
        """Polls the task folders' modification times (a supervisor writing state or exit
        changes them) and calls every ``notify`` given on a change."""
        self._notifiers.append(notify)
        if self._watcher is not None:
            return

        def loop() -> None:
            last: dict[str, int] = {}
            while not self._closed.wait(0.1):
                now: dict[str, int] = {}
                for task_dir in self._task_dirs():
                    with contextlib.suppress(OSError):
                        now[task_dir.name] = task_dir.stat().st_mtime_ns
                if now != last:
                    last = now
                    for each in list(self._notifiers):
                        each()

        self._watcher = threading.Thread(target=loop, name="local-backend-watch", daemon=True)
        self._watcher.start()

    def close(self) -> None:
        self._closed.set()
        if self._watcher is not None:
            self._watcher.join(timeout=1)
            self._watcher = None
