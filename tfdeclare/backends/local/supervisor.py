"""The per-task supervisor: ``python -m tfdeclare.backends.local.supervisor TASK_DIR``.

One small process per task, in its own session so it outlives the CLI that started it. It
starts the task's command (an argv list, never a shell) as the leader of a new process group,
its output going straight to the task's log file, and records, atomically:

- ``state.json`` once the task runs: its pid (= process group id) and start tick, and ours;
- ``exit.json`` when it ends: the exit code (128+N for signal N), and whether it was asked to
  stop; or, when the task could not be started, why, naming what is missing: its
  ``workingDir`` (``WorkingDirMissing``: a restart cannot make it, so the job fails at once)
  or its program.

The end is recorded whatever room the state disk has left (``ExitRecord``): a block is set
aside for it before the task starts (``.exit.json.spare``, written out, so a full disk later
needs no new block to record the end: the spare is overwritten in place and renamed), and
where even that fails (a copy-on-write file system) the write is retried every
``RETRY_S`` while the disk is full. A supervisor that died on a full disk would have turned
the task's exit code into "its supervisor process died".

It is started with ``--detach``, takes an exclusive ``flock`` on ``task.json`` (a second
supervisor of the same task, from a retried launch, finds it held and exits at once) and
writes ``launch.json`` (its own pid). A stop request is the file ``stop.json``: the
supervisor looks for it on every poll, and SIGTERM only wakes it sooner, so a controller that
dies between writing the request and signalling still gets its task stopped. It then sends
SIGTERM to the task's process group, waits the grace period, then SIGKILLs the group. When
the task ends, whatever is left of its group is killed too, so no task process outlives it.
The controller passes the descriptor holding the task's machine-wide port reservation
(``--port-fd``): it is never passed on to the task, and is closed once the task has ended.

While the task runs it samples its log's size once a second (``logtimes``: when each line was
written). It reads the task's record through ``record.py`` (every version a release wrote) and imports
little else, so it starts fast.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tfdeclare.backends.local.logtimes import Sampler
from tfdeclare.backends.local.record import TASK_FILE, read_task
from tfdeclare.backends.secrets import SecretUnavailable, read_all
from tfdeclare.core.errors import ErrorCode
from tfdeclare.files import fsync_dir, open_append, open_regular, read_regular, write_atomic

POLL_S = 0.05
EXIT_FILE = "exit.json"
SPARE_FILE = ".exit.json.spare"  # the block set aside for the end's record (module docstring)
SPARE_BYTES = 4096  # one block: an end's record is far smaller (its message is clipped)
MAX_MESSAGE = 1024  # characters of an end's message
RETRY_S = 1.0  # a full disk: the end's record is tried again this often
FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def process_start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: tells a process from a later one that reused its pid."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    return int(fields[19])


def write_json(path: Path, data: dict[str, Any]) -> None:
    write_atomic(path, json.dumps(data).encode())


def kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class ExitRecord:
    """The task's ``exit.json``, written whatever room its disk has left (module docstring)."""

    def __init__(self, task_dir: Path, sleep: Callable[[float], None] = time.sleep) -> None:
        self.path = task_dir / EXIT_FILE
        self.spare = task_dir / SPARE_FILE
        self.sleep = sleep
        self.spared = self._set_aside()

    def _set_aside(self) -> bool:
        """Write out ``SPARE_BYTES`` for the end's record (real blocks, not a hole); False when
        the disk has no room even for that (the end is then retried while it is full)."""
        try:
            fd = os.open(
                self.spare, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
            )
        except OSError:
            return False
        try:
            os.write(fd, b" " * SPARE_BYTES)
            os.fsync(fd)
        except OSError:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.spare)
            return False
        os.close(fd)
        return True

    def write(self, end: dict[str, Any]) -> None:
        """Record the end: written anew (atomically) where the disk has room, else into the
        spare block, else tried again every ``RETRY_S`` while the disk is full. Another
        error (the task's folder gone: the job was deleted) gives up."""
        if isinstance(end.get("message"), str) and len(end["message"]) > MAX_MESSAGE:
            end = {**end, "message": end["message"][: MAX_MESSAGE - 3] + "..."}
        data = json.dumps(end).encode()
        while True:
            try:
                write_atomic(self.path, data)
            except OSError as err:
                if self.spared and self._into_spare(data):
                    return
                if err.errno not in FULL:
                    return
                self.sleep(RETRY_S)
                continue
            with contextlib.suppress(OSError):
                os.unlink(self.spare)
            return

    def _into_spare(self, data: bytes) -> bool:
        """``data`` over the spare's own blocks, then renamed to ``exit.json``: no new block."""
        try:
            fd = os.open(self.spare, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return False
        try:
            os.pwrite(fd, data, 0)
            os.ftruncate(fd, len(data))  # shorter: frees blocks, needs none
            os.fsync(fd)
        except OSError:
            return False
        finally:
            os.close(fd)
        try:
            os.replace(self.spare, self.path)
        except OSError:
            return False
        self.spared = False
        with contextlib.suppress(OSError):
            fsync_dir(self.path.parent)
        return True


def cannot_start(
    err: OSError | SecretUnavailable, program: str, cwd: str | None
) -> tuple[str, ErrorCode | None]:
    """Why the task could not be started, naming what is missing, and its code when a restart
    cannot help: ``subprocess`` names the working folder (``filename``) when changing into it
    failed, the program when running it did."""
    if isinstance(err, SecretUnavailable):
        return str(err), None
    why = err.strerror or str(err)
    if cwd and err.filename == cwd and not os.path.isdir(cwd):
        return f"its workingDir {cwd}: {why}", ErrorCode.WORKING_DIR_MISSING
    looked = "" if "/" in program else " (looked for on the task's PATH)"
    return f"its program {program!r}{looked}: {why}", None


class Supervisor:
    def __init__(self, task_dir: Path, port_fd: int | None = None) -> None:
        self.task_dir = task_dir
        self.port_fd = port_fd
        task = read_task(task_dir)
        if task is None:
            raise SystemExit(f"tfdeclare supervisor: no task record it can read in {task_dir}")
        self.task = task
        self.stop_requested_at: float | None = None
        self.grace_s = task.grace_s
        self.running: dict[str, Any] | None = None  # state.json while it is not written yet
        self.exit_record = ExitRecord(task_dir)  # its block set aside before the task starts

    def _release_port(self) -> None:
        if self.port_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.port_fd)
            self.port_fd = None

    def _stop_requested(self) -> float | None:
        """When the stop was asked for (by ``stop.json``, with or without a signal), or None."""
        if self.stop_requested_at is None and (self.task_dir / "stop.json").exists():
            self._on_sigterm(signal.SIGTERM, None)
        return self.stop_requested_at

    def _on_sigterm(self, signum: int, frame: object) -> None:
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
            with contextlib.suppress(OSError, ValueError):
                request = json.loads(read_regular(self.task_dir / "stop.json", 1 << 20))
                self.grace_s = float(request.get("graceSeconds", self.grace_s))

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        log_path = self.task.log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.time()
        self.times = Sampler(log_path)  # when the log grew: `logs --timestamps`, `--since`
        with os.fdopen(open_append(log_path), "ab", buffering=0) as log, open(os.devnull, "rb") as devnull:
            try:  # the values of secrets are read now, and only kept in the task's environment
                secrets = read_all(self.task.secrets, os.environ)
                child = subprocess.Popen(
                    self.task.argv,
                    env={**self.task.env, **secrets},
                    cwd=self.task.cwd or None,
                    stdin=devnull,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    process_group=0,
                    close_fds=True,
                )
            except (OSError, SecretUnavailable) as err:
                reason, code = cannot_start(err, self.task.argv[0], self.task.cwd)
                with contextlib.suppress(OSError):  # a full disk: the end's record says it
                    log.write(f"tfdeclare: cannot start {self.task.argv[0]!r}: {reason}\n".encode())
                self.times.sample(time.time(), time.monotonic(), final=True)
                self._release_port()
                end: dict[str, Any] = {
                    "exitCode": 127,
                    "finishedAt": time.time(),
                    "stopped": False,
                    "message": f"cannot start: {reason}",
                }
                if code is not None:
                    end["error"] = code.value
                self.exit_record.write(end)
                return 0
        self.running = {
            "pid": child.pid,
            "ticks": process_start_ticks(child.pid),
            "supervisorPid": os.getpid(),
            "supervisorTicks": process_start_ticks(os.getpid()),
            "startedAt": started,
        }
        self._say_running()
        returncode = self._wait(child)
        self.times.sample(time.time(), time.monotonic(), final=True)
        kill_group(child.pid, signal.SIGKILL)  # stragglers of the task's group
        self._release_port()
        exit_code = returncode if returncode >= 0 else 128 - returncode
        self.exit_record.write(
            {"exitCode": exit_code, "finishedAt": time.time(), "stopped": self.stop_requested_at is not None}
        )
        return 0

    def _say_running(self) -> None:
        """``state.json``, once written; a full disk: tried again on the next poll."""
        if self.running is None:
            return
        with contextlib.suppress(OSError):
            write_json(self.task_dir / "state.json", self.running)
            self.running = None

    def _wait(self, child: subprocess.Popen[bytes]) -> int:
        termed = killed = False
        while True:
            code = child.poll()
            if code is not None:
                return code
            self.times.sample(time.time(), time.monotonic())
            self._say_running()
            asked_at = self._stop_requested()
            if asked_at is not None:
                if not termed:
                    kill_group(child.pid, signal.SIGTERM)
                    termed = True
                elif not killed and time.monotonic() - asked_at >= self.grace_s:
                    kill_group(child.pid, signal.SIGKILL)
                    killed = True
            time.sleep(POLL_S)


def main(argv: list[str]) -> int:
    """``--detach`` forks, and the parent exits at once: the supervisor is then nobody's child
    (no zombie in a long-running controller) and leads its own session. ``--port-fd N`` names
    the inherited descriptor that holds the task's port reservation: it is closed once the
    task has ended, before ``exit.json`` says so, so the port is free when the end is seen."""
    parser = argparse.ArgumentParser(prog="python -m tfdeclare.backends.local.supervisor")
    parser.add_argument("--detach", action="store_true")
    parser.add_argument("--port-fd", type=int)
    parser.add_argument("task_dir", type=Path)
    args = parser.parse_args(argv)
    task_dir: Path = args.task_dir
    if args.detach:
        if os.fork() > 0:
            os._exit(0)
        os.setsid()
    lock = open_regular(task_dir / TASK_FILE)  # never through a link, never waiting on a FIFO
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held until we exit
    except BlockingIOError:
        return 0  # this task's supervisor already runs (a retried launch)
    me = os.getpid()
    write_json(task_dir / "launch.json", {"supervisorPid": me, "supervisorTicks": process_start_ticks(me)})
    return Supervisor(task_dir, args.port_fd).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
