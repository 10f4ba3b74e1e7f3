"""The container launcher: ``python -m tfdeclare.backends.local.launcher --detach --owner O
--pull-timeout S TASK_DIR``.

One small process per container task, started by the Docker driver (``docker_driver.py``)
once the task's folder is written, in its own session so it outlives the controller (a
daemon stopped or killed, an ``apply`` that returned): it has the task's image on the engine
as its ``imagePullPolicy`` says (pulling it, ``docker_runtime.ensure_image``), then makes and
starts its container and records it (``launch.json``), or records why it could not
(``exit.json``). So no reconcile pass ever waits for a pull, and the engine, which cancels a
pull when its client goes away, keeps pulling whatever happens to the controller; the next
controller finds the launcher at work and waits for it (it never pulls again meanwhile).
Launchers of tasks with the same image share the engine's one download of each layer.

It takes an exclusive ``flock`` on ``task.json`` (a second launcher of the same task exits at
once; the controller tells a launcher at work by the lock) and writes ``launcher.json`` (its
pid, start tick, start time and pull timeout) and the pull's progress to ``pull.jsonl``
(``pull_log.py``).

The pull is bounded: past ``--pull-timeout`` seconds without the image, the launcher records
the task's end (no exit code; the message says the pull did not finish in time and how much
was fetched: the job's ``restartPolicy`` decides, as for any pull that failed) and exits,
which ends its connection to the engine, so the engine cancels the pull. A stop request
(``stop.json``, polled; SIGTERM only wakes it sooner) ends it the same way before the
container is made, with nothing recorded (the controller records "stopped before it
started"); one that comes while the container is being made has the engine stop it once
made.
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
from pathlib import Path

from tfdeclare.backends.local.pull_log import LAUNCHER_FILE, PULL_LOG, LauncherInfo, PullView, PullWriter
from tfdeclare.backends.local.record import TASK_FILE, read_task
from tfdeclare.backends.local.supervisor import process_start_ticks
from tfdeclare.files import write_atomic

POLL_S = 0.1


def _size(path: Path) -> int:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return 0


class Launcher:
    def __init__(self, task_dir: Path, owner: str, pull_timeout_s: float) -> None:
        from tfdeclare.backends.local.docker_runtime import DockerRuntime
        from tfdeclare.backends.local.drivers import TaskFolder

        task = read_task(task_dir)
        if task is None or task.container is None:
            raise SystemExit(f"tfdeclare launcher: no container task record it can read in {task_dir}")
        self.folder = TaskFolder(task_dir, task)
        self.engine = DockerRuntime(owner)
        self.pull_timeout_s = pull_timeout_s
        self._lock = threading.Lock()
        self._making = False  # the container is being made: too late to cancel
        self._cancelled = False  # the launch was given up: make nothing
        self._done = threading.Event()
        self._signalled = False

    def _stop_requested(self) -> bool:
        return self._signalled or (self.folder.path / "stop.json").exists()

    def _on_sigterm(self, signum: int, frame: object) -> None:
        self._signalled = True

    def run(self) -> int:
        from tfdeclare.backends import progress

        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with open(self.folder.path / PULL_LOG, "ab") as pull_log:
            progress.set_receiver(PullWriter(pull_log))
            deadline = time.monotonic() + self.pull_timeout_s
            threading.Thread(target=self._work, name="launch", daemon=True).start()
            while not self._done.wait(POLL_S):
                stop = self._stop_requested()
                if not stop and time.monotonic() < deadline:
                    continue
                with self._lock:
                    if not self._making:
                        self._cancelled = True
                if not self._cancelled:
                    continue  # the container is being made: the work ends soon
                if not stop:
                    self._timed_out()
                # Exiting ends the engine connection: the engine cancels the pull.
                os._exit(0)
        return 0

    def _timed_out(self) -> None:
        from tfdeclare.backends import progress
        from tfdeclare.backends.progress import PullEvent, PullStep

        assert self.folder.task.container is not None
        image = self.folder.task.container.image
        view = PullView(self.folder.path / PULL_LOG)
        view.read_new()
        why = f"not done within {self.pull_timeout_s:g} s (local.pullTimeoutSeconds); {view.fetched_text()}"
        progress.report(PullEvent(image, PullStep.FAILED, self.folder.task.job, status=why))
        message = f"cannot pull image {image}: {why}"
        self.folder.note(message)
        self.folder.record_end(None, time.time(), message, False, containerRemoved=True)

    def _work(self) -> None:
        try:
            self._launch()
        finally:
            self._done.set()

    def _launch(self) -> None:
        """Have the image, make and start the container and record it in ``launch.json``; an
        image that cannot be had (a pull the registry refused, a missing one under ``Never``)
        ends the task without an exit code, with the reason as its message; an engine that
        refuses (a host path that does not exist) ends it with exit code 127."""
        from tfdeclare.backends.local.docker_runtime import EngineError, ImageUnavailable, container_name

        folder = self.folder
        container = folder.task.container
        assert container is not None
        name = container_name(self.engine.owner, folder.task_id)
        try:
            self.engine.ensure_image(container.image, container.image_pull_policy, folder.task.job)
            with self._lock:
                if self._cancelled or self._stop_requested():
                    self._cancelled = True
                    return
                self._making = True
            container_id = self.engine.make(folder.task)
        except ImageUnavailable as err:  # it never ran: no exit code, the reason is its end
            folder.note(str(err))
            folder.record_end(None, time.time(), str(err), False, containerRemoved=True)
            return
        except EngineError as err:
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
        if self._stop_requested():  # asked while it was being made: the controller saw nothing to stop
            try:
                self.engine.stop(name, folder.task.grace_s)
            except EngineError:
                pass  # the controller kills it past its grace period


def main(argv: list[str]) -> int:
    """``--detach`` forks, and the parent exits at once: the launcher is then nobody's child
    and leads its own session."""
    parser = argparse.ArgumentParser(prog="python -m tfdeclare.backends.local.launcher")
    parser.add_argument("--detach", action="store_true")
    parser.add_argument("--owner", required=True)
    parser.add_argument("--pull-timeout", type=float, required=True)
    parser.add_argument("task_dir", type=Path)
    args = parser.parse_args(argv)
    task_dir: Path = args.task_dir
    if args.detach:
        if os.fork() > 0:
            os._exit(0)
        os.setsid()
    try:
        lock = os.open(task_dir / TASK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return 0  # forgotten meanwhile
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until we exit
    except BlockingIOError:
        return 0  # this task's launcher already runs
    if (task_dir / "exit.json").exists() or (task_dir / "launch.json").exists():
        return 0  # launched (or ended) before
    me = os.getpid()
    info = LauncherInfo(me, process_start_ticks(me) or 0, time.time(), args.pull_timeout)
    write_atomic(task_dir / LAUNCHER_FILE, json.dumps(info.to_json()).encode())
    return Launcher(task_dir, args.owner, args.pull_timeout).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
