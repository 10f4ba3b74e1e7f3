"""The local backend: each task a supervised process group on this machine.

State lives under ``<state-dir>/local``::

    tasks/<task-id>/task.json    what to run (written before the supervisor starts; mode 600)
    tasks/<task-id>/launch.json  the supervisor's pid and start tick
    tasks/<task-id>/state.json   written by the supervisor once the task runs
    tasks/<task-id>/stop.json    a stop request (grace period)
    tasks/<task-id>/exit.json    written by the supervisor when the task has ended
    tasks/<task-id>/launch.json  (container) its id and start time
    logs/<job>/<task-id>.log     the task's output (kept after the task is forgotten)
    work/<job>/<role>-<index>/   the task's own writable working folder (never deleted)

A task's working folder is the same for every launch of its slot (restarts, spec changes,
a deleted and re-created job of the same name), so what it writes there (checkpoints)
survives, and tfdeclare never deletes or overwrites it. Unless ``workingDir`` is absolute,
the task runs in it, and every entry of its source folder (the spec file's folder, or
``workingDir`` relative to it; hidden entries left out) appears in it as a link, refreshed at
each launch: a link whose name the source no longer has is removed, while a file or folder
the task made itself is left alone (and wins over a source entry of the same name). The
task's environment names both: ``TFDECLARE_WORK_DIR`` and ``TFDECLARE_SOURCE_DIR``.

Everything a later controller needs to adopt the tasks is in those files, so tasks survive
the CLI, and a crash at any point leaves a state the next run reads. Placement accounts for
the resources of every live task against the machine (or configured) capacity; a gang that
does not fit waits, and one that can never fit is unschedulable. Ports come from a range,
reserved machine-wide (``ports.py``: no two state folders hand out the same port) and checked
bindable, reused for a slot when its previous port is still free. GPU tasks get
``CUDA_VISIBLE_DEVICES`` with exactly their devices; other tasks on a GPU machine get none.

Two runtimes (``local.runtime``, ``config.py``): a task of a job without ``spec.image`` is a
process under its supervisor (``supervisor.py``); one with an image is a container of it,
made through the Docker engine (``containers.py``, ``docker_runtime.py``), which then
supervises it: the same task folder records it (``launch.json`` names the container,
``exit.json`` is written by the controller that sees it ended, which then removes the
container), its output comes from the engine while it runs and is kept in its log file once
it has ended, and the engine stops it (SIGTERM, grace period, SIGKILL). Placement, ports
and working folders are the same for both; inside a container the working folder (and the
source folder, read-only) are mounted at their own paths, and an absolute ``workingDir`` is
a folder of the image.

Crash safety: a task folder whose supervisor never started (the controller died between
making the folder and starting it) is started by the next controller, not counted as a
failure; a stop request is a file the supervisor polls, so a controller that dies before its
signal still gets the task stopped.
"""

from __future__ import annotations

import contextlib
import fcntl
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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfdeclare.backends.base import BackendError, LogChunk, LogOffsetError
from tfdeclare.backends.local import machine, ports
from tfdeclare.backends.local.config import LocalRuntime
from tfdeclare.backends.local.containers import ContainerTasks
from tfdeclare.backends.local.docker_runtime import EngineError, owner_of
from tfdeclare.backends.local.supervisor import kill_group, process_start_ticks
from tfdeclare.backends.secrets import SecretUnavailable, read_all
from tfdeclare.backends.secrets import to_json as secrets_json
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
ADDRESS_WAIT_S = 30.0  # a task restarting alone waits this long for its port, then the job restarts
HOLD_S = 900.0  # a slot's port is held this long after its task ended, unless launched again


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


def _supervisor_holds(task_dir: Path) -> bool:
    """Does a supervisor hold this task's lock (an exclusive ``flock`` on ``task.json``)?"""
    try:
        fd = os.open(task_dir / "task.json", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _source_folder(task: TaskLaunch) -> Path | None:
    """The folder whose files a task sees: its spec file's folder, or ``workingDir`` (relative
    to that folder; to the controller's folder when there is no spec file)."""
    if task.working_dir is None:
        return Path(task.source_dir) if task.source_dir is not None else None
    return Path(os.path.abspath(Path(task.source_dir or ".") / task.working_dir))


_SOURCE_MARK = ".tfdeclare-source"  # in a working folder: the source folder linked last


def _link_entries(work: Path, source: Path) -> None:
    """Show every (non-hidden) entry of ``source`` in ``work`` as a link. Links are replaced
    atomically; links into the previously linked source that it no longer has are removed;
    a file or folder that is not a link (the task's own) is never touched."""
    try:
        names = {e.name for e in os.scandir(source) if not e.name.startswith(".")}
    except FileNotFoundError:
        names = set()
    previous = (work / _SOURCE_MARK).read_text(encoding="utf-8") if (work / _SOURCE_MARK).exists() else ""
    for entry in os.scandir(work):
        if (
            previous
            and entry.is_symlink()
            and entry.name not in names
            and os.path.dirname(os.readlink(entry.path)) == previous
        ):
            os.unlink(entry.path)
    for name in names:
        link, target = work / name, str(source / name)
        if link.is_symlink():
            if os.readlink(link) != target:
                staged = work / f".{name}.tfdeclare-link"
                with contextlib.suppress(FileNotFoundError):
                    staged.unlink()
                staged.symlink_to(target)
                staged.replace(link)
        elif not os.path.lexists(link):
            link.symlink_to(target)
    write_atomic(work / _SOURCE_MARK, str(source).encode())


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
    ports: dict[int, int]  # port -> the descriptor holding its machine-wide reservation
    gpus: set[int]

    def close(self) -> None:
        for fd in self.ports.values():
            os.close(fd)
        self.ports.clear()


@dataclass(slots=True)
class _Hold:
    """A slot's port kept reserved by this controller (a duplicate of the descriptor its task's
    supervisor holds), so it stays ours while the task is down and its slot restarts on it."""

    port: int
    fd: int
    idle_since: float | None = None  # no task of the slot alive since then

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class LocalBackend:
    name = "local"
    address_wait_s: float | None = ADDRESS_WAIT_S

    def __init__(
        self,
        state_dir: Path,
        capacity: LocalCapacity | None = None,
        python: str | None = None,
        runtime: LocalRuntime = LocalRuntime.AUTO,
    ) -> None:
        self.root = state_dir / "local"
        self.tasks_dir = self.root / "tasks"
        self.logs_dir = self.root / "logs"
        self.work_dir = self.root / "work"
        self.capacity = capacity or LocalCapacity.detect()
        self.python = python or sys.executable
        self._reservations: dict[str, _Reservation] = {}
        self._held: dict[tuple[str, str], _Hold] = {}  # (job, task name) -> its port, kept
        self._specs: dict[str, dict[str, Any]] = {}  # task.json never changes: read once
        # task id -> (folder mtime, what was observed, launch.json): reused while unchanged
        self._observed: dict[str, tuple[int, ObservedTask, dict[str, Any]]] = {}
        self._watcher: threading.Thread | None = None
        self._notifiers: list[Callable[[], None]] = []
        self._closed = threading.Event()
        self._next_port = self.capacity.port_first
        self._started: dict[str, float] = {}  # supervisors this controller started: monotonic time
        self.runtime = runtime
        self.containers = ContainerTasks(owner_of(self.root), self._started)

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
        self.containers.new_pass()  # listed again, once, when a container task is looked at
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
        if self._held:
            self._expire_holds(observed)
        return observed

    def _expire_holds(self, observed: Sequence[ObservedTask]) -> None:
        """A held port goes back ``HOLD_S`` after no task of its slot is alive (the job
        finished or gave up on the slot) even if nobody says so."""
        alive = {(t.job, t.key.name) for t in observed if t.state.alive}
        now = time.monotonic()
        for slot, hold in list(self._held.items()):
            if slot in alive:
                hold.idle_since = None
            elif hold.idle_since is None:
                hold.idle_since = now
            elif now - hold.idle_since > HOLD_S:
                self._drop_hold(slot)

    def _drop_hold(self, slot: tuple[str, str]) -> None:
        hold = self._held.pop(slot, None)
        if hold is not None:
            hold.close()

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
        docker = spec.get("runtime") == "docker"
        running = TaskState.STARTING
        if exit_info is None and docker:
            stop_request = (_read_json(task_dir / "stop.json") or {}) if stopping else None
            try:
                seen = self.containers.observe(task_dir, spec, launch_info, stop_request)
            except EngineError as err:
                raise BackendError(str(err)) from err
            exit_info, running = (None, seen) if isinstance(seen, TaskState) else (seen, running)
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
        elif docker:
            state = TaskState.STOPPING if stopping and running is TaskState.RUNNING else running
            started_at = launch_info.get("startedAt") if running is TaskState.RUNNING else None
            launch_info = {"supervisorPid": None}  # never cached as alive: looked at every pass
        else:
            supervisor_alive = _alive(launch_info.get("supervisorPid"), launch_info.get("supervisorTicks"))
            if supervisor_alive:
                if state_info is None:
                    state = TaskState.STARTING
                else:
                    state = TaskState.STOPPING if stopping else TaskState.RUNNING
            elif state_info is None and self._starting(task_dir, spec):
                state = TaskState.STARTING  # its supervisor is on its way
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
            extra={
                "gpus": ",".join(str(g) for g in spec.get("gpuDevices", [])),
                "source": spec.get("sourceDir") or "",
            },
        )
        return task, launch_info

    def _starting(self, task_dir: Path, spec: dict[str, Any]) -> bool:
        """A task that has not started yet (no ``state.json``) and whose supervisor is not
        known alive: still starting when this controller started its supervisor less than
        ``START_TIMEOUT_S`` ago or a supervisor holds the task's lock; a launch that never
        started (a controller died before the supervisor ran) is started again, once per
        controller, and is never counted as a failure."""
        started = self._started.get(task_dir.name)
        if started is not None:
            return time.monotonic() - started < START_TIMEOUT_S
        if _supervisor_holds(task_dir):
            return True
        log_path = Path(spec["logPath"])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            log.write(b"tfdeclare: this task's launch never started (its controller stopped); starting it\n")
        fd = ports.reserve(spec["port"]) if spec.get("port") is not None else None
        try:
            self._start_supervisor(task_dir, fd).wait()
        finally:
            if fd is not None:
                os.close(fd)
        return True

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
        ports_used: set[int] = set()
        gpus: set[int] = set()
        for task in live:
            used = used + task.resources
            if task.port is not None:
                ports_used.add(task.port)
            gpus.update(int(g) for g in task.extra.get("gpus", "").split(",") if g)
        for reservation in self._reservations.values():
            used = used + reservation.resources
            ports_used |= reservation.ports.keys()
            gpus |= reservation.gpus
        return used, ports_used, gpus

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
        reservation = _Reservation(need, {}, set())
        free_gpus = [g for g in range(self.capacity.gpus) if g not in gpus_used]
        slots = []
        for slot_request in request.slots:
            previous = slot_request.previous.port if slot_request.previous else None
            try:
                port = self._held_port(request.job, slot_request.key, previous, reservation)
                if port is None and slot_request.pinned:
                    taken = ports_used | reservation.ports.keys()
                    if previous is not None and previous not in taken and self._take(previous, reservation):
                        port = previous
                    if port is None:
                        reservation.close()
                        return Unplaced(
                            UnplacedReason.WAITING_FOR_ADDRESS,
                            f"{slot_request.key.name} restarts alone at port {previous}, "
                            "which something else on this machine holds now",
                        )
                if port is None:
                    port = self._choose_port(previous, ports_used | reservation.ports.keys(), reservation)
            except OSError as err:
                reservation.close()
                raise BackendError(f"cannot reserve a port in {ports.ports_dir()}: {err}") from err
            if port is None:
                reservation.close()
                return Unplaced(UnplacedReason.WAITING_FOR_RESOURCES, "no free port in the configured range")
            devices = tuple(free_gpus[: slot_request.resources.gpus])
            free_gpus = free_gpus[slot_request.resources.gpus :]
            reservation.gpus.update(devices)
            slots.append(Slot(slot_request.key, HOST, port, gpu_devices=devices))
        token = uuid.uuid4().hex
        self._reservations[token] = reservation
        return Placement(request.job, request.attempt, tuple(slots), token)

    def _held_port(
        self, job: str, key: TaskKey, previous: int | None, reservation: _Reservation
    ) -> int | None:
        """The slot's own held port when it asks for it again (and nothing else binds it):
        reserved into ``reservation`` by a duplicate, so the hold stays if it is released."""
        hold = self._held.get((job, key.name))
        if hold is None or previous is None or hold.port != previous or previous in reservation.ports:
            return None
        if not machine.port_is_free(previous):
            return None
        reservation.ports[previous] = os.dup(hold.fd)
        return previous

    @staticmethod
    def _take(port: int, reservation: _Reservation) -> bool:
        """Reserve ``port`` machine-wide into ``reservation`` if nobody holds it and it binds."""
        fd = ports.reserve(port)
        if fd is None:
            return False
        if not machine.port_is_free(port):
            os.close(fd)
            return False
        reservation.ports[port] = fd
        return True

    def _choose_port(self, previous: int | None, taken: set[int], reservation: _Reservation) -> int | None:
        first, last = self.capacity.port_first, self.capacity.port_last
        if (
            previous is not None
            and first <= previous <= last
            and previous not in taken
            and self._take(previous, reservation)
        ):
            return previous
        span = last - first + 1
        for offset in range(span):
            port = first + (self._next_port - first + offset) % span
            if port not in taken and self._take(port, reservation):
                self._next_port = port + 1 if port < last else first
                return port
        return None

    def release(self, placement: Placement) -> None:
        reservation = self._reservations.pop(placement.token, None)
        if reservation is not None:
            reservation.close()

    # ---- launch / stop --------------------------------------------------------------------

    def launch(self, placement: Placement, tasks: Sequence[TaskLaunch]) -> None:
        starters: list[subprocess.Popen[bytes]] = []
        made: list[Future[dict[str, Any] | None]] = []
        reservation = self._reservations.get(placement.token)
        held = reservation.ports if reservation is not None else {}
        self._keep_addresses(tasks, held)
        try:
            # The engine makes and starts containers side by side, each once its folder is written.
            with ThreadPoolExecutor(max(1, len(tasks))) as engine:
                for task in tasks:
                    started = self._launch_one(task, held.get(task.slot.port) if task.slot.port else None)
                    if isinstance(started, subprocess.Popen):
                        starters.append(started)
                    elif started is not None:
                        made.append(engine.submit(self.containers.run, *started))
            for each in made:
                each.result()
        finally:
            for starter in starters:  # each forks the real supervisor and exits at once
                starter.wait()
            self.release(placement)

    def _keep_addresses(self, tasks: Sequence[TaskLaunch], held: dict[int, int]) -> None:
        """Keep the port of each task whose role restarts it alone (``keep_address``) reserved
        by this controller too, so a slot's port stays ours while its task is down."""
        for task in tasks:
            slot = (task.job, task.key.name)
            fd = held.get(task.slot.port) if task.slot.port else None
            if not task.keep_address or fd is None:
                self._drop_hold(slot)
                continue
            before = self._held.get(slot)
            self._held[slot] = _Hold(task.slot.port, os.dup(fd))
            if before is not None:
                before.close()

    def _launch_one(
        self, task: TaskLaunch, port_fd: int | None
    ) -> subprocess.Popen[bytes] | tuple[Path, dict[str, Any]] | None:
        """Write the task's folder, then start its supervisor (returned), or return the folder
        and ``task.json`` of a container task for ``containers.run``; None if launched before."""
        task_dir = self.tasks_dir / task.task_id
        if task_dir.exists():
            return None  # launched before (a retried apply): never twice
        try:  # read again by the supervisor as it starts the task: never written to its files
            read_all(task.secrets, os.environ)
        except SecretUnavailable as err:
            raise BackendError(f"{task.task_id}: {err}") from None
        docker = self.runtime.uses_docker(task.image)
        env = dict(task.env)
        if not docker:  # in a container, the image's PATH, and the engine hands out the GPUs
            python_bin = str(Path(self.python).parent)
            env["PATH"] = python_bin + os.pathsep + env.get("PATH", os.environ.get("PATH", os.defpath))
            if self.capacity.gpus or task.resources.gpus:
                env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in task.slot.gpu_devices)
        work = self.work_dir / task.job / task.key.name
        absolute = bool(task.working_dir) and Path(task.working_dir or "").is_absolute()
        # An absolute workingDir is a folder of this machine for a process, of the image for a
        # container (its source files are then the image's own: nothing is mounted for them).
        source = None if docker and absolute else _source_folder(task)
        cwd = task.working_dir if absolute and task.working_dir else str(work)
        try:
            work.mkdir(parents=True, exist_ok=True)
            if source is not None and cwd == str(work):
                _link_entries(work, source)
        except OSError as err:
            raise BackendError(f"cannot prepare the working folder {work} of {task.task_id}: {err}") from err
        env["TFDECLARE_WORK_DIR"] = str(work)
        if source is not None:
            env["TFDECLARE_SOURCE_DIR"] = str(source)
        spec: dict[str, Any] = {
            "taskId": task.task_id,
            "job": task.job,
            "role": task.key.role.value,
            "index": task.key.index,
            "attempt": task.attempt,
            "configHash": task.config_hash,
            "specHash": task.spec_hash,
            "argv": list(task.argv),
            "env": env,
            "secrets": secrets_json(task.secrets),
            "cwd": cwd,
            "workDir": str(work),
            "sourceDir": str(source) if source is not None else None,
            "resources": [task.resources.cpus, task.resources.mem_mib, task.resources.gpus],
            "host": task.slot.host,
            "port": task.slot.port,
            "gpuDevices": list(task.slot.gpu_devices),
            "graceSeconds": task.grace_period_s,
            "logPath": str(self.logs_dir / task.job / f"{task.task_id}.log"),
            "createdAt": time.time(),
        }
        if docker:
            spec.update(
                runtime="docker",
                image=task.image,
                imagePullPolicy=task.image_pull_policy.value,
                user=f"{os.getuid()}:{os.getgid()}",
                # the state folder (other jobs' records and logs) when its source folder holds it
                hidden=[os.path.realpath(self.root.parent)],
                volumes=[
                    {"hostPath": v.host_path, "containerPath": v.container_path, "mode": v.mode.value}
                    for v in task.volumes
                ],
            )
        tmp_dir = self.tasks_dir / f".{task.task_id}.tmp"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        tmp_dir.mkdir(parents=True)
        write_atomic(tmp_dir / "task.json", json.dumps(spec).encode(), mode=0o600)
        tmp_dir.rename(task_dir)  # the task exists from here on, complete
        if docker:
            return task_dir, spec
        return self._start_supervisor(task_dir, port_fd)

    def _start_supervisor(self, task_dir: Path, port_fd: int | None) -> subprocess.Popen[bytes]:
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
                    str(task_dir),
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(port_fd,) if port_fd is not None else (),
            )
        except OSError as err:
            raise BackendError(f"cannot start the supervisor of {task_dir.name}: {err}") from err
        self._started[task_dir.name] = time.monotonic()
        return starter

    def stop(self, task_ids: Sequence[str], grace_s: float) -> None:
        for task_id in task_ids:
            task_dir = self.tasks_dir / task_id
            if not task_dir.is_dir() or (task_dir / "exit.json").exists():
                continue
            write_atomic(
                task_dir / "stop.json", json.dumps({"graceSeconds": grace_s, "at": time.time()}).encode()
            )
            spec = self._spec(task_dir)
            if spec is not None:  # stopped on purpose: its slot's port need not stay ours
                self._drop_hold((spec["job"], f"{spec['role']}-{spec['index']}"))
            if spec is not None and spec.get("runtime") == "docker":
                self.containers.stop(task_id, grace_s)
                continue
            launch_info = _read_json(task_dir / "launch.json") or {}
            pid, ticks = launch_info.get("supervisorPid"), launch_info.get("supervisorTicks")
            if _alive(pid, ticks):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGTERM)  # type: ignore[arg-type]

    def forget(self, task_ids: Sequence[str]) -> None:
        for task_id in task_ids:
            task_dir = self.tasks_dir / task_id
            if (task_dir / "exit.json").exists():
                spec = self._spec(task_dir)
                if spec is not None and spec.get("runtime") == "docker":
                    with contextlib.suppress(EngineError):  # recorded, but not yet removed
                        self.containers.remove(task_id)
                shutil.rmtree(task_dir, ignore_errors=True)
                self._specs.pop(task_id, None)

    def purge(self, job: str) -> None:
        """Forget every ended task of ``job`` and delete its logs (the job is deleted)."""
        for slot in [slot for slot in self._held if slot[0] == job]:
            self._drop_hold(slot)
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
        task_dir = self.tasks_dir / task_id
        spec = self._spec(task_dir)
        try:
            live = self.containers.live_log(task_dir, spec) if spec is not None else None
        except EngineError as err:
            raise BackendError(str(err)) from err
        if live is not None:
            output, ended = live
            if offset > len(output):
                raise LogOffsetError(offset, len(output))
            data = output[offset : offset + limit]
            return LogChunk(data, offset + len(data), ended and len(data) < limit)
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if offset > size:
                    raise LogOffsetError(offset, size)
                handle.seek(offset)
                data = handle.read(limit)
        except FileNotFoundError:
            if offset > 0:
                raise LogOffsetError(offset, 0) from None
            data = b""
        complete = (task_dir / "exit.json").exists() or not task_dir.exists()
        return LogChunk(data, offset + len(data), complete and len(data) < limit)

    def _containers_alive(self) -> bool:
        """Did the last ``observe`` see a container task that has not ended?"""
        return any(
            not task.state.ended and self._specs.get(task_id, {}).get("runtime") == "docker"
            for task_id, (_, task, _) in list(self._observed.items())
        )

    def watch(self, notify: Callable[[], None]) -> None:
        """Polls the task folders' modification times (a supervisor writing state or exit
        changes them) and, while container tasks run, their containers' states (every 0.3 s),
        and calls every ``notify`` given on a change."""
        self._notifiers.append(notify)
        if self._watcher is not None:
            return

        def loop() -> None:
            last: dict[str, object] = {}
            tick = 0
            while not self._closed.wait(0.1):
                now: dict[str, object] = {}
                for task_dir in self._task_dirs():
                    with contextlib.suppress(OSError):
                        now[task_dir.name] = task_dir.stat().st_mtime_ns
                tick += 1
                if tick % 3 == 0 and self._containers_alive():
                    with contextlib.suppress(EngineError):
                        now.update({f"container:{n}": st for n, st in self.containers.listing().items()})
                elif tick % 3:
                    now.update({k: v for k, v in last.items() if k.startswith("container:")})
                if now != last:
                    last = now
                    for each in list(self._notifiers):
                        each()

        self._watcher = threading.Thread(target=loop, name="local-backend-watch", daemon=True)
        self._watcher.start()

    def close(self) -> None:
        for slot in list(self._held):
            self._drop_hold(slot)
        self._closed.set()
        if self._watcher is not None:
            self._watcher.join(timeout=1)
            self._watcher = None
        self.containers.close()
