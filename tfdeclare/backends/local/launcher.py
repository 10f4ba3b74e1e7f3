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
    making: bool = False  # its container is being made: too late to give it up
    given_up: bool = False  # timed out or asked to stop: make nothing
    done: bool = False

    @property
    def image(self) -> str:
        assert self.folder.task.container is not None
        return self.folder.task.container.image

    def stop_requested(self) -> bool:
        return (self.folder.path / "stop.json").exists()

    def release(self) -> None:
        """Let go of the task's lock: the controller sees its launcher's work is over (its
        end, its container, or nothing: stopped before it started), whatever the other tasks
        of the launch still wait for."""
        if self.lock >= 0:
            os.close(self.lock)
            self.lock = -1


class Launcher:
    def __init__(self, claimed: list[tuple[TaskFolder, int]], owner: str, pull_timeout_s: float) -> None:
        from tfdeclare.backends.local.docker_runtime import DockerRuntime

        self.engine = DockerRuntime(owner)
        self.pull_timeout_s = pull_timeout_s
        self.launches = [
            _Launch(folder, os.fdopen(open_append(folder.path / PULL_LOG), "ab"), lock)
            for folder, lock in claimed
        ]
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
                    break
        # Exiting ends the engine connection: the engine cancels a pull still under way.
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
        try:
            self._launch(launch)
        finally:
            with self._lock:
                launch.done = True
                launch.release()
            self._changed.set()

    def _launch(self, launch: _Launch) -> None:
        """Have the image, make and start the container and record it in ``launch.json``; an
        image that cannot be had (a pull the registry refused, a missing one under ``Never``)
        ends the task without an exit code, with the reason as its message; an engine that
        refuses (a host path that does not exist) ends it with exit code 127."""
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
                    return
                launch.making = True
            container_id = self.engine.make(folder.task)
        except ImageUnavailable as err:  # it never ran: no exit code, the reason is its end
            with self._lock:
                if launch.given_up:
                    return  # its end is recorded (timed out), or left to the controller (stopped)
            folder.note(str(err))
            folder.record_end(None, time.time(), str(err), False, containerRemoved=True, error=err.code.value)
            return
        except EngineError as err:
            with self._lock:
                if launch.given_up:
                    return
            folder.note(f"cannot start its container: {err}")
            try:  # made, perhaps, but not started
                self.engine.remove(name)
                removed = True
            except EngineError:
                removed = False  # ``destroy`` tries again
            folder.record_end(127, time.time(), f"cannot start: {err}", False, containerRemoved=removed)
            return
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


def _claim(task_dir: Path) -> tuple[TaskFolder, int] | None:
    """The task and the descriptor holding its lock for this launcher; None when another
    launcher holds it, or it was launched (or ended) before, or it has no container record."""
    try:
        lock = open_regular(task_dir / TASK_FILE)  # never through a link, never waiting on a FIFO
    except OSError:
        return None  # forgotten meanwhile (or not a regular file: not ours)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until we exit
    except BlockingIOError:
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


def main(argv: list[str]) -> int:
    """``--detach`` forks, and the parent exits at once: the launcher is then nobody's child
    and leads its own session."""
    parser = argparse.ArgumentParser(prog="python -m tfdeclare.backends.local.launcher")
    parser.add_argument("--detach", action="store_true")
    parser.add_argument("--owner", required=True)
    parser.add_argument("--pull-timeout", type=float, required=True)
    parser.add_argument("task_dirs", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.detach:
        if os.fork() > 0:
            os._exit(0)
        os.setsid()
    claimed = [c for c in map(_claim, args.task_dirs) if c is not None]
    if not claimed:
        return 0
    me = os.getpid()
    info = LauncherInfo(me, process_start_ticks(me) or 0, time.time(), args.pull_timeout)
    for folder, _ in claimed:
        write_atomic(folder.path / LAUNCHER_FILE, json.dumps(info.to_json()).encode())
    return Launcher(claimed, args.owner, args.pull_timeout).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
