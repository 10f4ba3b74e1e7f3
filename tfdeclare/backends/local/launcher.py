"""The container launcher: ``python -m tfdeclare.backends.local.launcher --detach --owner O
--pull-timeout S TASK_DIR...``.

One small process per launch (the container tasks of one gang; one task when a controller
launches a task that an earlier one left unlaunched), started by the Docker driver
(``docker_driver.py``) once the tasks' folders are written, in its own session so it outlives
the controller (a daemon stopped or killed, an ``apply`` that returned): for each task, side
by side, it has the task's image on the engine as its ``imagePullPolicy`` says (pulling it,
``docker_runtime.ensure_image``: the tasks that need one image wait for one pull), then makes
and starts its container and records it (``launch.json``), or records why it could not
(``exit.json``). So no reconcile pass ever waits for a pull, and the engine, which cancels a
pull when its client goes away, keeps pulling whatever happens to the controller; the next
controller finds the launcher at work and waits for it (it never pulls again meanwhile).
Launchers of several launches that need one image share the engine's one download of each
layer. One process per launch, not per task: its start (Python, the Docker SDK) is paid once.

It takes an exclusive ``flock`` on each task's ``task.json`` (a task whose lock is held, or
that was launched or ended before, is left out; the controller tells a task whose launcher is
at work by the lock) and writes its ``launcher.json`` (the launcher's pid, start tick, start
time and pull timeout) and the pull's progress to its ``pull.jsonl`` (``pull_log.py``).

The pull is bounded: past ``--pull-timeout`` seconds, each task whose image is not there yet
has its end recorded (no exit code; the message says the pull did not finish in time and how
much was fetched: the job's ``restartPolicy`` decides, as for any pull that failed) and is
given up. A stop request (``stop.json``, polled; SIGTERM only wakes it sooner) gives a task up
the same way before its container is made, with nothing recorded (the controller records
"stopped before it started"); one that comes while the container is being made has the
engine stop it once made. A task done or given up has its lock let go at once, so the
controller sees that while the other tasks of the launch still wait. Once every task is done
or given up the launcher exits, which ends its connection to the engine, so the engine
cancels a pull nobody waits for any more.

Ports: each task's port reservation (``ports.py``) comes with it, as a descriptor the
controller passes (``--port-fds``, one per task folder, ``-`` for none). A task whose container
was made keeps its descriptor: once every task is done or given up, the launcher stays on as
the holder of those reservations until each container ends (``port_holder.py``), so the port
stays reserved machine-wide for the container's whole life; the others' are closed at once.
``--hold`` starts a launcher that only holds (the controller found a running container whose
port nobody held: its holder was killed, or an earlier tfdeclare launched it).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tfdeclare.backends.local.drivers import TaskFolder
from tfdeclare.backends.local.pull_log import LAUNCHER_FILE, PULL_LOG, LauncherInfo, PullView, event_line
from tfdeclare.backends.local.record import TASK_FILE, read_task
from tfdeclare.backends.local.supervisor import process_start_ticks
from tfdeclare.backends.progress import PullEvent, PullStep
from tfdeclare.files import open_append, open_regular, write_atomic

POLL_S = 0.1


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


@dataclass(slots=True)
class _Launch:
    """One task of the launch, and how far it is (changed under the launcher's lock)."""

    folder: TaskFolder
    pull_log: IO[bytes]
    lock: int  # the descriptor holding its lock: closed once it is done or given up
    port_fd: int | None = None  # its port's reservation: held while its container lives
    making: bool = False  # its container is being made: too late to give it up
    given_up: bool = False  # timed out or asked to stop: make nothing
    done: bool = False

    @property
    def image(self) -> str:
        assert self.folder.task.container is not None
        return self.folder.task.container.image

    def stop_requested(self) -> bool:
        return (self.folder.path / "stop.json").exists()

    def drop_port(self) -> None:
        """Let go of the port's reservation (no container of it runs)."""
        if self.port_fd is not None:
            os.close(self.port_fd)
            self.port_fd = None

    def release(self) -> None:
        """Let go of the task's lock: the controller sees its launcher's work is over (its
        end, its container, or nothing: stopped before it started), whatever the other tasks
        of the launch still wait for."""
        if self.lock >= 0:
            os.close(self.lock)
            self.lock = -1


class Launcher:
    def __init__(
        self, claimed: list[tuple[TaskFolder, int, int | None]], owner: str, pull_timeout_s: float
    ) -> None:
        from tfdeclare.backends.local.docker_runtime import DockerRuntime

        self.engine = DockerRuntime(owner)
        self.pull_timeout_s = pull_timeout_s
        self.launches = [
            _Launch(folder, os.fdopen(open_append(folder.path / PULL_LOG), "ab"), lock, port_fd)
            for folder, lock, port_fd in claimed
        ]
        self.holds: list[tuple[str, int, Path]] = []  # (container, port reservation, task folder)
        self._lock = threading.Lock()
        self._changed = threading.Event()

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self._changed.set()  # a stop was asked for (its stop.json says which task)

    def _report(self, event: PullEvent) -> None:
        """A pull's event goes to the pull log of each task waiting for that image (an echo
        but in the first)."""
        lines = [event_line(event), event_line(event, echo=True)]
        with self._lock:
            for launch in self.launches:
                if launch.image == event.image and not launch.given_up and not launch.done:
                    launch.pull_log.write(lines[0])
                    launch.pull_log.flush()
                    lines = lines[1:] or lines

    def run(self) -> int:
        from tfdeclare.backends import progress

        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        progress.set_receiver(self._report)
        deadline = time.monotonic() + self.pull_timeout_s
        for launch in self.launches:
            threading.Thread(target=self._work, args=(launch,), name="launch", daemon=True).start()
        while True:
            self._changed.wait(POLL_S)
            self._changed.clear()
            late = time.monotonic() >= deadline
            with self._lock:
                shown: set[str] = set()  # images whose timeout is in a log already (the rest echo it)
                for launch in self.launches:
                    if launch.done or launch.making or launch.given_up:
                        continue
                    if launch.stop_requested():
                        launch.given_up = True
                        launch.release()
                    elif late:
                        launch.given_up = True
                        self._timed_out(launch, echo=launch.image in shown)
                        shown.add(launch.image)
                        launch.release()
                if all(launch.done or launch.given_up for launch in self.launches):
                    for launch in self.launches:
                        if launch.given_up:
                            launch.drop_port()
                    holds = list(self.holds)
                    break
        # What is left is holding the ports of the containers made until each ends. Exiting
        # then ends the engine connection: the engine cancels a pull still under way.
        from tfdeclare.backends.local.port_holder import hold

        hold(self.engine, holds)
        os._exit(0)

    def _timed_out(self, launch: _Launch, echo: bool) -> None:
        view = PullView(launch.folder.path / PULL_LOG)
        view.read_new()
        why = f"not done within {self.pull_timeout_s:g} s (local.pullTimeoutSeconds); {view.fetched_text()}"
        failed = PullEvent(launch.image, PullStep.FAILED, launch.folder.task.job, status=why)
        launch.pull_log.write(event_line(failed, echo=echo))
        launch.pull_log.flush()
        message = f"cannot pull image {launch.image}: {why}"
        launch.folder.note(message)
        launch.folder.record_end(None, time.time(), message, False, containerRemoved=True)

    def _work(self, launch: _Launch) -> None:
        from tfdeclare.backends.local.docker_runtime import container_name

        made = False
        try:
            made = self._launch(launch)
        finally:
            with self._lock:
                if made and launch.port_fd is not None and not launch.given_up:
                    name = container_name(self.engine.owner, launch.folder.task_id)
                    self.holds.append((name, launch.port_fd, launch.folder.path))  # until it ends
                    launch.port_fd = None
                elif not launch.given_up:
                    launch.drop_port()
                launch.done = True
                launch.release()
            self._changed.set()

    def _launch(self, launch: _Launch) -> bool:
        """Have the image, make and start the container and record it in ``launch.json``; an
        image that cannot be had (a pull the registry refused, a missing one under ``Never``)
        ends the task without an exit code, with the reason as its message; an engine that
        refuses (a host path that does not exist) ends it with exit code 127. Whether its
        container was made (and started)."""
        from tfdeclare.backends.local.docker_runtime import EngineError, ImageUnavailable, container_name

        folder = launch.folder
        container = folder.task.container
        assert container is not None
        name = container_name(self.engine.owner, folder.task_id)
        try:
            self.engine.ensure_image(container.image, container.image_pull_policy, folder.task.job)
            with self._lock:
                if launch.given_up or launch.stop_requested():
                    launch.given_up = True
                    return False
                launch.making = True
            container_id = self.engine.make(folder.task)
        except ImageUnavailable as err:  # it never ran: no exit code, the reason is its end
            with self._lock:
                if launch.given_up:
                    return False  # its end is recorded (timed out), or left to the controller (stopped)
            folder.note(str(err))
            folder.record_end(None, time.time(), str(err), False, containerRemoved=True, error=err.code.value)
            return False
        except EngineError as err:
            with self._lock:
                if launch.given_up:
                    return False
            folder.note(f"cannot start its container: {err}")
            try:  # made, perhaps, but not started
                self.engine.remove(name)
                removed = True
            except EngineError:
                removed = False  # ``destroy`` tries again
            folder.record_end(127, time.time(), f"cannot start: {err}", False, containerRemoved=removed)
            return False
        launched = {
            "container": container_id,
            "startedAt": time.time(),
            "logOffset": _size(folder.task.log_path),
        }
        write_atomic(folder.path / "launch.json", json.dumps(launched).encode())
        if launch.stop_requested():  # asked while it was made: the controller saw nothing
            try:
                self.engine.stop(name, folder.task.grace_s)
            except EngineError:
                pass  # the controller kills it past its grace period
        return True


CLAIM_TRIES = 10  # a lock found held is tried again this many times, CLAIM_WAIT_S apart
CLAIM_WAIT_S = 0.02


def _lock_soon(fd: int) -> bool:
    """Take the task's lock (exclusive, held until we exit). The controller's look takes it
    shared for an instant (``supervisor_holds``: is a launcher at work?), so a lock found
    held is tried again for a moment: only a launcher at work holds it longer."""
    for attempt in range(CLAIM_TRIES):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if attempt < CLAIM_TRIES - 1:
                time.sleep(CLAIM_WAIT_S)
    return False


def _claim(task_dir: Path) -> tuple[TaskFolder, int] | None:
    """The task and the descriptor holding its lock for this launcher; None when another
    launcher holds it, or it was launched (or ended) before, or it has no container record."""
    try:
        lock = open_regular(task_dir / TASK_FILE)  # never through a link, never waiting on a FIFO
    except OSError:
        return None  # forgotten meanwhile (or not a regular file: not ours)
    if not _lock_soon(lock):
        os.close(lock)
        return None  # this task's launcher already runs
    task = read_task(task_dir)
    if (task_dir / "exit.json").exists() or (task_dir / "launch.json").exists() or task is None:
        os.close(lock)
        return None
    if task.container is None:
        os.close(lock)
        return None
    return TaskFolder(task_dir, task), lock


def port_fds_arg(fds: list[int | None]) -> str:
    """``--port-fds``: each task folder's inherited reservation descriptor, ``-`` for none."""
    return ",".join("-" if fd is None else str(fd) for fd in fds)


def _port_fds(text: str | None, count: int) -> list[int | None]:
    if not text:
        return [None] * count
    fds = [None if part == "-" else int(part) for part in text.split(",")]
    if len(fds) != count:
        raise SystemExit("tfdeclare launcher: --port-fds needs one entry per task folder")
    return fds


def _hold_only(task_dirs: list[Path], fds: list[int | None], owner: str) -> int:
    """``--hold``: hold the reservations of these tasks' running containers until each ends."""
    from tfdeclare.backends.local.docker_runtime import DockerRuntime, container_name
    from tfdeclare.backends.local.port_holder import hold

    holds = []
    for task_dir, fd in zip(task_dirs, fds, strict=True):
        task = read_task(task_dir)
        if fd is None:
            continue
        if task is None or task.container is None:
            os.close(fd)
            continue
        holds.append((container_name(owner, task.task_id), fd, task_dir))
    hold(DockerRuntime(owner), holds)
    return 0


def main(argv: list[str]) -> int:
    """``--detach`` forks, and the parent exits at once: the launcher is then nobody's child
    and leads its own session."""
    parser = argparse.ArgumentParser(prog="python -m tfdeclare.backends.local.launcher")
    parser.add_argument("--detach", action="store_true")
    parser.add_argument("--owner", required=True)
    parser.add_argument("--pull-timeout", type=float, required=True)
    parser.add_argument("--port-fds")
    parser.add_argument("--hold", action="store_true")
    parser.add_argument("task_dirs", type=Path, nargs="+")
    args = parser.parse_args(argv)
    fds = _port_fds(args.port_fds, len(args.task_dirs))
    if args.detach:
        if os.fork() > 0:
            os._exit(0)
        os.setsid()
    if args.hold:
        return _hold_only(args.task_dirs, fds, args.owner)
    claimed = []
    for task_dir, fd in zip(args.task_dirs, fds, strict=True):
        found = _claim(task_dir)
        if found is not None:
            claimed.append((*found, fd))
        elif fd is not None:
            os.close(fd)  # launched by another launcher, or ended: not ours to hold
    if not claimed:
        return 0
    me = os.getpid()
    info = LauncherInfo(me, process_start_ticks(me) or 0, time.time(), args.pull_timeout)
    for folder, _, _ in claimed:
        write_atomic(folder.path / LAUNCHER_FILE, json.dumps(info.to_json()).encode())
    return Launcher(claimed, args.owner, args.pull_timeout).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
