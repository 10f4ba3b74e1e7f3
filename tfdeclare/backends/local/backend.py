"""The local backend: each task on this machine, run by the driver its record names.

State lives under ``<state-dir>/local``::

    tasks/<task-id>/task.json    the task's record: what to run (``record.py``; written once,
                                 before anything runs; mode 600)
    tasks/<task-id>/launch.json  the runtime's start (a supervisor's pid and start tick, or a
                                 container's id, start time and log offset)
    tasks/<task-id>/launcher.json  (container) its launcher's pid, start tick, start time and
                                 pull timeout (``launcher.py``)
    tasks/<task-id>/pull.jsonl   (container) its image pull's progress, appended by the launcher
    tasks/<task-id>/state.json   (process) written by the supervisor once the task runs
    tasks/<task-id>/stop.json    a stop request (grace period)
    tasks/<task-id>/exit.json    how the task ended
    tasks/<task-id>/.exit.json.spare  (process) a block set aside for exit.json (a full disk)
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

Two runtimes, one interface (``drivers.py``): ``local.runtime`` (``config.py``) decides at
launch what runs a task, a process under its supervisor (``process_driver.py``) or a
container of its image through the Docker engine (``docker_driver.py``), and the record says
so (``runtime``); from then on the backend picks the task's driver from its record and never
asks again. Placement, ports and working folders are the same for both; inside a container
the working folder (and the source folder, read-only) are mounted at their own paths, and an
absolute ``workingDir`` is a folder of the image.

``observe`` (and ``place``, which calls it) only reports. What a look finds to do (a launch
a dead controller left half-done, an end to record and what the task left to clear away, a
task past its grace period) is done by ``tend``, which the controller runs once per pass
before it observes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tfdeclare.backends.base import BackendError, LogChunk
from tfdeclare.backends.local import engine_images, machine, ports
from tfdeclare.backends.local.config import LocalRuntime
from tfdeclare.backends.local.docker_driver import DEFAULT_PULL_TIMEOUT_S, DockerDriver
from tfdeclare.backends.local.docker_runtime import owner_of
from tfdeclare.backends.local.drivers import Chore, Driver, Seen, TaskFolder, read_log_file
from tfdeclare.backends.local.logtimes import read_times
from tfdeclare.backends.local.prober import Prober
from tfdeclare.backends.local.process_driver import ProcessDriver
from tfdeclare.backends.local.record import LocalTask, TaskRuntime, read_task, write_task
from tfdeclare.backends.secrets import SecretUnavailable, read_all
from tfdeclare.core.enums import TaskState
from tfdeclare.core.errors import ErrorCode
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
from tfdeclare.files import read_regular, write_atomic

log = logging.getLogger("tfdeclare.backends.local")

HOST = "127.0.0.1"
ADDRESS_WAIT_S = 30.0  # a task restarting alone waits this long for its port, then the job restarts
TENDED_FRESH_S = 0.5  # observe reports what the tend just before it saw, if that was this recent
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


def _source_folder(task: TaskLaunch) -> Path | None:
    """The folder whose files a task sees: its spec file's folder, or ``workingDir`` (relative
    to that folder; to the controller's folder when there is no spec file). The controller
    resolved and checked it just now (``source_folder``, links resolved): that path is used."""
    if task.source_folder is not None:
        return Path(task.source_folder)
    if task.working_dir is None:
        return Path(task.source_dir) if task.source_dir is not None else None
    return Path(os.path.abspath(Path(task.source_dir or ".") / task.working_dir))


def no_link_in(path: Path) -> bool:
    """Whether no part of the absolute ``path`` is a link: each folder is opened from the one
    above with ``O_NOFOLLOW``, so a path resolved a moment ago still is. A part that is
    missing (a source folder that does not exist: nothing is linked from it) or not a folder
    is no link."""
    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in path.parts[1:]:
            try:
                inner = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                return True
            except OSError:  # ELOOP, or ENOTDIR for a link with O_PATH (or for a file)
                try:
                    return not stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode)
                except OSError:
                    return True
            os.close(fd)
            fd = inner
        return True
    finally:
        os.close(fd)


_SOURCE_MARK = ".tfdeclare-source"  # in a working folder: the source folder linked last


def _link_entries(work: Path, source: Path) -> None:
    """Show every (non-hidden) entry of ``source`` in ``work`` as a link. Links are replaced
    atomically; links into the previously linked source that it no longer has are removed;
    a file or folder that is not a link (the task's own) is never touched."""
    try:
        names = {e.name for e in os.scandir(source) if not e.name.startswith(".")}
    except FileNotFoundError:
        names = set()
    try:  # the task can write its working folder: the mark is read only as a regular file
        previous = read_regular(work / _SOURCE_MARK, 64 << 10).decode("utf-8", "replace")
    except OSError:  # none (the first launch), or not ours: no link of it is removed
        previous = ""
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


def _observed(task: LocalTask, seen: Seen) -> ObservedTask:
    return ObservedTask(
        task_id=task.task_id,
        job=task.job,
        key=task.key,
        attempt=task.attempt,
        config_hash=task.config_hash,
        spec_hash=task.spec_hash,
        state=seen.state,
        resources=task.resources,
        host=task.host,
        port=task.port,
        exit_code=seen.exit_code,
        started_at=seen.started_at,
        finished_at=seen.finished_at,
        message=seen.message,
        cause=seen.cause,
        error=seen.error,
        extra={"gpus": ",".join(str(g) for g in task.gpu_devices), "source": task.source_dir or ""},
    )


@dataclass(frozen=True, slots=True)
class _Look:
    """One task as the last look saw it, with its folder's modification time then."""

    mtime: int
    folder: TaskFolder
    seen: Seen
    task: ObservedTask


class LocalBackend:
    name = "local"
    host_paths_here = True  # its tasks' host paths are this machine's: checked again at launch
    address_wait_s: float | None = ADDRESS_WAIT_S

    def __init__(
        self,
        state_dir: Path,
        capacity: LocalCapacity | None = None,
        python: str | None = None,
        runtime: LocalRuntime = LocalRuntime.AUTO,
        pull_timeout_s: float = DEFAULT_PULL_TIMEOUT_S,
    ) -> None:
        self.root = state_dir / "local"
        self.tasks_dir = self.root / "tasks"
        self.logs_dir = self.root / "logs"
        self.work_dir = self.root / "work"
        self.capacity = capacity or LocalCapacity.detect()
        self.python = python or sys.executable
        self._reservations: dict[str, _Reservation] = {}
        self._held: dict[tuple[str, str], _Hold] = {}  # (job, task name) -> its port, kept
        self._records: dict[str, LocalTask] = {}  # task.json never changes: read once
        self._checked = False  # a record read so far has a health check (else none is probed)
        self._looks: dict[str, _Look] = {}  # task id -> the last look: reused while unchanged
        # A ``tend`` that had nothing to do: when, and what it saw (the pass's one look)
        self._tended: tuple[float, list[_Look]] | None = None
        self._watcher: threading.Thread | None = None
        self._notifiers: list[Callable[[], None]] = []
        self._closed = threading.Event()
        self._next_port = self.capacity.port_first
        self.runtime = runtime
        started: dict[str, float] = {}  # tasks this controller started: monotonic time
        self.drivers: dict[TaskRuntime, Driver] = {
            TaskRuntime.PROCESS: ProcessDriver(self.python, started),
            TaskRuntime.DOCKER: DockerDriver(
                owner_of(self.root), started, self.root.parent, self.python, pull_timeout_s
            ),
        }
        docker = self.drivers[TaskRuntime.DOCKER]
        assert isinstance(docker, DockerDriver)
        # health checks (``prober.py``): its threads start with the first task that has one
        self._prober = Prober(self._notify_all, in_container=docker.health_exec)

    # ---- the task folders -----------------------------------------------------------------

    def _folder(self, task_dir: Path) -> TaskFolder | None:
        """The task folder with its record; None when it has none it can read (a launch that
        crashed before writing it: nothing started)."""
        task = self._records.get(task_dir.name)
        if task is None:
            task = read_task(task_dir)
            if task is None:
                return None
            self._records[task_dir.name] = task
            self._checked = self._checked or task.health_check is not None
        return TaskFolder(task_dir, task)

    def _driver(self, folder: TaskFolder) -> Driver:
        return self.drivers[folder.task.runtime]

    def _task_dirs(self) -> list[os.DirEntry[str]]:
        try:
            return [e for e in os.scandir(self.tasks_dir) if not e.name.startswith(".") and e.is_dir()]
        except FileNotFoundError:
            return []

    # ---- observe, tend --------------------------------------------------------------------

    def _look(self) -> list[_Look]:
        """Every task folder, read again only when it changed (the runtimes write into it) or
        its driver cannot say nothing changed; reads only."""
        for driver in self.drivers.values():
            driver.begin_pass()
        looks = []
        seen_ids: set[str] = set()
        for entry in self._task_dirs():
            seen_ids.add(entry.name)
            try:
                mtime = entry.stat().st_mtime_ns
            except FileNotFoundError:
                continue
            last = self._looks.get(entry.name)
            if (
                last is not None
                and last.mtime == mtime
                and (last.task.state.ended or self._driver(last.folder).quiet(entry.name))
            ):
                looks.append(last)
                continue
            folder = self._folder(Path(entry.path))
            if folder is None:
                continue
            seen = self._driver(folder).inspect(folder)
            task = _observed(folder.task, seen)
            if last is not None and last.task == task:
                task = last.task  # the same object while nothing changed (the controller skips it)
            look = _Look(mtime, folder, seen, task)
            self._looks[entry.name] = look
            looks.append(look)
        for gone in self._looks.keys() - seen_ids:
            del self._looks[gone]
        return looks

    def observe(self) -> Sequence[ObservedTask]:
        """Every task, as it is now. Starts, records and removes nothing (``tend`` does).
        Right after a ``tend`` that had nothing to do (the controller's pass), what that
        ``tend`` saw: one look per pass."""
        tended, self._tended = self._tended, None
        fresh = tended is not None and time.monotonic() - tended[0] < TENDED_FRESH_S
        looks = tended[1] if tended is not None and fresh else self._look()
        return self._with_health(looks)

    def _with_health(self, looks: Sequence[_Look]) -> list[ObservedTask]:
        """The tasks, each running one with a health check handed to the prober, and those it
        found unhealthy marked so (``ObservedTask.unhealthy``: the lifecycle restarts them)."""
        if not self._checked:
            return [look.task for look in looks]  # no task has a health check
        now, running = time.time(), TaskState.RUNNING  # (an enum member looked up once)
        verdicts = self._prober.track(
            (look.folder.task, look.task.started_at or now)
            for look in looks
            if look.task.state is running and look.folder.task.health_check is not None
        )
        if not verdicts:
            return [look.task for look in looks]
        return [
            replace(look.task, unhealthy=verdicts[look.task.task_id])
            if look.task.task_id in verdicts
            else look.task
            for look in looks
        ]

    def _notify_all(self) -> None:
        for each in list(self._notifiers):
            each()

    def tend(self) -> None:
        """Do what the last look found to do, task by task (``Driver.tend``): start a launch a
        dead controller left half-done, record an end and clear away what the task left, kill
        a task past its grace period; and let go of ports held for slots long idle. A failure
        of one task's upkeep does not stop the others': they are reported together."""
        looks = self._look()
        errors: list[BackendError] = []
        nothing_to_do = all(look.seen.chore is None for look in looks)
        self._tended = (time.monotonic(), looks) if nothing_to_do else None
        for look in looks:
            if look.seen.chore is None:
                continue
            try:
                self._driver(look.folder).tend(look.folder, look.seen)
            except BackendError as err:
                errors.append(err)
            except OSError as err:
                errors.append(BackendError(f"{look.folder.task_id}: {err}", code=ErrorCode.TEND_FAILED))
        if self._held:
            self._expire_holds([look.task for look in looks])
        if errors:
            raise BackendError.joined(errors, ErrorCode.TEND_FAILED)

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
        problem = engine_images.launch_problem(self.runtime, request.images)
        if problem is not None:  # the job's lastError until the engine answers, the image is there
            raise problem
        live = [t for t in self.observe() if t.state.alive]
        used, ports_used, gpus_used = self._in_use(live)
        free = total - used
        if not need.fits_in(free):
            reason = UnplacedReason.WAITING_FOR_RESOURCES
            if need.cpus <= free.cpus + 1e-9 and need.mem_mib <= free.mem_mib:
                reason = UnplacedReason.WAITING_FOR_GPUS
            short = Resources(
                max(0.0, round(need.cpus - free.cpus, 3)),
                max(0, need.mem_mib - free.mem_mib),
                max(0, need.gpus - free.gpus),
            )
            return Unplaced(reason, f"needs {need.describe()}; free now: {free.describe()}", short)
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
                raise BackendError(
                    f"cannot reserve a port in {ports.ports_dir()}: {err}", code=ErrorCode.PORTS_UNAVAILABLE
                ) from err
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
        """Write each new task's folder (its record complete, by rename), then have its driver
        start it: the tasks of one runtime side by side."""
        self._tended = None  # what it does is not in that look
        reservation = self._reservations.get(placement.token)
        held = reservation.ports if reservation is not None else {}
        self._keep_addresses(tasks, held)
        try:
            for task in tasks:  # read again as each task starts: never written to its files
                try:
                    read_all(task.secrets, os.environ)
                except SecretUnavailable as err:
                    raise BackendError(f"{task.task_id}: {err}", code=ErrorCode.SECRET_UNAVAILABLE) from None
            by_runtime: dict[TaskRuntime, list[TaskLaunch]] = {}
            for task in tasks:
                runtime = TaskRuntime.DOCKER if self.runtime.uses_docker(task.image) else TaskRuntime.PROCESS
                by_runtime.setdefault(runtime, []).append(task)
            for runtime, batch in by_runtime.items():
                driver = self.drivers[runtime]
                driver.start(self._written(batch, driver, held))
        finally:
            self.release(placement)

    def _written(
        self, tasks: Sequence[TaskLaunch], driver: Driver, held: dict[int, int]
    ) -> Iterator[tuple[TaskFolder, int | None]]:
        """Each task's folder as it is written (the driver starts it at once, while the next
        is written), with the descriptor holding its port; tasks launched before are left out."""
        for task in tasks:
            folder = self._write_folder(task, driver)
            if folder is not None:
                unshared = ports.fallback() if task.slot.port else None
                if unshared is not None:  # said where the user looks: the task's log
                    folder.note(f"port {task.slot.port}: {unshared}")
                yield folder, held.get(task.slot.port) if task.slot.port else None

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

    def _write_folder(self, launch: TaskLaunch, driver: Driver) -> TaskFolder | None:
        """The task's working folder (its source linked in) and its folder with its record;
        None if it was launched before (a retried apply: never twice)."""
        task_dir = self.tasks_dir / launch.task_id
        if task_dir.exists():
            return None
        prepared = driver.prepare(launch, bool(self.capacity.gpus))
        env = prepared.env
        work = self.work_dir / launch.job / launch.key.name
        absolute = bool(launch.working_dir) and Path(launch.working_dir or "").is_absolute()
        # An absolute workingDir is a folder of this machine for a process, of the image for a
        # container (its source files are then the image's own: nothing is mounted for them).
        source = None if absolute and not prepared.host_working_dir else _source_folder(launch)
        cwd = launch.working_dir if absolute and launch.working_dir else str(work)
        if source is not None and launch.source_folder is not None and not no_link_in(source):
            raise BackendError(  # swapped since the controller resolved it a moment ago
                f"{launch.task_id}: its source folder {source} changed as it was launched "
                "(a part of it is a link now): not launched",
                code=ErrorCode.LAUNCH_REFUSED,
            )
        try:
            work.mkdir(parents=True, exist_ok=True)
            if source is not None and cwd == str(work):
                _link_entries(work, source)
        except OSError as err:
            raise BackendError(
                f"cannot prepare the working folder {work} of {launch.task_id}: {err}",
                code=ErrorCode.LAUNCH_FAILED,
            ) from err
        env["TFDECLARE_WORK_DIR"] = str(work)
        if source is not None:
            env["TFDECLARE_SOURCE_DIR"] = str(source)
        task = LocalTask(
            task_id=launch.task_id,
            job=launch.job,
            key=launch.key,
            attempt=launch.attempt,
            config_hash=launch.config_hash,
            spec_hash=launch.spec_hash,
            argv=launch.argv,
            env=env,
            cwd=cwd,
            work_dir=str(work),
            source_dir=str(source) if source is not None else None,
            resources=launch.resources,
            host=launch.slot.host,
            port=launch.slot.port,
            gpu_devices=launch.slot.gpu_devices,
            grace_s=launch.grace_period_s,
            log_path=self.logs_dir / launch.job / f"{launch.task_id}.log",
            created_at=time.time(),
            runtime=driver.runtime,
            secrets=launch.secrets,
            container=prepared.container,
            health_check=launch.health_check,
        )
        tmp_dir = self.tasks_dir / f".{launch.task_id}.tmp"
        shutil.rmtree(tmp_dir, ignore_errors=True)
        tmp_dir.mkdir(parents=True)
        write_task(tmp_dir, task)
        tmp_dir.rename(task_dir)  # the task exists from here on, complete
        self._records[launch.task_id] = task
        self._checked = self._checked or task.health_check is not None
        return TaskFolder(task_dir, task)

    def stop(self, task_ids: Sequence[str], grace_s: float) -> None:
        """Write each task's stop request (``stop.json``, which its runtime honours even if
        this controller dies now), then ask its driver to stop it. A driver that cannot is a
        ``BackendError`` once every task was asked."""
        self._tended = None  # what it does is not in that look
        errors: list[BackendError] = []
        for task_id in task_ids:
            task_dir = self.tasks_dir / task_id
            if not task_dir.is_dir() or (task_dir / "exit.json").exists():
                continue
            write_atomic(
                task_dir / "stop.json", json.dumps({"graceSeconds": grace_s, "at": time.time()}).encode()
            )
            folder = self._folder(task_dir)
            if folder is None:
                continue
            self._drop_hold((folder.task.job, folder.task.key.name))  # stopped on purpose
            try:
                self._driver(folder).stop(folder, grace_s)
            except BackendError as err:
                errors.append(err)
        if errors:
            raise BackendError.joined(errors, ErrorCode.STOP_FAILED)

    def forget(self, task_ids: Sequence[str]) -> None:
        """Drop ended tasks: what their runtime keeps of them, then their folders (their logs
        stay). One whose runtime cannot let go is kept for the next pass, and reported."""
        self._tended = None  # what it does is not in that look
        errors: list[BackendError] = []
        for task_id in task_ids:
            task_dir = self.tasks_dir / task_id
            if not (task_dir / "exit.json").exists():
                continue
            folder = self._folder(task_dir)
            if folder is not None:
                try:
                    self._driver(folder).destroy(folder)
                except BackendError as err:
                    errors.append(err)
                    continue
            shutil.rmtree(task_dir, ignore_errors=True)
            self._records.pop(task_id, None)
        if errors:
            raise BackendError.joined(errors, ErrorCode.FORGET_FAILED)

    def purge(self, job: str) -> None:
        """Forget every ended task of ``job`` and delete its logs (the job is deleted)."""
        for slot in [slot for slot in self._held if slot[0] == job]:
            self._drop_hold(slot)
        self.forget([task.task_id for task in self.observe() if task.job == job and task.state.ended])
        shutil.rmtree(self.logs_dir / job, ignore_errors=True)

    # ---- logs, watch, close ---------------------------------------------------------------

    def read_log(self, task_id: str, offset: int = 0, limit: int = 1 << 20) -> LogChunk:
        task_dir = self.tasks_dir / task_id
        folder = self._folder(task_dir) if task_dir.is_dir() else None
        if folder is not None:
            return self._driver(folder).read_log(folder, offset, limit)
        path = self.logs_dir / task_id.split(".", 1)[0] / f"{task_id}.log"
        if not path.exists():  # a forgotten task's log stays until its job is deleted
            raise BackendError(f"no log for task {task_id}", code=ErrorCode.LOG_UNAVAILABLE)
        return read_log_file(path, offset, limit, ended=True)

    def task_folder(self, job: str, key: TaskKey) -> str | None:
        """The task's working folder (``work/<job>/<role>-<index>``), where its progress
        files are read (``base.TaskFolders``)."""
        return str(self.work_dir / job / key.name)

    def read_log_times(self, task_id: str) -> list[tuple[int, float]] | None:
        """When the task's log grew (``logtimes``): process tasks only; None for a container's
        or a task started by a release before it."""
        task_dir = self.tasks_dir / task_id
        folder = self._folder(task_dir) if task_dir.is_dir() else None
        if folder is not None:
            return read_times(folder.task.log_path)
        return read_times(self.logs_dir / task_id.split(".", 1)[0] / f"{task_id}.log")

    def _alive_runtimes(self) -> set[TaskRuntime]:
        """The runtimes of the tasks the last look saw not ended."""
        return {look.folder.task.runtime for look in list(self._looks.values()) if not look.task.state.ended}

    def watch(self, notify: Callable[[], None]) -> None:
        """Polls the task folders' modification times (a supervisor writing state or exit
        changes them) every 0.1 s and, while a task of a driver that says more runs, that
        driver's ``state_token`` (a container listing, every 0.3 s), and calls every ``notify``
        given on a change."""
        self._notifiers.append(notify)
        if self._watcher is not None:
            return

        def loop() -> None:
            last: dict[str, object] = {}
            tick = 0
            while not self._closed.wait(0.1):
                now: dict[str, object] = {}
                for entry in self._task_dirs():
                    with contextlib.suppress(OSError):
                        now[entry.name] = entry.stat().st_mtime_ns
                tick += 1
                for runtime in self._alive_runtimes():
                    key = f"runtime:{runtime.value}"
                    if tick % 3 == 0:
                        now[key] = self.drivers[runtime].state_token()
                    elif key in last:
                        now[key] = last[key]
                if now != last:
                    last = now
                    for each in list(self._notifiers):
                        each()

        self._watcher = threading.Thread(target=loop, name="local-backend-watch", daemon=True)
        self._watcher.start()

    def close(self) -> None:
        """Let go of ports, the watcher and the drivers' connections; running tasks keep
        running. Ends the last look saw and no ``tend`` has recorded yet are recorded first
        (a CLI that exits right after the pass that saw a container end leaves no container
        behind); what fails there is left to the next controller."""
        for look in list(self._looks.values()):
            if look.seen.chore is Chore.RECORD_END:
                try:
                    self._driver(look.folder).tend(look.folder, look.seen)
                except (BackendError, OSError) as err:
                    log.warning("%s: its end is left to the next controller: %s", look.folder.task_id, err)
        for slot in list(self._held):
            self._drop_hold(slot)
        self._closed.set()
        self._prober.close()
        if self._watcher is not None:
            self._watcher.join(timeout=1)
            self._watcher = None
        for driver in self.drivers.values():
            driver.close()
